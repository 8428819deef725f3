"""Calls to a processor's management API, for the CLI's ``--api`` option."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

from tidemark.core.config import TOKEN_ENV
from tidemark.core.errors import TidemarkError


def call(base: str, method: str, path: str, body: Any = None) -> Any:
    """The JSON answer of ``method path`` under ``base``/api/v1; a non-2xx answer raises
    :class:`TidemarkError` with the API's message."""
    token = os.environ.get(TOKEN_ENV)
    if not token:
        raise TidemarkError(f"--api needs the API's bearer token in {TOKEN_ENV}")
    if not base.startswith(("http://", "https://")):
        raise TidemarkError(f"--api {base!r}: an http:// or https:// URL is needed")
    data = json.dumps(body).encode() if body is not None else None
    url = f"{base.rstrip('/')}/api/v1{path}"
    request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 - checked
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:  # noqa: S310 - checked
            return json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read()).get("error", exc.reason)
        except ValueError:
            message = exc.reason
        raise TidemarkError(f"{method} {path}: HTTP {exc.code}: {message}") from None
    except urllib.error.URLError as exc:
        raise TidemarkError(f"cannot reach the API at {base}: {exc.reason}") from None
