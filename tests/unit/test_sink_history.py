"""What a table keeps (``merge`` or ``append``, metadata columns): the configuration's
choice, each event's metadata, and an ``append`` table read as current state."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_sink.history import APPEND, MERGE, Keeping, event_metadata, keeping
from tidemark.cli.verify import newest_versions
from tidemark.core.config import SinkConfig, TableLayout, load_config
from tidemark.core.errors import ConfigError


def test_a_tables_own_entry_then_the_sinks_layout_then_merge() -> None:
    sink = SinkConfig(
        layout=TableLayout(metadata_columns=True),
        tables={
            "public.audit": TableLayout(mode="append"),
            "public.plain": TableLayout(metadata_columns=False),
        },
    )
    assert keeping(sink, "public.audit") == Keeping(APPEND, True)
    assert keeping(sink, "public.plain") == Keeping(MERGE, False)
    assert keeping(sink, "public.other") == Keeping(MERGE, True)
    assert keeping(SinkConfig(), "public.other") == Keeping(MERGE, False)
    # append always has them: its rows are told apart by them
    only = SinkConfig(tables={"public.a": TableLayout(mode="append", metadata_columns=False)})
    assert keeping(only, "public.a") == Keeping(APPEND, True)


def test_the_mode_is_read_from_the_file_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("sink:\n  tables:\n    public.audit: {mode: append}\n")
    assert load_config(path, environ={}).sink.tables["public.audit"].mode == "append"
    path.write_text("sink:\n  layout: {mode: history}\n")
    with pytest.raises(ConfigError, match="sink.layout.mode"):
        load_config(path, environ={})


def test_an_events_metadata_and_what_is_not_there() -> None:
    payload = {
        "op": "u",
        "source": {"ts_ms": 1700000000123, "lsn": 27028456, "txId": 764},
        "tidemark": {"position": "27028168,27028456"},
    }
    assert event_metadata(payload) == ("u", 1700000000123, 27028456, 764, "27028168,27028456")
    # a backfill's row: no transaction, no LSN
    assert event_metadata({"op": "r", "source": None, "tidemark": {"position": "5,0"}}) == (
        "r",
        None,
        None,
        None,
        "5,0",
    )
    hostile = {"op": 1, "source": {"lsn": "9", "txId": True}, "tidemark": "x"}
    assert event_metadata(hostile) == (None, None, None, None, None)


def test_an_append_table_read_as_current_state_is_each_keys_newest_version() -> None:
    rows = [
        {"id": 1, "v": "a", "tidemark_op": "c", "tidemark_position": "10,10"},
        {"id": 1, "v": "c", "tidemark_op": "u", "tidemark_position": "12,12"},
        {"id": 1, "v": "b", "tidemark_op": "u", "tidemark_position": "9,11"},  # older
        {"id": 2, "v": "x", "tidemark_op": "c", "tidemark_position": "10,11"},
        {"id": 2, "v": None, "tidemark_op": "d", "tidemark_position": "13,13"},
        {"id": 3, "v": "y", "tidemark_op": "r", "tidemark_position": "100,0"},
    ]
    assert newest_versions(rows, ["id"]) == [rows[1], rows[5]]
