"""The compiled fused loops (``processor/reconcile/_fused.c``) on any input.

What they decide is held to the general path by
``test_debezium_fast_path.py::test_the_fast_path_decides_as_the_general_path``; here their
arguments are arbitrary: they take an event only as the Python loop would, as its own
bytes, and stop (never read outside a buffer, never crash) at anything else.
"""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.reconcile import versions
from processor.reconcile._fused import (
    ENTRY_LAYOUT,
    take_avro_changes,
    take_changes,
    take_fresh_rows,
)
from processor.reconcile.versions import Entry
from tests.unit.fuzzing import SCALE
from tidemark.core.json_scan import scan_change, scan_object
from tidemark.core.messages import RawMessage

TAG = object()
HEAD, TAIL = b'{"before":null,"after":', b',"op":"r"}'


def call(
    run: list[RawMessage], keys: list[bytes], cache: dict[bytes, bytes | None], limit: int = 1000
) -> tuple[int, dict[bytes, bytes | None], list[tuple[str, int, bytes | None, bytes | None]]]:
    updates: dict[bytes, bytes | None] = {}
    records: list[tuple[str, int, bytes | None, bytes | None]] = []
    taken = take_fresh_rows(
        run, keys, 0, TAG, cache, updates, b"e", b"P", HEAD, TAIL, limit,
        (b"__unavailable",), b"<", b">", b"!", "out", records,
    )  # fmt: skip
    return taken, updates, records


def row(value: bytes | None, key: bytes | None = b"k", offset: int = 7) -> RawMessage:
    return RawMessage("t", 0, offset, key, value, TAG)


def test_a_row_in_its_envelope_goes_to_state_and_output_as_its_bytes() -> None:
    run = [row(HEAD + b'{"id":1}' + TAIL), row(HEAD + b'{"id":2}' + TAIL, offset=8)]
    taken, updates, records = call(run, [b"a", b"b"], {b"ea": None, b"eb": None})
    assert taken == 2
    assert updates == {b"ea": b'P{"id":1}', b"eb": b'P{"id":2}'}
    assert records == [("out", 0, b"k", b'<{"id":1}>7!'), ("out", 0, b"k", b'<{"id":2}>8!')]


@pytest.mark.parametrize(
    "run, cache",
    [
        ([row(HEAD + b'{"id":1}' + TAIL)], {b"ea": b"stored"}),  # an entry: the Python loop's
        ([row(HEAD + b'{"id":1}' + TAIL)], {}),  # not read yet
        ([row(HEAD + b'{"id":1' + TAIL)], {b"ea": None}),  # not one object
        ([row(HEAD + b'{"v":"__unavailable"}' + TAIL)], {b"ea": None}),  # a placeholder
        ([row(HEAD + b'{"id":1}' + TAIL[:-1])], {b"ea": None}),  # out of its envelope
        ([row(None)], {b"ea": None}),  # a tombstone
        ([row(HEAD + b'{"id":1}' + TAIL)._replace(chunk=object())], {b"ea": None}),  # next chunk
        ([row(HEAD + b'{"id":1}' + TAIL, offset=1 << 70)], {b"ea": None}),  # beyond 64 bits
        ([row(HEAD + b"{}" + TAIL, key=b"k" * 1000)], {b"ea": None}),  # over the limit
    ],
)
def test_a_row_it_cannot_take_stops_it_with_nothing_written(
    run: list[RawMessage], cache: dict[bytes, bytes | None]
) -> None:
    assert call(run, [b"a"], dict(cache)) == (0, {}, [])


def test_arguments_of_the_wrong_kind_are_refused() -> None:
    with pytest.raises(TypeError):
        take_fresh_rows([], [], 0)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        call("not a list", [], {})  # type: ignore[arg-type]


items = st.one_of(
    st.none(),
    st.binary(max_size=40),
    st.integers(),
    st.builds(lambda body: HEAD + body + TAIL, st.binary(max_size=40)),
    st.builds(lambda body: HEAD + body + TAIL, st.sampled_from([b"{}", b'{"a":[1,"x"]}'])),
)


