"""Snapshot signals: Debezium's payloads parsed, bad ones refused with a reason."""

from __future__ import annotations

import orjson
import pytest

from processor.errors import SignalError
from processor.snapshot.signals import (
    MAX_FILTER_BYTES,
    MAX_ID_CHARS,
    MAX_KEY_BYTES,
    MAX_REQUEST_KEY_BYTES,
    MAX_TABLES,
    ExecuteSnapshot,
    PauseSnapshot,
    ResumeSnapshot,
    StopSnapshot,
    parse_signal,
    read_again_signals,
)


def test_execute_snapshot_with_conditions_and_a_surrogate_key() -> None:
    data = (
        '{"data-collections": ["public.orders", "public.items", "public.orders"],'
        ' "type": "INCREMENTAL",'
        ' "additional-conditions": [{"data-collection": "public.orders", "filter": "id > 5"}],'
        ' "surrogate-key": "sku"}'
    )
    assert parse_signal("s1", "execute-snapshot", data) == ExecuteSnapshot(
        "s1", ("public.orders", "public.items"), {"public.orders": "id > 5"}, "sku"
    )


def test_stop_pause_resume() -> None:
    assert parse_signal("s2", "stop-snapshot", '{"type": "incremental"}') == StopSnapshot("s2")
    assert parse_signal("s3", "stop-snapshot", '{"data-collections": ["a.b"]}') == StopSnapshot(
        "s3", ("a.b",)
    )
    assert parse_signal("s4", "pause-snapshot", None) == PauseSnapshot("s4")
    assert parse_signal("s5", "resume-snapshot", "") == ResumeSnapshot("s5")


@pytest.mark.parametrize(
    ("kind", "data", "reason"),
    [
        ("execute-snapshot", '{"type": "incremental"}', "names no table"),
        ("execute-snapshot", '{"data-collections": ["orders"]}', "not 'schema.table'"),
        (
            "execute-snapshot",
            '{"data-collections": ["a.b"], "type": "blocking"}',
            "only incremental",
        ),
        ("execute-snapshot", "{oops", "not JSON"),
        ("execute-snapshot", "[1]", "JSON object"),
        (
            "execute-snapshot",
            '{"data-collections": ["a.b"], "additional-conditions": [{"data-collection": "c.d",'
            ' "filter": "x"}]}',
            "not among data-collections",
        ),
        ("execute-snapshot", '{"data-collections": ["a.b"], "surrogate-key": 3}', "column name"),
        ("log", "{}", "unknown type"),
    ],
)
def test_bad_signals_are_refused_with_a_reason(kind: str, data: str, reason: str) -> None:
    with pytest.raises(SignalError, match=reason):
        parse_signal("bad", kind, data)


def test_a_request_is_bounded_but_holds_500_tables() -> None:
    """Every signal ends in the progress record, one Kafka record: its size is bounded."""
    many = [f"public.t{i}" for i in range(MAX_TABLES + 1)]
    long_filter = "id > 0 AND " * (MAX_FILTER_BYTES // 11 + 1)
    with pytest.raises(SignalError, match=f"more than {MAX_TABLES} tables"):
        parse_signal("s", "execute-snapshot", orjson.dumps({"data-collections": many}))
    with pytest.raises(SignalError, match="filter of public.t0 is longer than"):
        parse_signal(
            "s",
            "execute-snapshot",
            orjson.dumps(
                {
                    "data-collections": many[:1],
                    "additional-conditions": [
                        {"data-collection": "public.t0", "filter": long_filter}
                    ],
                }
            ),
        )
    with pytest.raises(SignalError, match="id is longer than"):
        parse_signal("x" * (MAX_ID_CHARS + 1), "pause-snapshot", None)
    signal = parse_signal("s", "execute-snapshot", orjson.dumps({"data-collections": many[:500]}))
    assert isinstance(signal, ExecuteSnapshot) and len(signal.tables) == 500


def test_a_keys_request_reads_chosen_keys_of_one_table() -> None:
    data = {"data-collections": ["public.t"], "keys": [{"id": 5}, {"id": 6}]}
    signal = parse_signal("k-1", "execute-snapshot", orjson.dumps(data))
    assert isinstance(signal, ExecuteSnapshot)
    assert signal.tables == ("public.t",) and signal.keys == ({"id": 5}, {"id": 6})
    for bad, reason in (
        ({"data-collections": ["public.t", "public.u"], "keys": [{"id": 5}]}, "exactly one"),
        ({"data-collections": ["public.t"], "keys": []}, "non-empty"),
        ({"data-collections": ["public.t"], "keys": [{"id": [1]}]}, "number, text or boolean"),
        (
            {"data-collections": ["public.t"], "keys": [{"id": "x" * MAX_KEY_BYTES}]},
            "longer than",
        ),
        ({"data-collections": ["public.t"], "keys": [{"id": i} for i in range(1001)]}, "1000"),
        (
            {
                "data-collections": ["public.t"],
                "keys": [{"id": 1}],
                "additional-conditions": [{"data-collection": "public.t", "filter": "true"}],
            },
            "without filters",
        ),
    ):
        with pytest.raises(SignalError, match=reason):
            parse_signal("k-2", "execute-snapshot", orjson.dumps(bad))


def test_the_data_plane_asks_again_in_signals_the_coordinator_reads() -> None:
    keys = [{"id": i} for i in range(2500)]
    records = read_again_signals("public.t", keys)
    assert len(records) == 3
    parsed = []
    for request_id, value in records:
        doc = orjson.loads(value)
        signal = parse_signal(doc["id"], doc["type"], orjson.dumps(doc["data"]))
        assert isinstance(signal, ExecuteSnapshot) and signal.request_id == request_id
        parsed += signal.keys
    assert parsed == keys


def test_long_keys_are_asked_again_in_requests_the_coordinator_takes() -> None:
    """Review S4: a read-again request held up to 1,000 keys whatever their length, and
    the coordinator refused a request with any key over 1 KB, whole: its other keys were
    refused with it, again and again, and 1,000 long keys made a record of megabytes. A
    primary key's JSON can reach several KB (PostgreSQL indexes values up to about 2.7 KB,
    and JSON escapes some characters in six bytes): requests are now bounded in bytes,
    and every one is taken."""
    keys = [{"id": f"{i:05d}" + "\u0001" * 400} for i in range(1000)]  # 2.4 kB of JSON each
    records = read_again_signals("public.t", keys)
    parsed = []
    for _request_id, value in records:
        assert len(value) <= MAX_REQUEST_KEY_BYTES + 1024
        doc = orjson.loads(value)
        signal = parse_signal(doc["id"], doc["type"], orjson.dumps(doc["data"]))
        assert isinstance(signal, ExecuteSnapshot)
        parsed += signal.keys
    assert parsed == keys


def test_a_request_past_its_bytes_is_refused() -> None:
    keys = [{"id": "k" * 5000 + str(i)} for i in range(MAX_REQUEST_KEY_BYTES // 5000 + 1)]
    data = {"data-collections": ["public.t"], "keys": keys}
    with pytest.raises(SignalError, match="bytes of keys"):
        parse_signal("k-3", "execute-snapshot", orjson.dumps(data))
