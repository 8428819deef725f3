"""Decoding Debezium JSON (with and without schemas) and encoding reconciled events."""

from __future__ import annotations

import orjson
import pytest

from processor.change import Snapshot
from processor.codecs import SourceCodec
from processor.envelopes import Emit
from processor.errors import InputError, RawMessage
from processor.json_codec import TIDEMARK_FIELD

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
        "source": {"sequence": sequence, "lsn": lsn, "txId": 5, "connector": "postgresql"},
        "ts_ms": 1,
    }


def codec(envelope: str = "debezium-upsert") -> SourceCodec:
    return SourceCodec(envelope, "p.reconciled.public.t", None)


def decode(msg: RawMessage, envelope: str = "debezium-upsert"):  # type: ignore[no-untyped-def]
    return codec(envelope).decode(msg)


def test_version_comes_from_the_sequence_pair() -> None:
    assert decode(message(event())).version == (10, 12)
    # the first transaction a new connector sees has no previous commit LSN
    assert decode(message(event(sequence='[null,"9"]'))).version == (0, 9)
    assert decode(message(event(sequence=None, lsn=33))).version == (33, 33)


def test_mysql_position_orders_by_binlog_file_then_position_then_row() -> None:
    def at(file: str, pos: int, row: int) -> tuple[int, int]:
        payload = {
            **event(),
            "source": {"connector": "mysql", "file": file, "pos": pos, "row": row},
        }
        return decode(message(payload)).version

    assert at("bin.000002", 4, 0) > at("bin.000001", 900_000, 5)
    assert at("bin.000001", 10, 1) > at("bin.000001", 10, 0) > at("bin.000001", 9, 3)


def test_with_and_without_schema_and_the_schema_is_parsed_once() -> None:
    source = codec()
    plain = source.decode(message(event()))
    wrapped = source.decode(message({"schema": SCHEMA, "payload": event()}))
    again = source.decode(message({"schema": SCHEMA, "payload": event(op="c")}))
    assert plain.schema is None and wrapped.schema == SCHEMA
    assert again.schema is wrapped.schema  # cached by its bytes, not parsed again
    assert plain.after == wrapped.after == {"id": 1, "v": "x"}
    assert again.op == "c"


def test_snapshot_kinds() -> None:
    def kind(value: str | None) -> Snapshot:
        payload = event(op="r")
        payload["source"]["snapshot"] = value  # type: ignore[index]
        return decode(message(payload)).snapshot

    assert kind("first_in_data_collection") is kind("last") is Snapshot.INITIAL
    assert kind("incremental") is Snapshot.INCREMENTAL
    assert kind("false") is kind(None) is Snapshot.NONE


def test_delete_has_no_after() -> None:
    change = decode(message({**event(op="d"), "after": None}))
    assert change.op == "d" and change.after is None


def test_toast_placeholder_is_noticed() -> None:
    assert decode(message(event(after={"id": 1, "doc": "__debezium_unavailable_value"}))).toast
    assert not decode(message(event())).toast
    # with a schema, the first message learns it and the next ones reuse it: both searched
    source = codec()
    for doc in ("__debezium_unavailable_value", "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==", "x"):
        for _ in range(2):
            wrapped = {"schema": SCHEMA, "payload": event(after={"id": 1, "doc": doc})}
            assert source.decode(message(wrapped)).toast == (doc != "x")


KEY_SCHEMA = {
    "type": "struct",
    "optional": False,
    "fields": [{"type": "int32", "optional": False, "field": "id"}],
}


