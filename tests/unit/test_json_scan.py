"""The compiled scanner against its oracles: orjson, and the general path's reading of a
Debezium event (:func:`processor.events.change.debezium_change`).

What the scanner takes, orjson takes, with the same values: the spans parse to the
event's ``before`` and ``after``, the position, transaction id, snapshot kind and
connector are the general path's; a reconciled event's op and ``after``
(:func:`~tidemark.core.json_scan.scan_envelope`) are orjson's. It may decline (``None``)
what it does not judge, but it takes the events Debezium and the processor write.
Random, mutated and truncated bytes never crash it or make it read past the end it
was given.
"""

from __future__ import annotations

import json
import random
import string
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor.errors import PositionError
from processor.events.change import (
    TOAST_PLACEHOLDER,
    TOAST_PLACEHOLDER_BASE64,
    Snapshot,
    debezium_change,
    source_version,
)
from tests.unit.fuzzing import SCALE
from tidemark.core.errors import InputError
from tidemark.core.json_scan import (
    AFTER,
    AFTER_END,
    BEFORE,
    BEFORE_END,
    BEFORE_ROW,
    CLOSE,
    CONNECTOR,
    MAJOR,
    MINOR,
    OP,
    OPEN,
    SNAPSHOT,
    TOAST,
    TXID,
    scan_bare_key,
    scan_change,
    scan_envelope,
    scan_key,
    scan_object,
    sequence_version,
)
from tidemark.core.messages import RawMessage

#: ``make fuzz`` runs these properties and the byte fuzzing this many times longer.


def json_values_with(floats: st.SearchStrategy[float]) -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        floats,
        st.text(),
        st.sampled_from([TOAST_PLACEHOLDER, TOAST_PLACEHOLDER_BASE64, "é\u2028\U0001f600", '"\\']),
    )
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
        ),
        max_leaves=12,
    )


json_values = json_values_with(st.floats(allow_nan=False, allow_infinity=False))
#: Values the scanner must take whenever orjson does: no double beyond 1e300 (declined).
plain_json_values = json_values_with(st.floats(-1e300, 1e300))
rows = st.dictionaries(st.text(max_size=8), json_values, max_size=5)
sequences = st.one_of(
    st.tuples(st.integers(0, 2**63 - 1) | st.none(), st.integers(0, 2**63 - 1) | st.none()).map(
        lambda pair: orjson.dumps([None if v is None else str(v) for v in pair]).decode()
    ),
    st.sampled_from(["", "[1,2]", '["1"]', '["x","2"]', '[ "1","2"]']),
)
sources = st.fixed_dictionaries(
    {},
    optional={
        "version": st.just("3.0.0.Final"),
        "connector": st.sampled_from(["postgresql", "mysql", "mongodb", None, 7]),
        "snapshot": st.sampled_from(
            ["false", "true", "first", "last", "incremental", "other", None, True, 1]
        ),
        "sequence": sequences | st.none(),
        "lsn": st.integers(-(2**64), 2**64) | st.none() | st.just("12") | st.just(1.5),
        "txId": st.integers(-(2**64), 2**64) | st.none() | st.just("7") | st.just(True),
        "xmin": st.none(),
        "file": st.just("mysql-bin.000003"),
        "pos": st.integers(0, 2**30),
    },
)
events = st.fixed_dictionaries(
    {},
    optional={
        "before": rows | st.none() | st.just([1]),
        "after": rows | st.none() | st.just("x"),
        "op": st.sampled_from(["c", "u", "d", "r", "x", "", 1]),
        "source": sources | st.none(),
        "ts_ms": st.integers(0, 2**41) | st.none(),
        "transaction": st.none(),
        "tidemark": st.just({}),
    },
)


def layouts(doc: Any) -> list[bytes]:
    """``doc`` compact in UTF-8, with ASCII escapes (surrogate pairs too) and spaces,
    indented, and with spaces around it (the standard library writes every integer)."""
    compact = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()
    return [
        compact,
        json.dumps(doc).encode(),
        json.dumps(doc, indent=2).encode(),
        b" \n" + compact + b"\t ",
    ]


def general(payload: Any, raw: bytes) -> Any:
    """What the general path reads in ``payload``, or the error it raises."""
    msg = RawMessage("t", 0, 0, b"{}", raw)
    try:
        return debezium_change(b"k", payload, msg, False)
    except InputError as exc:
        return exc


