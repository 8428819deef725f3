"""Dead letters as the API shows them: hostile records, the query, and the answer's bounds."""

from __future__ import annotations

import base64
from contextlib import ExitStack
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.pipeline.dead_letters import (
    PREVIEW_BYTES,
    PREVIEWS_IN_FLIGHT,
    Query,
    ReadsBusyError,
    _newest,
    admitted,
    dead_letter,
    matches,
    table_of,
)

HEADERS = [
    ("tidemark.source.topic", b"tidemark.public.items"),
    ("tidemark.source.partition", b"2"),
    ("tidemark.source.offset", b"41"),
    ("tidemark.error", b"value is not JSON"),
    ("tidemark.error.kind", b"malformed"),
]


def test_a_dead_letter_says_where_it_came_from_and_why() -> None:
    found = dead_letter(0, 7, 1_700_000_000_000, HEADERS, b'{"id":1}', b"{not json")
    assert found["source"] == {"topic": "tidemark.public.items", "partition": 2, "offset": 41}
    assert (found["table"], found["kind"], found["error"]) == (
        "public.items",
        "malformed",
        "value is not JSON",
    )
    assert (found["key_preview"], found["value_preview"]) == ('{"id":1}', "{not json")
    assert (found["key_bytes"], found["value_bytes"]) == (8, 9)
    whole = dead_letter(0, 7, None, HEADERS, None, b"\xff\x00")
    assert whole["key_preview"] is None and "value_base64" not in whole
    downloaded = dead_letter(0, 7, None, HEADERS, None, b"\xff\x00", whole=True)
    assert base64.b64decode(downloaded["value_base64"]) == b"\xff\x00"
    assert downloaded["key_base64"] is None and "value_preview" not in downloaded


def test_a_large_value_is_previewed_not_shown_whole() -> None:
    found = dead_letter(0, 0, None, HEADERS, None, b"x" * (10 << 20))
    assert found["value_preview"] == "x" * PREVIEW_BYTES + "…"
    assert found["value_bytes"] == 10 << 20


@settings(max_examples=300)
@given(
    headers=st.one_of(
        st.none(),
        st.lists(
            st.tuples(
                st.sampled_from([name for name, _ in HEADERS] + ["other", ""]),
                st.one_of(st.none(), st.binary(max_size=40), st.text(max_size=20)),
            ),
            max_size=8,
        ),
    ),
    key=st.one_of(st.none(), st.binary(max_size=700)),
    value=st.one_of(st.none(), st.binary(max_size=700)),
)
def test_any_record_in_the_topic_reads_as_a_dead_letter_and_never_raises(
    headers: list[tuple[str, Any]] | None, key: bytes | None, value: bytes | None
) -> None:
    found = dead_letter(3, 9, None, headers, key, value)
    orjson.dumps(found)  # what the API answers is JSON, whatever the record held
    for preview, raw in ((found["key_preview"], key), (found["value_preview"], value)):
        assert (preview is None) == (raw is None)
        assert preview is None or len(preview) <= PREVIEW_BYTES + 1
    assert found["source"]["partition"] is None or isinstance(found["source"]["partition"], int)


def test_the_table_is_the_change_topics_last_two_names() -> None:
    assert table_of("tidemark.public.items") == "public.items"
    assert table_of("a.b.public.items") == "public.items"
    assert table_of("items") is None and table_of(None) is None


def test_a_letter_matches_a_query_by_table_and_kind() -> None:
    letter = dead_letter(0, 0, None, HEADERS, None, None)
    assert matches(letter, Query("public.items", "malformed")) and matches(letter, Query())
    assert not matches(letter, Query("public.other")) and not matches(letter, Query(kind="x"))


letters = st.lists(
    st.builds(
        lambda partition, offset, stamp, size: {
            "partition": partition,
            "offset": offset,
            "timestamp_ms": stamp,
            "key_bytes": None,
            "value_bytes": size,
        },
        st.integers(0, 3),
        st.integers(0, 10**6),
        st.one_of(st.none(), st.integers(0, 50)),
        st.integers(0, 40),
    ),
    max_size=40,
    unique_by=lambda d: (d["partition"], d["offset"]),
)


# A rare interleaving (a byte cut, then the limit cut before it) took 100 examples by luck
# and 20,000 for sure: 2,000 take well under a second.
@settings(max_examples=2000)
@given(found=letters, limit=st.integers(1, 12), whole=st.booleans(), every=st.integers(1, 10))
def test_pruning_while_reading_answers_what_pruning_at_the_end_answers(
    found: list[dict[str, Any]], limit: int, whole: bool, every: int
) -> None:
    query = Query(limit=limit, whole=whole)
    at_end = _newest(found, query, None, 100)
    kept: list[dict[str, Any]] = []
    floor = None
    for i, letter in enumerate(found):
        kept.append(letter)
        if i % every == 0:
            kept, floor = _newest(kept, query, floor, 100)
    assert _newest(kept, query, floor, 100) == at_end
    assert len(at_end[0]) <= limit
    if whole and len(at_end[0]) > 1:
        assert sum(d["value_bytes"] for d in at_end[0]) <= 100


def test_the_reads_in_flight_are_bounded_for_the_whole_process() -> None:
    """A download holds up to 2 x DOWNLOAD_BYTES while it reads: one at a time in the
    process, and a few previews beside it; a request past them is answered busy, and a
    read that ends frees its place."""
    with admitted(whole=True):
        with pytest.raises(ReadsBusyError, match="a download of dead letters is in flight"):
            with admitted(whole=True):
                pass
        with ExitStack() as previews:
            for _ in range(PREVIEWS_IN_FLIGHT):
                previews.enter_context(admitted(whole=False))
            with pytest.raises(ReadsBusyError, match=f"{PREVIEWS_IN_FLIGHT} reads"):
                with admitted(whole=False):
                    pass
        with admitted(whole=False):
            pass
    with admitted(whole=True):
        pass
