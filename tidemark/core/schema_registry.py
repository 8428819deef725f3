"""Schema registries: Avro schemas found by id and registered by subject.

Avro topics carry the Confluent wire format (magic byte 0, a 4-byte schema id,
the body). The processor resolves ids through a :class:`SchemaRegistry`:

- :class:`HttpRegistry`, any Confluent-compatible registry over HTTP, in
  production;
- :class:`MemoryRegistry`, schemas in a dict (optionally kept in a file), which
  the development stack serves over the same HTTP API.

The registry's answers are read as what they mean, so that no valid message is
dead-lettered for the registry's sake:

- a schema id it does not know (404, ``error_code`` 40403) is the input's fault
  (:class:`UnknownSchemaError`: the message goes to the dead-letter topic), but only
  once the registry has answered 404 for ``unknown_after_s`` with no id found since: a
  follower that has not seen a new schema yet answers 404 too, so until then it is an
  outage. The window is one for a run of 404s, so that messages with many unknown ids
  (hostile ones) hold the data plane back for ``unknown_after_s`` in all, not each;
- 429, a 5xx or no answer is asked again a few times, then is an outage
  (:class:`RegistryError`: the data plane drops the batch and tries again, up to
  ``kafka.outage_deadline_s``), and so is a 404 that is not a registry's (a wrong URL);
- 401 and 403, or a registration refused (an incompatible output schema), is a
  refusal (:class:`RegistryRefusedError`): the source it was for stops with the
  reason, and the others go on.
:class:`SchemaCache` parses each schema once and remembers registrations, so
the registry is asked once per id and once per subject and schema.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro

from tidemark.core.config import KafkaConfig
from tidemark.core.errors import RegistryError, RegistryRefusedError, UnknownSchemaError

#: Confluent's error code for a schema id it does not have.
SCHEMA_NOT_FOUND = 40403
#: How many times a busy (429) or failing (5xx) registry, or one that does not answer,
#: is asked in one call before it is an outage.
ATTEMPTS = 3
#: The longest pause between them (seconds), whatever ``Retry-After`` says.
MOST_PAUSE_S = 5.0


class SchemaRegistry(ABC):
    """Avro schemas (JSON text) by global id; registration by subject."""

    @abstractmethod
    def schema(self, schema_id: int) -> str:
        """The schema text of ``schema_id``; :class:`UnknownSchemaError` when there is none."""

    @abstractmethod
    def register(self, subject: str, schema: str) -> int:
        """Register ``schema`` under ``subject`` (idempotent) and return its id."""


def canonical(schema: str) -> str:
    """One text per schema, whatever its spacing or key order (what identifies it)."""
    return json.dumps(json.loads(schema), sort_keys=True, separators=(",", ":"))


class MemoryRegistry(SchemaRegistry):
    """Ids are global and one per distinct schema, versions per subject, as Confluent's.

    With ``path``, every registration is written to that JSON file (atomically)
    and read back on start, so ids survive a restart. Compatibility is not
    checked: every schema is accepted.
    """

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._schemas: list[str] = []  # id - 1 -> canonical text
        self._subjects: dict[str, list[int]] = {}  # subject -> ids by version
        if path is not None and path.exists():
            saved = json.loads(path.read_text())
            self._schemas = saved["schemas"]
            self._subjects = saved["subjects"]

    def schema(self, schema_id: int) -> str:
        with self._lock:
            if not 1 <= schema_id <= len(self._schemas):
                raise UnknownSchemaError(f"schema id {schema_id} is not registered")
            return self._schemas[schema_id - 1]

    def register(self, subject: str, schema: str) -> int:
        text = canonical(schema)
        with self._lock:
            try:
                schema_id = self._schemas.index(text) + 1
            except ValueError:
                self._schemas.append(text)
                schema_id = len(self._schemas)
            versions = self._subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
                self._save()
            return schema_id

    def subjects(self) -> list[str]:
        """Every subject with a version."""
        with self._lock:
            return sorted(self._subjects)

    def versions(self, subject: str) -> list[int]:
        """The ids of ``subject``'s versions, oldest first (version n is index n - 1)."""
        with self._lock:
            return list(self._subjects.get(subject, []))

    def _save(self) -> None:
        if self._path is None:
            return
        temporary = self._path.with_suffix(".tmp")
        temporary.write_text(json.dumps({"schemas": self._schemas, "subjects": self._subjects}))
        os.replace(temporary, self._path)


