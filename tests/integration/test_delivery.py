"""A backfill completes once the data plane has read its rows (issue 45, item 5).

The coordinator used to complete a table, and its request, once Kafka had acknowledged
its chunk rows. With the pipeline paused, the rows only wait in the backfill topic (and
expire after its retention), yet the request was COMPLETED. Now the table is
``delivering`` until the data plane's committed offsets pass its rows.
"""

from __future__ import annotations

import time

from processor.pipeline.control_topic import Lifecycle, set_lifecycle
from processor.snapshot.client import send_signal
from processor.snapshot.coordinator import DELIVERY_CHECK_S
from tests.integration.processes import Processor, final_rows, reconciled, wait_for
from tests.integration.test_snapshots import (
    leading,
    notified,
    progress,
    snapshot_config,
    uncaptured_table,
)
from tidemark.cli.verify import wait_caught_up
from tidemark.devstack.stack import DevStack


def test_a_backfill_read_while_paused_completes_once_its_rows_are_read(
    stack: DevStack,
) -> None:
    config = snapshot_config(stack, "deliver")
    table = "iso_deliver_t"
    uncaptured_table(config, table, 50)
    processor = Processor(stack, config, "deliver-processor").start()
    try:
        wait_for("the coordinator", lambda: leading(processor))
        set_lifecycle(config, Lifecycle.PAUSED, "test")
        wait_for("paused", lambda: processor.health().get("dataplane") == "paused")
        send_signal(config, "execute-snapshot", {"data-collections": [f"public.{table}"]}, "d-1")
        wait_for("read whole", lambda: notified(config, "TABLE_SCAN_COMPLETED", "d-1"))
        time.sleep(3 * DELIVERY_CHECK_S)
        assert not notified(config, "COMPLETED", "d-1")
        entry = progress(config, f"public.{table}", "d-1")
        assert entry.status == "delivering" and entry.deliver_upto, entry
        set_lifecycle(config, Lifecycle.RUNNING, "test")
        wait_for("completed", lambda: notified(config, "COMPLETED", "d-1"))
        assert progress(config, f"public.{table}", "d-1").status == "completed"
        wait_caught_up(config)
        assert len(final_rows(reconciled(config, table))) == 51
    finally:
        processor.stop()