@pytest.mark.fuzz
@settings(max_examples=300 * SCALE)
@given(
    st.lists(
        st.tuples(items, st.one_of(st.none(), st.binary(max_size=8)), st.integers(-5, 1 << 66)),
        max_size=8,
    ),
    st.lists(st.one_of(st.binary(max_size=4), st.none()), max_size=8),
    st.integers(0, 120),
)
def test_any_rows_are_taken_or_stopped_at_never_misread(
    fields: list[tuple[object, bytes | None, int]], keys: list[bytes | None], limit: int
) -> None:
    run = [RawMessage("t", 0, offset, key, value, TAG) for value, key, offset in fields]  # type: ignore[arg-type]
    cache: dict[bytes, bytes | None] = {b"e" + k: None for k in keys if k is not None}
    taken, updates, records = call(run, keys, cache, limit)  # type: ignore[arg-type]
    assert 0 <= taken <= min(len(run), len(keys))
    assert len(records) == taken and len(updates) <= taken
    for msg, record in zip(run, records, strict=False):
        value = msg.value
        assert isinstance(value, bytes) and value.startswith(HEAD) and value.endswith(TAIL)
        body = value[len(HEAD) : -len(TAIL)]
        assert scan_object(value, len(HEAD), len(value) - len(TAIL))
        assert record == ("out", 0, msg.key, b"<" + body + b">%d!" % msg.offset)


PARTS = (b"[", b"|", b"|", b",", b"|", b"]")


def change(txid: int | None = 9, op: str = "u", lsn: int = 5) -> bytes:
    after = None if op == "d" else {"id": 1, "v": "x"}
    source = {"lsn": lsn, "txId": txid}
    return orjson.dumps(
        {"before": {"id": 1}, "after": after, "source": source, "op": op, "ts_ms": 1}
    )


def take(
    group: list[RawMessage], cache: dict[bytes, bytes | None], flushed: int = 0
) -> tuple[tuple[int, int, int, int], dict[bytes, bytes | None], list[object]]:
    updates: dict[bytes, bytes | None] = {}
    records: list[tuple[str, int, bytes | None, bytes | None]] = []
    keys = [b"e" + (m.key or b"") for m in group]
    taken = take_changes(
        group, keys, 0, cache, updates, b"", b"", 1000, flushed, PARTS, "out", records
    )
    return taken, updates, records


def test_a_change_of_a_key_without_an_entry_is_applied_with_its_before_replaced() -> None:
    (index, dropped, last, stop), updates, records = take([row(change(), key=b"k")], {b"ek": None})
    assert (index, dropped, last, stop) == (1, 0, 0, 0)
    head = b"\x02" + (5).to_bytes(8, "big") * 2
    assert updates == {b"ek": head + b"\x03" + (9).to_bytes(8, "big") + b'{"id":1,"v":"x"}'}
    payload = change().replace(b'"before":{"id":1}', b'"before":null')[:-1]
    assert records == [("out", 0, b"k", payload + b"[0|7|5,5|applied]")]


def test_the_loops_keep_the_state_entry_in_the_layout_of_the_rules() -> None:
    """The layout is written in C and in Python: both name the same, and the entries the
    loop writes are those the rules encode, and decode back."""
    assert ENTRY_LAYOUT == versions.ENTRY_LAYOUT
    _t, applied, _r = take([row(change(), key=b"k")], {b"ek": None})
    _t, deleted, _r = take([row(change(None, "d"), key=b"k")], {b"ek": None})
    row_entry = Entry((5, 5), b'{"id":1,"v":"x"}', txid=9)
    assert applied[b"ek"] == row_entry.encode()
    assert Entry.decode(applied[b"ek"] or b"") == row_entry
    assert deleted[b"ek"] == Entry((5, 5), None).encode()


