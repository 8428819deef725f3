"""The audit trail: every operator action, who did it, when, and what came of it.

Every request that is not a read, through the API or the console (snapshot start, stop,
pause and resume, offsets writes and undos, lifecycle changes, console logins and
logouts), and every order the CLI gives through Kafka directly, becomes one record of the
append-only topic ``<pipeline>.audit`` (one partition, so in order; kept
``kafka.audit_retention_ms``). A record says:

- ``at_ms``, and ``via``: ``api``, ``console`` or ``cli``;
- ``who``: the role, the credential (``token:`` or ``session:`` and the first 12 hex
  digits of its SHA-256: which token, or which login's session, without the secret;
  ``cli:`` and the operator's user and host) and the client's address;
- ``action`` (``POST /api/v1/snapshots``, or the CLI's command), its ``detail`` (the
  request's JSON body up to :data:`DETAIL_BYTES`, else its size and SHA-256; never a
  login's, which holds the token) and ``result`` (the HTTP status, the error).

Anyone with write access to the topic could add records, so every record read back is
checked (:func:`entry_of`): one that is not an audit record, or, with a record key, not
signed with it (:mod:`tidemark.core.record_auth`), is counted as unreadable, not shown.
"""

from __future__ import annotations

import getpass
import hashlib
import logging
import queue
import socket
import threading
import time
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from processor import metrics
from processor.pipeline.dead_letters import admitted
from tidemark.core.config import Config
from tidemark.core.errors import TidemarkError
from tidemark.core.kafka import (
    Acknowledgements,
    client_config,
    ensure_topics,
    headers_of,
    producer_config,
    read_newest,
    reader_config,
    record_topic_config,
)
from tidemark.core.record_auth import record_keys
from tidemark.core.topics import audit_topic, reader_group

log = logging.getLogger(__name__)

FORMAT = 1
#: A request body larger than this is recorded by its size and digest.
DETAIL_BYTES = 4096
#: The newest records one read looks at, and the most it answers.
SCANNED, MAX_ENTRIES = 20_000, 1000
VIA = frozenset({"api", "console", "cli"})
#: Records waiting for Kafka in the web port's writer at most.
QUEUED = 1000


def fingerprint(secret: str) -> str:
    """Which secret, without it: the first 12 hex digits of its SHA-256."""
    return hashlib.sha256(secret.encode()).hexdigest()[:12]


