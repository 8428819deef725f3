"""What a failed batch means for its table: stop it, try it again, or end the sink."""

from __future__ import annotations

import time
from typing import cast

import pytest
from confluent_kafka import KafkaError, KafkaException
from pyspark.sql import SparkSession

from spark_sink import job
from spark_sink import maintain as maintain_module
from spark_sink.errors import TableRetry, TableStop
from spark_sink.job import Sink, _verdict
from spark_sink.maintenance import first_due_in_s, met_commits
from spark_sink.reader import Offsets, Range
from tidemark.core.config import Config, SinkConfig
from tidemark.core.errors import TidemarkError


class Py4JLike(Exception):
    """Spark's wrapping of an executor's failure: its text carries the executor's."""


@pytest.mark.parametrize(
    ("exc", "kind", "reason"),
    [
        (
            Py4JLike("Job aborted\nPythonException: tidemark-table-stop: offset 3: no\n at"),
            TableStop,
            "offset 3: no",
        ),
        (
            Py4JLike("x tidemark-table-retry: t[0]: no record after 5 in 60.0 s\n..."),
            TableRetry,
            "t[0]: no record after 5 in 60.0 s",
        ),
        (
            Py4JLike("x tidemark-schema-drift: column v is not in the batch's plan"),
            TableStop,
            "column v",
        ),
        (
            Py4JLike(
                "An error occurred while calling o93.sql.\n: org.apache.iceberg.exceptions."
                "ValidationException: Found conflicting files that can contain records"
            ),
            TableRetry,
            "a concurrent commit",
        ),
        (
            # a MERGE planned at one snapshot while `sink maintain` committed another
            Py4JLike(
                "An error occurred while calling o57.sql.\n: java.lang.IllegalStateException: "
                "Runtime file filtering is not possible: the table has been concurrently "
                "modified. Row-level operation scan snapshot ID: 1752527113433346207, current "
                "table snapshot ID: 3118477628478740268. If an external process modifies the "
                "table, enable table caching in the catalog."
            ),
            TableRetry,
            "a concurrent commit",
        ),
        (KafkaException(KafkaError(KafkaError._TRANSPORT)), TableRetry, "Kafka"),
    ],
)
def test_failures_of_the_data_stop_the_table_and_passing_ones_retry_it(
    exc: Exception, kind: type[Exception], reason: str
) -> None:
    verdict = _verdict(exc)
    assert isinstance(verdict, kind)
    assert reason in str(verdict)


def test_other_failures_end_the_sink() -> None:
    fatal = KafkaException(KafkaError(KafkaError._FATAL, fatal=True))
    assert _verdict(fatal) is fatal
    spark = Py4JLike("java.lang.OutOfMemoryError: Java heap space")
    assert _verdict(spark) is spark


def test_a_first_unread_record_that_does_not_come_is_tried_again_not_a_gap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When the sink must date its unread records by the first of them and Kafka sends
    none in time, nothing is known of a gap: the batch is tried again, where taking it for
    one made the table again from the whole topic."""
    topic = "p.reconciled.public.t"
    sink = Sink(Config(), cast(SparkSession, None))
    sink._retention[topic] = 24 * 3600 * 1000
    sink.progress[topic], sink.unread_since[topic] = {0: 5}, {}  # an earlier release's table
    monkeypatch.setattr(job, "first_unread", lambda _context, _topic, _wanted: {})
    with pytest.raises(TableRetry, match="first unread record did not come"):
        sink._gap(topic, {0: 9})


def test_a_topic_end_misread_once_is_read_again_before_its_table_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A clean-clone CI run stopped a continuous sink's table for a topic "made again":
    one read of the topic's ends, under load, gave 0. A gap that only data lost for good
    explains is read again before the table stops; the fresh ends go on."""
    topic = "p.reconciled.public.t"
    sink = Sink(Config(), cast(SparkSession, None))
    sink._retention[topic] = 24 * 3600 * 1000
    sink.progress[topic], sink.unread_since[topic] = {0: 224}, {0: int(time.time() * 1000)}
    monkeypatch.setattr(job, "GAP_PAUSE_S", 0.0)
    fresh = Offsets({0: 0}, {0: 300}, {})
    monkeypatch.setattr(job, "topic_offsets", lambda _conf, _topic, _count: fresh)
    ends = {0: 0}
    assert sink._checked_gap(topic, ends) is None
    assert ends == {0: 300}
    fresh = Offsets({0: 0}, {0: 7}, {})
    sink._high[topic] = {0: 0}  # a later round's first read
    found = sink._checked_gap(topic, {0: 0})
    assert found is not None and "made again" in found.reason


