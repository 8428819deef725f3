"""Avro schemas of reconciled events, and the layout that lets the codec splice bytes.

For each input value schema, a :class:`Layout` holds the parsed schemas the
codec reads with (the envelope's ``before``, ``after`` and the fields after
them, each wrapped in a record of its own so it is parsed once), the row
schema, the output schema (the input's, with the ``tidemark`` field last) and
the bytes that select a union branch. Also: Avro's zig-zag ``long`` and
``string`` encodings, which the codec writes by hand for the ``tidemark`` block.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import fastavro

from tidemark.core.avro_read import write_long

TIDEMARK_RECORD: dict[str, Any] = {
    "type": "record",
    "name": "Metadata",
    "namespace": "io.tidemark",
    "fields": [
        {"name": "topic", "type": "string"},
        {"name": "partition", "type": "int"},
        {"name": "offset", "type": "long"},
        {"name": "position", "type": "string"},
        {"name": "envelope", "type": "string"},
        {"name": "reason", "type": "string"},
    ],
}


@dataclass
class Layout:
    """How the messages of one value schema are read and their outputs written."""

    schema_id: int
    #: The parsed row record (rows in state, rows that must be encoded).
    row: Any
    #: The output schema as JSON (registered) and its id once registered.
    output_doc: dict[str, Any]
    #: Union branch bytes of ``before`` / ``after``: null, and the row.
    null_byte: bytes = b"\x00"
    row_byte: bytes = b"\x02"
    #: Wrapped parts of an envelope: ``{"before"}``, ``{"after"}``, the rest.
    before: Any = None
    after: Any = None
    rest: Any = None
    output_id: int = field(default=0)


#: Avro's zig-zag varint encoding of a ``long`` (or ``int``), in C.
avro_long = write_long


def avro_string(value: str) -> bytes:
    """Avro's encoding of a ``string``: its UTF-8 length, then the bytes."""
    data = value.encode()
    return avro_long(len(data)) + data


def row_schema(envelope: dict[str, Any]) -> dict[str, Any]:
    """The row record of a Debezium envelope schema (defined in ``before`` or ``after``)."""
    for item in envelope.get("fields", []):
        if item.get("name") in ("before", "after"):
            kind = item.get("type")
            branches = kind if isinstance(kind, list) else [kind]
            for branch in branches:
                if isinstance(branch, dict) and branch.get("type") == "record":
                    # The row's name lives in the envelope's namespace unless it has its own.
                    if "namespace" in branch or "." in branch.get("name", ""):
                        return branch
                    return dict(branch, namespace=envelope.get("namespace", ""))
    raise ValueError(f"schema {envelope.get('name')!r} is not a Debezium envelope (no row record)")


def with_tidemark(fields: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``fields`` with the ``tidemark`` field last (replacing one that is there)."""
    kept = [f for f in fields if f.get("name") != "tidemark"]
    return [*kept, {"name": "tidemark", "type": ["null", TIDEMARK_RECORD], "default": None}]


def envelope_schema(row: dict[str, Any]) -> dict[str, Any]:
    """The output envelope of an ``upsert`` row schema."""
    name = row.get("name", "Row")
    namespace = row.get("namespace")
    full = f"{namespace}.{name}" if namespace and "." not in name else name
    return {
        "type": "record",
        "name": full + "Envelope",
        "fields": with_tidemark(
            [
                {"name": "before", "type": ["null", row], "default": None},
                {"name": "after", "type": ["null", full], "default": None},
                {"name": "op", "type": "string"},
                {"name": "ts_ms", "type": ["null", "long"], "default": None},
            ]
        ),
    }


def envelope_layout(schema_id: int, document: dict[str, Any]) -> Layout:
    """The layout of a Debezium envelope schema: ``before`` and ``after`` first, as unions.

    Raises ``ValueError`` for a schema that is not laid out like Debezium's.
    """
    expanded = fastavro.parse_schema(document, {}, expand=True)
    fields = expanded.get("fields", []) if isinstance(expanded, dict) else []
    if [f.get("name") for f in fields[:2]] != ["before", "after"]:
        raise ValueError("a Debezium envelope starts with the fields 'before' and 'after'")
    null_byte, row_byte = _union_bytes(fields[0]["type"])
    if _union_bytes(fields[1]["type"]) != (null_byte, row_byte):
        raise ValueError("'before' and 'after' must be the same union of null and the row")
    output = dict(document, fields=with_tidemark(document.get("fields", [])))
    return Layout(
        schema_id,
        fastavro.parse_schema(row_schema(document), {}),
        output,
        null_byte,
        row_byte,
        before=_wrap("Before", fields[:1]),
        after=_wrap("After", fields[1:2]),
        rest=_wrap("Rest", fields[2:]),
    )


def upsert_layout(schema_id: int, document: dict[str, Any], parsed: Any) -> Layout:
    """The layout of a flat row schema (``upsert``): the output wraps it in an envelope."""
    if not (isinstance(document, dict) and document.get("type") == "record"):
        raise ValueError("an upsert value must be an Avro record")
    return Layout(schema_id, parsed, envelope_schema(document))


def _union_bytes(kind: Any) -> tuple[bytes, bytes]:
    if not (isinstance(kind, list) and len(kind) == 2 and "null" in kind):
        raise ValueError("'before' and 'after' must be unions of null and the row")
    null_index = kind.index("null")
    return avro_long(null_index), avro_long(1 - null_index)


def _wrap(name: str, fields: list[dict[str, Any]]) -> Any:
    """A record of ``fields`` (already expanded), parsed once for the reader."""
    return fastavro.parse_schema(
        {"type": "record", "name": f"tidemark.{name}", "fields": fields}, {}
    )
