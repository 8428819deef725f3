"""Outages ridden through, not turned into restarts.

- The broker stopped (SIGSTOP) for 30 s while changes stream in, then resumed
  (SIGCONT): it keeps its data in memory, so it must not be restarted. The
  processor keeps running, catches up and converges; it never exits.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.integration.processes import Processor, final_rows, pipeline_config, reconciled
from tests.integration.workload import Table, Workload, source_rows
from tidemark.cli.devstack.procs import pid_alive
from tidemark.cli.devstack.stack import DevStack
from tidemark.cli.verify import wait_caught_up

pytestmark = pytest.mark.integration


def test_a_broker_pause_is_ridden_through(stack: DevStack) -> None:
    table = Table("iso_pause_rows")
    config = pipeline_config(stack, "pause")
    workload = Workload(config, [table], seed=51)
    workload.create_tables()
    workload.run_some(40)
    processor = Processor(stack, config, "pause-processor").start()
    pid = processor.pid
    broker = stack.process_pid("broker")
    assert broker is not None
    workload.start()
    try:
        time.sleep(3)
        os.kill(broker, signal.SIGSTOP)
        try:
            time.sleep(30)
            assert pid_alive(pid)
        finally:
            os.kill(broker, signal.SIGCONT)
        time.sleep(5)
    finally:
        workload.stop()
    try:
        wait_caught_up(config, timeout=180)
        assert final_rows(reconciled(config, table.name)) == source_rows(config, table)
        assert processor.pid == pid and pid_alive(pid)
        assert processor.health().get("status") == "ok"
    finally:
        processor.stop()
