"""The pipeline's dead letters, read back for operators: newest first, filtered, bounded.

A dead letter is the input message unchanged, its origin and reason in headers
(``tidemark.source.*``, ``tidemark.error``, ``tidemark.error.kind``; see
:meth:`processor.dataplane.commit.Committer`). Anyone could have written the
dead-letter topic, and a dead letter is by definition input that did not parse,
so nothing of it is trusted: a missing or undecodable header reads as ``None``
or with replacement characters, and the bytes are shown as a bounded preview
(JSON strings, never markup).

A request looks at the newest :data:`SCAN_RECORDS` records of the topic (shared
among its partitions) and answers at most ``limit`` of those that match;
``complete`` says whether that reached back to the oldest record still kept. A
download carries each key and value whole, in base64, up to
:data:`DOWNLOAD_BYTES` of them in all.

These reads run in the data plane's own process, at a viewer's request, so what they
hold is bounded for the whole process, not per request (:func:`admitted`): one
download at a time (it holds up to twice :data:`DOWNLOAD_BYTES` while it reads, then
the answer), :data:`PREVIEWS_IN_FLIGHT` reads of previews beside it, and each read's
consumer fetches ahead at most :data:`FETCH_AHEAD_KB`. A request past them is
answered 503 with ``Retry-After``, never queued.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer

from tidemark.core.config import Config
from tidemark.core.errors import TidemarkError
from tidemark.core.kafka import client_config, read_newest
from tidemark.core.topics import dead_letter_topic, reader_group

#: Bytes of a key or value shown in a preview.
PREVIEW_BYTES = 512
#: The most dead letters one answer holds.
MAX_LIMIT = 1000
#: The newest records of the topic one request looks at.
SCAN_RECORDS = 20_000
#: The raw bytes one download holds at most.
DOWNLOAD_BYTES = 64 << 20
#: Reads of previews in flight in the process at most, besides one download.
PREVIEWS_IN_FLIGHT = 4
#: What a read's consumer fetches ahead of it at most (librdkafka's
#: ``queued.max.messages.kbytes``, 64 MiB by default).
FETCH_AHEAD_KB = 8192
#: The seconds a client is told to wait when the reads are busy.
BUSY_RETRY_S = 5


class ReadsBusyError(TidemarkError):
    """As many reads of dead letters as the process holds are in flight."""

    retry_after_s = BUSY_RETRY_S


_DOWNLOADS = threading.BoundedSemaphore(1)
_PREVIEWS = threading.BoundedSemaphore(PREVIEWS_IN_FLIGHT)


@contextmanager
def admitted(whole: bool) -> Iterator[None]:
    """A place for one read (``whole``: a download) among those the process holds, or
    :class:`ReadsBusyError` at once."""
    gate = _DOWNLOADS if whole else _PREVIEWS
    if not gate.acquire(blocking=False):
        held = "a download of dead letters is" if whole else f"{PREVIEWS_IN_FLIGHT} reads are"
        raise ReadsBusyError(f"{held} in flight in this processor: try again shortly")
    try:
        yield
    finally:
        gate.release()


_HEADERS = {
    "tidemark.source.topic": "topic",
    "tidemark.source.partition": "partition",
    "tidemark.source.offset": "offset",
    "tidemark.error": "error",
    "tidemark.error.kind": "kind",
}


#: A record's headers as confluent-kafka gives them.
Headers = Sequence[tuple[str, str | bytes | None]] | Mapping[str, str | bytes | None] | None


@dataclass(frozen=True)
class Query:
    """Which dead letters to answer: of one table (``schema.table``), of one kind."""

    table: str | None = None
    kind: str | None = None
    limit: int = 100
    #: Each key and value whole (base64), not a preview.
    whole: bool = False


def dead_letter(
    partition: int,
    offset: int,
    timestamp_ms: int | None,
    headers: Headers,
    key: bytes | None,
    value: bytes | None,
    whole: bool = False,
) -> dict[str, Any]:
    """One dead letter as the API shows it (``partition``/``offset``: in the dead-letter
    topic)."""
    said: dict[str, str | None] = dict.fromkeys(_HEADERS.values())
    pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
    for name, raw in pairs:
        field = _HEADERS.get(name)
        if field is not None and said[field] is None and raw is not None:
            said[field] = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    topic = said["topic"]
    source = {
        "topic": topic,
        "partition": _integer(said["partition"]),
        "offset": _integer(said["offset"]),
    }
    found: dict[str, Any] = {
        "partition": partition,
        "offset": offset,
        "timestamp_ms": timestamp_ms,
        "source": source,
        "table": table_of(topic),
        "kind": said["kind"],
        "error": said["error"],
        "key_bytes": None if key is None else len(key),
        "value_bytes": None if value is None else len(value),
    }
    if whole:
        found["key_base64"] = None if key is None else base64.b64encode(key).decode()
        found["value_base64"] = None if value is None else base64.b64encode(value).decode()
    else:
        found["key_preview"] = _preview(key)
        found["value_preview"] = _preview(value)
    return found


def table_of(topic: str | None) -> str | None:
    """``schema.table`` of a Debezium change topic (``<prefix>.<schema>.<table>``)."""
    if topic is None or topic.count(".") < 2:
        return None
    return ".".join(topic.rsplit(".", 2)[-2:])


def matches(found: dict[str, Any], query: Query) -> bool:
    return (query.table is None or found["table"] == query.table) and (
        query.kind is None or found["kind"] == query.kind
    )


def read_dead_letters(config: Config, query: Query) -> dict[str, Any]:
    """The newest dead letters of the pipeline that match ``query``, newest first."""
    with admitted(query.whole):
        return _read(config, query)


def _read(config: Config, query: Query) -> dict[str, Any]:
    topic = dead_letter_topic(config.processor.pipeline)
    consumer = Consumer(
        client_config(
            config.kafka,
            **{
                "group.id": reader_group(config.processor.pipeline, "dead-letters"),
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 10,  # as tidemark.core.kafka.reader_config: no long poll
                "queued.max.messages.kbytes": FETCH_AHEAD_KB,
            },
        )
    )
    try:
        records, complete = read_newest(consumer, topic, SCAN_RECORDS)
        found: list[dict[str, Any]] = []
        scanned, held = 0, 0
        floor: tuple[int, int, int] | None = None
        for msg in records:
            scanned += 1
            stamp = msg.timestamp()[1]
            letter = dead_letter(
                msg.partition() or 0,
                msg.offset() or 0,
                stamp if stamp >= 0 else None,
                msg.headers(),
                msg.key(),
                msg.value(),
                query.whole,
            )
            if matches(letter, query):
                found.append(letter)
                held += _size(letter) if query.whole else 0
            if held > 2 * DOWNLOAD_BYTES or len(found) > 2 * query.limit:
                found, floor = _newest(found, query, floor)
                held = sum(map(_size, found)) if query.whole else 0
        found, floor = _newest(found, query, floor)
        return {"dead_letters": found, "scanned": scanned, "complete": complete and floor is None}
    finally:
        consumer.close()


def _newest(
    found: list[dict[str, Any]],
    query: Query,
    floor: tuple[int, int, int] | None = None,
    most_bytes: int = DOWNLOAD_BYTES,
) -> tuple[list[dict[str, Any]], tuple[int, int, int] | None]:
    """The dead letters an answer keeps, newest first: at most ``query.limit``, and for a
    download at most ``most_bytes`` (the newest always), none as old as ``floor``. Returns
    them and the floor: the recency of the newest one the byte bound left out (``None``:
    none was). Applied while reading, with the floor it returned, it keeps what it keeps
    applied once at the end: a record read later is either newer than the floor, and
    moves the cut towards newer ones, or no newer, and would have been cut."""
    kept: list[dict[str, Any]] = []
    held = 0
    for letter in sorted(found, key=_recency, reverse=True)[: query.limit]:
        if floor is not None and _recency(letter) <= floor:
            break
        if query.whole and kept and held + _size(letter) > most_bytes:
            return kept, _recency(letter)
        held += _size(letter)
        kept.append(letter)
    # with ``limit`` newer ones kept, the floor's letter is out for the limit, not for size
    return kept, floor if len(kept) < query.limit else None


def _recency(letter: dict[str, Any]) -> tuple[int, int, int]:
    return (letter["timestamp_ms"] or 0, letter["partition"], letter["offset"])


def _size(letter: dict[str, Any]) -> int:
    return int(letter["key_bytes"] or 0) + int(letter["value_bytes"] or 0)


def _preview(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    shown = raw[:PREVIEW_BYTES].decode("utf-8", "replace")
    return shown + "…" if len(raw) > PREVIEW_BYTES else shown


def _integer(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
