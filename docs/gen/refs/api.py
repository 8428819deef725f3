"""``reference/api.md``: the management API, rendered from its OpenAPI document.

The document is ``processor.openapi.OPENAPI``, the one ``processor/api.py`` serves at
``/api/v1/openapi.json`` and checks request bodies against; the page lists each
operation (method and path, summary, who may call it, parameters, request body,
responses) and then the document's schemas. ``reference/openapi.json`` is the
document itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from refs.markdown import MissingDescriptionError, capitalized, code, page, rst, table

SOURCE = "processor/openapi.py"
METHODS = ("get", "put", "post", "patch", "delete", "head", "options", "trace")
#: The file the page links to, beside it in the site.
DOCUMENT_FILE = "openapi.json"


@dataclass(frozen=True)
class Operation:
    """One operation of the document."""

    method: str  #: upper case
    path: str  #: with the server's prefix
    summary: str
    description: str
    parameters: tuple[dict[str, Any], ...]
    body: dict[str, Any] | None
    responses: tuple[tuple[str, dict[str, Any]], ...]
    security: tuple[str, ...]  #: the schemes that admit it; empty: open

    @property
    def title(self) -> str:
        return f"{self.method} {self.path}"


def prefix_of(document: Mapping[str, Any]) -> str:
    """The path prefix of the document's first server (``/api/v1``)."""
    servers = document.get("servers") or [{}]
    url = str(servers[0].get("url", ""))
    return re.sub(r"^[a-z]+://[^/]+", "", url).rstrip("/")


def operations(document: Mapping[str, Any]) -> list[Operation]:
    """Every operation of ``document``, in its order; :class:`MissingDescriptionError` for
    one with neither summary nor description, or a response with no description."""
    prefix = prefix_of(document)
    default_security = document.get("security", [])
    found = []
    for path, item in document.get("paths", {}).items():
        shared = item.get("parameters", [])
        for method in (m for m in item if m in METHODS):
            operation = item[method]
            title = f"{method.upper()} {prefix}{path}"
            summary = str(operation.get("summary") or "").strip()
            description = str(operation.get("description") or "").strip()
            if not summary and not description:
                raise MissingDescriptionError(f"operation {title} has no summary or description")
            own = operation.get("parameters", [])
            keys = {(p.get("name"), p.get("in")) for p in own}
            parameters = [p for p in shared if (p.get("name"), p.get("in")) not in keys] + own
            responses = tuple((str(k), v) for k, v in operation.get("responses", {}).items())
            for status, response in responses:
                if not str(response.get("description") or "").strip():
                    raise MissingDescriptionError(
                        f"operation {title}: response {status} has no description"
                    )
            security = operation.get("security", default_security)
            found.append(
                Operation(
                    method=method.upper(),
                    path=f"{prefix}{path}",
                    summary=summary,
                    description=description,
                    parameters=tuple(parameters),
                    body=operation.get("requestBody"),
                    responses=responses,
                    security=tuple(name for requirement in security for name in requirement),
                )
            )
    return found


def schema_anchor(name: str) -> str:
    """The heading id of a component schema on the page."""
    return "schema-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def operation_anchor(operation: Operation) -> str:
    """The heading id of an operation: ``get-api-v1-pipelines-name-status``."""
    return re.sub(r"[^a-z0-9]+", "-", operation.title.lower()).strip("-")


def _plural(count: object, word: str) -> str:
    if count == 1:
        return f"{count} {word}"
    return f"{count} {word[:-1]}ies" if word.endswith("y") else f"{count} {word}s"


def _constraints(schema: Mapping[str, Any]) -> list[str]:
    notes = []
    if "minimum" in schema:
        notes.append(f"at least {schema['minimum']}")
    if "maximum" in schema:
        notes.append(f"at most {schema['maximum']}")
    for key, word in (("Length", "character"), ("Items", "item"), ("Properties", "property")):
        if f"min{key}" in schema:
            notes.append("at least " + _plural(schema[f"min{key}"], word))
        if f"max{key}" in schema:
            notes.append("at most " + _plural(schema[f"max{key}"], word))
    if "pattern" in schema:
        notes.append(f"matching {code(schema['pattern'])}")
    if "default" in schema:
        notes.append(f"default {code(json.dumps(schema['default']))}")
    return notes