@pytest.mark.fuzz
@settings(max_examples=400 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event=events)
def test_what_the_scanner_takes_the_general_path_reads_the_same(event: dict[str, Any]) -> None:
    for raw in layouts(event):
        scan = scan_change(raw, 0, len(raw))
        if scan is None:
            continue
        payload = orjson.loads(raw)  # taken: orjson takes it too
        change = general(payload, raw)
        assert not isinstance(change, InputError), change
        assert orjson.loads(raw[scan[BEFORE] : scan[BEFORE_END]]) == payload["before"]
        assert orjson.loads(raw[scan[AFTER] : scan[AFTER_END]]) == payload["after"]
        assert scan[BEFORE_ROW] == isinstance(payload["before"], dict)
        assert chr(scan[OP]) == change.op
        assert (scan[MAJOR], scan[MINOR]) == change.version
        assert scan[TXID] == change.txid
        kinds = {0: Snapshot.NONE, 1: Snapshot.INITIAL, 2: Snapshot.INCREMENTAL}
        assert kinds[scan[SNAPSHOT]] == change.snapshot
        connectors = {0: None, 1: "postgresql", 2: "mysql"}
        assert connectors.get(scan[CONNECTOR], change.connector) == change.connector
        after = raw[scan[AFTER] : scan[AFTER_END]]
        placeholder = (
            TOAST_PLACEHOLDER.encode() in after or TOAST_PLACEHOLDER_BASE64.encode() in after
        )
        assert bool(scan[TOAST]) == placeholder
        assert raw[scan[OPEN] : scan[CLOSE] + 1].strip() == raw.strip()


def debezium_event(row: dict[str, Any], txid: int, lsn: int) -> dict[str, Any]:
    source = {
        "version": "3.0.0.Final",
        "connector": "postgresql",
        "name": "tidemark",
        "ts_ms": 1700000000000,
        "snapshot": "false",
        "db": "tidemark",
        "sequence": orjson.dumps([str(lsn - 8), str(lsn)]).decode(),
        "schema": "public",
        "table": "items",
        "txId": txid,
        "lsn": lsn,
        "xmin": None,
    }
    return {
        "before": None,
        "after": row,
        "source": source,
        "op": "c",
        "ts_ms": 1,
        "transaction": None,
    }


#: Column values as Debezium writes them (no double beyond 1e300: those are declined).
columns = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(-1e300, 1e300),
    st.text(),
    st.lists(st.text(max_size=4), max_size=3),
)


@pytest.mark.fuzz
@settings(max_examples=200 * SCALE, deadline=None)
@given(
    row=st.dictionaries(st.text(max_size=8), columns, max_size=6),
    txid=st.integers(0, 2**32),
    lsn=st.integers(8, 2**62),
)
def test_the_events_debezium_writes_are_taken(row: dict[str, Any], txid: int, lsn: int) -> None:
    """Not declined: a fast path that declines Debezium's own events gains nothing."""
    for raw in layouts(debezium_event(row, txid, lsn)):
        assert scan_change(raw, 0, len(raw)) is not None


#: Top-level member names the scanner reads as they are (no escape in any layout).
plain_names = st.text(string.ascii_letters + string.digits + "_", max_size=8).filter(
    lambda name: name not in ("op", "after")
)
tidemark_blocks = st.fixed_dictionaries(
    {
        "topic": st.text(max_size=8),
        "partition": st.integers(0, 2**31 - 1),
        "offset": st.integers(0, 2**63 - 1),
        "position": st.just("10,12"),
        "envelope": st.sampled_from(["debezium", "upsert"]),
        "reason": st.sampled_from(["change", "repair"]),
    }
)
#: Reconciled events, the processor's and others: any members, ``tidemark`` or not.
reconciled_events = st.tuples(
    st.fixed_dictionaries(
        {},
        optional={
            "before": rows | st.none(),
            "after": rows | st.none() | st.sampled_from(["x", 1, [1], True]),
            "op": st.sampled_from(["c", "u", "d", "r", "x", "", "dd", "é", 1, None, ["d"]]),
            "source": sources | st.just({}) | st.none(),
            "ts_ms": st.integers(0, 2**41) | st.none(),
            "transaction": st.none(),
            "tidemark": tidemark_blocks | st.just({}),
        },
    ),
    st.dictionaries(st.text(max_size=6), json_values, max_size=3),
).map(lambda pair: {**pair[1], **pair[0]})


