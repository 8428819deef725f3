"""The audit trail (:mod:`processor.pipeline.audit`, :mod:`processor.web.audit_trail`): what
a record says and what a reader accepts as one, and which requests of the web port become
one, with who made them (the topic itself: ``test_api.py``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from processor.pipeline.audit import (
    AuditWriter,
    detail_of,
    entry,
    entry_of,
    fingerprint,
    newest_first,
)
from processor.web.audit_trail import audited
from processor.web.guard import FailureLimit, Tokens, guard
from processor.web.sessions import SESSION_PATH, Sessions
from processor.web.who import CREDENTIAL, ROLE, SESSION
from tidemark.core.config import TOKEN_ENV, VIEWER_TOKEN_ENV, Config

OPERATOR, VIEWER = "o" * 32, "v" * 40


class Kept(AuditWriter):
    """A writer that keeps its records (Kafka's part is ``test_api.py``'s)."""

    def __init__(self) -> None:
        super().__init__(Config())
        self.kept: list[dict[str, Any]] = []

    def submit(self, document: dict[str, Any]) -> None:
        self.kept.append(document)


def test_a_record_names_the_secret_by_its_fingerprint_and_the_body_as_it_was() -> None:
    assert fingerprint(OPERATOR) == fingerprint(OPERATOR) != fingerprint(VIEWER)
    assert len(fingerprint(OPERATOR)) == 12 and OPERATOR not in fingerprint(OPERATOR)
    assert detail_of(b'{"data-collections": ["public.t"]}') == {"data-collections": ["public.t"]}
    assert detail_of(b"") is None
    big = detail_of(b"[" + b"1," * 5000 + b"1]")
    assert set(big) == {"bytes", "sha256"} and big["bytes"] > 4096
    assert detail_of(b"not json")["bytes"] == 8


@pytest.mark.parametrize(
    "forged",
    [
        None,
        [],
        {"format": 2},
        {**entry("api", {"role": "operator"}, "POST /x", 200), "via": "mail"},
        {**entry("api", {"role": "operator"}, "POST /x", 200), "at_ms": "today"},
        {**entry("api", {"role": "operator"}, "POST /x", 200), "result": {"status": "ok"}},
        {**entry("api", {"role": ["operator"]}, "POST /x", 200)},
    ],
)
def test_what_is_not_an_audit_record_is_not_read_as_one(forged: Any) -> None:
    assert entry_of(forged) is None


def test_records_of_one_millisecond_read_back_newest_first() -> None:
    """Two actions in the same millisecond (a refused request, then a login) come back in
    the order the topic holds them, the later one first, as with any other two."""
    who: dict[str, str | None] = {"role": "operator", "credential": None, "address": None}
    written = [  # in the topic's order, oldest first
        entry("api", who, "POST /api/v1/snapshots/pause", 202, at_ms=1_000),
        entry("api", who, "POST /api/v1/snapshots", 400, at_ms=1_007),
        entry("console", who, "POST /console/session", 200, at_ms=1_007),
        entry("cli", who, "pipeline pause", 0, at_ms=1_005),  # another host's clock
        entry("api", who, "POST /api/v1/snapshots/resume", 202, at_ms=1_007),
    ]
    assert [d["action"] for d in newest_first(written)] == [
        "POST /api/v1/snapshots/resume",
        "POST /console/session",
        "POST /api/v1/snapshots",
        "pipeline pause",
        "POST /api/v1/snapshots/pause",
    ]


def test_a_record_reads_back_as_written() -> None:
    written = entry("cli", {"role": "operator", "credential": "cli:ann@host"}, "pipeline stop", 0)
    assert entry_of(written) == written


def web_app(kept: Kept) -> web.Application:
    tokens = Tokens.read({TOKEN_ENV: OPERATOR, VIEWER_TOKEN_ENV: VIEWER})
    sessions = Sessions(OPERATOR, VIEWER)

    async def accepted(request: web.Request) -> web.Response:
        return web.json_response({"ok": True}, status=202)

    async def refused(request: web.Request) -> web.Response:
        return web.json_response({"error": "the pipeline runs"}, status=409)

    async def login(request: web.Request) -> web.Response:  # as the console's view does
        body = await request.json()
        role = tokens.role("Bearer " + body.get("token", ""))
        if role is None:
            return web.json_response({"error": "wrong token"}, status=401)
        request[ROLE], request[CREDENTIAL] = role, "token:" + fingerprint(body["token"])
        request[SESSION] = "session:abc"
        return web.json_response({"role": role})

    app = web.Application(
        middlewares=[
            guard(tokens, FailureLimit(20), "/api/v1/", sessions),
            audited(kept, "/api/v1/"),
        ]
    )
    app.router.add_post("/api/v1/snapshots", accepted)
    app.router.add_get("/api/v1/snapshots", accepted)
    app.router.add_delete("/api/v1/pipelines/p/offsets", refused)
    app.router.add_post(SESSION_PATH, login)
    return app


def test_every_action_of_the_web_port_is_recorded_with_who_made_it() -> None:
    kept = Kept()

    async def scenario() -> None:
        async with TestClient(TestServer(web_app(kept))) as client:
            bearer = {"Authorization": f"Bearer {OPERATOR}"}
            await client.post("/api/v1/snapshots", json={"data-collections": ["t"]}, headers=bearer)
            await client.get("/api/v1/snapshots", headers=bearer)  # a read: not recorded
            await client.delete("/api/v1/pipelines/p/offsets?reset_state=true", headers=bearer)
            await client.post("/api/v1/snapshots", headers={"Authorization": "Bearer nope"})
            await client.post(SESSION_PATH, json={"token": VIEWER})
            await client.post(SESSION_PATH, json={"token": "wrong-" + OPERATOR})

    asyncio.run(scenario())
    started, refused, login, failed = kept.kept  # the guard's 401 is not an action
    assert started["via"] == "api" and started["action"] == "POST /api/v1/snapshots"
    assert started["who"] == {
        "role": "operator",
        "credential": "token:" + fingerprint(OPERATOR),
        "address": "127.0.0.1",
    }
    assert started["detail"] == {"data-collections": ["t"]}
    assert started["result"] == {"status": 202, "error": None}
    assert refused["action"] == "DELETE /api/v1/pipelines/p/offsets?reset_state=true"
    assert refused["result"] == {"status": 409, "error": "the pipeline runs"}
    assert login["via"] == "console" and login["who"]["role"] == "viewer"
    assert login["who"]["credential"] == "token:" + fingerprint(VIEWER)
    assert login["detail"] == {"session": "session:abc"}
    assert failed["who"]["credential"] is None and failed["result"]["status"] == 401
    assert VIEWER not in repr(kept.kept) and OPERATOR not in repr(kept.kept)  # no token