def describe(schema: Mapping[str, Any] | None) -> str:
    """A schema in a few words: a link for a ``$ref``, ``array of X``, ``"a" | "b"``, ..."""
    if not schema:
        return "any"
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return f"[{name}](#{schema_anchor(name)})"
    if "const" in schema:
        return code(json.dumps(schema["const"]))
    if "enum" in schema:
        text = " | ".join(code(json.dumps(v)) for v in schema["enum"])
    elif "oneOf" in schema or "anyOf" in schema:
        text = " or ".join(describe(s) for s in schema.get("oneOf", schema.get("anyOf", [])))
    elif "allOf" in schema:
        text = " and ".join(describe(s) for s in schema["allOf"])
    else:
        kinds = schema.get("type", "any")
        kinds = kinds if isinstance(kinds, list) else [kinds]
        words = []
        for kind in kinds:
            if kind == "array" and "items" in schema:
                words.append(f"array of {describe(schema['items'])}")
            elif kind == "object" and isinstance(schema.get("additionalProperties"), dict):
                words.append(f"map of {describe(schema['additionalProperties'])}")
            elif kind == "object" and schema.get("properties"):
                names = ", ".join(code(n) for n in schema["properties"])
                words.append(f"object ({names})")
            else:
                words.append(str(kind))
        text = " or ".join(words)
    notes = _constraints(schema)
    return text + (f" ({', '.join(notes)})" if notes else "")


