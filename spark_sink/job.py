"""``tidemark sink``: merge reconciled topics into Iceberg tables, one table per topic.

Guarantees:

- Effectively once per table: the offsets a batch consumed are committed in the
  same Iceberg snapshot as its rows (:mod:`spark_sink.writer`), and read back
  from the newest snapshot that carries them when the sink starts. A crash
  before that commit re-reads the batch; a crash after it re-reads nothing.
- Within a batch the newest event per key wins (by offset; a key lives in one
  partition); deletes and tombstones delete the row.
- Topics are found by pattern on every batch, so a new reconciled topic is
  picked up without a restart.
- With ``once`` the sink drains every topic to the end it had when the sink
  started, then returns; otherwise it runs a batch every
  ``sink.trigger_interval_s`` until SIGTERM or SIGINT, finishing the batch in
  flight first.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

from confluent_kafka.admin import AdminClient

from spark_sink.reader import (
    Range,
    decode_range,
    end_offsets,
    key_names_of,
    latest_schema,
    plan,
    reader_config,
    sink_topics,
)
from spark_sink.schema import Column, SchemaError, columns_from_envelope, columns_from_values
from spark_sink.session import create_session
from spark_sink.writer import DELETED, OFFSET, Table, quote
from tidemark.config import Config
from tidemark.kafka import client_config

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


class Sink:
    """The sink's state between batches: per topic, the next offset of each partition."""

    def __init__(self, config: Config, spark: SparkSession) -> None:
        self.config = config
        self.spark = spark
        self.kafka_conf = reader_config(config)
        self.admin = AdminClient(client_config(config.kafka))
        self.progress: dict[str, dict[int, int]] = {}

    def ends(self) -> dict[str, dict[int, int]]:
        """The current end offsets of every reconciled topic."""
        return {
            topic: end_offsets(self.kafka_conf, topic, partitions)
            for topic, partitions in sink_topics(self.admin, self.config.sink_pattern()).items()
        }

    def run_batch(self, targets: dict[str, dict[int, int]]) -> int:
        """Merge every topic up to ``targets`` (capped per batch); the ranges read."""
        read = 0
        for topic, ends in sorted(targets.items()):
            table = self._table(topic)
            if topic not in self.progress:
                self.progress[topic] = table.committed_offsets()
            ranges = plan(
                topic, self.progress[topic], ends, self.config.sink.max_records_per_partition
            )
            if ranges:
                self._merge(topic, table, ranges)
                read += len(ranges)
        return read

    def _table(self, topic: str) -> Table:
        namespace, name = topic.split(".")[-2:]
        return Table(self.spark, self.config.sink.catalog_name, namespace, name)

    def _merge(self, topic: str, table: Table, ranges: list[Range]) -> None:
        started = time.monotonic()
        schema, sample = latest_schema(self.kafka_conf, ranges)
        columns: list[Column] | None = None
        if schema is not None:
            columns = columns_from_envelope(schema)
        elif sample is not None:
            columns = columns_from_values(sample)
        if not table.exists():
            if columns is None:  # only deletes of rows the table never had
                self._advance(topic, ranges)
                return
            table.create(columns)
        known = self._table_columns(table)
        if columns is None:
            columns = [Column(name, sql_type, _same) for name, sql_type in known]
        elif [c.name for c in columns] != [name for name, _ in known]:
            raise SchemaError(
                f"{topic}: the columns changed ({[c.name for c in columns]} against the table's "
                f"{[n for n, _ in known]}); schema evolution is not supported yet"
            )
        keys = key_names_of(self.kafka_conf, ranges)
        ddl = ", ".join(
            [f"{OFFSET} bigint", f"{DELETED} boolean"]
            + [f"{quote(c.name)} {c.sql_type}" for c in columns]
        )
        conf = self.kafka_conf
        rows = self.spark.sparkContext.parallelize(ranges, len(ranges)).flatMap(
            lambda r: decode_range(conf, r, keys, columns)
        )
        batch = self.spark.createDataFrame(rows, schema=ddl)
        offsets = dict(self.progress[topic])
        offsets.update({r.partition: r.end for r in ranges})
        table.merge(batch, keys, [c.name for c in columns], offsets)
        self._advance(topic, ranges)
        log.info(
            "%s: merged offsets %s into %s in %.1f s",
            topic,
            ", ".join(f"[{r.partition}] {r.start}-{r.end}" for r in ranges),
            table.name,
            time.monotonic() - started,
        )

    def _advance(self, topic: str, ranges: list[Range]) -> None:
        for r in ranges:
            self.progress[topic][r.partition] = r.end

    def _table_columns(self, table: Table) -> list[tuple[str, str]]:
        fields = self.spark.table(table.name.replace("`", "")).schema.fields
        return [(f.name, f.dataType.simpleString()) for f in fields]


def _same(value: Any) -> Any:
    return value


def run_sink(config: Config, once: bool, *, spark: SparkSession | None = None) -> int:
    """Run the sink (see the module docstring); 0 on a clean stop."""
    own = spark is None
    session = spark if spark is not None else create_session(config)
    stop = threading.Event()
    restore = _install_stop_handlers(stop)
    try:
        sink = Sink(config, session)
        if once:
            targets = sink.ends()
            log.info("draining %d topics to their current ends", len(targets))
            while not stop.is_set() and sink.run_batch(targets):
                pass
        else:
            while not stop.is_set():
                sink.run_batch(sink.ends())
                stop.wait(config.sink.trigger_interval_s)
        return 0
    finally:
        restore()
        gateway = session.sparkContext._gateway
        if gateway is not None:
            gateway.shutdown_callback_server()
        if own:
            session.stop()


def _install_stop_handlers(stop: threading.Event) -> Any:
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def handler(_sig: int, _frame: Any) -> None:
        log.info("stopping after the batch in flight")
        stop.set()

    for sig in previous:
        signal.signal(sig, handler)

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore
