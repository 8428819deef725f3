"""Decoding Debezium JSON and encoding reconciled events."""

from __future__ import annotations

import orjson
import pytest

from processor.codec import TIDEMARK_FIELD, decode_debezium, decode_upsert, encode_output
from processor.errors import InputError, RawMessage

SCHEMA = {
    "type": "struct",
    "name": "p.public.t.Envelope",
    "optional": False,
    "fields": [
        {"type": "struct", "field": "before", "optional": True, "fields": []},
        {"type": "struct", "field": "after", "optional": True, "fields": []},
        {"type": "string", "field": "op", "optional": False},
    ],
}


def message(value: object, offset: int = 7, raw: bytes | None = None) -> RawMessage:
    body = raw if raw is not None else orjson.dumps(value)
    return RawMessage("p.public.t", 1, offset, b'{"id":1}', body)


def event(
    op: str = "u", after: object = None, sequence: str | None = '["10","12"]', lsn: int | None = 12
) -> dict[str, object]:
    return {
        "before": None,
        "after": {"id": 1, "v": "x"} if after is None else after,
        "op": op,
        "source": {"sequence": sequence, "lsn": lsn, "txId": 5},
        "ts_ms": 1,
    }


def test_version_comes_from_the_sequence_pair() -> None:
    assert decode_debezium(message(event())).version == (10, 12)
    # the first transaction a new connector sees has no previous commit LSN
    assert decode_debezium(message(event(sequence='[null,"9"]'))).version == (0, 9)
    assert decode_debezium(message(event(sequence=None, lsn=33))).version == (33, 33)


def test_with_and_without_schema() -> None:
    plain = decode_debezium(message(event()))
    wrapped = decode_debezium(message({"schema": SCHEMA, "payload": event()}))
    assert plain.schema is None and wrapped.schema == SCHEMA
    assert plain.after == wrapped.after == orjson.dumps({"id": 1, "v": "x"})


def test_delete_has_no_after() -> None:
    change = decode_debezium(message(event(op="d", after={})))
    assert change.op == "d" and change.after is None


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"{not json", "value is not JSON"),
        (orjson.dumps({"hello": 1}), "not a Debezium change event"),
        (orjson.dumps(event(op="x")), "unknown op 'x'"),
        (orjson.dumps({**event(), "after": None}), "op 'u' without an 'after' row"),
        (orjson.dumps({**event(), "source": None}), "without a 'source' block"),
        (orjson.dumps(event(sequence=None, lsn=None)), "without a source position"),
        (orjson.dumps(event(sequence="[oops")), "unreadable source position"),
    ],
)
def test_bad_input_is_an_input_error_with_the_raw_message(raw: bytes, reason: str) -> None:
    with pytest.raises(InputError, match=reason) as info:
        decode_debezium(message(None, raw=raw))
    assert info.value.message.value == raw
    assert info.value.message.offset == 7


def test_output_carries_state_before_and_metadata_with_schema() -> None:
    msg = message({"schema": SCHEMA, "payload": event()})
    change = decode_debezium(msg)
    out = orjson.loads(
        encode_output(change, b'{"id":1,"v":"old"}', "applied", "debezium-upsert", msg)
    )
    assert out["payload"]["before"] == {"id": 1, "v": "old"}
    assert out["payload"]["after"] == {"id": 1, "v": "x"}
    assert out["payload"]["tidemark"] == {
        "topic": "p.public.t",
        "partition": 1,
        "offset": 7,
        "envelope": "debezium-upsert",
        "reason": "applied",
    }
    assert out["schema"]["fields"][-1] == TIDEMARK_FIELD
    assert [f["field"] for f in out["schema"]["fields"]] == ["before", "after", "op", "tidemark"]


def test_upsert_envelope_versions_by_offset_and_null_deletes() -> None:
    assert decode_upsert(message({"id": 1}, offset=3)).version == (0, 3)
    deleted = decode_upsert(RawMessage("t", 0, 4, b"k", None))
    assert deleted.after is None and deleted.op == "d"
    with pytest.raises(InputError, match="not a JSON object"):
        decode_upsert(message([1, 2]))
