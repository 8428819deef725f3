"""Chunk rows' keys: an integer key is formatted as the general path serializes it."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from processor.snapshot.chunk_events import TableShape
from processor.snapshot.postgres.values import column

EVENT = {
    "before": None,
    "after": None,
    "source": {"connector": "postgresql", "snapshot": "false", "txId": 5, "lsn": 7},
    "op": "c",
    "ts_ms": 1,
}
KEY_SCHEMA = {"type": "struct", "fields": [], "optional": False, "name": "k"}


def keys(name: str, values: list[Any], schema: bool) -> list[bytes]:
    """The keys ``encode_chunk`` writes for rows of ``(values[i], "x")`` keyed by ``name``."""
    columns = [column(name, "int8", -1, "N", None), column("note", "text", -1, "S", None)]
    key = orjson.dumps({name: 1})
    if schema:
        key = orjson.dumps({"schema": KEY_SCHEMA, "payload": {name: 1}})
    event = orjson.dumps(dict(EVENT, after={name: 1, "note": "x"}))
    shape = TableShape.learn(key, event, None)
    return [k for k, _ in shape.encode_chunk([(v, "x") for v in values], columns)]


@given(
    st.text(min_size=1, max_size=8),
    st.lists(st.integers(-(1 << 63), (1 << 63) - 1) | st.none() | st.booleans(), max_size=5),
    st.booleans(),
)
def test_a_one_column_key_is_what_orjson_writes(name: str, values: list[Any], schema: bool) -> None:
    """Names with ``%``, quotes or escapes included, in both JSON formats."""
    written = keys(name, values, schema)
    payloads = [orjson.dumps({name: v}) for v in values]
    if schema:
        head = orjson.dumps({"schema": KEY_SCHEMA, "payload": 0})[: -len(b"0}")]
        payloads = [head + p + b"}" for p in payloads]
    assert written == payloads


def test_a_percent_sign_in_the_name_is_not_a_format() -> None:
    assert keys("a%d%%b", [7], False) == [b'{"a%d%%b":7}']
