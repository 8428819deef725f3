"""Decoding Debezium JSON (with and without schemas) and encoding reconciled events."""

from __future__ import annotations

import contextlib
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.events.change import Emit, Snapshot
from processor.events.chunk_tag import ChunkTag
from processor.events.json_codec import TIDEMARK_FIELD
from processor.events.source_codec import SourceCodec
from processor.events.visibility import PgSnapshot
from processor.snapshot.chunk_events import TableShape
from processor.snapshot.connect_values import Column, same
from tidemark.core.errors import InputError
from tidemark.core.messages import RawMessage

SCHEMA: dict[str, Any] = {
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
    # Debezium's own snapshot rows have no commit LSN: they sit at the snapshot's position
    assert decode(message(event(sequence='[null,"9"]'))).version == (9, 9)
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


def test_a_key_that_does_not_match_its_schema_is_an_input_error() -> None:
    def key(schema: object, payload: object) -> RawMessage:
        wrapped = orjson.dumps({"schema": schema, "payload": payload})
        return RawMessage("p.public.t", 1, 7, wrapped, orjson.dumps(event()))

    source = codec()
    for payload, reason in (
        ({"id": "1"}, "'id' is not int64"),
        ({"id": None}, "'id' is null"),
        ({"id": 1, "x": 2}, "columns differ"),
        ({"x": 1}, "no column 'id'"),
        ({"id": True}, "'id' is not int64"),
    ):
        for _ in range(2):  # with the schema's columns read, and then remembered
            with pytest.raises(InputError, match=reason) as info:
                source.decode(key(KEY_SCHEMA, payload))
            assert info.value.kind == "key"
    odd = dict(KEY_SCHEMA, fields=[{"type": ["int64"], "optional": False, "field": "id"}])
    assert source.decode(key(odd, {"id": 1})).key == b'{"id":1}'  # an unknown type: not checked
    with pytest.raises(InputError, match="not a struct"):
        source.decode(key(dict(KEY_SCHEMA, fields=["id"]), {"id": 1}))


#: Key columns of every kind the scanner checks, and values of every JSON type for them.
KEY_TYPES = ["int32", "int64", "double", "boolean", "string", "bytes", "struct", ["int64"]]
key_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=4),
    st.just({"a": [1]}),
)


@settings(max_examples=300, deadline=None)
@given(
    columns=st.lists(
        st.tuples(
            st.sampled_from(["id", "b", "é", "id"]), st.sampled_from(KEY_TYPES), st.booleans()
        ),
        min_size=1,
        max_size=3,
    ),
    values=st.lists(key_values, min_size=3, max_size=3),
    layout=st.sampled_from(["ordered", "reversed", "spaced", "extra", "missing"]),
)
def test_a_key_the_scanner_takes_decodes_to_the_same_bytes(
    columns: list[tuple[str, Any, bool]], values: list[Any], layout: str
) -> None:
    """:meth:`JsonCodec.scanned_key` takes a schema's key only where :meth:`decode_key`
    gives the same state key, and takes the keys that match their schema in its order."""
    fields = [{"type": t, "optional": o, "field": n} for n, t, o in columns]
    schema = {"type": "struct", "optional": False, "name": "p.public.t.Key", "fields": fields}
    payload = {n: v for (n, _t, _o), v in zip(columns, values, strict=False)}
    text = orjson.dumps(payload)
    if layout == "reversed":
        text = orjson.dumps(dict(reversed(payload.items())))
    elif layout == "spaced":
        text = orjson.dumps(payload, option=orjson.OPT_INDENT_2)
    elif layout == "extra":
        text = orjson.dumps(dict(payload, extra=1))
    elif layout == "missing":
        text = orjson.dumps(dict(list(payload.items())[1:]))
    head = b'{"schema":' + orjson.dumps(schema) + b',"payload":'
    json = codec().json
    learned = RawMessage("p.public.t", 0, 0, head + b'{"id":1}}', None)
    with contextlib.suppress(InputError):
        json.decode_key(learned)  # the schema's prefix and columns, learned
    key = head + text + b"}"
    taken = json.scanned_key(key)
    try:
        decoded: bytes | None = json.decode_key(RawMessage("p.public.t", 0, 1, key, None))
    except InputError:
        decoded = None
    if taken is not None:
        assert taken == decoded
    ordinary = layout in ("ordered", "spaced") and len({n for n, _t, _o in columns}) == len(columns)
    if (
        decoded is not None
        and ordinary
        and all(abs(v) < 2**63 for v in payload.values() if type(v) is int)
        # the scanner declines doubles beyond 1e300 (tidemark/core/json_scan.py)
        and all(abs(v) < 1e300 for v in payload.values() if type(v) is float)
    ):
        assert taken == decoded  # not declined


def test_a_message_without_a_key_is_an_input_error() -> None:
    with pytest.raises(InputError, match="without a key") as info:
        decode(RawMessage("p.public.t", 0, 1, None, orjson.dumps(event())))
    assert info.value.kind == "no-key"


