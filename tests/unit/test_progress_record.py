"""The progress record read back (review A3): anything that is not a record the
coordinator wrote is refused with the reason, never half-read into a crash."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from processor.snapshot.progress import KeyRange, SnapshotState, TableProgress
from processor.snapshot.progress_record import ProgressRecordError, decode
from tidemark.core.record_auth import KEY_ENV, record_keys

TOPIC = "tidemark.snapshot-progress"


def written() -> dict[str, Any]:
    """A record as the coordinator writes it, with one table being read in two parts."""
    table = TableProgress("public.items", "r-1", condition="id > 3", status="running")
    table.last_key, table.maximum_key, table.rows, table.started_at = [5], [90], 12, 1.5
    table.ranges = [KeyRange([5], [40], chunk=7), KeyRange([40], [90], chunk=8, rows=3)]
    read = TableProgress("public.done", "r-1", status="delivering", rows=3)
    read.deliver_from, read.deliver_upto = {"0": 2, "1": 0}, {"0": 5, "1": 0}
    state = SnapshotState([read, table], False, 8, {"tidemark.signals": {0: 4}})
    return dict(orjson.loads(state.to_json()))


def test_a_written_record_reads_back_whole() -> None:
    doc = written()
    state = decode(orjson.dumps(doc))
    assert orjson.loads(state.to_json()) == doc


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda d: b"not json", "not JSON"),
        (lambda d: b"[1]", "not a JSON object"),
        (lambda d: {**d, "format": 99}, "unknown format"),
        (lambda d: {**d, "tables": {}}, "tables is not a list"),
        (lambda d: {**d, "paused": "no"}, "paused"),
        (lambda d: {**d, "chunk_sequence": -1}, "chunk_sequence"),
        (lambda d: {**d, "chunk_sequence": 2**63}, "chunk_sequence"),
        (lambda d: {**d, "signal_offsets": {"t": {"x": 1}}}, "signal_offsets"),
        (lambda d: {**d, "signal_offsets": {"t": {"0": "1"}}}, "signal_offsets"),
        (lambda d: {**d, "tables": [1]}, "tables[0] is not an object"),
        (lambda d: {**d, "tables": [{"table": "t"}]}, "tables[0].request_id is missing"),
        (lambda d: table(d, status="done"), "tables[0].status"),
        (lambda d: table(d, rows="12"), "tables[0].rows"),
        (lambda d: table(d, rows=True), "tables[0].rows"),
        (lambda d: table(d, condition=["id > 3"]), "tables[0].condition"),
        (lambda d: table(d, keys=[1]), "tables[0].keys"),
        (lambda d: table(d, last_key="5"), "tables[0].last_key"),
        (lambda d: table(d, surprise=1), "unknown fields"),
        (lambda d: table(d, ranges=[{"after": None}]), "tables[0].ranges[0].upto is missing"),
        (lambda d: table(d, ranges=[{"after": None, "upto": [1], "chunk": "7"}]), "chunk"),
        (lambda d: table(d, ranges="all"), "ranges is not a list"),
    ],
)
def test_a_record_the_coordinator_did_not_write_is_refused_with_the_reason(
    change: Any, reason: str
) -> None:
    changed = change(written())
    raw = changed if isinstance(changed, bytes) else orjson.dumps(changed)
    with pytest.raises(ProgressRecordError, match=reason.replace("[", r"\[").replace("]", r"\]")):
        decode(raw)


def table(doc: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**doc, "tables": [{**doc["tables"][0], **changes}]}


def test_delivery_offsets_are_offsets() -> None:
    with pytest.raises(ProgressRecordError, match="deliver_upto"):
        decode(orjson.dumps(table(written(), deliver_upto={"0": -1})))
    with pytest.raises(ProgressRecordError, match="deliver_from"):
        decode(orjson.dumps(table(written(), deliver_from=[1])))
    with pytest.raises(ProgressRecordError, match="deliver_upto names a partition"):
        decode(orjson.dumps(table(written(), deliver_upto={"x": 1})))


def test_with_a_record_key_only_a_signed_record_is_read() -> None:
    keys = record_keys({KEY_ENV: "p" * 32})
    assert keys is not None
    raw = orjson.dumps(written())
    with pytest.raises(ProgressRecordError, match="not signed"):
        decode(raw, keys, TOPIC, b"state", [])
    signed = [keys.sign(TOPIC, 0, b"state", raw)]
    assert decode(raw, keys, TOPIC, b"state", signed).chunk_sequence == 8
    with pytest.raises(ProgressRecordError, match="not signed"):
        decode(raw, keys, "other.snapshot-progress", b"state", signed)
