"""The console's session cookies: signed, expiring, revocable, bound to the tokens."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from processor.web.sessions import LIFETIME_S, Sessions

OPERATOR = "o" * 32
VIEWER = "v" * 32


def at(now: list[float], viewer: str | None = VIEWER, operator: str = OPERATOR) -> Sessions:
    return Sessions(operator, viewer, clock=lambda: now[0])


def test_a_cookie_is_accepted_by_every_replica_until_it_expires() -> None:
    now = [1_000_000.0]
    cookie, session = at(now).issue("viewer")
    replica = at(now)
    assert replica.check(cookie) == session
    assert session.role == "viewer" and session.expires == 1_000_000 + LIFETIME_S
    now[0] += LIFETIME_S - 1
    assert replica.check(cookie) == session
    now[0] += 1
    assert replica.check(cookie) is None


def test_each_session_has_its_own_csrf_token() -> None:
    sessions = at([0.0])
    (_, one), (_, two) = sessions.issue("operator"), sessions.issue("operator")
    assert one.csrf != two.csrf and len(one.csrf) >= 40


def test_a_changed_token_ends_every_session() -> None:
    now = [0.0]
    cookie, _ = at(now).issue("operator")
    assert at(now, operator="p" * 32).check(cookie) is None
    assert at(now, viewer="w" * 32).check(cookie) is None
    assert at(now, viewer=None).check(cookie) is None


def test_a_rewritten_role_or_expiry_is_refused() -> None:
    now = [0.0]
    sessions = at(now)
    cookie, _ = sessions.issue("viewer")
    version, role, expires, nonce, mac = cookie.split(".")
    assert sessions.check(".".join((version, "operator", expires, nonce, mac))) is None
    later = str(int(expires) + 3600)
    assert sessions.check(".".join((version, role, later, nonce, mac))) is None


def test_a_revoked_session_ends_on_the_instance_that_revoked_it() -> None:
    now = [0.0]
    sessions, replica = at(now), at(now)
    cookie, _ = sessions.issue("operator")
    sessions.revoke(cookie)
    assert sessions.check(cookie) is None
    assert replica.check(cookie) is not None  # stateless: until it expires
    sessions.revoke("not a cookie")


@given(st.data())
def test_any_change_to_a_cookie_is_refused(data: st.DataObject) -> None:
    sessions = at([0.0])
    cookie, _ = sessions.issue(data.draw(st.sampled_from(["operator", "viewer"])))
    at_index = data.draw(st.integers(0, len(cookie) - 1))
    replacement = data.draw(st.text(min_size=0, max_size=3))
    changed = cookie[:at_index] + replacement + cookie[at_index + 1 :]
    if changed != cookie:
        assert sessions.check(changed) is None
