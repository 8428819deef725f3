"""Schema registries: the in-memory one, and the HTTP client against the dev stack's server."""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.certificates import Authority
from tidemark.core.errors import RegistryError, UnknownSchemaError
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
    client = HttpRegistry(server + "/", user="someone", password="secret")
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