# -- rows of one incremental-snapshot chunk ---------------------------------------

ROW_SCHEMA = {
    "type": "struct",
    "name": "p.public.t.Value",
    "optional": True,
    "fields": [
        {"type": "int64", "optional": False, "field": "id"},
        {"type": "string", "optional": True, "field": "v"},
    ],
}
CHUNK_SCHEMA = dict(
    SCHEMA,
    fields=[dict(ROW_SCHEMA, field="before"), dict(ROW_SCHEMA, field="after"), SCHEMA["fields"][2]],
)
KEY_SCHEMA = {
    "type": "struct",
    "name": "p.public.t.Key",
    "optional": False,
    "fields": [{"type": "int64", "optional": False, "field": "id"}],
}


def chunk_messages(rows: list[tuple[int, str | None]], chunk: int = 3) -> list[RawMessage]:
    """Rows of one chunk as Tidemark's chunk reader writes them (JSON with schemas)."""
    debezium = event("c", {"id": 0, "v": "seed"})
    debezium["source"] = dict(debezium["source"], snapshot="false")  # type: ignore[call-overload]
    shape = TableShape.learn(
        orjson.dumps({"schema": KEY_SCHEMA, "payload": {"id": 0}}),
        orjson.dumps({"schema": CHUNK_SCHEMA, "payload": debezium}),
        None,
    )
    columns = [Column("id", "int8", None, same), Column("v", "text", "text", same)]
    tag = ChunkTag(chunk, PgSnapshot(100, 104, frozenset({101})), "req")
    encoded = shape.encode_chunk(rows, columns)
    return [
        RawMessage("p.backfill.p.public.t", 0, offset, key, value, tag)
        for offset, (key, value) in enumerate(encoded)
    ]


def full_decode(msg: RawMessage):  # type: ignore[no-untyped-def]
    return codec().decode(msg)  # a fresh codec has learned no envelope


def test_rows_of_one_chunk_decode_as_in_full_with_only_the_row_parsed() -> None:
    rows = [(1, "a"), (2, None), (3, 'quote " and ,"source":{} inside'), (4, "é \u2028")]
    msgs = chunk_messages(rows)
    shared = codec()
    decoded = [shared.decode(m) for m in msgs]
    assert shared.json._chunk is not None  # learned from the first row
    for msg, change in zip(msgs, decoded, strict=True):
        full = full_decode(msg)
        assert (change.key, change.op, change.before, change.after) == (
            full.key,
            full.op,
            full.before,
            full.after,
        )
        assert (change.version, change.chunk, change.read_in) == (full.version, 3, full.read_in)
        assert (change.snapshot, change.connector, change.toast) == (
            Snapshot.INCREMENTAL,
            "postgresql",
            False,
        )
        assert change.schema == full.schema and change.event["source"] == full.event["source"]
    # after the first row, each row's own bytes go to state and the output as they are
    for change in decoded[1:]:
        assert change.raw_after is not None and orjson.loads(change.raw_after) == change.after
    assert [(c.after or {}).get("v") for c in decoded] == [v for _, v in rows]


def test_a_chunk_row_that_does_not_fit_the_envelope_is_decoded_in_full() -> None:
    first, second = chunk_messages([(1, "a"), (2, "b")])
    shared = codec()
    shared.decode(first)
    envelope = shared.json._chunk
    assert envelope is not None
    # bytes between the envelope's that are not one JSON object: decoded in full, and refused
    for between, kind in ((b'{"id":2}}', "malformed"), (b"[2]", "not-debezium")):
        with pytest.raises(InputError) as refused:
            shared.decode(second._replace(value=envelope.head + between + envelope.tail))
        assert refused.value.kind == kind
    # a row of another chunk (its source block differs): decoded in full, its envelope learned
    other = chunk_messages([(5, "e")], chunk=4)[0]
    assert other.value is not None
    other = other._replace(value=other.value.replace(b'"ts_ms":', b'"ts_ms":1', 1))
    assert shared.decode(other).after == {"id": 5, "v": "e"}
    assert shared.json._chunk is not envelope
    # a change of the change topic (no chunk tag) never takes the envelope's shortcut
    live = second._replace(topic="p.public.t", chunk=None)
    with pytest.raises(InputError, match="position"):
        shared.decode(live)


def test_a_chunk_row_with_the_toast_placeholder_is_flagged() -> None:
    msgs = chunk_messages([(1, "a"), (2, "__debezium_unavailable_value")])
    shared = codec()
    assert [shared.decode(m).toast for m in msgs] == [False, True]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.none() | st.text()), min_size=1))
def test_any_chunk_decodes_the_same_through_its_envelope(
    rows: list[tuple[int, str | None]],
) -> None:
    shared = codec()
    for msg in chunk_messages(rows):
        change, full = shared.decode(msg), full_decode(msg)
        assert (change.key, change.after, change.version, change.toast) == (
            full.key,
            full.after,
            full.version,
            full.toast,
        )
