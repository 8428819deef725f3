"""The compiled scanner against its oracles: orjson, and the general path's reading of a
Debezium event (:func:`processor.events.change.debezium_change`).

What the scanner takes, orjson takes, with the same values: the spans parse to the
event's ``before`` and ``after``, the position, transaction id, snapshot kind and
connector are the general path's. It may decline (``None``) what it does not judge,
but it takes the events Debezium writes. Random, mutated and truncated bytes never
crash it or make it read past the end it was given.
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor.events.change import (
    TOAST_PLACEHOLDER,
    TOAST_PLACEHOLDER_BASE64,
    Snapshot,
    debezium_change,
)
from tidemark.errors import InputError
from tidemark.json_scan import (
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
    scan_change,
    scan_key,
    scan_object,
)
from tidemark.messages import RawMessage

#: ``make fuzz`` runs these properties and the byte fuzzing this many times longer.
SCALE = int(os.environ.get("TIDEMARK_FUZZ_SCALE", "1"))


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


@settings(max_examples=300 * SCALE, deadline=None)
@given(doc=plain_json_values)
def test_an_object_is_taken_exactly_when_orjson_reads_one(doc: Any) -> None:
    for raw in layouts(doc):
        assert scan_object(raw, 0, len(raw)) == isinstance(doc, dict)


@settings(max_examples=300 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event=events, seed=st.integers(0, 2**32))
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


def test_random_bytes_do_not_crash_it() -> None:
    rng = random.Random(7)
    alphabet = b'{}[]":,\\ntrufalse0123456789-+.eE \t\n\x00\x7f\x80\xbf\xc2\xe0\xed\xf0\xf4\xff'
    for _ in range(20_000 * SCALE):
        size = rng.randrange(64)
        data = bytes(rng.choice(alphabet) for _ in range(size))
        taken = scan_key(data, 0, size, (b"a", b"id"), b"Ia")
        for found in (scan_change(data, 0, size), scan_object(data, 0, size), taken):
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
    ],
)
def test_what_orjson_refuses_is_not_taken(text: bytes) -> None:
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(text)
    assert not scan_object(text, 0, len(text))


def test_deep_nesting_is_declined_within_orjsons_limit() -> None:
    deep = b'{"a":' * 300 + b"1" + b"}" * 300
    assert isinstance(orjson.loads(deep), dict)
    assert not scan_object(deep, 0, len(deep))  # declined, not a crash


def test_bounds_outside_the_bytes_are_an_error() -> None:
    with pytest.raises(ValueError):
        scan_change(b"{}", 0, 3)
    with pytest.raises(ValueError):
        scan_object(b"{}", -1, 2)
    with pytest.raises(TypeError):
        scan_change("{}", 0, 2)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        scan_key(b"{}", 0, 2, (b"a",), b"ii")  # a kind per name
    with pytest.raises(ValueError):
        scan_key(b"{}", 0, 3, (b"a",), b"i")
