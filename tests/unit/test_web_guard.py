"""The web port's tokens and its limit on failed authentications (the middleware itself runs
against a real processor in ``test_api.py``)."""

from __future__ import annotations

import pytest

from processor.web.guard import FailureLimit, Tokens
from tidemark.core.config import TOKEN_ENV, VIEWER_TOKEN_ENV
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
