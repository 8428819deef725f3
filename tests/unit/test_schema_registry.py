"""Schema registries: the in-memory one, and the HTTP client against the dev stack's server."""

from __future__ import annotations

import json
import re
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from processor.outages import is_outage
from tests.certificates import Authority
from tidemark.core.errors import RegistryError, RegistryRefusedError, UnknownSchemaError
from tidemark.core.ports import free_port
from tidemark.core.schema_registry import HttpRegistry, MemoryRegistry, SchemaCache
from tidemark.devstack.registry import make_server

RECORD = {"type": "record", "name": "Row", "fields": [{"name": "id", "type": "int"}]}
OTHER = {"type": "record", "name": "Row", "fields": [{"name": "id", "type": "long"}]}


def test_ids_are_global_per_schema_and_versions_per_subject(tmp_path: Path) -> None:
    path = tmp_path / "registry.json"
    registry = MemoryRegistry(path)
    first = registry.register("a-value", json.dumps(RECORD))
    assert registry.register("b-value", json.dumps(RECORD, indent=2)) == first  # same schema
    second = registry.register("a-value", json.dumps(OTHER))
    assert second != first
    assert registry.register("a-value", json.dumps(RECORD)) == first  # idempotent
    assert registry.versions("a-value") == [first, second]
    again = MemoryRegistry(path)  # kept in its file
    assert json.loads(again.schema(second)) == OTHER
    assert again.subjects() == ["a-value", "b-value"]
    with pytest.raises(UnknownSchemaError):
        again.schema(99)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    httpd = make_server(0, tmp_path / "registry.json")
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def test_http_client_registers_and_fetches_over_the_confluent_api(server: str) -> None:
    client = HttpRegistry(server + "/", user="someone", password="secret", unknown_after_s=0)
    schema_id = client.register("t-value", json.dumps(RECORD))
    assert json.loads(client.schema(schema_id)) == RECORD
    assert client.register("t-value", json.dumps(RECORD)) == schema_id
    with pytest.raises(UnknownSchemaError):
        client.schema(schema_id + 10)
    cache = SchemaCache(client)
    document, parsed = cache.get(schema_id)
    assert document == RECORD and cache.get(schema_id)[1] is parsed  # parsed once


def test_an_unreachable_registry_is_an_infrastructure_error_without_the_password() -> None:
    client = HttpRegistry(f"http://127.0.0.1:{free_port()}", user="u", password="hunter2")
    with pytest.raises(RegistryError) as info:
        client.schema(1)
    assert "unreachable" in str(info.value) and "hunter2" not in str(info.value)


def test_a_schema_the_registry_rejects_is_an_error(server: str) -> None:
    with pytest.raises(RegistryError, match="422"):
        HttpRegistry(server).register("t-value", "{not json")