def test_a_round_whose_ends_were_read_again_is_dated_by_the_last_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A clean-clone CI run: a table's newest snapshot said it was fresh until 8 ms before
    changes it held were written. Its round had read the ends again (a misread end of 0)
    and merged up to the fresh ends, dated by the first read. The merge is now dated by
    the read its ends come from."""
    topic = "p.reconciled.public.t"
    sink = Sink(Config(), cast(SparkSession, None))
    sink._retention[topic] = 24 * 3600 * 1000
    earlier = int(time.time() * 1000) - 1000
    sink.progress[topic], sink.unread_since[topic] = {0: 224}, {0: earlier}
    sink._read_ms[topic] = earlier  # the first read, before the records came
    monkeypatch.setattr(job, "GAP_PAUSE_S", 0.0)
    monkeypatch.setattr(
        job, "topic_offsets", lambda _conf, _topic, _count: Offsets({0: 0}, {0: 300}, {})
    )
    merged: list[dict[int, int]] = []
    monkeypatch.setattr(
        sink, "_merge", lambda _topic, _table, _ranges, since, whole=False: merged.append(since)
    )
    before_reread = int(time.time() * 1000)
    assert sink._topic_batch(topic, {0: 0}) == 1
    assert merged[0][0] >= before_reread


def test_a_stable_end_held_by_an_open_transaction_is_no_gap_and_is_passed_when_stuck(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The long lifetime run: after processors were killed inside transactions, the
    embedded broker's last stable offset of some reconciled partitions read 0 for good.
    The sink read nothing of them, logged nothing, and two Iceberg tables stayed short
    of a third of their rows (the third table was never made). An end held back by an
    open transaction is not a topic made again; one held back past the bound is read
    past."""
    topic = "p.reconciled.public.t"
    sink = Sink(Config(), cast(SparkSession, None))
    sink._retention[topic] = 24 * 3600 * 1000
    sink.progress[topic], sink.unread_since[topic] = {0: 224}, {0: int(time.time() * 1000)}
    monkeypatch.setattr(job, "sink_topics", lambda _admin, _pattern, _names: {topic: 1})
    monkeypatch.setattr(job, "delete_retention_ms", lambda _admin, _topic: 24 * 3600 * 1000)
    monkeypatch.setattr(
        job, "topic_offsets", lambda _conf, _topic, _count: Offsets({0: 0}, {0: 0}, {0: 300})
    )
    clock = [1000.0]
    monkeypatch.setattr(job.time, "monotonic", lambda: clock[0])
    ends = sink.ends()[topic]
    assert ends == {0: 0}
    assert sink._checked_gap(topic, ends) is None  # no read again: nothing is suspect
    clock[0] += Config().sink.stuck_transaction_s
    assert sink.ends()[topic] == {0: 300}
    # read uncommitted: a committed read takes the stable offset for the end, and the
    # batch committed offsets past records it never read
    assert sink._past_stable(topic, [Range(topic, 0, 224, 300)]) == [
        Range(topic, 0, 224, 300, uncommitted=True)
    ]


def test_maintenance_of_a_hadoop_catalog_is_refused_unless_the_sink_is_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two processes committing to a ``hadoop`` catalog can overwrite each other's
    commits: a compaction beside a running sink could drop a MERGE and its rows. On such a
    catalog ``sink maintain`` starts no Spark until told the sink is stopped."""
    sessions: list[Config] = []

    def no_spark(config: Config) -> SparkSession:
        sessions.append(config)
        raise RuntimeError("no Spark in this test")

    monkeypatch.setattr(maintain_module, "create_session", no_spark)
    with pytest.raises(TidemarkError, match="--sink-stopped"):
        maintain_module.maintain(Config())
    assert sessions == []
    with pytest.raises(RuntimeError, match="no Spark"):
        maintain_module.maintain(Config(), sink_stopped=True)
    jdbc = Config(sink=SinkConfig(catalog_type="jdbc", catalog_uri="jdbc:postgresql://h/db"))
    with pytest.raises(RuntimeError, match="no Spark"):
        maintain_module.maintain(jdbc)
    assert len(sessions) == 2
    # the same catalog class under another name
    impl = {"catalog-impl": "org.apache.iceberg.hadoop.HadoopCatalog"}
    custom = Config(sink=SinkConfig(catalog_type="custom", catalog_properties=impl))
    with pytest.raises(TidemarkError, match="--sink-stopped"):
        maintain_module.maintain(custom)
    assert len(sessions) == 2


@pytest.mark.parametrize(
    ("text", "met"),
    [
        ("org.apache.iceberg.exceptions.CommitFailedException: Cannot commit: stale", True),
        (
            "org.apache.iceberg.exceptions.ValidationException: Found conflicting files that "
            "can contain records matching true",
            True,
        ),
        (
            "org.apache.iceberg.exceptions.ValidationException: Deleted manifest "
            "file:/w/m1.avro could not be found in the latest snapshot 42",
            True,
        ),
        (
            "org.apache.iceberg.exceptions.ValidationException: Unable to determine whether "
            "certain files are orphan. Metadata references files that match listed/provided "
            "files except for authority/scheme.",
            False,
        ),
        ("java.lang.OutOfMemoryError: Java heap space", False),
    ],
)
def test_a_maintenance_step_is_tried_again_only_for_other_writers_commits(
    text: str, met: bool
) -> None:
    """A commit another writer's commits refused is tried again, and then reported as met
    commits, not a failure; a validation of the table itself (an orphan listing whose
    locations do not match the metadata's) stays a failure, counted and alerted on."""
    assert met_commits(Py4JLike(f"An error occurred while calling o1.execute.\n: {text}")) is met


def test_a_table_first_seen_comes_due_an_interval_after_its_last_maintenance_or_spread() -> None:
    """A sink that restarts more often than the interval still maintains on time (the last
    time is the table's); tables never maintained, or overdue after a long stop, come due
    apart, at a point fixed by name: within the interval, within 10 minutes if overdue."""
    now_ms, hour = 10_000_000_000, 3600.0
    assert first_due_in_s("t", hour, now_ms - 1_000_000, now_ms) == hour - 1000
    assert first_due_in_s("t", hour, now_ms + 86_400_000, now_ms) == hour  # a future time
    names = [f"p.reconciled.public.t{i}" for i in range(200)]
    never = [first_due_in_s(n, hour, None, now_ms) for n in names]
    overdue = [first_due_in_s(n, hour, now_ms - 86_400_000, now_ms) for n in names]
    assert all(0 <= w < hour for w in never) and len(set(never)) == len(names)
    assert all(0 <= w < 600 for w in overdue) and len(set(overdue)) == len(names)
    assert first_due_in_s(names[0], hour, None, now_ms) == never[0]  # fixed by the name
