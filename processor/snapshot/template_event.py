"""The event Debezium would write for a table that has none yet, to learn its layout from.

With ``snapshot.mode=no_data`` a quiet table's change topic is empty (or missing), so
there is no event of its own to copy (:class:`~processor.snapshot.chunk_events.TableShape`
learns from one). Another table's event of the same connector gives what every table
shares: the converter, the envelope's fields and order, the ``source`` block (connector,
version, server name, database) and the envelope's schema. The key's and the row's field
schemas come from the catalog (:mod:`processor.snapshot.postgres.connect_schemas`), named
after the topic as Debezium names them (``<topic>.Key``, ``.Value``, ``.Envelope``).

The template's row holds NULLs: it is learned from, never written. Avro needs the
schemas registered under the topic's subjects first, which is not done yet: a quiet
table whose connector writes Avro is refused.
"""

from __future__ import annotations

from typing import Any

import orjson

from processor.errors import ShapeError
from tidemark.core.avro_wire import MAGIC


def template_event(
    sibling: tuple[bytes, bytes],
    topic: str,
    table: tuple[str, str],
    key_fields: list[dict[str, Any]],
    row_fields: list[dict[str, Any]],
) -> tuple[bytes, bytes]:
    """Key and value bytes of an event of ``table`` (schema, name) on ``topic``, in the form
    of ``sibling``, another table's event of the same connector."""
    sibling_key, sibling_value = sibling
    if sibling_key[:1] == MAGIC or sibling_value[:1] == MAGIC:
        raise ShapeError(
            "the connector writes Avro, and a table with no event yet would need its "
            "schemas registered first, which Tidemark does not do yet"
        )
    key_doc, value_doc = orjson.loads(sibling_key), orjson.loads(sibling_value)
    envelope = value_doc.get("payload", value_doc) if _enveloped(value_doc) else value_doc
    if not isinstance(envelope, dict) or not isinstance(envelope.get("source"), dict):
        raise ShapeError("the other table's event is not a Debezium change event")
    schema, name = table
    source = dict(envelope["source"], schema=schema, table=name)
    payload = dict(envelope, before=None, after={f["field"]: None for f in row_fields})
    payload["source"] = source
    key_payload = {f["field"]: None for f in key_fields}
    key: Any = key_payload
    if _enveloped(key_doc):
        key_schema = {"type": "struct", "fields": key_fields, "optional": False}
        key = {"schema": dict(key_schema, name=f"{topic}.Key"), "payload": key_payload}
    value: Any = payload
    if _enveloped(value_doc):
        value = {"schema": _envelope_schema(value_doc["schema"], topic, row_fields)}
        value["payload"] = payload
    return orjson.dumps(key), orjson.dumps(value)


def _enveloped(document: Any) -> bool:
    return isinstance(document, dict) and set(document) == {"schema", "payload"}


def _envelope_schema(
    sibling: dict[str, Any], topic: str, row_fields: list[dict[str, Any]]
) -> dict[str, Any]:
    fields = []
    for field in sibling.get("fields", []):
        if field.get("field") in ("before", "after"):
            field = dict(field, fields=row_fields, name=f"{topic}.Value")
        fields.append(field)
    return dict(sibling, fields=fields, name=f"{topic}.Envelope")