def test_a_delete_emits_its_tombstone_and_keeps_no_row() -> None:
    (index, _d, _l, _s), updates, records = take([row(change(None, "d"), key=b"k")], {b"ek": None})
    assert index == 1 and updates == {b"ek": b"\x02" + (5).to_bytes(8, "big") * 2 + b"\x00"}
    assert [r[3] is None for r in records] == [False, True]


def test_an_older_change_is_dropped_and_an_equal_one_below_the_flushed_offset_too() -> None:
    stored = b"\x02" + (5).to_bytes(8, "big") * 2 + b"\x01" + b'{"id":0}'
    for lsn, flushed, outcome in ((4, 0, (1, 1, 0, 0)), (5, 8, (1, 1, 0, 0)), (5, 7, (1, 0, 0, 0))):
        taken, updates, records = take([row(change(lsn=lsn), key=b"k")], {b"ek": stored}, flushed)
        assert taken == outcome and updates == {}
        assert len(records) == 1 - outcome[1]
    _t, _u, records = take([row(change(lsn=5), key=b"k")], {b"ek": stored}, 7)
    assert records[0][3].startswith(b'{"before":{"id":0}')  # type: ignore[index]


def test_versions_order_by_their_first_part_then_their_second() -> None:
    """PostgreSQL's ``[last commit, this event]``: one transaction's events share the first."""
    stored = b"\x02" + (16).to_bytes(8, "big") + (200).to_bytes(8, "big") + b"\x01{}"
    for first, second, dropped in (
        ("16", "100", 1),
        ("16", "300", 0),
        ("8", "900", 1),
        ("17", "1", 0),
    ):
        event = orjson.loads(change())
        event["source"]["sequence"] = orjson.dumps([first, second]).decode()
        taken, _updates, _records = take([row(orjson.dumps(event), key=b"k")], {b"ek": stored})
        assert taken == (1, dropped, 0, 0), (first, second)


@pytest.mark.parametrize(
    "value, cache, outcome",
    [
        (change(), {}, (0, 0, -1, 0)),  # not read yet: the Python loop reads it
        (change(), {b"ek": b"\x02" + bytes(16) + b"\x08" + bytes(8)}, (0, 0, -1, 0)),  # a chunk's
        (change(), {b"ek": b"\x02" + bytes(16) + b"\x01\x00avro"}, (0, 0, -1, 1)),  # Avro row
        (b"\x00avro", {b"ek": None}, (0, 0, -1, 1)),  # Avro: the general path
        (
            change().replace(b'"v":"x"', b'"v":"__debezium_unavailable_value"'),
            {b"ek": None},
            (0, 0, -1, 1),
        ),
        (change()[:-1], {b"ek": None}, (0, 0, -1, 1)),  # not JSON
        (b"{" + b" " * 1000 + b"}", {b"ek": None}, (0, 0, -1, 1)),  # over the limit
    ],
)
def test_an_event_it_does_not_decide_stops_it_with_nothing_written(
    value: bytes, cache: dict[bytes, bytes | None], outcome: tuple[int, int, int, int]
) -> None:
    assert take([row(value, key=b"k")], dict(cache)) == (outcome, {}, [])


def test_a_tombstone_is_taken_with_nothing_emitted() -> None:
    assert take([row(None, key=b"k")], {}) == ((1, 0, -1, 0), {}, [])


