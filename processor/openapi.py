"""The management API's OpenAPI 3.1 document, as data, and the validators of its request bodies.

:mod:`processor.api` serves the document at ``/api/v1/openapi.json`` and
checks request bodies against the schemas here, so the document and the
behaviour cannot drift apart; the schemathesis test fuzzes the API from it.
"""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator

from processor.pipeline.audit import MAX_ENTRIES as MAX_AUDIT_ENTRIES
from processor.pipeline.control_topic import Lifecycle
from processor.pipeline.dead_letters import MAX_LIMIT as DEAD_LETTERS_LIMIT
from processor.pipeline.dead_letters import PREVIEWS_IN_FLIGHT
from processor.pipeline.offsets import RESET_TARGETS
from processor.pipeline.offsets_schema import OFFSETS_SCHEMA
from processor.snapshot.client import MAX_NOTIFICATIONS
from processor.snapshot.signals import MAX_FILTER_BYTES, MAX_TABLES, TABLE_PATTERN

PREFIX = "/api/v1"
#: ``POST /api/v1/snapshots/{action}``: the signal each action sends.
ACTIONS = {"stop": "stop-snapshot", "pause": "pause-snapshot", "resume": "resume-snapshot"}
#: ``POST /api/v1/pipelines/{name}/{action}``: the lifecycle state each action asks for.
LIFECYCLE_ACTIONS = {
    "stop": Lifecycle.STOPPED,
    "pause": Lifecycle.PAUSED,
    "resume": Lifecycle.RUNNING,
}

_ERROR = {"$ref": "#/components/schemas/Error"}
_ACCEPTED = {
    "202": {
        "description": "the signal was written to the pipeline's signal topic",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Accepted"}}},
    },
    "400": {
        "description": "not a valid signal",
        "content": {"application/json": {"schema": _ERROR}},
    },
    "401": {
        "description": "no or wrong bearer token",
        "content": {"application/json": {"schema": _ERROR}},
    },
    "413": {
        "description": "a body larger than the API reads (1 MiB)",
        "content": {"application/json": {"schema": _ERROR}},
    },
}


