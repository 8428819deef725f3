"""The development stack's schema registry: the Confluent REST API over a MemoryRegistry.

No schema-registry server can be installed on these machines, so the stack
serves the part of Confluent's API that its clients use: Debezium's
``AvroConverter`` (Confluent's Java client, over HTTP) registers the change
topics' schemas, and the processor (confluent-kafka's Python client) reads them
and registers its output schemas. It is a stand-in for development and tests:
every schema is accepted (no compatibility checks), nothing is authenticated,
and it listens on loopback only. Registrations are kept in
``<run_dir>/registry.json``.

    python -m tidemark.devstack.registry --port P --store FILE
"""

from __future__ import annotations

import argparse
import json
import re
import urllib.parse
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tidemark.core.errors import UnknownSchemaError
from tidemark.core.ports import claim_port, port_is_open
from tidemark.core.schema_registry import MemoryRegistry, canonical
from tidemark.devstack.procs import pid_alive, start_detached, wait_for

MARKER = "tidemark.devstack.registry"
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"

_SCHEMA_BY_ID = re.compile(r"^/schemas/ids/(\d+)$")
_SUBJECT = re.compile(r"^/subjects/([^/]+)$")
_VERSIONS = re.compile(r"^/subjects/([^/]+)/versions$")
_VERSION = re.compile(r"^/subjects/([^/]+)/versions/(latest|\d+)$")


class _Handler(BaseHTTPRequestHandler):
    registry: MemoryRegistry

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        """Quiet: the registry's clients log what matters."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = urllib.parse.urlsplit(self.path).path
        if path == "/subjects":
            return self._reply(self.registry.subjects())
        if path in ("/config", "/mode"):
            return self._reply({"compatibilityLevel": "NONE", "mode": "READWRITE"})
        if match := _SCHEMA_BY_ID.match(path):
            try:
                return self._reply({"schema": self.registry.schema(int(match.group(1)))})
            except UnknownSchemaError as exc:
                return self._error(HTTPStatus.NOT_FOUND, 40403, str(exc))
        if match := _VERSIONS.match(path):
            versions = self.registry.versions(_subject(match))
            if not versions:
                return self._error(HTTPStatus.NOT_FOUND, 40401, "subject not found")
            return self._reply(list(range(1, len(versions) + 1)))
        if match := _VERSION.match(path):
            subject, versions = _subject(match), self.registry.versions(_subject(match))
            wanted = len(versions) if match.group(2) == "latest" else int(match.group(2))
            if not 1 <= wanted <= len(versions):
                return self._error(HTTPStatus.NOT_FOUND, 40402, "version not found")
            return self._reply(self._registered(subject, wanted, versions[wanted - 1]))
        return self._error(HTTPStatus.NOT_FOUND, 404, f"no such resource: {path}")

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        path = urllib.parse.urlsplit(self.path).path
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            schema = body["schema"]
            if body.get("schemaType", "AVRO") != "AVRO":
                raise ValueError("only Avro schemas are served here")
            json.loads(schema)
        except (ValueError, KeyError, TypeError) as exc:
            return self._error(HTTPStatus.UNPROCESSABLE_ENTITY, 42201, f"invalid schema: {exc}")
        if match := _VERSIONS.match(path):
            return self._reply({"id": self.registry.register(_subject(match), schema)})
        if match := _SUBJECT.match(path):  # lookup: is this schema registered under the subject?
            subject = _subject(match)
            versions = self.registry.versions(subject)
            for version, schema_id in enumerate(versions, 1):
                if self.registry.schema(schema_id) == canonical(schema):
                    return self._reply(self._registered(subject, version, schema_id))
            return self._error(HTTPStatus.NOT_FOUND, 40403, "schema not found")
        return self._error(HTTPStatus.NOT_FOUND, 404, f"no such resource: {path}")

    def _registered(self, subject: str, version: int, schema_id: int) -> dict[str, Any]:
        schema = self.registry.schema(schema_id)
        return {"subject": subject, "version": version, "id": schema_id, "schema": schema}

    def _reply(self, document: Any, status: HTTPStatus = HTTPStatus.OK) -> None:
        body = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: HTTPStatus, code: int, message: str) -> None:
        self._reply({"error_code": code, "message": message}, status)


def _subject(match: re.Match[str]) -> str:
    return urllib.parse.unquote(match.group(1))


def make_server(port: int, store: Path | None) -> ThreadingHTTPServer:
    """The registry's HTTP server on loopback (``port`` 0: any free port)."""
    handler = type("Handler", (_Handler,), {"registry": MemoryRegistry(store)})
    return ThreadingHTTPServer(("127.0.0.1", port), handler)


def serve(port: int, store: Path) -> None:
    """Serve the registry until the process is stopped."""
    with make_server(port, store) as server:
        server.serve_forever()


def start_registry(run_dir: Path, python: str) -> tuple[int, int]:
    """Start the registry as a process of the stack; return ``(pid, port)`` once it answers."""
    port = claim_port(0, "schema registry")
    log = run_dir / "registry.log"
    pid = start_detached(
        [python, "-m", MARKER, "--port", str(port), "--store", str(run_dir / "registry.json")],
        log,
    )
    wait_for(lambda: port_is_open(port), 30, "schema registry", log, alive=lambda: pid_alive(pid))
    return pid, port


def main() -> None:
    """``python -m tidemark.devstack.registry``."""
    parser = argparse.ArgumentParser(description="Tidemark's development schema registry")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--store", type=Path, required=True)
    args = parser.parse_args()
    serve(args.port, args.store)


if __name__ == "__main__":
    main()
