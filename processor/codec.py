"""Decoding of input messages and encoding of reconciled events (JSON for now).

Input is Debezium's JSON converter output, with schemas (``{"schema", "payload"}``)
or without, or a flat JSON value for the ``upsert`` envelope. Output is a
Debezium-compatible envelope (``before``, ``after``, ``op``, ``source``,
``ts_ms``) plus a ``tidemark`` struct saying where the event came from and why
it was emitted, in the input's format and carrying its schema.

Values travel as raw JSON bytes between state and output (``orjson.Fragment``),
so a stored row is never parsed again just to be written out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson

from processor.errors import InputError, RawMessage
from processor.reconcile import Version

OPS = frozenset({"c", "u", "d", "r"})

TIDEMARK_FIELD: dict[str, Any] = {
    "type": "struct",
    "optional": True,
    "field": "tidemark",
    "name": "io.tidemark.Metadata",
    "fields": [
        {"type": "string", "optional": False, "field": "topic"},
        {"type": "int32", "optional": False, "field": "partition"},
        {"type": "int64", "optional": False, "field": "offset"},
        {"type": "string", "optional": False, "field": "envelope"},
        {"type": "string", "optional": False, "field": "reason"},
    ],
}


@dataclass(slots=True)
class Change:
    """One decoded input change."""

    op: str
    #: The new row as JSON bytes; ``None`` for a delete.
    after: bytes | None
    version: Version
    #: The input payload and schema, the template of the output event.
    payload: dict[str, Any]
    schema: dict[str, Any] | None


def split_envelope(raw: bytes, msg: RawMessage) -> tuple[Any, dict[str, Any] | None]:
    """``(payload, schema)`` of a JSON message with (``{schema, payload}``) or without schema."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"value is not JSON: {exc}", msg) from None
    if isinstance(doc, dict) and doc.keys() == {"schema", "payload"}:
        schema = doc["schema"]
        if schema is not None and not isinstance(schema, dict):
            raise InputError("value schema is not a JSON object", msg)
        return doc["payload"], schema
    return doc, None


def decode_debezium(msg: RawMessage) -> Change:
    """A Debezium envelope (``op``, ``before``, ``after``, ``source``) from JSON bytes."""
    assert msg.value is not None
    payload, schema = split_envelope(msg.value, msg)
    if not isinstance(payload, dict) or "op" not in payload:
        raise InputError("not a Debezium change event (no 'op' field)", msg)
    op = payload["op"]
    if op not in OPS:
        raise InputError(f"unknown op {op!r} (expected one of c, u, d, r)", msg)
    after = payload.get("after")
    if op == "d":
        after_bytes = None
    elif isinstance(after, dict):
        after_bytes = orjson.dumps(after)
    else:
        raise InputError(f"op {op!r} without an 'after' row", msg)
    return Change(op, after_bytes, source_version(payload.get("source"), msg), payload, schema)


def decode_upsert(msg: RawMessage) -> Change:
    """A flat key/value record: the value is the row, a null value deletes it."""
    if msg.value is None:
        return Change("d", None, (0, msg.offset), {}, None)
    row, schema = split_envelope(msg.value, msg)
    if not isinstance(row, dict):
        raise InputError("upsert value is not a JSON object", msg)
    return Change("u", orjson.dumps(row), (0, msg.offset), {}, schema)


def source_version(source: Any, msg: RawMessage) -> Version:
    """The change's position in the source's commit order.

    PostgreSQL: ``source.sequence`` is ``[last commit LSN, change LSN]`` as a JSON
    string; the pair follows commit order even where plain LSNs interleave. A null
    commit LSN (the first transaction a new connector sees) counts as 0.
    """
    if not isinstance(source, dict):
        raise InputError("Debezium event without a 'source' block", msg)
    sequence = source.get("sequence")
    try:
        if sequence:
            commit, change = orjson.loads(sequence)
            return int(commit or 0), int(change or 0)
        if source.get("lsn") is not None:
            lsn = int(source["lsn"])
            return lsn, lsn
    except (orjson.JSONDecodeError, TypeError, ValueError):
        raise InputError(f"unreadable source position {sequence!r}", msg) from None
    raise InputError("Debezium event without a source position (sequence or lsn)", msg)


def encode_output(
    change: Change, previous: bytes | None, reason: str, envelope: str, msg: RawMessage
) -> bytes:
    """The reconciled event for ``change``; ``previous`` is the state's prior value."""
    payload = dict(change.payload)
    payload["before"] = None if previous is None else orjson.Fragment(previous)
    payload["after"] = None if change.after is None else orjson.Fragment(change.after)
    payload["op"] = change.op
    payload.setdefault("source", None)
    payload.setdefault("ts_ms", int(time.time() * 1000))
    payload["tidemark"] = {
        "topic": msg.topic,
        "partition": msg.partition,
        "offset": msg.offset,
        "envelope": envelope,
        "reason": reason,
    }
    if change.schema is None:
        return orjson.dumps(payload)
    return orjson.dumps({"schema": output_schema(change.schema, envelope), "payload": payload})


def output_schema(schema: dict[str, Any], envelope: str) -> dict[str, Any]:
    """The input schema with the ``tidemark`` field (an upsert row wrapped in an envelope)."""
    if envelope == "upsert":
        row = dict(schema, optional=True)
        fields = [
            dict(row, field="before"),
            dict(row, field="after"),
            {"type": "string", "optional": False, "field": "op"},
            {"type": "struct", "optional": True, "field": "source", "fields": []},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ]
        out = {
            "type": "struct",
            "optional": False,
            "fields": fields + [TIDEMARK_FIELD],
            "name": f"{schema.get('name', 'row')}.Envelope",
        }
    else:
        fields = [f for f in schema.get("fields", []) if f.get("field") != "tidemark"]
        out = dict(schema, fields=fields + [TIDEMARK_FIELD])
    return out