def envelope_oracle(payload: dict[str, Any]) -> tuple[int, bool, Any]:
    """What :func:`scan_envelope` says of ``payload`` as orjson reads it: the op's code (0
    unless a one-byte string), whether ``after`` is a row, ``after`` (``None`` if absent)."""
    op = payload.get("op")
    code = ord(op) if isinstance(op, str) and len(op.encode()) == 1 else 0
    after = payload.get("after")
    return code, isinstance(after, dict), after


@pytest.mark.fuzz
@settings(max_examples=400 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event=reconciled_events)
def test_what_the_envelope_scan_takes_orjson_reads_the_same(event: dict[str, Any]) -> None:
    """Bare, and inside a schema envelope (the payload's slice of the message)."""
    head = b'{"schema":{"type":"struct"},"payload":'
    for raw in layouts(event):
        for buf, start, end in ((raw, 0, len(raw)), (head + raw + b"}", len(head), -1)):
            end %= len(buf) + 1
            found = scan_envelope(buf, start, end)
            if found is None:
                continue
            payload = orjson.loads(buf[start:end])  # taken: orjson takes it too
            assert isinstance(payload, dict)
            op, row, after, after_end = found
            code, is_row, value = envelope_oracle(payload)
            assert (op, row) == (code, is_row)
            if "after" in payload:
                assert start <= after < after_end <= end
                assert orjson.loads(buf[after:after_end]) == value
            else:
                assert (after, after_end) == (-1, -1)


@pytest.mark.fuzz
@settings(max_examples=300 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    event=st.fixed_dictionaries(
        {"tidemark": tidemark_blocks},
        optional={
            "before": st.dictionaries(st.text(max_size=8), columns, max_size=4) | st.none(),
            "after": st.dictionaries(st.text(max_size=8), columns, max_size=6) | st.none(),
            "op": st.sampled_from(["c", "u", "d", "r"]),
            "source": st.just({}) | st.just(debezium_event({}, 1, 8)["source"]),
            "ts_ms": st.integers(0, 2**41),
            "transaction": st.none(),
        },
    ),
    extra=st.dictionaries(plain_names, plain_json_values, max_size=3),
)
def test_the_events_the_processor_writes_are_taken_by_the_envelope_scan(
    event: dict[str, Any], extra: dict[str, Any]
) -> None:
    """Upsert and Debezium outputs (an empty ``source`` or Debezium's), deletes, members of
    any kind: not declined, and read as orjson reads them."""
    event = {**extra, **event}
    for raw in layouts(event):
        found = scan_envelope(raw, 0, len(raw))
        assert found is not None
        op, row, after, after_end = found
        assert (op, row, orjson.loads(raw[after:after_end]) if after >= 0 else None) == (
            envelope_oracle(event)
        )


@pytest.mark.parametrize(
    "text",
    [
        b'{"op":"c","op":"d","after":null}',  # orjson keeps the last
        b'{"after":{"a":1},"op":"c","after":null}',
        b'{"op":"\\u0064","after":{"a":1}}',  # "d", escaped
        b'{"\\u006fp":"d","after":{"a":1}}',  # an escaped member name
        b'{"after":"x","op":"d"}',  # after neither a row nor null
        b'{"after":[{"a":1}]}',
        b'{"after":{"a":1e400}}',  # orjson refuses the double
        b'{"after":{"a":1},"x":' + b"[" * 300 + b"]" * 300 + b"}",  # deeper than the limit
        b'[{"op":"c"}]',
        b'"op"',
    ],
)
def test_what_the_envelope_scan_does_not_judge_is_declined(text: bytes) -> None:
    assert scan_envelope(text, 0, len(text)) is None


def test_the_envelope_scan_reads_op_and_after_exactly() -> None:
    cases: dict[bytes, tuple[int, bool, bytes | None]] = {
        b"{}": (0, False, None),
        b'{"op":"d"}': (ord("d"), False, None),
        b'{"op":"dd","after":null}': (0, False, b"null"),
        b'{"op":1,"after":{}}': (0, True, b"{}"),
        b' {"tidemark":{"op":"d"},"after" : {"op":"d"} ,"op":"u"}\n': (
            ord("u"),
            True,
            b'{"op":"d"}',
        ),
    }
    for raw, (op, row, after) in cases.items():
        found = scan_envelope(raw, 0, len(raw))
        assert found is not None and found[:2] == (op, row)
        assert (raw[found[2] : found[3]] if found[2] >= 0 else None) == after
        assert after is not None or found[2:] == (-1, -1)
    raw = b'xx{"after":{"a":1}}yy'
    assert scan_envelope(raw, 2, len(raw) - 2) == (0, True, 11, 18)
    assert scan_envelope(raw, 2, len(raw) - 3) is None  # the slice ends in the row


