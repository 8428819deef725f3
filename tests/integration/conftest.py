"""Real components, started once per test session: broker, PostgreSQL, Debezium, processor."""

from __future__ import annotations

import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidemark.config import Config, ProcessorConfig, SinkConfig
from tidemark.devstack.procs import pid_alive
from tidemark.devstack.stack import DevStack
from tidemark.ports import free_port

#: The shared processor's input: every change topic but the signal, heartbeat and ``iso_*``
#: tables, which tests give to processors of their own (``processes.pipeline_config``).
SHARED_INPUT = (
    r"^tidemark\.public\.(?!(?:debezium_signal|tidemark_signal|tidemark_heartbeat)$)(?!iso_)[^.]+$"
)
SHARED_OUTPUT = r"^tidemark\.reconciled\.public\.(?!iso_)[^.]+$"


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    """A development stack with Debezium streaming; stopped at the end of the session."""
    run_dir = tmp_path_factory.mktemp("stack")
    base = Config(
        processor=ProcessorConfig(
            web_port=free_port(),
            state_dir=str(run_dir / "state"),
            input_pattern=SHARED_INPUT,
        ),
        sink=SinkConfig(warehouse=str(run_dir / "warehouse"), topic_pattern=SHARED_OUTPUT),
    )
    dev = DevStack(run_dir, base)
    dev.up()
    try:
        yield dev
    finally:
        dev.down()


@pytest.fixture(scope="session")
def processor(stack: DevStack) -> Iterator[int]:
    """A running ``tidemark process``; yields its web port."""
    cmd = [sys.executable, "-m", "tidemark.cli", "process", "--config", str(stack.config_path)]
    pid = stack.start_process("processor", cmd)
    port = stack.config.processor.web_port
    deadline = time.monotonic() + 90
    while True:
        assert pid_alive(pid), (Path(stack.run_dir) / "processor.log").read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                if resp.status == 200:
                    break
        except OSError:
            pass
        assert time.monotonic() < deadline, "the processor did not become healthy"
        time.sleep(0.5)
    try:
        yield port
    finally:
        stack.stop_process("processor")