@pytest.mark.fuzz
@settings(max_examples=300 * SCALE)
@given(
    st.lists(
        st.tuples(
            st.one_of(items, st.builds(change, st.one_of(st.none(), st.integers(0, 1 << 62)))),
            st.one_of(st.none(), st.binary(max_size=8)),
            st.integers(-5, 1 << 66),
        ),
        max_size=8,
    ),
    st.lists(st.one_of(st.none(), st.binary(min_size=0, max_size=40)), max_size=8),
    st.integers(-1, 1 << 64),
)
def test_any_changes_are_taken_or_stopped_at_never_misread(
    fields: list[tuple[object, bytes | None, int]], stored: list[bytes | None], flushed: int
) -> None:
    run = [RawMessage("t", 0, offset, key, value, None) for value, key, offset in fields]  # type: ignore[arg-type]
    keys = [b"e%d" % i for i in range(len(run))]
    cache = dict(zip(keys, stored, strict=False))
    records: list[tuple[str, int, bytes | None, bytes | None]] = []
    try:
        index, dropped, last, _stop = take_changes(
            run, keys, 0, cache, {}, b"", b"", 500, flushed, PARTS, "out", records
        )
    except OverflowError:
        assert flushed >= 1 << 63
        return
    assert 0 <= dropped <= index <= len(run) and -1 <= last < max(index, 1)
    for record in records:
        if record[3] is not None:  # a change event again, then its tidemark member
            payload = record[3][: record[3].rindex(b"[")] + b"}"
            assert scan_change(payload, 0, len(payload)) is not None


LAYOUT = object()
AVRO_HEADER, KEY_IN, KEY_OUT = (
    b"\x00\x00\x00\x00\x07",
    b"\x00\x00\x00\x00\x01",
    b"\x00\x00\x00\x00\x09",
)


def avro_take(
    values: list[tuple[bytes | None, tuple[object, ...] | None]],
    cache: dict[bytes, bytes | None],
    key: bytes | None = KEY_IN + b"\x02",
) -> tuple[tuple[int, int, int, int], dict[bytes, bytes | None], list[object]]:
    group = [RawMessage("t", 0, 7, key, value, None) for value, _scan in values]
    scans = [scan for _value, scan in values]
    updates: dict[bytes, bytes | None] = {}
    records: list[tuple[str, int, bytes | None, bytes | None]] = []
    result = take_avro_changes(
        group, [b"ek"] * len(group), 0, scans, 0, LAYOUT, b"\x00\x00\x00\x00\x08", b"\x00",
        b"\x02", cache, updates, 0, b"<", b"A>", b"R>", KEY_IN, KEY_OUT, "out", records,
    )  # fmt: skip
    return result, updates, records


def avro_change(op: str = "u", txid: int | None = 3) -> tuple[bytes, tuple[object, ...]]:
    """An event: header, before (null), after (row branch + row), the rest; and its scan."""
    value = AVRO_HEADER + b"\x00" + (b"\x00" if op == "d" else b"\x02ROW") + b"REST"
    after_at = 6
    rest_at = 7 if op == "d" else 10
    return value, (LAYOUT, after_at, rest_at, False, op, (5, 6), txid, None, "postgresql")


def test_an_avro_change_goes_to_state_and_output_as_its_bytes() -> None:
    value, scan = avro_change()
    (index, dropped, last, stop), updates, records = avro_take([(value, scan)], {b"ek": None})
    assert (index, dropped, last, stop) == (1, 0, 0, 0)
    version = (5).to_bytes(8, "big") + (6).to_bytes(8, "big")
    assert updates == {
        b"ek": b"\x02" + version + b"\x03" + (3).to_bytes(8, "big") + AVRO_HEADER + b"ROW"
    }
    # the output key's header is the output schema's; the block: offset 7, "5,6" (3 bytes)
    assert records == [
        ("out", 0, KEY_OUT + b"\x02", b"\x00\x00\x00\x00\x08\x00\x02ROWREST<\x0e\x065,6A>")
    ]


def test_an_avro_delete_keeps_no_row_and_emits_its_tombstone() -> None:
    value, scan = avro_change("d", None)
    stored = b"\x02" + bytes(16) + b"\x01" + AVRO_HEADER + b"OLD"
    _result, updates, records = avro_take([(value, scan)], {b"ek": stored})
    assert updates == {b"ek": b"\x02" + (5).to_bytes(8, "big") + (6).to_bytes(8, "big") + b"\x00"}
    assert records[0][3].startswith(b"\x00\x00\x00\x00\x08\x02OLD\x00")  # type: ignore[index]
    assert records[1][3] is None  # type: ignore[index]