def test_an_https_registry_signed_by_a_private_ca_is_trusted_only_with_that_ca(
    tmp_path: Path,
) -> None:
    authority = Authority(tmp_path, "registry")
    issued = authority.issue("registry", ips=("127.0.0.1",))
    httpd = make_server(0, tmp_path / "registry.json")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(issued.cert, issued.key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    url = f"https://127.0.0.1:{httpd.server_address[1]}"
    try:
        trusted = HttpRegistry(url, cafile=str(authority.cert))
        schema_id = trusted.register("t-value", json.dumps(RECORD))
        assert json.loads(trusted.schema(schema_id)) == RECORD
        with pytest.raises(RegistryError, match="CERTIFICATE_VERIFY_FAILED"):
            HttpRegistry(url).schema(schema_id)  # the system's authorities do not know it
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


class Scripted(BaseHTTPRequestHandler):
    """Answers each request with the next of ``answers``: (status, body, headers)."""

    answers: list[tuple[int, dict[str, object], dict[str, str]]] = []
    asked: list[str] = []

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    def _answer(self) -> None:
        self.asked.append(f"{self.command} {self.path}")
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        status, body, headers = self.answers.pop(0)
        data = json.dumps(body).encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer  # noqa: N815


@pytest.fixture
def scripted() -> Iterator[tuple[str, type[Scripted]]]:
    handler = type("Handler", (Scripted,), {"answers": [], "asked": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


NOT_FOUND = (404, {"error_code": 40403, "message": "Schema not found"}, {})
FOUND = (200, {"schema": json.dumps(RECORD)}, {})


def test_a_schema_not_found_yet_is_asked_again_for_a_bounded_time(
    scripted: tuple[str, type[Scripted]],
) -> None:
    """A follower that has not seen a new schema yet answers 404: that is an outage (the
    batch is tried again) until the registry has answered 404 for ``unknown_after_s``
    with no id found since; only then is it the message's fault, and an id that comes
    meanwhile is served."""
    url, handler = scripted
    now = [100.0]
    client = HttpRegistry(url, unknown_after_s=60, clock=lambda: now[0])
    handler.answers += [NOT_FOUND, NOT_FOUND, FOUND]
    with pytest.raises(RegistryError, match="not found yet") as raised:
        client.schema(7)
    assert not isinstance(raised.value, UnknownSchemaError)
    now[0] = 130.0
    with pytest.raises(RegistryError, match="not found yet"):
        client.schema(7)
    assert json.loads(client.schema(7)) == RECORD  # the follower caught up
    handler.answers += [NOT_FOUND, NOT_FOUND]
    with pytest.raises(RegistryError, match="not found yet"):
        client.schema(8)
    now[0] = 190.0  # 60 s after 404s began again, with no id found since
    with pytest.raises(UnknownSchemaError, match="not registered"):
        client.schema(8)
    # one window for a run of 404s: many unknown ids (hostile ones) do not wait each
    handler.answers += [NOT_FOUND]
    with pytest.raises(UnknownSchemaError, match="not registered"):
        client.schema(9)


@pytest.mark.parametrize(
    ("answers", "error", "message"),
    [
        # not a registry's 404 (a wrong URL): never the message's fault
        ([(404, {"message": "no route"}, {})], RegistryError, "not a schema registry's answer"),
        ([(401, {"message": "unauthorized"}, {})], RegistryRefusedError, "refused (HTTP 401)"),
        ([(403, {"message": "forbidden"}, {})], RegistryRefusedError, "refused (HTTP 403)"),
        ([(500, {}, {})] * 3, RegistryError, "HTTP 500"),
        ([(429, {}, {"Retry-After": "0"})] * 3, RegistryError, "HTTP 429"),
    ],
)
def test_each_answer_of_the_registry_is_an_outage_a_refusal_or_the_messages_fault(
    scripted: tuple[str, type[Scripted]],
    answers: list[tuple[int, dict[str, object], dict[str, str]]],
    error: type[Exception],
    message: str,
) -> None:
    url, handler = scripted
    handler.answers += answers
    with pytest.raises(error, match=re.escape(message)) as raised:
        HttpRegistry(url, retry_pause_s=0).schema(1)
    assert not isinstance(raised.value, UnknownSchemaError)
    if error is RegistryError:
        assert is_outage(raised.value)  # ridden out, up to kafka.outage_deadline_s
    else:
        assert not is_outage(raised.value)


def test_a_busy_or_failing_registry_is_asked_again_a_few_times_first(
    scripted: tuple[str, type[Scripted]],
) -> None:
    url, handler = scripted
    handler.answers += [(429, {}, {"Retry-After": "0"}), (503, {}, {}), FOUND]
    assert json.loads(HttpRegistry(url, retry_pause_s=0).schema(1)) == RECORD
    assert len(handler.asked) == 3


def test_a_registration_the_registry_refuses_is_a_refusal_of_that_source(
    scripted: tuple[str, type[Scripted]],
) -> None:
    url, handler = scripted
    handler.answers += [(409, {"error_code": 409, "message": "incompatible"}, {})]
    with pytest.raises(RegistryRefusedError, match="incompatible"):
        HttpRegistry(url).register("t-value", json.dumps(RECORD))
