"""The console's routes: its page and files (open: they hold no data), and its session.

``/console/session`` logs in (``POST {"token": ...}``: the operator's or the viewer's
token, counted against the same failure limit as the API's bearer tokens), tells the
page who is logged in and its CSRF token (``GET``), and logs out (``DELETE``). Every
other request of the page goes to the API, authenticated by the cookie
(:func:`processor.web.guard.guard`).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from importlib import resources
from typing import Any, cast

import orjson
from aiohttp import web
from faust import App
from faust.web import Request, Response, View

from processor import metrics
from processor.web.guard import FailureLimit, Tokens, same_origin
from processor.web.sessions import (
    COOKIE,
    CSRF_HEADER,
    LIFETIME_S,
    SESSION_PATH,
    Session,
    Sessions,
)
from processor.web.who import CREDENTIAL, ROLE, SESSION, session_credential, token_credential

PAGE = "/console/"
STATIC = "/console/static/"

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}


@dataclass(frozen=True)
class Asset:
    """One of the console's files, held in memory."""

    body: bytes
    content_type: str
    etag: str


def load_assets() -> dict[str, Asset]:
    """Every file of ``processor/console/static`` by name."""
    assets = {}
    for entry in resources.files("processor.console").joinpath("static").iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in _TYPES:
            body = entry.read_bytes()
            etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
            assets[entry.name] = Asset(body, _TYPES[suffix], etag)
    return assets


def register_console(
    app: App, pipeline: str, tokens: Tokens, limit: FailureLimit, sessions: Sessions
) -> None:
    """Add the console's routes to ``app``, the processor of ``pipeline``."""
    assets = load_assets()

    def serve(view: View, request: Request, name: str) -> Response:
        asset = assets.get(name)
        if asset is None:
            return view.error(404, f"no such file: {name}")
        headers = {"ETag": asset.etag, "Cache-Control": "no-cache"}
        if request.headers.get("If-None-Match") == asset.etag:
            return view.bytes(b"", status=304, headers=headers)
        headers["Content-Type"] = asset.content_type
        return view.bytes(asset.body, headers=headers)

    @app.page("/console")
    class ConsoleRedirect(View):
        async def get(self, request: Request) -> Response:
            return self.bytes(b"", status=302, headers={"Location": PAGE})

    @app.page(PAGE)
    class ConsolePage(View):
        async def get(self, request: Request) -> Response:
            return serve(self, request, "index.html")

    @app.page(STATIC + "{name}")
    class ConsoleFile(View):
        async def get(self, request: Request, name: str) -> Response:
            return serve(self, request, name)

    @app.page(SESSION_PATH)
    class ConsoleSession(View):
        async def get(self, request: Request) -> Response:
            session = sessions.check(request.cookies.get(COOKIE, ""))
            if session is None:
                return self.error(401, "not logged in")
            return self.json(_described(session, pipeline))

        async def post(self, request: Request) -> Response:
            client = _aiohttp(request).remote or "unknown"
            if not same_origin(_aiohttp(request)):
                return self.error(403, "a login must come from the console's own page")
            if tokens.operator is None:
                return self.error(401, "the API is off: the processor has no token set")
            token = _token_of(await request.read())
            role = tokens.role("Bearer " + token)
            if role is None:
                wait = limit.retry_after(client)  # a valid token passes whatever others sent
                if wait is not None:
                    metrics.API_AUTH_FAILURES.labels("rate-limited").inc()
                    return self.json(
                        {"error": "too many failed authentications"},
                        status=429,
                        headers={"Retry-After": str(wait)},
                    )
                limit.failed(client)
                metrics.API_AUTH_FAILURES.labels("wrong").inc()
                return self.error(401, "wrong token")
            cookie, session = sessions.issue(role)
            # for the audit trail: which token logged in, and the session it opened
            seen = _aiohttp(request)
            seen[ROLE], seen[CREDENTIAL] = role, token_credential(token)
            seen[SESSION] = session_credential(session.csrf)
            response = self.json(_described(session, pipeline))
            cast(web.Response, response).set_cookie(
                COOKIE,
                cookie,
                max_age=LIFETIME_S,
                path="/",
                httponly=True,
                samesite="Strict",
                secure=_aiohttp(request).secure,
            )
            return response

        async def delete(self, request: Request) -> Response:
            cookie = request.cookies.get(COOKIE, "")
            session = sessions.check(cookie)
            if session is not None:
                given = request.headers.get(CSRF_HEADER, "")
                if not hmac.compare_digest(given.encode(), session.csrf.encode()):
                    return self.error(403, "missing or wrong CSRF token")
                sessions.revoke(cookie)
                seen = _aiohttp(request)
                seen[ROLE], seen[CREDENTIAL] = session.role, session_credential(session.csrf)
            response = self.json({"logged_out": True})
            cast(web.Response, response).del_cookie(COOKIE, path="/")
            return response


def _aiohttp(request: Request) -> web.Request:
    """Faust's request, as the aiohttp request it is (Faust's type has no cookies' API)."""
    return cast(web.Request, request)


def _described(session: Session, pipeline: str) -> dict[str, Any]:
    return {
        "role": session.role,
        "csrf": session.csrf,
        "expires": session.expires,
        "pipeline": pipeline,
    }


def _token_of(body: bytes) -> str:
    """The ``token`` of a login's JSON body ("" if there is none)."""
    try:
        given = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""
    token = given.get("token") if isinstance(given, dict) else None
    return token if isinstance(token, str) else ""
