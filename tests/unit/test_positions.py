"""Source positions in Debezium's offsets layout (DDD-4), from decoded events."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import example, given
from hypothesis import strategies as st

from processor.dataplane.positions import source_position

FIELDS = ["lsn", "txId", "xmin", "sequence", "ts_ms", "ts_us", "snapshot"]
#: What orjson parses JSON into: integers within 64 bits (unsigned at most), floats, ...
ANY_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=5,
)


def test_postgresql_position_has_lsn_txid_commit_lsn_and_microseconds() -> None:
    source = {
        "connector": "postgresql",
        "lsn": 26437600,
        "txId": 812,
        "xmin": None,
        "sequence": '["26437240","26437600"]',
        "ts_ms": 1700000000123,
        "ts_us": 1700000000123456,
    }
    assert source_position({"source": source}) == {
        "postgresql": {
            "lsn": 26437600,
            "txId": 812,
            "lsn_commit": 26437240,
            "ts_usec": 1700000000123456,
        }
    }
    # Older Debezium: no ts_us; a first change: no commit LSN yet.
    older = {**source, "ts_us": None, "sequence": '[null,"26437600"]'}
    assert source_position({"source": older}) == {
        "postgresql": {"lsn": 26437600, "txId": 812, "ts_usec": 1700000000123000}
    }


def test_mysql_position_has_binlog_file_pos_row_and_gtids() -> None:
    source = {
        "connector": "mysql",
        "server_id": 223344,
        "gtid": "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5",
        "file": "mysql-bin.000003",
        "pos": 154,
        "row": 1,
        "ts_ms": 1700000000000,
    }
    assert source_position({"source": source}) == {
        "mysql": {
            "server_id": 223344,
            "gtids": "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5",
            "file": "mysql-bin.000003",
            "pos": 154,
            "row": 1,
            "ts_ms": 1700000000000,
        }
    }


def test_no_position_without_a_known_connector() -> None:
    assert source_position({"id": 1, "name": "flat upsert value"}) is None
    assert source_position({"source": {"connector": "mongodb", "ord": 3}}) is None
    assert source_position({"source": None}) is None
    assert source_position(None) is None
    assert source_position({"source": {"connector": "postgresql", "sequence": "oops"}}) is None


@given(source=st.dictionaries(st.sampled_from(FIELDS), ANY_JSON, max_size=8))
@example(source={"ts_ms": 2**64 - 1})
@example(source={"ts_ms": {"a": 1}, "sequence": [1, 2]})
def test_any_source_block_gives_a_position_that_can_be_written(source: dict[str, Any]) -> None:
    """Whatever a PostgreSQL event's source block holds, its position is JSON (the data
    plane writes it with the batch: a failure there would stop every partition)."""
    position = source_position({"source": {**source, "connector": "postgresql"}})
    orjson.dumps({"at_offset": 1, **(position or {})})