class HttpRegistry(SchemaRegistry):
    """A Confluent-compatible registry over HTTP(S), with optional basic authentication.

    Two calls of Confluent's REST API are all the processor needs:
    ``GET /schemas/ids/{id}`` and ``POST /subjects/{subject}/versions``. The
    password never appears in an error or a log line.
    """

    def __init__(
        self,
        url: str,
        user: str = "",
        password: str = "",
        timeout: float = 10,
        cafile: str = "",
        unknown_after_s: float = 60.0,
        retry_pause_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._url = url.rstrip("/")
        self._timeout = timeout
        self._unknown_after_s = unknown_after_s
        self._retry_pause_s = retry_pause_s
        self._clock = clock
        #: Since when the registry has answered 404 for ids, with no id found since: one
        #: grace window for a run of them, however many ids (hostile ones included).
        self._missing_since: float | None = None
        #: HTTPS: the system's trusted authorities, or ``cafile``'s (a private CA).
        self._tls = ssl.create_default_context(cafile=cafile or None)
        self._headers = {
            "Accept": "application/vnd.schemaregistry.v1+json, application/json",
            "Content-Type": "application/vnd.schemaregistry.v1+json",
        }
        if user:
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            self._headers["Authorization"] = f"Basic {token}"

    def schema(self, schema_id: int) -> str:
        schema_id = int(schema_id)
        status, document = self._call("GET", f"/schemas/ids/{schema_id}")
        if status == 404:
            if document.get("error_code") != SCHEMA_NOT_FOUND:
                raise RegistryError(
                    f"schema registry {self._url}: HTTP 404 for schema id {schema_id} is not "
                    "a schema registry's answer (check kafka.schema_registry_url)"
                )
            now = self._clock()
            if self._missing_since is None:
                self._missing_since = now
            if now - self._missing_since < self._unknown_after_s:
                raise RegistryError(
                    f"schema registry {self._url}: schema id {schema_id} not found yet (a "
                    f"follower may lag); asked again for up to {self._unknown_after_s:g} s"
                )
            raise UnknownSchemaError(f"schema id {schema_id} is not registered")
        self._missing_since = None
        text = document.get("schema")
        if not isinstance(text, str):
            raise RegistryError(f"schema registry {self._url}: no schema text for id {schema_id}")
        return text

    def register(self, subject: str, schema: str) -> int:
        path = f"/subjects/{urllib.parse.quote(subject, safe='')}/versions"
        status, document = self._call("POST", path, {"schema": schema, "schemaType": "AVRO"})
        schema_id = document.get("id")
        if status != 200 or not isinstance(schema_id, int):
            failed = RegistryRefusedError if 400 <= status < 500 else RegistryError
            raise failed(
                f"schema registry {self._url}: registering under {subject} failed "
                f"({status}: {document.get('message', document)})"
            )
        return schema_id

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        """The status and JSON document of a call; 429, 5xx and no answer are asked again
        (:data:`ATTEMPTS`), then :class:`RegistryError`; 401 and 403 are
        :class:`RegistryRefusedError`."""
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return self._once(method, path, body)
            except _Busy as busy:
                if attempt == ATTEMPTS:
                    raise RegistryError(f"schema registry {self._url}{path}: {busy}") from None
                pause = self._retry_pause_s * 2 ** (attempt - 1)
                time.sleep(min(MOST_PAUSE_S, max(pause, busy.retry_after_s)))
        raise AssertionError("unreachable")  # pragma: no cover

    def _once(self, method: str, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 - the URL is the configured registry
            self._url + path, data=data, method=method, headers=self._headers
        )
        try:
            with urllib.request.urlopen(  # noqa: S310
                request, timeout=self._timeout, context=self._tls
            ) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                raise RegistryRefusedError(
                    f"schema registry {self._url} refused (HTTP {exc.code}) {method} {path}: "
                    "check kafka.schema_registry_user, its password and its permissions"
                ) from None
            if exc.code == 429 or exc.code >= 500:
                raise _Busy(f"HTTP {exc.code}", _seconds(exc.headers.get("Retry-After"))) from None
            try:
                document = json.loads(exc.read() or b"{}")
            except ValueError:
                document = {}
            return exc.code, document if isinstance(document, dict) else {}
        except (OSError, ValueError) as exc:
            raise _Busy(f"unreachable: {exc}", 0.0) from None


class _Busy(Exception):
    """An answer worth asking again: 429, a 5xx, or none."""

    def __init__(self, what: str, retry_after_s: float) -> None:
        super().__init__(what)
        self.retry_after_s = retry_after_s


def _seconds(header: str | None) -> float:
    """``Retry-After`` in seconds (an HTTP date, or nothing: 0)."""
    try:
        return max(0.0, float(header or 0))
    except ValueError:
        return 0.0


class SchemaCache:
    """Parsed schemas by id and registered ids by (subject, schema), each fetched once."""

    def __init__(self, registry: SchemaRegistry) -> None:
        self.registry = registry
        self._parsed: dict[int, tuple[dict[str, Any], Any]] = {}
        self._registered: dict[tuple[str, str], int] = {}

    def get(self, schema_id: int) -> tuple[dict[str, Any], Any]:
        """``(schema as JSON, fastavro's parsed schema)`` of ``schema_id``."""
        found = self._parsed.get(schema_id)
        if found is None:
            text = self.registry.schema(schema_id)
            try:
                document = json.loads(text)
                parsed = fastavro.parse_schema(document, {})
            except (ValueError, fastavro.schema.SchemaParseException) as exc:
                raise UnknownSchemaError(
                    f"schema id {schema_id} is not a valid Avro schema: {exc}"
                ) from None
            found = self._parsed[schema_id] = (document, parsed)
        return found

    def register(self, subject: str, schema: dict[str, Any]) -> int:
        """The id of ``schema`` under ``subject``, registered on first use."""
        text = json.dumps(schema, separators=(",", ":"))
        key = (subject, text)
        schema_id = self._registered.get(key)
        if schema_id is None:
            schema_id = self._registered[key] = self.registry.register(subject, text)
        return schema_id


def configured_schemas(kafka: KafkaConfig) -> SchemaCache | None:
    """The schema cache over ``kafka``'s registry; ``None`` when none is configured."""
    if not kafka.schema_registry_url:
        return None
    return SchemaCache(
        HttpRegistry(
            kafka.schema_registry_url,
            kafka.schema_registry_user,
            kafka.schema_registry_password,
            cafile=kafka.schema_registry_ca,
            unknown_after_s=kafka.schema_registry_unknown_after_s,
        )
    )
