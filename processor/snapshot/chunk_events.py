"""Chunk rows as Debezium events: the same key bytes, value encoding and partition.

A chunk row must be indistinguishable from Debezium's own event for the row
(docs/concepts/versions.md): the same key bytes, so Kafka's murmur2 partitioner puts it in the
partition that owns the key, and the same value encoding for every column.
:class:`TableShape` learns a table's formats and schemas from one of Debezium's
events on its change topic (JSON with or without schemas, or Avro with the
registry's ids) and then writes ``op = r`` events with ``source.snapshot =
incremental`` for rows converted by :mod:`processor.snapshot.postgres.values`.

A topic flattened by Debezium's ``ExtractNewRecordState`` holds rows, not
envelopes: the table's columns, then the fields the transform adds
(``__deleted``, then ``add.fields``, e.g. ``__op``, ``__txId``). Its chunk rows are
flat rows of the same fields, with the values the transform gives a snapshot READ
event: ``__op`` ``r``, ``__deleted`` ``false``, no ``__txId`` or ``__lsn``.
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import fastavro
import orjson

from processor.errors import ShapeError
from processor.events.change import FLAT_PREFIX
from processor.snapshot.connect_values import Column, to_avro, to_json
from processor.snapshot.encoding_check import (
    Disagreement,
    avro_decimal_scales,
    avro_fields,
    avro_row_fields,
    declared_disagreements,
    json_decimal_scales,
    json_fields,
    value_disagreements,
)
from tidemark.core.avro_read import read
from tidemark.core.avro_wire import HEADER, MAGIC
from tidemark.core.debezium_settings import ValueSettings
from tidemark.core.json_envelope import PAYLOAD_HEAD, SCHEMA_HEAD
from tidemark.core.schema_registry import SchemaCache

#: Source fields of an incremental snapshot's READ event that are not the table's.
_READ_SOURCE = {
    "snapshot": "incremental",
    "sequence": None,
    "txId": None,
    "lsn": None,
    "xmin": None,
}


@dataclass
class _Side:
    """How a key or a value is written: its format and what that format needs."""

    format: str  # "avro", "json-schema" or "json"
    #: JSON with schema: the bytes up to the payload, exactly as Debezium wrote them.
    head: bytes = b""
    schema_id: int = 0
    parsed: Any = None
    #: Field order (the key's columns; the envelope's fields).
    fields: tuple[str, ...] = ()
    #: JSON with schema: the schema document.
    schema: Any = None


class TableShape:
    """A table's Debezium event layout, learned from one of its events."""

    def __init__(
        self,
        key: _Side,
        value: _Side,
        source: dict[str, Any],
        row: dict[str, Any],
        flat: dict[str, Any] | None = None,
    ) -> None:
        self._key, self._value, self._source = key, value, source
        self._row = row  # the learned event's row: what a schemaless topic says of its types
        #: A flattened topic's: the fields the transform adds, as the learned event has them.
        self.flat = flat

    @staticmethod
    def learn(key: bytes, value: bytes, schemas: SchemaCache | None) -> TableShape:
        """The shape of the events of the table that Debezium's ``key``/``value`` belong to:
        Debezium's envelopes, or rows flattened by ``ExtractNewRecordState``."""
        key_side, key_payload = _learn(key, schemas, "key")
        value_side, payload = _learn(value, schemas, "value")
        if not isinstance(payload, dict):
            raise ShapeError("neither a Debezium change event nor a row")
        if not isinstance(key_payload, dict) or not key_payload:
            raise ShapeError("a Debezium key is a struct of the key columns")
        key_side.fields = tuple(key_payload)
        value_side.fields = tuple(payload)
        if not isinstance(payload.get("source"), dict) or "after" not in payload:
            flat = {k: v for k, v in payload.items() if k.startswith(FLAT_PREFIX)}
            row = {k: v for k, v in payload.items() if k not in flat}
            return TableShape(key_side, value_side, {}, row, flat)
        row = payload.get("after") or payload.get("before") or {}
        return TableShape(key_side, value_side, dict(payload["source"]), dict(row))

    def disagreements(
        self, columns: list[Column], settings: ValueSettings, others: Iterable[bytes] = ()
    ) -> list[Disagreement]:
        """The ``columns`` whose encoding under ``settings`` is not the events' own. Schemaless
        events show only values: ``others`` (more of the table's event values) add to the
        learned one, as a value that reads both ways proves nothing."""
        declared = self.declared()
        if declared is None:
            for row in (self._row, *(_row_of(value, self.flat is not None) for value in others)):
                found = value_disagreements(row, columns, settings)
                if found:
                    return found
            return []
        return declared_disagreements(declared, columns, settings)

    def declared(self) -> dict[str, tuple[str, str | None]] | None:
        """The row's field schemas as the learned event declares them (``(type, logical
        name)`` per column); ``None`` for schemaless events, which declare none."""
        flat = self.flat is not None
        if self._value.format == "avro":
            return avro_fields(self._value.parsed, flat)
        if self._value.format == "json-schema":
            return json_fields(self._value.schema, flat)
        return None

    def decimal_scales(self) -> dict[str, tuple[str | None, str | None]]:
        """The precision and scale the learned event declares for each of its row's
        ``Decimal`` fields (the Connect parameters); none for schemaless events."""
        flat = self.flat is not None
        if self._value.format == "avro":
            return avro_decimal_scales(self._value.parsed, flat)
        if self._value.format == "json-schema":
            return json_decimal_scales(self._value.schema, flat)
        return {}

    @property
    def row_columns(self) -> tuple[str, ...]:
        """The columns of the learned event's row, in its order."""
        if self._value.format == "avro":
            fields = avro_row_fields(self._value.parsed, self.flat is not None)
            return tuple(f["name"] for f in fields)
        if self._value.format == "json-schema":
            return tuple(json_fields(self._value.schema, self.flat is not None))
        return tuple(self._row)

    @property
    def key_columns(self) -> tuple[str, ...]:
        """The key's columns, in the order Debezium writes them."""
        return self._key.fields

    def encode_chunk(
        self, rows: list[tuple[Any, ...]], columns: list[Column]
    ) -> list[tuple[bytes, bytes]]:
        """Key and value bytes of each row's READ event (``rows`` as the chunk query gave
        them, values in the order of ``columns``).

        The rows of one chunk share their ``source`` block and timestamps, so a JSON
        event is the chunk's envelope bytes around each row's ``after``: one
        serialization of the row and one of its key per row.
        """
        now_ns = time.time_ns()
        payload = self._payload(now_ns)
        if self._value.format == "avro" or self._key.format == "avro":
            return [self._encode_each(row, columns, payload) for row in rows]
        names = [c.name for c in columns]
        converted = [(i, c.json) for i, c in enumerate(columns) if c.json is not None]
        head, tail = self._around_after(payload)
        row_end = -1 if self.flat is not None else None  # a flat row goes on with its fields
        key_at = [(name, names.index(name)) for name in self._key.fields]
        key_head = self._key.head if self._key.format == "json-schema" else b""
        key_tail = b"}" if key_head else b""
        dumps = orjson.dumps
        # A key of one integer column, the common case, is formatted as orjson writes it.
        single = key_at[0][1] if len(key_at) == 1 else -1
        number_key = (
            _escaped(key_head + b"{" + dumps(key_at[0][0]) + b":")
            + b"%d"
            + _escaped(b"}" + key_tail)
        )
        out = []
        for row in rows:
            values = list(row)
            for i, encode in converted:
                values[i] = encode(values[i])
            if single >= 0 and type(values[single]) is int:
                key = number_key % values[single]
            else:
                key = key_head + dumps({name: values[i] for name, i in key_at}) + key_tail
            body = dumps(dict(zip(names, values, strict=True)))[:row_end]
            out.append((key, head + body + tail))
        return out

    def _payload(self, now_ns: int) -> dict[str, Any]:
        """A READ event without its row, with the fields and order of the table's events;
        a flattened topic's: the fields the transform adds to the row."""
        if self.flat is not None:
            return _flat_fields(self.flat, now_ns)
        source = dict(self._source, **_READ_SOURCE)
        source.update(ts_ms=now_ns // 1_000_000, ts_us=now_ns // 1000, ts_ns=now_ns)
        payload: dict[str, Any] = {
            "before": None,
            "after": None,
            "source": {k: v for k, v in source.items() if k in self._source},
            "transaction": None,
            "op": "r",
            "ts_ms": now_ns // 1_000_000,
            "ts_us": now_ns // 1000,
            "ts_ns": now_ns,
        }
        return {f: payload.get(f) for f in self._value.fields}

    def _around_after(self, payload: dict[str, Any]) -> tuple[bytes, bytes]:
        """The JSON value's bytes before and after its ``after`` row; a flat row's, before
        its columns and after them (its closing brace not included)."""
        if self.flat is not None:
            head, tail = b"", (b"," + orjson.dumps(payload)[1:]) if payload else b"}"
        else:
            text = orjson.dumps(dict(payload, after=_AFTER_MARK))
            head, tail = text.split(orjson.dumps(_AFTER_MARK))
        if self._value.format == "json-schema":
            return self._value.head + head, tail + b"}"
        return head, tail

    def _encode_each(
        self, row: tuple[Any, ...], columns: list[Column], payload: dict[str, Any]
    ) -> tuple[bytes, bytes]:
        values = {c.name: c.convert(v) for c, v in zip(columns, row, strict=True)}
        key = _wire(self._key, {name: values[name] for name in self._key.fields})
        if self.flat is not None:
            value = dict(_wire(self._value, values), **payload)
        else:
            value = dict(payload, after=_wire(self._value, values))
        return _write(self._key, key), _write(self._value, value)


def _escaped(text: bytes) -> bytes:
    """``text`` as a literal part of a ``%`` format."""
    return text.replace(b"%", b"%%")


_AFTER_MARK = "\x01tidemark:after\x01"
#: What ``ExtractNewRecordState`` gives a snapshot READ event's fields, by name (without
#: the prefix; ``source_`` names a ``source`` field): the rest keep the learned event's.
_FLAT_READ: dict[str, Any] = {
    "deleted": "false",
    "op": "r",
    **_READ_SOURCE,
    **{f"source_{name}": value for name, value in _READ_SOURCE.items()},
}
_FLAT_TIMES = {"ts_ms": 1_000_000, "ts_us": 1000, "ts_ns": 1}


def _flat_fields(learned: dict[str, Any], now_ns: int) -> dict[str, Any]:
    """The fields ``ExtractNewRecordState`` adds to a snapshot READ row, as it adds them to
    the ``learned`` event (its values of the table's own, like ``__table``, kept)."""
    out = {}
    for field, value in learned.items():
        name = field[len(FLAT_PREFIX) :]
        time_unit = _FLAT_TIMES.get(name.removeprefix("source_"))
        if time_unit is not None:
            out[field] = now_ns // time_unit
        else:
            out[field] = _FLAT_READ.get(name, value)
    return out


def _learn(raw: bytes, schemas: SchemaCache | None, what: str) -> tuple[_Side, Any]:
    if raw[:1] == MAGIC:
        if schemas is None:
            raise ShapeError(f"the {what}s are Avro but no schema registry is configured")
        schema_id = HEADER.unpack_from(raw)[1]
        parsed = schemas.get(schema_id)[1]
        datum = read(parsed, raw, HEADER.size)[0]
        return _Side("avro", schema_id=schema_id, parsed=parsed), datum
    document = orjson.loads(raw)
    if isinstance(document, dict) and set(document) == {"schema", "payload"}:
        end = raw.index(PAYLOAD_HEAD, len(SCHEMA_HEAD)) + len(PAYLOAD_HEAD)
        side = _Side("json-schema", head=raw[:end], schema=document["schema"])
        return side, document["payload"]
    return _Side("json"), document


def _row_of(value: bytes, flat: bool) -> dict[str, Any]:
    """A schemaless event's row (``after``, else ``before``; a ``flat`` event's columns);
    nothing if it is not one."""
    try:
        document = orjson.loads(value)
    except orjson.JSONDecodeError:
        return {}
    if not isinstance(document, dict):
        return {}
    if flat:
        return {k: v for k, v in document.items() if not k.startswith(FLAT_PREFIX)}
    row = document.get("after") or document.get("before")
    return row if isinstance(row, dict) else {}


def _wire(side: _Side, values: dict[str, Any]) -> dict[str, Any]:
    """Connect values as ``side``'s format writes them."""
    convert = to_avro if side.format == "avro" else to_json
    return {name: convert(value) for name, value in values.items()}


def _write(side: _Side, datum: dict[str, Any]) -> bytes:
    if side.format == "avro":
        out = io.BytesIO()
        out.write(HEADER.pack(0, side.schema_id))
        fastavro.schemaless_writer(out, side.parsed, datum)
        return out.getvalue()
    body = orjson.dumps(datum)
    return side.head + body + b"}" if side.format == "json-schema" else body
