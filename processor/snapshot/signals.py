"""Snapshot signals with Debezium's names and payloads, whichever channel brings them.

A signal is an ``id``, a ``type`` and a JSON ``data`` document, as in
Debezium's signal table. The types Tidemark acts on:

- ``execute-snapshot``: ``{"data-collections": ["public.orders", ...],
  "type": "incremental", "additional-conditions": [{"data-collection":
  "public.orders", "filter": "status = 'open'"}], "surrogate-key": "id"}``;
- ``stop-snapshot``: ``{"data-collections": [...], "type": "incremental"}``
  (no collections: stop every table);
- ``pause-snapshot`` and ``resume-snapshot``: ``{"type": "incremental"}``.

Tidemark adds ``keys`` to ``execute-snapshot``: with one table in ``data-collections``,
``"keys": [{"id": 5}, ...]`` reads only the rows of those keys (DBLog's dump of chosen
primary keys), each object naming the table's key columns with values as Debezium's
key carries them. The data plane sends such a signal for a key whose row it must read
again (:data:`processor.reconcile.envelopes.READ_AGAIN`).

A filter of ``additional-conditions`` is SQL, as in Debezium: whoever may write
signals may add read conditions to chunk queries. Chunks are read in read-only
transactions, so a filter cannot change the source.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson

from processor.errors import SignalError

#: Rows of a chunk's signal-table window (:mod:`processor.snapshot.watermarks`): in the
#: signal table, but no signals.
OPEN = "snapshot-window-open"
CLOSE = "snapshot-window-close"
WINDOW_TYPES = frozenset({OPEN, CLOSE})

#: Bounds of a signal: every one ends in the snapshot progress record, which is one Kafka
#: record (:data:`processor.snapshot.progress.MAX_QUEUED_TABLES` bounds the queue).
MAX_TABLES = 1000
MAX_FILTER_BYTES = 2048
MAX_ID_CHARS = 256
#: Keys of one ``keys`` request, the JSON size of one key, and of all of them: a primary
#: key's JSON can take several KB (PostgreSQL indexes values up to about 2.7 KB, and JSON
#: writes some characters in six bytes), and a request stays one modest record.
MAX_KEYS = 1000
MAX_KEY_BYTES = 16 << 10
MAX_REQUEST_KEY_BYTES = 1 << 20

#: ``schema.table``: one dot between two non-empty names (quoted names may hold spaces).
TABLE_PATTERN = r"^[^.]+\.[^.]+$"
_TABLE = re.compile(TABLE_PATTERN)


@dataclass(frozen=True)
class ExecuteSnapshot:
    """Backfill ``tables`` in order (``schema.table``)."""

    request_id: str
    tables: tuple[str, ...]
    #: A SQL filter per table (Debezium's ``additional-conditions``).
    conditions: dict[str, str] = field(default_factory=dict)
    #: A column to chunk by instead of the primary key (Debezium's ``surrogate-key``).
    surrogate_key: str | None = None
    #: Only these keys of the (one) table: column to value, as Debezium's key has them.
    keys: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class StopSnapshot:
    """Stop the snapshot of ``tables`` (empty: of every table)."""

    request_id: str
    tables: tuple[str, ...] = ()


@dataclass(frozen=True)
class PauseSnapshot:
    """Stop reading chunks until resumed; progress is kept."""

    request_id: str


@dataclass(frozen=True)
class ResumeSnapshot:
    """Read chunks again after a pause."""

    request_id: str


Signal = ExecuteSnapshot | StopSnapshot | PauseSnapshot | ResumeSnapshot
SIGNAL_TYPES = ("execute-snapshot", "stop-snapshot", "pause-snapshot", "resume-snapshot")


def parse_signal(signal_id: str, kind: str, data: str | bytes | None) -> Signal:
    """The signal of a row ``(id, type, data)``; :class:`SignalError` when it is not one."""
    if not signal_id:
        raise SignalError("a signal needs an id")
    if len(signal_id) > MAX_ID_CHARS:
        raise SignalError(f"a signal's id is longer than {MAX_ID_CHARS} characters")
    if kind not in SIGNAL_TYPES:
        raise SignalError(f"signal {signal_id}: unknown type {kind!r} (known: {SIGNAL_TYPES})")
    document = json_object(data, f"signal {signal_id}: data")
    snapshot_type = document.get("type", "incremental")
    if str(snapshot_type).lower() != "incremental":
        raise SignalError(
            f"signal {signal_id}: only incremental snapshots are run, not {snapshot_type!r}"
        )
    if kind == "pause-snapshot":
        return PauseSnapshot(signal_id)
    if kind == "resume-snapshot":
        return ResumeSnapshot(signal_id)
    tables = _tables(signal_id, document.get("data-collections"), required=kind != "stop-snapshot")
    if kind == "stop-snapshot":
        return StopSnapshot(signal_id, tables)
    conditions: dict[str, str] = {}
    items = document.get("additional-conditions")
    if items is not None and not isinstance(items, list):
        raise SignalError(f"signal {signal_id}: additional-conditions must be a list")
    for item in items or []:
        if not isinstance(item, dict):
            raise SignalError(f"signal {signal_id}: additional-conditions holds {item!r}")
        table, sql_filter = item.get("data-collection"), item.get("filter")
        if not isinstance(table, str) or table not in tables:
            raise SignalError(
                f"signal {signal_id}: additional condition for {table!r}, "
                "which is not among data-collections"
            )
        if not isinstance(sql_filter, str) or not sql_filter.strip():
            raise SignalError(f"signal {signal_id}: additional condition without a filter")
        if len(sql_filter.encode()) > MAX_FILTER_BYTES:
            raise SignalError(
                f"signal {signal_id}: the filter of {table} is longer than {MAX_FILTER_BYTES} bytes"
            )
        conditions[table] = sql_filter
    surrogate = document.get("surrogate-key")
    if surrogate is not None and (not isinstance(surrogate, str) or not surrogate):
        raise SignalError(f"signal {signal_id}: surrogate-key must be a column name")
    keys = _keys(signal_id, document.get("keys"), tables)
    if keys and (conditions or surrogate):
        raise SignalError(f"signal {signal_id}: keys go without filters and surrogate-key")
    return ExecuteSnapshot(signal_id, tables, conditions, surrogate or None, keys)


#: What the id of every read-again request starts with.
READ_AGAIN = "read-again-"


def read_again_signals(table: str, keys: list[dict[str, Any]]) -> list[tuple[str, bytes]]:
    """Records for the signal topic, ``(id, value)``, asking to read ``keys`` of ``table``
    again (at most :data:`MAX_KEYS` and :data:`MAX_REQUEST_KEY_BYTES` of keys a record).
    A key longer than :data:`MAX_KEY_BYTES` still goes, in a request the coordinator
    refuses with the reason, so that it takes no other key down with it."""
    groups: list[list[dict[str, Any]]] = []
    size = 0
    for key in keys:
        length = len(orjson.dumps(key)) + 1
        if not groups or len(groups[-1]) == MAX_KEYS or size + length > MAX_REQUEST_KEY_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(key)
        size += length
    records = []
    for group in groups:
        request_id = f"{READ_AGAIN}{uuid.uuid4().hex}"
        data = {"data-collections": [table], "type": "incremental", "keys": group}
        value = {"id": request_id, "type": "execute-snapshot", "data": data}
        records.append((request_id, orjson.dumps(value)))
    return records


def _keys(signal_id: str, value: Any, tables: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    if value is None:
        return ()
    if len(tables) != 1:
        raise SignalError(f"signal {signal_id}: keys need exactly one table in data-collections")
    if not isinstance(value, list) or not value:
        raise SignalError(f"signal {signal_id}: keys must be a non-empty list of key objects")
    if len(value) > MAX_KEYS:
        raise SignalError(f"signal {signal_id}: more than {MAX_KEYS} keys in one request")
    total = 0
    for key in value:
        if (
            not isinstance(key, dict)
            or not key
            or not all(isinstance(v, int | str | bool) for v in key.values())
        ):
            raise SignalError(
                f"signal {signal_id}: a key must map each key column to a number, text or "
                f"boolean, not {str(key)[:100]!r}"
            )
        length = len(orjson.dumps(key))
        if length > MAX_KEY_BYTES:
            raise SignalError(f"signal {signal_id}: a key is longer than {MAX_KEY_BYTES} bytes")
        total += length + 1
        if total > MAX_REQUEST_KEY_BYTES:
            raise SignalError(
                f"signal {signal_id}: more than {MAX_REQUEST_KEY_BYTES} bytes of keys in one "
                "request"
            )
    return tuple(value)


def json_object(data: str | bytes | None, what: str) -> dict[str, Any]:
    """``data`` as a JSON object (empty for none); :class:`SignalError` naming ``what``."""
    if data is None or (isinstance(data, str | bytes) and not data.strip()):
        return {}
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise SignalError(f"{what} is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise SignalError(f"{what} must be a JSON object")
    return document


def _tables(signal_id: str, value: Any, required: bool) -> tuple[str, ...]:
    if value is None or value == []:
        if required:
            raise SignalError(f"signal {signal_id}: data-collections names no table")
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise SignalError(f"signal {signal_id}: data-collections must be a list of table names")
    tables = tuple(dict.fromkeys(value))
    if len(tables) > MAX_TABLES:
        raise SignalError(f"signal {signal_id}: more than {MAX_TABLES} tables in one request")
    for table in tables:
        if not _TABLE.match(table):
            raise SignalError(f"signal {signal_id}: {table!r} is not 'schema.table'")
    return tables
