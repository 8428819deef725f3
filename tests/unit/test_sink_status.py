"""The sink's published table statuses, as the processor reads them back."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from processor.pipeline.sink_status import status_of
from spark_sink.status import StatusBoard
from tidemark.core.config import Config


def test_a_table_status_starts_running_with_nothing_committed() -> None:
    board = StatusBoard(Config())
    status = board.of("lake.public.items", "tidemark.reconciled.public.items")
    assert status == {
        "table": "lake.public.items",
        "topic": "tidemark.reconciled.public.items",
        "committed": {},
        "lag": {},
        "last_commit_ms": None,
        "last_commit_rows": None,
        "stopped": False,
        "reason": None,
        "retrying": None,
    }
    assert board.of("lake.public.items", "other") is status  # one per table
    assert status_of(orjson.dumps(status, option=orjson.OPT_NON_STR_KEYS)) == status


@given(st.binary(max_size=200))
def test_any_bytes_in_the_topic_read_as_a_status_or_nothing(raw: bytes) -> None:
    found = status_of(raw)
    assert found is None or isinstance(found["table"], str)


def test_what_is_not_a_status_is_skipped() -> None:
    for raw in (None, b"", b"[]", b"{oops", b'{"table": 3}'):
        assert status_of(raw) is None