@pytest.mark.parametrize(
    ("raw", "key", "reason", "kind"),
    [
        (b"{not json", None, "value is not JSON", "malformed"),
        (orjson.dumps({"hello": 1}), None, "not a Debezium change event", "not-debezium"),
        (orjson.dumps(event(op="x")), None, "unknown op 'x'", "unknown-op"),
        (
            orjson.dumps({**event(), "after": None}),
            None,
            "op 'u' without an 'after' row",
            "not-debezium",
        ),
        (orjson.dumps({**event(), "source": None}), None, "without a 'source' block", "position"),
        (
            orjson.dumps(event(sequence=None, lsn=None)),
            None,
            "without a source position",
            "position",
        ),
        (orjson.dumps(event(sequence="[oops")), None, "unreadable source position", "position"),
        (orjson.dumps(event()), b"[1]", "not a struct of primary-key columns", "key"),
        (orjson.dumps(event()), b"{oops", "key is not JSON", "malformed"),
        (
            orjson.dumps(event()),
            orjson.dumps({"schema": KEY_SCHEMA, "payload": {"id": "one"}}),
            "'id' is not int32",
            "key",
        ),
        (
            orjson.dumps(event()),
            orjson.dumps({"schema": KEY_SCHEMA, "payload": {"other": 1}}),
            "no column 'id'",
            "key",
        ),
    ],
)
def test_bad_input_is_an_input_error_with_the_raw_message(
    raw: bytes, key: bytes | None, reason: str, kind: str
) -> None:
    msg = RawMessage("p.public.t", 1, 7, key or b'{"id":1}', raw)
    with pytest.raises(InputError, match=reason) as info:
        decode(msg)
    assert info.value.message.value == raw
    assert info.value.message.offset == 7
    assert info.value.kind == kind


def test_output_carries_state_before_and_metadata_with_schema() -> None:
    source = codec()
    msg = message({"schema": SCHEMA, "payload": event()})
    change = source.decode(msg)
    emit = Emit("u", b'{"id":1,"v":"old"}', change.after, "applied", b'{"id":1,"v":"x"}')
    key, value = source.encode(change, emit, msg)
    assert key == msg.key  # the output is keyed like the input, schema and all
    out = orjson.loads(value)
    assert out["payload"]["before"] == {"id": 1, "v": "old"}
    assert out["payload"]["after"] == {"id": 1, "v": "x"}
    assert out["payload"]["tidemark"] == {
        "topic": "p.public.t",
        "partition": 1,
        "offset": 7,
        "position": "10,12",
        "envelope": "debezium-upsert",
        "reason": "applied",
    }
    assert out["schema"]["fields"][-1] == TIDEMARK_FIELD
    assert [f["field"] for f in out["schema"]["fields"]] == ["before", "after", "op", "tidemark"]


def test_output_without_schema_is_the_bare_payload() -> None:
    source = codec("debezium")
    msg = message(event())
    change = source.decode(msg)
    out = orjson.loads(source.encode(change, Emit("u", None, change.after, "applied"), msg)[1])
    assert set(out) >= {"before", "after", "op", "source", "ts_ms", "tidemark"}


def test_upsert_envelope_versions_by_offset_and_null_deletes() -> None:
    assert decode(message({"id": 1}, offset=3), "upsert").version == (0, 3)
    deleted = decode(RawMessage("t", 0, 4, b"k", None), "upsert")
    assert deleted.after is None and deleted.op == "d"
    with pytest.raises(InputError, match="not a JSON object"):
        decode(message([1, 2]), "upsert")


def test_the_state_key_is_the_key_payload_with_or_without_its_schema() -> None:
    wrapped = orjson.dumps({"schema": KEY_SCHEMA, "payload": {"id": 1}})
    source = codec()
    for _ in range(2):  # the first parse and the cached prefix agree
        change = source.decode(RawMessage("p.public.t", 1, 7, wrapped, orjson.dumps(event())))
        assert change.key == b'{"id":1}'
    assert decode(message(event())).key == b'{"id":1}'


def test_a_message_without_a_key_is_an_input_error() -> None:
    with pytest.raises(InputError, match="without a key") as info:
        decode(RawMessage("p.public.t", 0, 1, None, orjson.dumps(event())))
    assert info.value.kind == "no-key"