def detail_of(body: bytes) -> Any:
    """What a request's body says, for the trail: its JSON, if small, else its size and
    digest (``None`` for none)."""
    if not body:
        return None
    if len(body) <= DETAIL_BYTES:
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
    return {"bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}


def entry(
    via: str,
    who: dict[str, str | None],
    action: str,
    status: int,
    error: str | None = None,
    detail: Any = None,
    at_ms: int | None = None,
) -> dict[str, Any]:
    """One audit record's document."""
    return {
        "format": FORMAT,
        "at_ms": int(time.time() * 1000) if at_ms is None else at_ms,
        "via": via,
        "who": who,
        "action": action,
        "detail": detail,
        "result": {"status": status, "error": error},
    }


def cli_operator() -> dict[str, str | None]:
    """Who runs the CLI: the operating system's user and host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return {"role": "operator", "credential": f"cli:{user}@{socket.gethostname()}", "address": None}


def entry_of(document: Any) -> dict[str, Any] | None:
    """``document`` if it is an audit record, else ``None``."""
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        return None
    who, result = document.get("who"), document.get("result")
    fields_ok = (
        type(document.get("at_ms")) is int
        and document.get("via") in VIA
        and isinstance(document.get("action"), str)
        and isinstance(who, dict)
        and all(isinstance(who.get(k), str | None) for k in ("role", "credential", "address"))
        and isinstance(result, dict)
        and type(result.get("status")) is int
        and isinstance(result.get("error"), str | None)
    )
    return document if fields_ok else None


class AuditWriter:
    """Writes audit records, each acknowledged; a record Kafka does not take is logged and
    counted (``tidemark_audit_records_failed_total``): the action it records was done.

    The web port hands records over with :meth:`submit`, which never waits: a thread of
    the writer's own writes them in order from a queue of at most :data:`QUEUED`, so
    that neither a slow broker nor a flood of failed logins holds the event loop or the
    threads the API's reads run in. A record the full queue cannot take is counted too.
    """

    def __init__(self, config: Config) -> None:
        self._config = config
        self._topic = audit_topic(config.processor.pipeline)
        self._keys = record_keys()
        self._producer: Producer | None = None
        self._acks: Acknowledgements | None = None
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue(QUEUED)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, document: dict[str, Any]) -> None:
        """Write ``document`` soon, in the order submitted, without waiting."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._drain, name="audit", daemon=True)
                self._thread.start()
        try:
            self._queue.put_nowait(document)
        except queue.Full:
            metrics.AUDIT_FAILED.inc()
            log.error("audit record not written (%s): the queue is full", document.get("action"))

    def _drain(self) -> None:
        while True:
            self.record(self._queue.get())

    def record(self, document: dict[str, Any]) -> bool:
        """Write ``document``; whether Kafka acknowledged it."""
        try:
            producer, acks = self._started()
            value = orjson.dumps(document)
            headers = [] if self._keys is None else [self._keys.sign(self._topic, 0, None, value)]
            producer.produce(
                self._topic, value, None, 0, headers=headers, on_delivery=acks.on_delivery
            )
            acks.wait("audit record", timeout=10.0)
            return True
        except (TidemarkError, KafkaException, BufferError) as exc:
            metrics.AUDIT_FAILED.inc()
            log.error("audit record not written (%s): %s", document.get("action"), exc)
            return False

    def _started(self) -> tuple[Producer, Acknowledgements]:
        if self._producer is None or self._acks is None:
            kafka = self._config.kafka
            ensure_topics(
                AdminClient(client_config(kafka)),
                {self._topic: 1},
                kafka.replication_factor,
                config=audit_topic_config(self._config),
            )
            self._producer = Producer(producer_config(kafka, **{"linger.ms": 0}))
            self._acks = Acknowledgements(self._producer)
        return self._producer, self._acks


def audit_topic_config(config: Config) -> dict[str, str]:
    """Append-only, kept ``kafka.audit_retention_ms``, with no size limit."""
    return record_topic_config(
        config.kafka,
        **{
            "cleanup.policy": "delete",
            "retention.ms": str(config.kafka.audit_retention_ms),
            "retention.bytes": "-1",
        },
    )


def newest_first(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Audit records read in the topic's order (oldest first), newest first by ``at_ms``;
    records of the same millisecond, the later in the topic first."""
    later_first = documents[::-1]
    later_first.sort(key=lambda d: d["at_ms"], reverse=True)  # stable: ties keep that order
    return later_first


def read_audit(config: Config, limit: int, since_ms: int = 0) -> dict[str, Any]:
    """The newest audit records, newest first, at or after ``since_ms``; records that are
    not audit records, or not signed with the record key when there is one, are counted
    in ``unreadable``."""
    pipeline = config.processor.pipeline
    topic = audit_topic(pipeline)
    keys = record_keys()
    found: list[dict[str, Any]] = []
    unreadable = 0
    with admitted(whole=False):  # one of the reads the process holds at a time
        consumer = Consumer(reader_config(config.kafka, reader_group(pipeline, "audit")))
        try:
            records, complete = read_newest(consumer, topic, SCANNED)
            for msg in records:
                value = msg.value()
                signed = keys is None or keys.verify(
                    topic, msg.partition() or 0, msg.key(), value, headers_of(msg)
                )
                try:
                    document = entry_of(orjson.loads(value or b"")) if signed else None
                except orjson.JSONDecodeError:
                    document = None
                if document is None:
                    unreadable += 1
                elif document["at_ms"] >= since_ms:
                    found.append(document)
        finally:
            consumer.close()
    return {"entries": newest_first(found)[:limit], "complete": complete, "unreadable": unreadable}
