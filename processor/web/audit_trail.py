"""The web port's part of the audit trail (:mod:`processor.pipeline.audit`): every request
that is not a read, to the API or to the console's session (a login, a logout), recorded
with who made it, once it is answered.

It stands inside the guard (:mod:`processor.web.guard`), so a request the guard refused
(401, 403) is not an action and is not recorded; a failed login is, and so is an action
the API refused (400, 409), but not a login refused for the client's earlier failures
(429). A login's body holds the token: it is never recorded. Records go to the writer's
queue (:meth:`processor.pipeline.audit.AuditWriter.submit`): the answer never waits.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from processor.pipeline.audit import AuditWriter, detail_of, entry
from processor.web.sessions import SESSION_PATH
from processor.web.who import CREDENTIAL, ROLE, SESSION, recorded

#: Methods that change nothing: not recorded.
READS = frozenset({"GET", "HEAD", "OPTIONS"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Middleware = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]


def audited(writer: AuditWriter, served: str) -> Middleware:
    """The middleware that records the actions under ``served`` (the API's prefix) and
    the console's logins and logouts."""

    @web.middleware
    async def audit(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method in READS or not (
            request.path.startswith(served) or request.path == SESSION_PATH
        ):
            return await handler(request)
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            await _record(writer, request, exc.status, exc.text)
            raise
        if response.status != 429:  # refused for the client's earlier failures: not an action
            await _record(writer, request, response.status, _error_of(response))
        return response

    return audit


async def _record(
    writer: AuditWriter, request: web.Request, status: int, error: str | None
) -> None:
    credential = recorded(request, CREDENTIAL)
    login = request.path == SESSION_PATH
    detail: Any
    if login:
        detail = {"session": recorded(request, SESSION)} if recorded(request, SESSION) else None
    else:
        try:
            detail = detail_of(await request.read())  # aiohttp keeps what the handler read
        except Exception:  # noqa: BLE001 - a body too large, a client gone: say so
            detail = {"unread": True}
    via = "console" if login or (credential or "").startswith("session:") else "api"
    who = {"role": recorded(request, ROLE), "credential": credential, "address": request.remote}
    action = f"{request.method} {request.path}"
    if request.query_string:
        action += "?" + request.query_string
    writer.submit(entry(via, who, action, status, error if status >= 400 else None, detail))


def _error_of(response: web.StreamResponse) -> str | None:
    """The ``error`` of a JSON answer of an error."""
    if response.status < 400 or not isinstance(response, web.Response):
        return None
    try:
        found = orjson.loads(response.body or b"")  # type: ignore[arg-type]
    except (orjson.JSONDecodeError, TypeError):
        return None
    error = found.get("error") if isinstance(found, dict) else None
    return error if isinstance(error, str) else None