@pytest.mark.parametrize(
    "cache, key, outcome",
    [
        ({}, KEY_IN + b"\x02", (0, 0, -1, 0)),  # not read yet
        (
            {b"ek": b"\x02" + bytes(16) + b"\x01JSON"},
            KEY_IN + b"\x02",
            (0, 0, -1, 1),
        ),  # another format
        ({b"ek": None}, b"\x00\x00\x00\x00\x05\x02", (0, 0, -1, 0)),  # another key schema
    ],
)
def test_an_avro_change_it_does_not_decide_stops_it_with_nothing_written(
    cache: dict[bytes, bytes | None], key: bytes, outcome: tuple[int, int, int, int]
) -> None:
    assert avro_take([avro_change()], cache, key) == (outcome, {}, [])


@pytest.mark.fuzz
@settings(max_examples=200 * SCALE)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=30)),
            st.one_of(
                st.none(),
                st.tuples(
                    st.sampled_from([LAYOUT, object()]),
                    st.integers(-3, 40),
                    st.integers(-3, 40),
                    st.booleans(),
                    st.sampled_from(["c", "u", "d", "r", "dd", ""]),
                    st.tuples(st.integers(-(1 << 63), (1 << 63) - 1), st.integers(0, 9)),
                    st.one_of(st.none(), st.integers(0, 1 << 62)),
                ),
            ),
        ),
        max_size=6,
    ),
    st.one_of(st.none(), st.binary(max_size=40)),
)
def test_any_avro_scans_are_taken_or_stopped_at_never_misread(
    values: list[tuple[bytes | None, tuple[object, ...] | None]], stored: bytes | None
) -> None:
    (index, dropped, _last, _stop), _updates, records = avro_take(values, {b"ek": stored})
    assert 0 <= dropped <= index <= len(values)
    for record in records:
        assert record[3] is None or record[3][:5] == b"\x00\x00\x00\x00\x08"  # type: ignore[index]


#: Run under PYTHONMALLOC=debug, which fills freed memory with 0xDD: a row read from an
#: entry after the loop's own write of the key freed it would come out as that.
_REPLACED_ENTRY = """
import sys
from processor.reconcile._fused import take_avro_changes, take_changes
from tests.unit.test_fused_loops import (
    KEY_IN, KEY_OUT, LAYOUT, PARTS, avro_change, change, row
)
old = b'{"id":1,"doc":"' + b"x" * 5000 + b'"}'
cache = {b"ek": b"\\x02" + bytes(16) + b"\\x01" + old}  # only the dict holds it
records = []
take_changes([row(change(), key=b"k")], [b"ek"], 0, cache, {}, b"", b"", 10**6, 0, PARTS,
             "out", records)
assert records[0][3].startswith(b'{"before":' + old), records[0][3][:40]
value, scan = avro_change()
cache = {b"ek": b"\\x02" + bytes(16) + b"\\x01" + value[:5] + b"R" * 5000}
records = []
take_avro_changes([row(value)], [b"ek"], 0, [scan], 0, LAYOUT, b"\\x00" * 4 + b"\\x08",
                  b"\\x00", b"\\x02", cache, {}, 0, b"<", b"A>", b"R>", KEY_IN, KEY_OUT,
                  "out", records)
assert records[0][3][5:5006] == b"\\x02" + b"R" * 5000, records[0][3][:40]
"""


def test_an_entry_the_loop_replaces_is_read_before_it_is_freed() -> None:
    """The loops read the stored row (the output's ``before``) of an entry that their own
    write of the key's new entry releases; with only the state map holding it, the write
    freed it under the pointer, and large rows came out as garbage (seen in CI as outputs
    that were not JSON)."""
    done = subprocess.run(
        [sys.executable, "-c", _REPLACED_ENTRY],
        env={**os.environ, "PYTHONMALLOC": "debug"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
