"""Each table's state as the sink last saw it, published for the processor's API and console.

After every round of a table (a merge, a retry, nothing to read) and when a table
stops, the sink writes the table's status under the table's name to the compacted
topic ``<pipeline>.sink-status``: its topic, the offsets committed with its last
Iceberg commit, the lag behind the topic's end, when it last committed and how
many rows, and whether it stopped and why. The processor reads the topic back
(:mod:`processor.pipeline.sink_status`), so nothing but Kafka is needed to show the
sink.

The status is information: the offsets that count are those in the Iceberg
snapshots. It is sent without waiting; a status that Kafka did not take is logged
and the table's next round writes a newer one. It never stops or slows the sink:
when the topic cannot be reached, statuses are not sent for a minute.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import orjson
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient

from tidemark.core.config import Config
from tidemark.core.errors import TidemarkError
from tidemark.core.kafka import client_config, ensure_topics, producer_config
from tidemark.core.topics import sink_status_topic

log = logging.getLogger(__name__)


class StatusBoard:
    """The tables' statuses in this sink, and their publication (without waiting: a status
    is sent in the background, a failed one logged; :meth:`flush` when the sink ends)."""

    #: Seconds before trying again to reach the status topic after a failure.
    RETRY_S = 60.0

    def __init__(self, config: Config) -> None:
        self._config = config
        self._topic = sink_status_topic(config.processor.pipeline)
        self._producer: Producer | None = None
        self._next_try = 0.0
        self._making = threading.Lock()  # tables publish from threads of their own
        self.tables: dict[str, dict[str, Any]] = {}

    def of(self, table: str, topic: str) -> dict[str, Any]:
        """``table``'s status (made on first use), fed by ``topic``."""
        status = self.tables.get(table)
        if status is None:
            status = self.tables[table] = {
                "table": table,
                "topic": topic,
                "committed": {},
                "lag": {},
                "last_commit_ms": None,
                "last_commit_rows": None,
                "stopped": False,
                "reason": None,
                "retrying": None,
            }
        return status

    def publish(self, table: str) -> None:
        """Send ``table``'s status."""
        producer = self._ready()
        if producer is None:
            return
        status = {**self.tables[table], "reported_ms": int(time.time() * 1000)}
        try:
            producer.produce(
                self._topic,
                orjson.dumps(status, option=orjson.OPT_NON_STR_KEYS),
                table.encode(),
                0,
                on_delivery=_delivered,
            )
            producer.poll(0)
        except (BufferError, KafkaException) as exc:
            log.warning("the status of %s was not published: %s", table, exc)

    def flush(self, timeout: float = 10.0) -> None:
        """Deliver the statuses sent (the sink is ending)."""
        if self._producer is not None and self._producer.flush(timeout):
            log.warning("%d statuses of tables were not published", len(self._producer))

    def _ready(self) -> Producer | None:
        with self._making:
            return self._made()

    def _made(self) -> Producer | None:
        if self._producer is None and time.monotonic() >= self._next_try:
            try:
                ensure_topics(
                    AdminClient(client_config(self._config.kafka)),
                    {self._topic: 1},
                    self._config.kafka.replication_factor,
                    config={"cleanup.policy": "compact"},
                )
            except (TidemarkError, KafkaException) as exc:
                log.warning("tables' statuses are not published for now: %s", exc)
                self._next_try = time.monotonic() + self.RETRY_S
                return None
            self._producer = Producer(producer_config(self._config.kafka))
        return self._producer


def _delivered(err: KafkaError | None, _msg: Message) -> None:
    if err is not None:
        log.warning("a table's status was not published: %s", err.str())