def _resolve(document: Mapping[str, Any], schema: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return schema
    found: Any = document
    for part in ref[2:].split("/"):
        found = found[part]
    return _resolve(document, found)


def properties_table(schema: Mapping[str, Any]) -> str:
    """A table of an object schema's properties (empty when it lists none)."""
    properties = schema.get("properties") or {}
    if not properties:
        return ""
    required = set(schema.get("required", []))
    rows = []
    for name, body in properties.items():
        notes = [rst(str(body["description"]))] if body.get("description") else []
        if body.get("readOnly"):
            notes.append("read-only")
        rows.append(
            (code(name), describe(body), "yes" if name in required else "no", "; ".join(notes))
        )
    return table(["Property", "Type", "Required", "Description"], rows)


def _who(operation: Operation, tokens: tuple[str, str]) -> str:
    operator, viewer = tokens
    if not operation.security:
        return "Anyone: it needs no token."
    refused = dict(operation.responses).get("403")
    if refused is not None:
        return (
            f"The operator's token ({code(operator)}) only: a viewer's token "
            f"({code(viewer)}) is answered 403 ({rst(str(refused['description']))})."
        )
    return f"Any token: the operator's ({code(operator)}) or a viewer's ({code(viewer)})."


def _operation_block(
    document: Mapping[str, Any], operation: Operation, tokens: tuple[str, str]
) -> str:
    parts = [f"### {code(operation.title)} {{#{operation_anchor(operation)}}}"]
    parts += [
        rst(capitalized(t)) + ("" if t.endswith(".") else ".")
        for t in (operation.summary, operation.description)
        if t
    ]
    parts.append(f"**Who may call it:** {_who(operation, tokens)}")
    if operation.parameters:
        rows = []
        for parameter in operation.parameters:
            parameter = dict(_resolve(document, parameter))
            rows.append(
                (
                    code(parameter.get("name", "")),
                    str(parameter.get("in", "")),
                    describe(parameter.get("schema")),
                    "yes" if parameter.get("required") else "no",
                    rst(str(parameter.get("description", ""))),
                )
            )
        parts += [
            "Parameters:",
            table(["Name", "In", "Type", "Required", "Description"], rows),
        ]
    if operation.body:
        body = _resolve(document, operation.body)
        content = body.get("content", {})
        for media, spec in content.items():
            schema = spec.get("schema", {})
            needed = "required" if body.get("required") else "optional"
            parts.append(f"Request body ({code(media)}, {needed}): {describe(schema)}.")
            listed = properties_table(_resolve(document, schema))
            if listed:
                parts.append(listed)
    answers = []
    for status, given in operation.responses:
        response = _resolve(document, given)
        bodies = [
            f"{describe(spec.get('schema'))} ({code(media)})"
            for media, spec in response.get("content", {}).items()
        ]
        headers = ", ".join(code(h) for h in response.get("headers", {}))
        if headers:
            bodies.append(f"header {headers}")
        answers.append(
            (code(status), rst(str(response["description"])), "; ".join(bodies) or "none")
        )
    parts += ["Responses:", table(["Status", "Description", "Body"], answers)]
    return "\n\n".join(parts)


def _schema_block(name: str, schema: Mapping[str, Any]) -> str:
    parts = [f"### {name} {{#{schema_anchor(name)}}}"]
    for key in ("title", "description"):
        if schema.get(key):
            parts.append(rst(capitalized(str(schema[key]))) + ".")
    listed = properties_table(schema)
    if listed:
        closed = schema.get("additionalProperties") is False
        parts.append(f"An object{' with no other property' if closed else ''}:")
        parts.append(listed)
    else:
        parts.append(f"Type: {describe(schema)}.")
    return "\n\n".join(parts)


def api_page(
    document: Mapping[str, Any],
    *,
    tokens: tuple[str, str] = ("TIDEMARK_API_TOKEN", "TIDEMARK_VIEWER_TOKEN"),
    document_file: str = DOCUMENT_FILE,
) -> str:
    """The page for ``document``. ``tokens``: the variables of the operator's and the
    viewer's token."""
    found = operations(document)
    info = document.get("info", {})
    opening = (
        f"Every operation of the processor's management API ({info.get('title', 'the API')}, "
        f"version {info.get('version', '?')}), with who may call it, its parameters, request "
        "body and responses, then the schemas they use. This page is generated from the "
        f"code: the OpenAPI {document.get('openapi', '')} document of {code(SOURCE)} (see "
        "`docs/gen/refs/api.py`), the one a running processor serves at "
        f"{code(prefix_of(document) + '/openapi.json')}; "
        f"[{document_file}]({document_file}) is a copy of it."
    )
    schemes = document.get("components", {}).get("securitySchemes", {})
    described = ", ".join(
        f"{code(name)} ({scheme.get('type', '')} {scheme.get('scheme', '')})".replace(" )", ")")
        for name, scheme in schemes.items()
    )
    operator, viewer = tokens
    access = (
        f"Every path below starts with {code(prefix_of(document))} on the processor's web "
        "port ([`processor.web_host`](configuration.md#processor.web_host), "
        "[`processor.web_port`](configuration.md#processor.web_port)). "
        f"Security scheme: {described or 'none'}: a request sends "
        "`Authorization: Bearer <token>`, with the operator's token "
        f"({code(operator)}) or a viewer's ({code(viewer)}). Who may call an operation is read "
        "from the document: one that may answer 403 refuses a viewer's token."
    )
    index = table(
        ["Operation", "Summary"],
        [
            (
                f"[{code(o.title)}](#{operation_anchor(o)})",
                capitalized(rst(o.summary or o.description)),
            )
            for o in found
        ],
    )
    blocks = [access, "## Operations", index]
    blocks += [_operation_block(document, o, tokens) for o in found]
    schemas = document.get("components", {}).get("schemas", {})
    if schemas:
        blocks.append("## Schemas")
        blocks += [_schema_block(name, body) for name, body in schemas.items()]
    return page("Management API", opening, *blocks)


def document_text(document: Mapping[str, Any]) -> str:
    """The document as the file ``reference/openapi.json``."""
    return json.dumps(document, indent=2) + "\n"


def load() -> dict[str, Any]:
    """The API's document, as the processor serves it."""
    from processor.openapi import OPENAPI

    return OPENAPI


def generate() -> str:
    """The page for the processor's API."""
    from tidemark.core.config import TOKEN_ENV, VIEWER_TOKEN_ENV

    return api_page(load(), tokens=(TOKEN_ENV, VIEWER_TOKEN_ENV))
