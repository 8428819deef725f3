"""Who made a request: what the guard (:mod:`processor.web.guard`) and the console's login
record on the request they let through, for the answer (:mod:`processor.web.viewers`)
and the audit trail (:mod:`processor.web.audit_trail`)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from processor.pipeline.audit import fingerprint

#: ``operator`` or ``viewer``.
ROLE = web.RequestKey("role", str)
#: ``token:<fingerprint>`` or ``session:<fingerprint>``: which secret, not the secret.
CREDENTIAL = web.RequestKey("credential", str)
#: A login's new session (``session:<fingerprint>``), linking it to the token it used.
SESSION = web.RequestKey("session", str)


def token_credential(token: str) -> str:
    return f"token:{fingerprint(token)}"


def session_credential(csrf: str) -> str:
    """A session by its CSRF token, which is one per session and derived from its nonce."""
    return f"session:{fingerprint(csrf)}"


def recorded(request: Any, key: web.RequestKey[str]) -> str | None:
    """What the guard recorded under ``key`` on ``request``, if anything."""
    try:
        found = request[key]
    except (KeyError, TypeError):
        return None
    return found if isinstance(found, str) else None