@pytest.mark.fuzz
@settings(max_examples=300 * SCALE, deadline=None)
@given(doc=plain_json_values)
def test_an_object_is_taken_exactly_when_orjson_reads_one(doc: Any) -> None:
    for raw in layouts(doc):
        assert scan_object(raw, 0, len(raw)) == isinstance(doc, dict)


@pytest.mark.fuzz
@settings(max_examples=300 * SCALE, deadline=None)
@given(
    doc=plain_json_values
    | st.dictionaries(st.sampled_from(["id", "schema", "payload", "é"]), plain_json_values)
)
def test_a_bare_key_is_taken_only_as_an_object_without_an_envelopes_members(doc: Any) -> None:
    """What ``scan_bare_key`` takes, orjson reads as an object with a member and neither
    ``schema`` nor ``payload`` (so never as JsonConverter's envelope); such an object
    written with its names unescaped is taken wherever ``scan_object`` takes it."""
    for layout, raw in enumerate(layouts(doc)):
        taken = scan_bare_key(raw, 0, len(raw))
        plain = (
            isinstance(doc, dict)
            and doc
            and not {"schema", "payload"} & set(doc)
            and all(json.dumps(name, ensure_ascii=False)[1:-1] == name for name in doc)
        )
        if taken:
            read = orjson.loads(raw)
            assert isinstance(read, dict) and read and not {"schema", "payload"} & set(read)
        if plain and layout == 0 and scan_object(raw, 0, len(raw)):
            assert taken


@pytest.mark.fuzz
@settings(max_examples=300 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event=events | reconciled_events, seed=st.integers(0, 2**32))
def test_mutated_and_truncated_bytes_are_never_taken_wrongly(
    event: dict[str, Any], seed: int
) -> None:
    """Flipped, inserted and deleted bytes, and every prefix: taken only if orjson takes
    them; the scan of a slice never looks outside it."""
    rng = random.Random(seed)
    raw = bytearray(layouts(event)[0])
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(raw) + 1)
        kind = rng.randrange(3)
        if kind == 0 and at < len(raw):
            raw[at] = rng.randrange(256)
        elif kind == 1:
            raw[at:at] = bytes([rng.choice(b'{}[]",:\\ \x00\x80\xc3\xed\xf4u0e-.')])
        elif at < len(raw):
            del raw[at]
    data = bytes(raw)
    for end in {len(data), *(rng.randrange(len(data) + 1) for _ in range(8))}:
        # The slice ends inside bytes that go on: reading past ``end`` would see them.
        padded = data[:end] + b'}]"0'
        for buf, stop in ((data[:end], end), (padded, end)):
            if scan_change(buf, 0, stop) is not None:
                assert isinstance(orjson.loads(data[:end]), dict)
            if scan_object(buf, 0, stop):
                assert isinstance(orjson.loads(data[:end]), dict)
            found = scan_envelope(buf, 0, stop)
            if found is not None:
                payload = orjson.loads(data[:end])
                assert isinstance(payload, dict)
                code, row, after = envelope_oracle(payload)
                assert found[:2] == (code, row)
                if found[2] >= 0:
                    assert found[3] <= end and orjson.loads(data[found[2] : found[3]]) == after


@pytest.mark.fuzz
def test_random_bytes_do_not_crash_it() -> None:
    rng = random.Random(7)
    alphabet = b'{}[]":,\\ntrufalse0123456789-+.eE \t\n\x00\x7f\x80\xbf\xc2\xe0\xed\xf0\xf4\xff'
    for _ in range(20_000 * SCALE):
        size = rng.randrange(64)
        data = bytes(rng.choice(alphabet) for _ in range(size))
        taken = scan_key(data, 0, size, (b"a", b"id"), b"Ia") or scan_bare_key(data, 0, size)
        envelope = scan_envelope(data, 0, size)
        for found in (scan_change(data, 0, size), scan_object(data, 0, size), taken, envelope):
            if found:
                assert isinstance(orjson.loads(data), dict)


