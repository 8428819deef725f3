"""Who may use the processor's web port: every route but ``/health``, ``/metrics`` and the
console's page needs a token.

One aiohttp middleware stands in front of every route of the web server, Faust's
own included (its views are switched off as well, and any route outside the API
and the console is answered 404), so no route is served open by being forgotten.
The console's page and files are open (they hold no data), and so is its login,
which checks the token itself. Any other request needs ``Authorization: Bearer
<token>``, or the console's session cookie (:mod:`processor.web.sessions`),
with its CSRF token for any method but a read's:

- the operator's token (``TIDEMARK_API_TOKEN``) may do anything the API offers;
- the viewer's token (``TIDEMARK_VIEWER_TOKEN``, optional) may read: a request of
  another method is answered 403;
- without ``TIDEMARK_API_TOKEN`` every request is answered 401: the API never runs
  open;
- during a rotation, ``TIDEMARK_API_TOKEN_NEXT`` and ``TIDEMARK_VIEWER_TOKEN_NEXT``
  hold the same roles beside the current tokens.

Tokens shorter than :data:`MIN_TOKEN_CHARS` are refused when the processor starts.
A request whose credentials are missing or wrong, from a client whose
authentications failed ``processor.api_auth_failures_per_minute`` times in the last
minute, is answered 429 (with ``Retry-After``) until the oldest of them is a minute
old. Valid credentials always pass: the limit is keyed on the client's address, and
behind an ingress or a NAT every client has one, so a guesser must not lock the
operator out (a token of 32 characters or more is not guessed at any rate a web port
serves). Each failure is counted in ``tidemark_api_auth_failures_total{reason}`` and
logged with the client's address, never with what it sent. Tokens are compared in
constant time.

Every answer carries a Content-Security-Policy that allows scripts, styles and
connections to this origin only (so no inline script), and is never framed.
"""

from __future__ import annotations

import collections
import hmac
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from aiohttp import web

from processor import metrics
from processor.web.sessions import COOKIE, CSRF_HEADER, SESSION_PATH, Sessions
from processor.web.who import CREDENTIAL, ROLE, session_credential, token_credential
from tidemark.core.config import (
    NEXT_TOKEN_ENV,
    NEXT_VIEWER_TOKEN_ENV,
    TOKEN_ENV,
    VIEWER_TOKEN_ENV,
)
from tidemark.core.errors import ConfigError

log = logging.getLogger(__name__)

#: The routes served without a token.
OPEN_PATHS = frozenset({"/health", "/metrics"})
#: The console's page, its files and its login: served without a token.
CONSOLE_PREFIX = "/console"
#: What every answer carries.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}
MIN_TOKEN_CHARS = 32
#: Methods a viewer's token may use.
READING = frozenset({"GET", "HEAD", "OPTIONS"})
_WINDOW_S = 60.0
_MAX_CLIENTS = 10_000

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Tokens:
    """The operator's token and the viewer's (``None``: not set), and during a rotation the
    ones that take over (``*_next``), accepted beside them."""

    operator: str | None = field(repr=False)
    viewer: str | None = field(default=None, repr=False)
    operator_next: str | None = field(default=None, repr=False)
    viewer_next: str | None = field(default=None, repr=False)

    @staticmethod
    def read(environ: Mapping[str, str]) -> Tokens:
        """The tokens in ``environ``; :class:`ConfigError` for one too short, one without
        the token it goes beside, or one token given two roles."""
        named = {
            name: environ.get(name) or None
            for name in (TOKEN_ENV, VIEWER_TOKEN_ENV, NEXT_TOKEN_ENV, NEXT_VIEWER_TOKEN_ENV)
        }
        for name, token in named.items():
            if token is not None and len(token) < MIN_TOKEN_CHARS:
                raise ConfigError(
                    f"{name}: a token of at least {MIN_TOKEN_CHARS} characters is needed, "
                    f"not {len(token)} (for example: openssl rand -hex 24)"
                )
        tokens = Tokens(*named.values())
        operator, viewer = tokens.operator, tokens.viewer
        if viewer is not None and (operator is None or hmac.compare_digest(viewer, operator)):
            raise ConfigError(f"{VIEWER_TOKEN_ENV}: set it beside, and different from, {TOKEN_ENV}")
        for name, beside, token in (
            (NEXT_TOKEN_ENV, TOKEN_ENV, tokens.operator_next),
            (NEXT_VIEWER_TOKEN_ENV, VIEWER_TOKEN_ENV, tokens.viewer_next),
        ):
            if token is not None and named[beside] is None:
                raise ConfigError(f"{name}: set it beside {beside}, during a rotation only")
        operators = {t for t in (operator, tokens.operator_next) if t is not None}
        if operators & {t for t in (viewer, tokens.viewer_next) if t is not None}:
            raise ConfigError(
                f"a token may have one role: {NEXT_TOKEN_ENV} or {NEXT_VIEWER_TOKEN_ENV} "
                "equals a token of the other role"
            )
        return tokens

    def role(self, header: str) -> str | None:
        """``operator``, ``viewer`` or ``None`` for an ``Authorization`` header."""
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given:
            return None
        found = None
        for role, token in (
            ("operator", self.operator),
            ("operator", self.operator_next),
            ("viewer", self.viewer),
            ("viewer", self.viewer_next),
        ):
            # each one compared, always, in constant time
            if token is not None and hmac.compare_digest(given.encode(), token.encode()):
                found = role
        return found