def _answer(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _components(schema: dict[str, Any], prefix: str) -> dict[str, Any]:
    """``schema`` and its ``$defs`` as OpenAPI components named ``prefix`` and ``prefix_<def>``."""
    text = json.dumps(schema).replace('"#/$defs/', f'"#/components/schemas/{prefix}_')
    moved = json.loads(text)
    defs = moved.pop("$defs", {})
    for key in ("$schema", "$id"):
        moved.pop(key, None)
    return {prefix: moved, **{f"{prefix}_{name}": body for name, body in defs.items()}}


_TABLE_NAME = {"type": "string", "pattern": TABLE_PATTERN}
_TABLES = {"type": "array", "items": _TABLE_NAME, "maxItems": MAX_TABLES}
#: "incremental" in any case, as Debezium reads it.
_INCREMENTAL = "^" + "".join(f"[{c}{c.upper()}]" for c in "incremental") + "$"
_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
_RESET_STATE = {
    "name": "reset_state",
    "in": "query",
    "required": False,
    "description": "delete the state of the partitions written, so that a replay rebuilds it",
    "schema": {"type": "boolean", "default": False},
}
_OFFSETS = {"$ref": "#/components/schemas/Offsets"}
_WRITTEN = {
    "200": _answer(
        "written; 'previous' written back undoes it",
        {
            "type": "object",
            "required": ["previous", "current"],
            "properties": {"previous": _OFFSETS, "current": _OFFSETS},
        },
    ),
    "400": _answer("not a valid offsets document, or not of this pipeline", _ERROR),
    "401": _ACCEPTED["401"],
    "404": _answer("another pipeline", _ERROR),
    "409": _answer("instances of the pipeline are running or paused", _ERROR),
    "413": _ACCEPTED["413"],
}
#: The answers of a read of the pipeline's topics.
_READ = {
    "401": _ACCEPTED["401"],
    "404": _answer("another pipeline", _ERROR),
    "503": _answer("Kafka could not be read", _ERROR),
}
_BAD_PARAMETERS = _answer("a parameter it does not know, or a bad value", _ERROR)


def _limit(most: int) -> dict[str, Any]:
    """The ``limit`` parameter of a read that answers at most ``most`` items."""
    return {
        "name": "limit",
        "in": "query",
        "schema": {"type": "integer", "minimum": 1, "maximum": most, "default": 100},
    }


_OFFSETS_BODY = {"required": True, "content": {"application/json": {"schema": _OFFSETS}}}

#: The API's OpenAPI 3.1 document (served at ``/api/v1/openapi.json``).
OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "Tidemark management API", "version": "1"},
    "servers": [{"url": PREFIX}],
    "security": [{"bearer": []}],
    "paths": {
        "/pipelines/{name}/status": {
            "get": {
                "summary": "this instance's data plane and snapshot coordinator",
                "parameters": [
                    {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "responses": {
                    "200": {
                        "description": "status",
                        "content": {
                            "application/json": {"schema": {"$ref": "#/components/schemas/Status"}}
                        },
                    },
                    "401": _ACCEPTED["401"],
                    "404": {
                        "description": "another pipeline",
                        "content": {"application/json": {"schema": _ERROR}},
                    },
                },
            }
        },
        "/pipelines/{name}/offsets": {
            "parameters": [_NAME],
            "get": {
                "summary": "the pipeline's offsets document (always allowed)",
                "responses": {
                    "200": _answer("the offsets", _OFFSETS),
                    "401": _ACCEPTED["401"],
                    "404": _WRITTEN["404"],
                },
            },
            "put": {
                "summary": "replace every committed offset (the document lists them all)",
                "parameters": [_RESET_STATE],
                "requestBody": _OFFSETS_BODY,
                "responses": _WRITTEN,
            },
            "patch": {
                "summary": "set the offsets of the partitions listed",
                "parameters": [_RESET_STATE],
                "requestBody": _OFFSETS_BODY,
                "responses": _WRITTEN,
            },
            "delete": {
                "summary": "forget every committed offset (a restart reads from the beginning)",
                "parameters": [_RESET_STATE],
                "responses": _WRITTEN,
            },
        },
        "/pipelines/{name}/offsets/reset": {
            "parameters": [_NAME],
            "post": {
                "summary": "move offsets to the beginning, the end, or a time",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Reset"}}
                    },
                },
                "responses": _WRITTEN,
            },
        },
        "/pipelines/{name}/instances": {
            "parameters": [_NAME],
            "get": {
                "summary": "the pipeline's running instances and the partitions each holds, as "
                "each reported itself in the last 30 s",
                "responses": {
                    "200": _answer(
                        "the instances",
                        {
                            "type": "object",
                            "required": ["instances", "partitions"],
                            "properties": {
                                "instances": {
                                    "type": "array",
                                    "items": {
                                        "allOf": [
                                            {"$ref": "#/components/schemas/Status"},
                                            {
                                                "type": "object",
                                                "properties": {
                                                    "instance": {"type": "string"},
                                                    "started_ms": {"type": "integer"},
                                                    "reported_ms": {"type": "integer"},
                                                },
                                            },
                                        ]
                                    },
                                },
                                "partitions": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "properties": {
                                            "topic": {"type": "string"},
                                            "partition": {"type": "integer"},
                                            "instance": {"type": "string"},
                                        },
                                    },
                                },
                            },
                        },
                    ),
                    **_READ,
                },
            },
        },
        "/pipelines/{name}/sink": {
            "parameters": [_NAME],
            "get": {
                "summary": "each Iceberg table as the sink last published it: committed "
                "offsets, lag, last commit, stopped and why",
                "responses": {
                    "200": _answer(
                        "the tables",
                        {
                            "type": "object",
                            "required": ["tables"],
                            "properties": {
                                "tables": {
                                    "type": "array",
                                    "items": {"$ref": "#/components/schemas/SinkTable"},
                                }
                            },
                        },
                    ),
                    **_READ,
                },
            },
        },
        "/pipelines/{name}/history": {
            "parameters": [_NAME],
            "get": {
                "summary": "this instance's figures per topic over the last 15 minutes",
                "parameters": [
                    {
                        "name": "since",
                        "in": "query",
                        "description": "only the samples taken after this time (epoch ms)",
                        "schema": {"type": "integer", "minimum": 0},
                    }
                ],
                "responses": {
                    "200": _answer(
                        "samples, oldest first", {"$ref": "#/components/schemas/History"}
                    ),
                    "400": _BAD_PARAMETERS,
                    "401": _ACCEPTED["401"],
                    "404": _answer("another pipeline", _ERROR),
                },
            },
        },
        "/pipelines/{name}/audit": {
            "parameters": [_NAME],
            "get": {
                "summary": "the audit trail: operator actions, newest first (viewers: "
                "without addresses and request bodies)",
                "parameters": [
                    {
                        "name": "since",
                        "in": "query",
                        "description": "only the actions at or after this time (epoch ms)",
                        "schema": {"type": "integer", "minimum": 0},
                    },
                    _limit(MAX_AUDIT_ENTRIES),
                ],
                "responses": {
                    "200": _answer("the actions found", {"$ref": "#/components/schemas/Audit"}),
                    "400": _BAD_PARAMETERS,
                    **_READ,
                },
            },
        },
        "/pipelines/{name}/dead-letters": {
            "parameters": [_NAME],
            "get": {
                "summary": "the newest dead letters, newest first (always allowed)",
                "parameters": [
                    {
                        "name": "table",
                        "in": "query",
                        "description": "only those of this table (schema.table)",
                        "schema": {"type": "string"},
                    },
                    {
                        "name": "kind",
                        "in": "query",
                        "description": "only those of this kind (e.g. malformed, too-large)",
                        "schema": {"type": "string"},
                    },
                    _limit(DEAD_LETTERS_LIMIT),
                    {
                        "name": "whole",
                        "in": "query",
                        "description": "each key and value whole, in base64, not a preview",
                        "schema": {"type": "boolean", "default": False},
                    },
                ],
                "responses": {
                    "200": _answer(
                        "the dead letters found", {"$ref": "#/components/schemas/DeadLetters"}
                    ),
                    "400": _BAD_PARAMETERS,
                    **_READ,
                    "403": _answer("a viewer's download (whole=true)", _ERROR),
                    "503": _answer(
                        "Kafka could not be read, or the reads of dead letters the process "
                        "holds are in flight (then with Retry-After): one download, "
                        f"{PREVIEWS_IN_FLIGHT} reads of previews",
                        _ERROR,
                    ),
                },
            },
        },
        **{
            f"/pipelines/{{name}}/{action}": {
                "parameters": [_NAME],
                "post": {
                    "summary": f"{action} every instance of the pipeline",
                    "responses": {
                        "202": _answer(
                            "asked of every instance through the control topic",
                            {
                                "type": "object",
                                "properties": {
                                    "pipeline": {"type": "string"},
                                    "lifecycle": {"const": state.value},
                                },
                            },
                        ),
                        "401": _ACCEPTED["401"],
                        "404": _answer("another pipeline", _ERROR),
                        "503": _answer("Kafka did not take the control record", _ERROR),
                    },
                },
            }
            for action, state in LIFECYCLE_ACTIONS.items()
        },
        "/notifications": {
            "get": {
                "summary": "the snapshots' notifications in Debezium's format, newest first",
                "parameters": [
                    {
                        "name": "request",
                        "in": "query",
                        "description": "only those of this snapshot request (its id)",
                        "schema": {"type": "string"},
                    },
                    _limit(MAX_NOTIFICATIONS),
                ],
                "responses": {
                    "200": _answer(
                        "the notifications found",
                        {
                            "type": "object",
                            "required": ["notifications", "complete", "unreadable"],
                            "properties": {
                                "notifications": {"type": "array", "items": {"type": "object"}},
                                "complete": {
                                    "type": "boolean",
                                    "description": "the newest 20,000 records were all of them",
                                },
                                "unreadable": {
                                    "type": "integer",
                                    "description": "records that are not notifications",
                                },
                            },
                        },
                    ),
                    "400": _BAD_PARAMETERS,
                    "401": _READ["401"],
                    "503": _READ["503"],
                },
            },
        },
        "/snapshots": {
            "get": {
                "summary": "progress of the pipeline's incremental snapshots",
                "responses": {
                    "200": {
                        "description": "progress per table",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                    "401": _ACCEPTED["401"],
                },
            },
            "post": {
                "summary": "start an incremental snapshot (Debezium's execute-snapshot data)",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {"$ref": "#/components/schemas/ExecuteSnapshot"}
                        }
                    },
                },
                "responses": _ACCEPTED,
            },
        },
        "/snapshots/{action}": {
            "post": {
                "summary": "stop (all or some data-collections), pause or resume snapshots",
                "parameters": [
                    {
                        "name": "action",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string", "enum": sorted(ACTIONS)},
                    }
                ],
                "requestBody": {
                    "required": False,
                    "content": {
                        "application/json": {
                            "schema": {"$ref": "#/components/schemas/SnapshotAction"}
                        }
                    },
                },
                "responses": {
                    **_ACCEPTED,
                    "404": {
                        "description": "unknown action",
                        "content": {"application/json": {"schema": _ERROR}},
                    },
                },
            }
        },
    },
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "Error": {
                "type": "object",
                "required": ["error"],
                "properties": {"error": {"type": "string"}},
            },
            "Accepted": {
                "type": "object",
                "required": ["request_id", "signal"],
                "properties": {"request_id": {"type": "string"}, "signal": {"type": "string"}},
            },
            "ExecuteSnapshot": {
                "type": "object",
                "required": ["data-collections"],
                "properties": {
                    "data-collections": {
                        "description": "tables as schema.table; one table may be a string",
                        "oneOf": [{**_TABLES, "minItems": 1}, _TABLE_NAME],
                    },
                    "type": {"type": "string", "pattern": _INCREMENTAL},
                    "additional-conditions": {
                        "description": "each data-collection must be among data-collections",
                        "type": ["array", "null"],
                        "items": {
                            "type": "object",
                            "required": ["data-collection", "filter"],
                            "properties": {
                                "data-collection": {"type": "string"},
                                "filter": {
                                    "type": "string",
                                    "pattern": r"\S",
                                    "description": f"at most {MAX_FILTER_BYTES} bytes",
                                },
                            },
                        },
                    },
                    "surrogate-key": {"type": ["string", "null"], "minLength": 1},
                },
            },
            "SnapshotAction": {
                "type": "object",
                "properties": {
                    "data-collections": {
                        "description": "stop only: these tables (none: every table)",
                        "oneOf": [_TABLES, _TABLE_NAME],
                    },
                    "type": {"type": "string", "pattern": _INCREMENTAL},
                },
            },
            "Status": {
                "type": "object",
                "properties": {
                    "pipeline": {"type": "string"},
                    "dataplane": {"type": "string", "enum": ["running", "stopped", "failed"]},
                    "error": {"type": ["string", "null"]},
                    "assigned_partitions": {"type": "array", "items": {"type": "object"}},
                    "refused_topics": {"type": "object"},
                    "released_for_removal": {
                        "type": "array",
                        "description": "input topics of tables being removed "
                        "(tidemark tables remove) this instance has let go of",
                        "items": {"type": "string"},
                    },
                    "refused_partitions": {
                        "type": "array",
                        "description": "input partitions stopped by state they cannot read",
                        "items": {"type": "object"},
                    },
                    "snapshots": {"type": "string", "enum": ["leader", "standby", "refused"]},
                    "snapshots_refused": {
                        "type": ["string", "null"],
                        "description": "why this leader does not coordinate: its progress "
                        "record is unreadable (tidemark snapshot reset-progress)",
                    },
                    "lifecycle": {"enum": [s.value for s in Lifecycle]},
                },
            },
            "SinkTable": {
                "type": "object",
                "required": ["table"],
                "properties": {
                    "table": {"type": "string", "description": "catalog.schema.table"},
                    "topic": {"type": "string"},
                    "committed": {
                        "type": "object",
                        "description": "partition: the next offset, as in the last commit",
                        "additionalProperties": {"type": "integer"},
                    },
                    "lag": {"type": "object", "additionalProperties": {"type": "integer"}},
                    "last_commit_ms": {"type": ["integer", "null"]},
                    "last_commit_rows": {"type": ["integer", "null"]},
                    "stopped": {"type": "boolean"},
                    "reason": {"type": ["string", "null"]},
                    "retrying": {"type": ["string", "null"]},
                    "reported_ms": {"type": "integer"},
                },
            },
            "History": {
                "type": "object",
                "required": ["interval_s", "window_s", "samples"],
                "properties": {
                    "interval_s": {"type": "number"},
                    "window_s": {"type": "number"},
                    "samples": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["at_ms", "topics"],
                            "properties": {
                                "at_ms": {"type": "integer"},
                                "topics": {
                                    "type": "object",
                                    "description": "per topic: lag (summed over the "
                                    "partitions this instance owns), in_per_s, out_per_s, "
                                    "dead_letters_per_s",
                                    "additionalProperties": {
                                        "type": "object",
                                        "additionalProperties": {"type": "number"},
                                    },
                                },
                            },
                        },
                    },
                },
            },
            "Audit": {
                "type": "object",
                "required": ["entries", "complete", "unreadable"],
                "properties": {
                    "entries": {
                        "type": "array",
                        "items": {"$ref": "#/components/schemas/AuditEntry"},
                    },
                    "complete": {
                        "type": "boolean",
                        "description": "the newest 20,000 records were all of them",
                    },
                    "unreadable": {
                        "type": "integer",
                        "description": "records that are not audit records, or not signed "
                        "with the record key when one is set",
                    },
                },
            },
            "AuditEntry": {
                "type": "object",
                "required": ["at_ms", "via", "who", "action", "result"],
                "properties": {
                    "format": {"type": "integer"},
                    "at_ms": {"type": "integer"},
                    "via": {"type": "string", "enum": ["api", "console", "cli"]},
                    "who": {
                        "type": "object",
                        "properties": {
                            "role": {"type": ["string", "null"]},
                            "credential": {
                                "type": ["string", "null"],
                                "description": "token:, session: or cli: and who: a token "
                                "or session by its SHA-256's first 12 hex digits",
                            },
                            "address": {"type": ["string", "null"]},
                        },
                    },
                    "action": {"type": "string", "description": "METHOD path, or the CLI's"},
                    "detail": {"description": "the request's body, or its size and digest"},
                    "result": {
                        "type": "object",
                        "properties": {
                            "status": {"type": "integer"},
                            "error": {"type": ["string", "null"]},
                        },
                    },
                },
            },
            "DeadLetters": {
                "type": "object",
                "required": ["dead_letters", "scanned", "complete"],
                "properties": {
                    "dead_letters": {
                        "type": "array",
                        "items": {"$ref": "#/components/schemas/DeadLetter"},
                    },
                    "scanned": {"type": "integer", "description": "records looked at"},
                    "complete": {
                        "type": "boolean",
                        "description": "every record kept was looked at, none left out for size",
                    },
                },
            },
            "DeadLetter": {
                "type": "object",
                "properties": {
                    "partition": {"type": "integer"},
                    "offset": {"type": "integer"},
                    "timestamp_ms": {"type": ["integer", "null"]},
                    "source": {
                        "type": "object",
                        "properties": {
                            "topic": {"type": ["string", "null"]},
                            "partition": {"type": ["integer", "null"]},
                            "offset": {"type": ["integer", "null"]},
                        },
                    },
                    "table": {"type": ["string", "null"]},
                    "kind": {"type": ["string", "null"]},
                    "error": {"type": ["string", "null"]},
                    "key_bytes": {"type": ["integer", "null"]},
                    "value_bytes": {"type": ["integer", "null"]},
                    "key_preview": {"type": ["string", "null"]},
                    "value_preview": {"type": ["string", "null"]},
                    "key_base64": {"type": ["string", "null"]},
                    "value_base64": {"type": ["string", "null"]},
                },
            },
            "Reset": {
                "type": "object",
                "required": ["to"],
                "additionalProperties": False,
                "properties": {
                    "to": {"enum": list(RESET_TARGETS)},
                    "timestamp": {"type": "integer", "description": "epoch ms, with to=timestamp"},
                    "topics": {"type": "array", "items": {"type": "string"}},
                    "reset_state": {"type": "boolean", "default": False},
                },
            },
            **_components(OFFSETS_SCHEMA, "Offsets"),
        },
    },
}

