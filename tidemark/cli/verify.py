"""Checks that the pipeline caught up and that Iceberg tables equal their source tables.

Used by ``tidemark demo`` and the end-to-end tests. Values are compared in a
canonical text form, so that PostgreSQL's and Spark's Python types (timestamps
with or without a zone, UUID objects or strings, JSON objects or text) agree
when they hold the same value.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
import psycopg
from confluent_kafka import Consumer, TopicPartition
from psycopg import sql

from processor.snapshot.client import read_state
from processor.snapshot.postgres.positions import committed_position, confirmed_flush_lsn
from processor.snapshot.signals import READ_AGAIN
from spark_sink.history import OP, POSITION
from spark_sink.writer import Table
from tidemark.cli.errors import NotCaughtUpError
from tidemark.core.config import Config
from tidemark.core.kafka import client_config, exact_end_offsets, read_range
from tidemark.core.topics import backfilled_topic, dataplane_group, signal_topic

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def source_lsn(config: Config) -> int:
    """A WAL position past the commit of every transaction committed by now
    (:func:`~processor.snapshot.postgres.positions.committed_position`: with the write
    position, Debezium's slot had often confirmed it already under ``synchronous_commit =
    off``, and :func:`wait_caught_up` returned before the latest changes reached Kafka)."""
    with psycopg.connect(**config.source.conninfo()) as conn:
        return committed_position(conn)


def wait_debezium(config: Config, lsn: int, timeout: float = 120) -> None:
    """Wait until Debezium confirmed ``lsn``: everything before it is in Kafka.

    The bridge acknowledges a batch to the engine only after Kafka did, and the
    engine confirms a position to the slot only after that, so the slot's
    ``confirmed_flush_lsn`` never runs ahead of Kafka.
    """
    deadline = time.monotonic() + timeout
    with psycopg.connect(**config.source.conninfo(), autocommit=True) as conn:
        while time.monotonic() < deadline:
            confirmed = confirmed_flush_lsn(conn, config.source.replication_slot)
            if confirmed is not None and confirmed >= lsn:
                return
            time.sleep(0.25)
    raise NotCaughtUpError(f"Debezium did not confirm LSN {lsn} within {timeout:.0f} s")


def processor_lag(config: Config) -> dict[str, int]:
    """Per input topic (backfill topics included), messages the data plane has not committed."""
    pattern = re.compile(config.input_pattern())
    group = dataplane_group(config.processor.pipeline)
    consumer = Consumer(
        client_config(config.kafka, **{"group.id": group, "enable.auto.commit": False})
    )
    try:
        listed = consumer.list_topics(timeout=10).topics
        pipeline = config.processor.pipeline
        topics = {
            name: meta
            for name, meta in listed.items()
            if pattern.match(backfilled_topic(pipeline, name) or name)
        }
        # a topic just created may be listed before its partitions are: not readable yet
        lag = {name: 1 for name, meta in topics.items() if meta.error or not meta.partitions}
        parts = [TopicPartition(t, p) for t, m in topics.items() for p in m.partitions]
        committed = consumer.committed(parts, timeout=10) if parts else []
        ends = exact_end_offsets(consumer, parts)
        for tp in committed:
            done = tp.offset if tp.offset >= 0 else 0
            end = ends[(tp.topic, tp.partition)]
            if end > done and not any(
                True for _ in read_range(consumer, tp.topic, tp.partition, done, end)
            ):
                # only transaction markers after what the data plane read (the truncate
                # markers of a backfill topic are written in transactions), which no
                # reader is given, so none commits past them
                end = done
            lag[tp.topic] = lag.get(tp.topic, 0) + max(0, end - done)
        return lag
    finally:
        consumer.close()


def rows_asked_again(config: Config) -> tuple[int, int]:
    """``(the signal topic's end, read-again requests not yet served)``: signals the
    snapshot coordinator has not read count as unserved requests. (The records after
    the coordinator's offset are read, not counted: a transaction's commit marker, which
    no reader is given, can sit there, as the data plane writes its requests in its
    transactions.)"""
    topic = signal_topic(config.processor.pipeline)
    state = read_state(config)
    read = state.signal_offsets.get(topic, {}).get(0, 0) if state else 0
    waiting = sum(1 for t in state.pending() if t.request_id.startswith(READ_AGAIN)) if state else 0
    consumer = Consumer(client_config(config.kafka, **{"group.id": "tidemark-verify"}))
    try:
        if topic not in consumer.list_topics(timeout=10).topics:
            return 0, waiting
        end = exact_end_offsets(consumer, [TopicPartition(topic, 0)])[(topic, 0)]
        unread = sum(1 for _ in read_range(consumer, topic, 0, read, end))
    finally:
        consumer.close()
    return end, unread + waiting


def wait_caught_up(config: Config, timeout: float = 180) -> None:
    """Wait until every source change up to now went through Debezium and the processor.

    Every transaction committed before the call ends at or before :func:`source_lsn`; once the
    slot confirmed it, their events are in Kafka (:func:`wait_debezium`), in topics listed
    from then on; and the data plane commits an input offset only after the outputs of
    the messages before it were acknowledged. A key whose row the data plane asked for
    again (:func:`rows_asked_again`) emits once its row, read again, went through: so the
    wait also needs no such request unserved, the same before and after the lag was read
    (a batch that asks writes its request before it commits).
    """
    deadline = time.monotonic() + timeout
    wait_debezium(config, source_lsn(config), timeout)
    lag: dict[str, int] = {}
    asked = (0, 0)
    while time.monotonic() < deadline:
        asked = rows_asked_again(config)
        lag = processor_lag(config)
        if lag and not any(lag.values()) and not asked[1] and rows_asked_again(config) == asked:
            return
        time.sleep(0.5)
    raise NotCaughtUpError(
        f"the processor did not catch up within {timeout:.0f} s: {lag}"
        + (f"; {asked[1]} requests for rows asked again wait" if asked[1] else "")
    )


@dataclass(frozen=True)
class TableComparison:
    """The comparison of one source table with its Iceberg table."""

    table: str
    source_rows: int
    lake_rows: int
    missing: int
    extra: int
    different: int

    @property
    def equal(self) -> bool:
        """Whether the tables hold the same rows."""
        return self.source_rows == self.lake_rows and not (
            self.missing or self.extra or self.different
        )


def source_rows(config: Config, schema: str, table: str) -> tuple[list[str], list[tuple]]:
    """Column names and rows of a source table."""
    with psycopg.connect(**config.source.conninfo()) as conn:
        cur = conn.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, table)))
        columns = [c.name for c in cur.description or []]
        return columns, cur.fetchall()


def primary_key(config: Config, schema: str, table: str) -> list[str]:
    """The primary-key columns of a source table, in key order."""
    query = """
        SELECT a.attname FROM pg_index i
        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
        WHERE i.indrelid = (quote_ident(%s) || '.' || quote_ident(%s))::regclass
          AND i.indisprimary
        ORDER BY array_position(i.indkey, a.attnum)"""
    with psycopg.connect(**config.source.conninfo()) as conn:
        return [r[0] for r in conn.execute(query, (schema, table)).fetchall()]


def compare_rows(
    table: str,
    key: list[str],
    columns: list[str],
    source: list[dict[str, Any]],
    lake: list[dict[str, Any]],
) -> TableComparison:
    """Compare rows (as dicts) by primary key, values in canonical form."""

    def index(rows: list[dict[str, Any]]) -> dict[tuple[str, ...], tuple[str, ...]]:
        return {
            tuple(canonical(r[k]) for k in key): tuple(canonical(r.get(c)) for c in columns)
            for r in rows
        }

    src, dst = index(source), index(lake)
    missing = len(src.keys() - dst.keys())
    extra = len(dst.keys() - src.keys())
    different = sum(1 for k in src.keys() & dst.keys() if src[k] != dst[k])
    return TableComparison(table, len(source), len(lake), missing, extra, different)


def canonical(value: Any) -> str:
    """A text form in which equal values from PostgreSQL and Spark agree."""
    if value is None:
        return "NULL"
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC).isoformat()
    if isinstance(value, decimal.Decimal):
        return format(value.normalize(), "f")
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, dict | list):
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return orjson.dumps(orjson.loads(value), option=orjson.OPT_SORT_KEYS).decode()
        except orjson.JSONDecodeError:
            return value
    return str(value)


def newest_versions(rows: list[dict[str, Any]], key: list[str]) -> list[dict[str, Any]]:
    """An ``append`` table's rows as a ``merge`` table would hold them: each key's newest
    version by Tidemark's position, and no row for a key whose newest is a delete."""
    newest: dict[tuple[str, ...], tuple[tuple[int, ...], dict[str, Any]]] = {}
    for row in rows:
        at = tuple(int(part) for part in str(row[POSITION]).split(","))
        named = tuple(canonical(row[c]) for c in key)
        if named not in newest or at > newest[named][0]:
            newest[named] = (at, row)
    return [row for _at, row in newest.values() if row[OP] != "d"]


def compare_table(config: Config, spark: SparkSession, schema: str, table: str) -> TableComparison:
    """One source table against its Iceberg table (an ``append`` table's newest versions)."""
    columns, rows = source_rows(config, schema, table)
    lake_table = Table(spark, config.sink.catalog_name, schema, table, config.sink.soft_delete)
    lake = [r.asDict() for r in spark.table(lake_table.path).collect()]
    key = primary_key(config, schema, table)
    if lake_table.kept().append:
        lake = newest_versions(lake, key)
    return compare_rows(
        table, key, columns, [dict(zip(columns, r, strict=True)) for r in rows], lake
    )
