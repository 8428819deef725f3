"""Framed key-value pairs (``tidemark/core/_records.c``): a round trip, any bytes read safely."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.fuzzing import SCALE
from tidemark.core.frames import FRAMING, frame, unframe, unframe_messages
from tidemark.core.messages import RawMessage

pairs = st.lists(st.tuples(st.binary(max_size=300), st.binary(max_size=300)), max_size=20)


@given(pairs, st.data())
def test_frames_give_their_pairs_back(
    framed: list[tuple[bytes, bytes]], data: st.DataObject
) -> None:
    start = data.draw(st.integers(0, len(framed)))
    stop = data.draw(st.integers(start, len(framed)))
    buf = frame(framed, start, stop)
    assert len(buf) == sum(len(k) + len(v) + FRAMING for k, v in framed[start:stop])
    assert unframe(buf) == [part for pair in framed[start:stop] for part in pair]


@pytest.mark.fuzz
@settings(max_examples=300 * SCALE)
@given(pairs.filter(bool), st.data())
def test_cut_or_changed_frames_are_refused_or_read_as_frames(
    framed: list[tuple[bytes, bytes]], data: st.DataObject
) -> None:
    """A buffer cut short is refused, unless it ends where a pair does (then it holds the
    pairs before); whatever the bytes, unframe reads only inside them, and what it takes
    frames again into the same bytes."""
    buf = bytearray(frame(framed, 0, len(framed)))
    ends = {len(frame(framed, 0, n)): n for n in range(len(framed))}
    cut = data.draw(st.integers(0, len(buf) - 1))
    whole = ends.get(cut)
    expected = None if whole is None else [part for pair in framed[:whole] for part in pair]
    assert unframe(bytes(buf[:cut])) == expected
    for _ in range(data.draw(st.integers(1, 4))):
        buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    parts = unframe(bytes(buf))
    if parts is not None:
        again = list(zip(parts[::2], parts[1::2], strict=True))
        assert frame(again, 0, len(again)) == bytes(buf)


@pytest.mark.fuzz
def test_random_bytes_do_not_crash_it() -> None:
    chance = random.Random(24)
    for _ in range(20_000 * SCALE):
        buf = chance.randbytes(chance.randint(0, 64))
        parts = unframe(buf)
        if parts is not None:
            again = list(zip(parts[::2], parts[1::2], strict=True))
            assert frame(again, 0, len(again)) == buf


def test_frame_refuses_what_is_not_pairs_of_bytes() -> None:
    with pytest.raises(TypeError):
        frame([(b"k", "v")], 0, 1)  # type: ignore[list-item]
    with pytest.raises(TypeError):
        frame([(b"k",)], 0, 1)  # type: ignore[list-item]
    with pytest.raises(IndexError):
        frame([(b"k", b"v")], 0, 2)
    with pytest.raises(TypeError):
        unframe("text")  # type: ignore[arg-type]


@pytest.mark.fuzz
@settings(max_examples=300 * SCALE)
@given(pairs, st.data())
def test_frames_as_messages_are_unframes_pairs(
    framed: list[tuple[bytes, bytes]], data: st.DataObject
) -> None:
    """:func:`unframe_messages` gives what :func:`unframe` gives, as messages, when the
    buffer holds exactly ``count`` pairs (and at least one), else ``None``; on any bytes."""
    buf = bytearray(frame(framed, 0, len(framed)))
    if buf and data.draw(st.booleans()):
        buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    buf = buf[: data.draw(st.integers(0, len(buf)))] if data.draw(st.booleans()) else buf
    count = data.draw(st.sampled_from([len(framed), len(framed) + 1, max(0, len(framed) - 1)]))
    tag = object()
    parts = unframe(bytes(buf))
    expected = None
    if parts and len(parts) == 2 * count:
        pairs_read = zip(parts[::2], parts[1::2], strict=True)
        expected = [RawMessage("t", 2, 9, k, v, tag) for k, v in pairs_read]
    found = unframe_messages(RawMessage, "t", 2, 9, tag, bytes(buf), count)
    assert found == expected
    assert found is None or all(type(msg) is RawMessage and msg.chunk is tag for msg in found)


def test_frames_as_messages_refuse_a_type_that_is_not_a_plain_tuple() -> None:
    class Wider(tuple):  # type: ignore[type-arg]
        """A tuple with a __dict__: larger than a tuple."""

    for cls in (list, dict, Wider):
        with pytest.raises(TypeError):
            buf = frame([(b"k", b"v")], 0, 1)
            unframe_messages(cls, "t", 0, 0, None, buf, 1)  # type: ignore[type-var]