_GUARD = {
    "401": _ACCEPTED["401"],
    "429": {
        "description": "too many failed authentications from this client in a minute",
        "headers": {"Retry-After": {"schema": {"type": "integer"}}},
        "content": {"application/json": {"schema": _ERROR}},
    },
}
_WRITE_GUARD = {"403": _answer("a viewer's token may read only", _ERROR)}


def _guarded(paths: dict[str, Any]) -> dict[str, Any]:
    """Every operation with the answers of :mod:`processor.web.guard` (and 413 where it
    takes a body)."""
    for item in paths.values():
        for method, operation in item.items():
            if method not in ("get", "put", "post", "patch", "delete"):
                continue
            answers = {**operation["responses"], **_GUARD}
            if method != "get":
                answers.update(_WRITE_GUARD)
            if "requestBody" in operation:
                answers["413"] = _ACCEPTED["413"]
            operation["responses"] = dict(sorted(answers.items()))
    return paths


OPENAPI["paths"]["/openapi.json"] = {
    "get": {
        "summary": "this document",
        "responses": {"200": _answer("the OpenAPI document", {"type": "object"})},
    }
}
_guarded(OPENAPI["paths"])

#: Validators of the request bodies the API checks against its own document.
BODIES = {
    name: Draft202012Validator(
        {**OPENAPI["components"]["schemas"][name], "components": OPENAPI["components"]}
    )
    for name in ("ExecuteSnapshot", "SnapshotAction", "Reset")
}
