"""The compiled chunk-row loop (``processor/reconcile/_chunk_rows.c``) on any input.

What it decides is held to the general path by
``test_debezium_fast_path.py::test_the_fast_path_decides_as_the_general_path``; here its
arguments are arbitrary: it takes a row only in its envelope, as its own bytes, and
stops (never reads outside a buffer, never crashes) at anything else.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.reconcile._chunk_rows import take_fresh_rows
from tidemark.json_scan import scan_object
from tidemark.messages import RawMessage

SCALE = int(os.environ.get("TIDEMARK_FUZZ_SCALE", "1"))
TAG = object()
HEAD, TAIL = b'{"before":null,"after":', b',"op":"r"}'


def call(
    run: list[RawMessage], keys: list[bytes], cache: dict[bytes, bytes | None], limit: int = 1000
) -> tuple[int, dict[bytes, bytes | None], list[tuple[str, int, bytes | None, bytes | None]]]:
    updates: dict[bytes, bytes | None] = {}
    records: list[tuple[str, int, bytes | None, bytes | None]] = []
    taken = take_fresh_rows(
        run, keys, 0, TAG, cache, updates, b"e", b"P", HEAD, TAIL, limit,
        (b"__unavailable",), scan_object, b"<", b">", b"!", "out", records,
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
