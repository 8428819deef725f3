"""The offsets document's JSON Schema (version 1), and validation against it.

One document covers everything that positions a pipeline (DDD-4): per
partition of its input and backfill topics, the committed Kafka offset and the
source position last applied (nested by connector: PostgreSQL is what the
processor records; MySQL's layout is validated the same way); the pipeline's
lifecycle; and Debezium's incremental-snapshot fields, with keys as JSON
arrays instead of Java-serialized hex. Fields marked ``readOnly`` are
reported by reads and ignored by writes.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator

from processor.errors import InvalidOffsetsError
from tidemark.core.config import ENVELOPE_NAMES

VERSION = 1

_LONG = {"type": "integer"}
_POSITIVE = {"type": "integer", "minimum": 0}
_NULLABLE_TEXT = {"type": ["string", "null"]}

OFFSETS_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "urn:tidemark:offsets:1",
    "title": "Tidemark pipeline offsets",
    "type": "object",
    "required": ["version", "partitions"],
    "additionalProperties": False,
    "properties": {
        "version": {"const": VERSION},
        "pipeline": {"type": "string"},
        "group": {"type": "string", "readOnly": True},
        "lifecycle": {"enum": ["RUNNING", "PAUSED", "STOPPED"], "readOnly": True},
        "members": {
            "description": "whether instances are in the data plane's consumer group",
            "type": "boolean",
            "readOnly": True,
        },
        "partitions": {"type": "array", "items": {"$ref": "#/$defs/partition"}},
        "incremental_snapshot": {
            "readOnly": True,
            "oneOf": [{"type": "null"}, {"$ref": "#/$defs/incremental_snapshot"}],
        },
    },
    "$defs": {
        "partition": {
            "type": "object",
            "required": ["topic", "partition"],
            "additionalProperties": False,
            "properties": {
                "topic": {"type": "string", "minLength": 1},
                "partition": _POSITIVE,
                "kind": {"enum": ["input", "backfill"], "readOnly": True},
                "envelope": {"enum": list(ENVELOPE_NAMES), "readOnly": True},
                "offset": {
                    "description": "the next offset to read; null: none committed (the "
                    "data plane reads from the beginning; written as the first offset)",
                    "type": ["integer", "null"],
                    "minimum": 0,
                },
                "source_position": {
                    "oneOf": [{"type": "null"}, {"$ref": "#/$defs/source_position"}]
                },
            },
        },
        "source_position": {
            "description": "the last change applied below at_offset, in the connector's terms",
            "type": "object",
            "required": ["at_offset"],
            "additionalProperties": False,
            "minProperties": 2,
            "maxProperties": 2,
            "properties": {
                "at_offset": _POSITIVE,
                "postgresql": {"$ref": "#/$defs/postgresql"},
                "mysql": {"$ref": "#/$defs/mysql"},
            },
        },
        "postgresql": {
            "type": "object",
            "additionalProperties": False,
            "minProperties": 1,
            "properties": {
                "ts_usec": _LONG,
                "txId": _POSITIVE,
                "lsn": _POSITIVE,
                "xmin": _POSITIVE,
                "lsn_proc": _POSITIVE,
                "lsn_commit": _POSITIVE,
                "messageType": {
                    "enum": ["INSERT", "UPDATE", "DELETE", "TRUNCATE", "BEGIN", "COMMIT", "MESSAGE"]
                },
                "snapshot": {"type": "boolean"},
                "last_snapshot_record": {"type": "boolean"},
            },
        },
        "mysql": {
            "type": "object",
            "required": ["file", "pos"],
            "additionalProperties": False,
            "properties": {
                "server_id": _POSITIVE,
                "gtids": {"type": "string", "minLength": 1},
                "file": {"type": "string", "minLength": 1},
                "pos": _POSITIVE,
                "event": {"type": "integer", "minimum": 1},
                "row": {"type": "integer", "minimum": 1},
                "ts_ms": _LONG,
                "snapshot": {"type": "boolean"},
            },
        },
        "incremental_snapshot": {
            "type": "object",
            "additionalProperties": False,
            "required": ["incremental_snapshot_collections"],
            "properties": {
                "incremental_snapshot_collections": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["incremental_snapshot_collections_id"],
                        "additionalProperties": False,
                        "properties": {
                            "incremental_snapshot_collections_id": {"type": "string"},
                            "incremental_snapshot_collections_additional_condition": _NULLABLE_TEXT,
                            "incremental_snapshot_collection_surrogate_key": _NULLABLE_TEXT,
                        },
                    },
                },
                "incremental_snapshot_primary_key": {"type": ["array", "null"]},
                "incremental_snapshot_maximum_key": {"type": ["array", "null"]},
            },
        },
    },
}

_VALIDATOR = Draft202012Validator(OFFSETS_SCHEMA)


def schema_error(validator: Draft202012Validator, document: Any) -> str | None:
    """The first field of ``document`` that ``validator`` refuses, as ``<JSON pointer>: <why>``
    (e.g. ``/partitions/0/offset: -1 is less than the minimum of 0``), or ``None``."""
    errors = sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    error = errors[0]
    # A oneOf's own message repeats the whole value; the deepest sub-error is clearer.
    while error.context:
        error = max(error.context, key=lambda e: len(e.absolute_path))
    return "/" + "/".join(str(part) for part in error.absolute_path) + f": {error.message}"


def validate(document: Any) -> dict[str, Any]:
    """``document`` if it is a valid offsets document, else :class:`InvalidOffsetsError`
    naming the first wrong field (:func:`schema_error`)."""
    wrong = schema_error(_VALIDATOR, document)
    if wrong is not None:
        raise InvalidOffsetsError(wrong)
    assert isinstance(document, dict)
    return document
