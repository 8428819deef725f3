"""The web port's tokens and its limit on failed authentications (the middleware itself runs
against a real processor in ``test_api.py``)."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from processor.web.guard import FailureLimit, Tokens, guard
from processor.web.sessions import Sessions
from tidemark.core.config import NEXT_TOKEN_ENV, NEXT_VIEWER_TOKEN_ENV, TOKEN_ENV, VIEWER_TOKEN_ENV
from tidemark.core.errors import ConfigError

OPERATOR = "o" * 32
VIEWER = "v" * 40


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({TOKEN_ENV: "o" * 31}, f"{TOKEN_ENV}: a token of at least 32 characters"),
        ({TOKEN_ENV: OPERATOR, VIEWER_TOKEN_ENV: "short"}, f"{VIEWER_TOKEN_ENV}: a token of"),
        ({VIEWER_TOKEN_ENV: VIEWER}, "set it beside, and different from"),
        ({TOKEN_ENV: OPERATOR, VIEWER_TOKEN_ENV: OPERATOR}, "set it beside, and different from"),
        ({TOKEN_ENV: OPERATOR, NEXT_TOKEN_ENV: "n" * 31}, f"{NEXT_TOKEN_ENV}: a token of"),
        ({NEXT_TOKEN_ENV: "n" * 32}, f"{NEXT_TOKEN_ENV}: set it beside {TOKEN_ENV}"),
        (
            {TOKEN_ENV: OPERATOR, VIEWER_TOKEN_ENV: VIEWER, NEXT_TOKEN_ENV: VIEWER},
            "a token may have one role",
        ),
        (
            {TOKEN_ENV: OPERATOR, VIEWER_TOKEN_ENV: VIEWER, NEXT_VIEWER_TOKEN_ENV: OPERATOR},
            "a token may have one role",
        ),
        ({TOKEN_ENV: OPERATOR, NEXT_VIEWER_TOKEN_ENV: VIEWER}, f"{NEXT_VIEWER_TOKEN_ENV}: set it"),
    ],
)
def test_tokens_too_short_or_confused_are_refused(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        Tokens.read(environ)
    assert "o" * 31 not in str(raised.value)


def test_each_token_has_its_role() -> None:
    tokens = Tokens.read({TOKEN_ENV: OPERATOR, VIEWER_TOKEN_ENV: VIEWER, "OTHER": "x"})
    assert tokens.role(f"Bearer {OPERATOR}") == "operator"
    assert tokens.role(f"bearer {VIEWER}") == "viewer"
    for header in ("", "Bearer", f"Basic {OPERATOR}", f"Bearer {OPERATOR}x", "Bearer  "):
        assert tokens.role(header) is None, header
    assert OPERATOR not in repr(tokens)
    assert Tokens.read({}).operator is None


def test_a_client_past_the_limit_waits_until_its_oldest_failure_is_a_minute_old() -> None:
    now = [1000.0]
    limit = FailureLimit(3, clock=lambda: now[0])
    for second in (0, 10, 20):
        now[0] = 1000.0 + second
        assert limit.retry_after("a") is None
        limit.failed("a")
    assert limit.retry_after("a") == 40  # the first failure ages out at 1060
    assert limit.retry_after("b") is None  # per client
    now[0] = 1060.0
    assert limit.retry_after("a") is None
    limit.failed("a")
    assert limit.retry_after("a") == 10  # the one at 1010 is the oldest now


def _guarded_app(tokens: Tokens, limit: FailureLimit) -> web.Application:
    async def answer(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application(middlewares=[guard(tokens, limit, "/api/v1", Sessions(OPERATOR, VIEWER))])
    app.router.add_get("/api/v1/things", answer)
    return app


def test_a_client_past_the_limit_cannot_lock_a_valid_token_out() -> None:
    """Behind an ingress every client has one address: failures of a guesser there are
    answered 429, yet the operator's and the viewer's valid tokens still pass."""
    tokens = Tokens.read({TOKEN_ENV: OPERATOR, VIEWER_TOKEN_ENV: VIEWER})
    limit = FailureLimit(3)

    async def scenario() -> list[int]:
        async with TestClient(TestServer(_guarded_app(tokens, limit))) as client:
            statuses = []
            for token in ["wrong-" + OPERATOR] * 4 + [OPERATOR, VIEWER, "", "wrong"]:
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                response = await client.get("/api/v1/things", headers=headers)
                statuses.append(response.status)
            return statuses

    assert asyncio.run(scenario()) == [401, 401, 401, 429, 200, 200, 429, 429]


def test_during_a_rotation_the_current_and_the_next_token_both_hold_their_role() -> None:
    nxt, viewer_next = "n" * 32, "w" * 32
    tokens = Tokens.read(
        {
            TOKEN_ENV: OPERATOR,
            NEXT_TOKEN_ENV: nxt,
            VIEWER_TOKEN_ENV: VIEWER,
            NEXT_VIEWER_TOKEN_ENV: viewer_next,
        }
    )
    assert [tokens.role(f"Bearer {t}") for t in (OPERATOR, nxt, VIEWER, viewer_next)] == [
        "operator",
        "operator",
        "viewer",
        "viewer",
    ]
    assert tokens.role(f"Bearer {nxt}x") is None
    assert nxt not in repr(tokens) and viewer_next not in repr(tokens)