class FailureLimit:
    """Failed authentications per client over the last minute."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self._clock = clock
        self._failures: dict[str, collections.deque[float]] = {}

    def retry_after(self, client: str) -> int | None:
        """Seconds until ``client`` may try again; ``None``: it may now."""
        seen = self._recent(client)
        if seen is None or len(seen) < self.per_minute:
            return None
        return max(1, math.ceil(seen[0] + _WINDOW_S - self._clock()))

    def failed(self, client: str) -> None:
        """Count a failed authentication of ``client``."""
        now = self._clock()
        if len(self._failures) >= _MAX_CLIENTS:  # forget the clients quiet for a minute
            horizon = now - _WINDOW_S
            self._failures = {c: d for c, d in self._failures.items() if d and d[-1] > horizon}
        seen = self._failures.setdefault(client, collections.deque(maxlen=self.per_minute))
        seen.append(now)

    def _recent(self, client: str) -> collections.deque[float] | None:
        seen = self._failures.get(client)
        if seen is not None:
            horizon = self._clock() - _WINDOW_S
            while seen and seen[0] <= horizon:
                seen.popleft()
        return seen


Middleware = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]


def guard(tokens: Tokens, limit: FailureLimit, served: str, sessions: Sessions) -> Middleware:
    """The middleware that lets a request through only as described above, and only to the
    open paths, the console or under ``served`` (the API's prefix): any other route, even
    one a library registered, is answered 404."""

    @web.middleware
    async def guarded(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await admit(request, handler)
        except web.HTTPException as exc:
            exc.headers.update(SECURITY_HEADERS)
            raise
        response.headers.update(SECURITY_HEADERS)
        if request.path.startswith(served) or request.path == SESSION_PATH:
            response.headers["Cache-Control"] = "no-store"  # answers, and the CSRF token
        return response

    async def admit(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS or _console(request.path):
            return await handler(request)
        if tokens.operator is None:
            return _error(401, f"the API is off: start the processor with {TOKEN_ENV} set")
        if "Authorization" in request.headers or COOKIE not in request.cookies:
            header = request.headers.get("Authorization", "")
            role = tokens.role(header)
            credential = token_credential(header.partition(" ")[2])
            if role is None:
                client = request.remote or "unknown"
                wait = limit.retry_after(client)
                if wait is not None:
                    metrics.API_AUTH_FAILURES.labels("rate-limited").inc()
                    retry = {"Retry-After": str(wait)}
                    return _error(429, "too many failed authentications", retry)
                reason = "missing" if "Authorization" not in request.headers else "wrong"
                limit.failed(client)
                metrics.API_AUTH_FAILURES.labels(reason).inc()
                log.warning("API authentication failed from %s: %s token", client, reason)
                return _error(401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"})
        else:
            # A session's cookie is signed: a wrong one is expired or revoked, not a guess.
            session = sessions.check(request.cookies[COOKIE])
            if session is None:
                return _error(401, "the console's session has ended: log in again")
            role, credential = session.role, session_credential(session.csrf)
            if request.method not in READING and not _csrf_ok(request, session.csrf):
                return _error(403, "missing or wrong CSRF token, or another site's request")
        if not request.path.startswith(served):
            return _error(404, f"no such route: {request.path}")
        if role == "viewer" and request.method not in READING:
            return _error(403, f"a viewer's token may read only, not {request.method}")
        # what the answer may show (processor.web.viewers), and whose it is (the audit)
        request[ROLE], request[CREDENTIAL] = role, credential
        return await handler(request)

    return guarded


def same_origin(request: web.Request) -> bool:
    """Whether ``request`` comes from a page of this server (by its ``Origin``, which
    browsers send with every request that is not a read; none: not a browser's)."""
    origin = request.headers.get("Origin")
    return origin is None or urlsplit(origin).netloc == request.host


def _csrf_ok(request: web.Request, csrf: str) -> bool:
    given = request.headers.get(CSRF_HEADER, "")
    return hmac.compare_digest(given.encode(), csrf.encode()) and same_origin(request)


def _console(path: str) -> bool:
    return path == CONSOLE_PREFIX or path.startswith(CONSOLE_PREFIX + "/")


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers)
