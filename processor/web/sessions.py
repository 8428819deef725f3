"""Console sessions: the bearer token entered once, then a signed, HTTP-only cookie.

A session is not stored: its cookie carries the role, the expiry and a random
nonce, signed with a key derived from the configured tokens (HMAC-SHA256). Every
replica of the processor with the same tokens accepts it, and changing either
token ends every session. Logging out forgets the cookie in the browser and
revokes its nonce on the instance that served the logout; other replicas accept
the cookie until it expires (:data:`LIFETIME_S`).

Cross-site request forgery: the cookie is ``SameSite=Strict``, and a request that
changes state with it must also carry the session's CSRF token (derived from the
nonce, handed to the page by ``GET /console/session``) in :data:`CSRF_HEADER`, and,
if the browser says where it comes from (``Origin``), come from the processor's
own origin.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

COOKIE = "tidemark_session"
#: Where the console logs in (POST), learns its session (GET) and logs out (DELETE).
SESSION_PATH = "/console/session"
CSRF_HEADER = "X-CSRF-Token"
LIFETIME_S = 8 * 3600
_VERSION = "v1"
_MAX_REVOKED = 10_000


@dataclass(frozen=True)
class Session:
    """A valid session: who (``operator`` or ``viewer``), until when, and its CSRF token."""

    role: str
    expires: int
    csrf: str


class Sessions:
    """Issues and checks session cookies for the tokens ``operator`` and ``viewer``."""

    def __init__(
        self,
        operator: str,
        viewer: str | None,
        clock: Callable[[], float] = time.time,
        lifetime_s: int = LIFETIME_S,
    ) -> None:
        seed = b"tidemark console session\0" + (viewer or "").encode()
        self._key = hmac.new(operator.encode(), seed, hashlib.sha256).digest()
        self._clock, self._lifetime_s = clock, lifetime_s
        self._revoked: dict[str, int] = {}  # nonce: expiry

    def issue(self, role: str) -> tuple[str, Session]:
        """A new cookie value for ``role``, and its session."""
        expires = int(self._clock()) + self._lifetime_s
        nonce = _b64(secrets.token_bytes(18))
        signed = f"{_VERSION}.{role}.{expires}.{nonce}"
        return f"{signed}.{self._mac(signed)}", Session(role, expires, self._csrf(nonce))

    def check(self, cookie: str) -> Session | None:
        """The session of a cookie value, or ``None`` if it is forged, expired or revoked."""
        parts = cookie.split(".")
        if len(parts) != 5 or parts[0] != _VERSION or parts[1] not in ("operator", "viewer"):
            return None
        signed, mac = ".".join(parts[:4]), parts[4]
        if not hmac.compare_digest(mac.encode(), self._mac(signed).encode()):
            return None
        _, role, expires, nonce = parts[:4]
        if not expires.isdigit() or int(expires) <= self._clock() or nonce in self._revoked:
            return None
        return Session(role, int(expires), self._csrf(nonce))

    def revoke(self, cookie: str) -> None:
        """End the session of ``cookie`` on this instance (a no-op for an invalid one)."""
        session = self.check(cookie)
        if session is None:
            return
        now = self._clock()
        if len(self._revoked) >= _MAX_REVOKED:
            self._revoked = {n: e for n, e in self._revoked.items() if e > now}
        self._revoked[cookie.split(".")[3]] = session.expires

    def _mac(self, signed: str) -> str:
        return _b64(hmac.new(self._key, signed.encode(), hashlib.sha256).digest())

    def _csrf(self, nonce: str) -> str:
        return _b64(hmac.new(self._key, b"csrf\0" + nonce.encode(), hashlib.sha256).digest())


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