@pytest.mark.parametrize(
    "text",
    [
        b'{"a":"\\ud800"}',  # a lone high surrogate
        b'{"a":"\\udc00"}',  # a lone low surrogate
        b'{"a":"\xed\xa0\x80"}',  # a surrogate in UTF-8
        b'{"a":"\xc0\xaf"}',  # an overlong encoding
        b'{"a":1e400}',  # infinity as a double
        b'{"a":01}',
        b'{"a":1,}',
        b'{"a":NaN}',
        b'{"a":"\x01"}',
        b'{"a":1} x',
        b'{"op":"\x1f","after":null}',  # a control character, unescaped
        b'{"op":"\xc3","after":null}',  # a truncated UTF-8 sequence
        b'{"op":"c","after":{"a":"\xed\xa0\x80"}}',
        b'{"op":"c","after":{"a":1}',
        b'{"op":"c","after":nul}',
        b'{"op":"c",,"after":null}',
        b'{"op":"d","after":null}{}',
        b'{"op":"c","after":{"a":-}}',
    ],
)
def test_what_orjson_refuses_is_not_taken(text: bytes) -> None:
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(text)
    assert not scan_object(text, 0, len(text))
    assert scan_envelope(text, 0, len(text)) is None


def test_deep_nesting_is_declined_within_orjsons_limit() -> None:
    deep = b'{"a":' * 300 + b"1" + b"}" * 300
    assert isinstance(orjson.loads(deep), dict)
    assert not scan_object(deep, 0, len(deep))  # declined, not a crash
    assert scan_envelope(deep, 0, len(deep)) is None
    deep_after = b'{"after":' + deep + b"}"
    assert scan_envelope(deep_after, 0, len(deep_after)) is None


def test_bounds_outside_the_bytes_are_an_error() -> None:
    with pytest.raises(ValueError):
        scan_change(b"{}", 0, 3)
    with pytest.raises(ValueError):
        scan_object(b"{}", -1, 2)
    with pytest.raises(TypeError):
        scan_change("{}", 0, 2)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        scan_envelope(b"{}", 1, 0)
    with pytest.raises(TypeError):
        scan_envelope(b"{}", 0)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        scan_key(b"{}", 0, 2, (b"a",), b"ii")  # a kind per name
    with pytest.raises(ValueError):
        scan_key(b"{}", 0, 3, (b"a",), b"i")


def general_version(sequence: str) -> tuple[int, int] | None:
    """What ``source_version`` makes of a sequence without the compiled reading (its
    general way, orjson), or ``None`` where it raises."""
    with mock.patch("processor.events.change.sequence_version", lambda _sequence: None):
        try:
            return source_version({"sequence": sequence})
        except PositionError:
            return None


elements = st.one_of(
    st.none(),
    st.integers(0, 2**64).map(str),
    st.integers(-5, 5).map(str),
    st.sampled_from(["", "007", " 1", "1_0", "+1", "1e3", "١٢"]),
    st.integers(0, 10),
)


@pytest.mark.fuzz
@settings(max_examples=500 * SCALE, deadline=None)
@given(
    sequence=st.one_of(
        st.tuples(elements, elements).map(lambda pair: json.dumps(list(pair))),
        st.tuples(elements, elements).map(lambda pair: orjson.dumps(list(pair)).decode()),
        st.text(alphabet='[]",nul0123456789 \\-', max_size=30),
        st.text(max_size=30),
    )
)
def test_a_sequence_is_read_as_source_version_reads_it(sequence: str) -> None:
    """Where the compiled reading gives a version, it is the general way's: it only
    declines (``None``), never reads a sequence otherwise."""
    found = sequence_version(sequence)
    if found is not None:
        assert found == general_version(sequence)


def test_postgresqls_own_sequences_are_read_compiled() -> None:
    assert sequence_version('["10","12"]') == (10, 12)
    assert sequence_version('[null,"12"]') == (12, 12)  # Debezium's own snapshot rows
    assert sequence_version("[null,null]") == (0, 0)
    assert sequence_version(f'["{2**63 - 1}",null]') == (2**63 - 1, 0)
    for other in ('["1", "2"]', f'["{2**63}","1"]', '["-1","2"]', '["1","2"] ', "[1,2]", ""):
        assert sequence_version(other) is None
