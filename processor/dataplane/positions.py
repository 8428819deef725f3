"""Source positions: where in the source database the last applied change of a partition was.

The data plane records, with each batch, the position of the last change it
applied in every input partition, in the layout of Debezium's own offsets
(DDD-4) nested under the connector's name, so that an operator reads the
offsets document in terms of the source. The positions are information: the
processor reads Kafka, not the database log, so it never seeks by them.

- PostgreSQL: ``lsn``, ``txId``, ``lsn_commit`` (the commit LSN of
  ``source.sequence``), ``ts_usec``, ``xmin``.
- MySQL: ``server_id``, ``gtids``, ``file``, ``pos``, ``row``, ``ts_ms``.

Absent values are omitted, as Debezium omits them.
"""

from __future__ import annotations

from typing import Any

import orjson

from processor.events.change import in_64_bits

#: The source fields each connector's position keeps: offsets field, ``source`` field.
_FIELDS: dict[str, tuple[tuple[str, str], ...]] = {
    "postgresql": (("lsn", "lsn"), ("txId", "txId"), ("xmin", "xmin")),
    "mysql": (
        ("server_id", "server_id"),
        ("gtids", "gtid"),
        ("file", "file"),
        ("pos", "pos"),
        ("row", "row"),
        ("ts_ms", "ts_ms"),
    ),
}


def source_position(event: Any) -> dict[str, Any] | None:
    """The position of a decoded Debezium event, ``{connector: {field: value}}``, or ``None``.

    ``None`` for events without a ``source`` block of a known connector (a flat
    ``upsert`` value, a Tidemark chunk row).
    """
    source = event.get("source") if isinstance(event, dict) else None
    if not isinstance(source, dict):
        return None
    connector = source.get("connector")
    if not isinstance(connector, str) or connector not in _FIELDS:
        return None
    fields = _FIELDS[connector]
    position = {name: source[field] for name, field in fields if source.get(field) is not None}
    if connector == "postgresql":
        commit = _commit_lsn(source.get("sequence"))
        if commit is not None:
            position["lsn_commit"] = commit
        ts_us, ts_ms = source.get("ts_us"), source.get("ts_ms")
        if ts_us is not None:
            position["ts_usec"] = ts_us
        elif isinstance(ts_ms, int) and not isinstance(ts_ms, bool) and in_64_bits(ts_ms * 1000):
            position["ts_usec"] = ts_ms * 1000
    return {connector: position} if position else None


def _commit_lsn(sequence: Any) -> int | None:
    if not isinstance(sequence, str):
        return None
    try:
        commit = orjson.loads(sequence)[0]
    except (orjson.JSONDecodeError, IndexError, KeyError, TypeError):
        return None
    try:
        return int(commit) if commit is not None else None
    except (TypeError, ValueError):
        return None
