"""Signed records (review A3): a record is accepted only as its signer wrote it, where
it was written, and a control record only if it is not an old one written again."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from processor import metrics
from processor.pipeline.control_topic import (
    AT_HEADER,
    LIFECYCLE,
    OFFSETS_WRITE,
    RELEASED_HEADER,
    REPLAY_SKEW_MS,
    ControlView,
    Lifecycle,
)
from tests.unit.test_control_topic import CONFIG, plan
from tidemark.core.record_auth import (
    KEY_ENV,
    PREVIOUS_KEY_ENV,
    RecordKeyError,
    RecordKeys,
    record_keys,
)
from tidemark.core.topics import control_topic

KEY = "a" * 32
OLD_KEY = "b" * 32
TOPIC = control_topic(CONFIG.processor.pipeline)


def keys(*secrets: str) -> RecordKeys:
    found = record_keys({KEY_ENV: secrets[0], PREVIOUS_KEY_ENV: "".join(secrets[1:])})
    assert found is not None
    return found


def test_a_record_verifies_only_as_it_was_signed() -> None:
    signer = keys(KEY)
    headers: list[tuple[str, str | bytes | None]] = [("tidemark.chunk", b"7"), ("h", None)]
    mac = signer.sign("t", 0, b"k", b"v", headers)
    signed = [*headers, mac]
    assert signer.verify("t", 0, b"k", b"v", signed)
    assert signer.verify("t", 0, b"k", b"v", list(reversed(signed)))  # order of headers
    assert not signer.verify("u", 0, b"k", b"v", signed)  # another topic
    assert not signer.verify("t", 1, b"k", b"v", signed)  # another partition
    assert not signer.verify("t", 0, b"K", b"v", signed)  # another key
    assert not signer.verify("t", 0, b"k", b"w", signed)  # another value
    assert not signer.verify("t", 0, b"k", None, signed)  # a tombstone
    assert not signer.verify("t", 0, b"k", b"v", [("tidemark.chunk", b"8"), ("h", None), mac])
    assert not signer.verify("t", 0, b"k", b"v", headers)  # no MAC
    assert not signer.verify(
        "t", 0, b"kv", b"", [*headers, signer.sign("t", 0, b"k", b"v", headers)]
    )
    assert not keys(OLD_KEY).verify("t", 0, b"k", b"v", signed)


def test_the_previous_key_is_accepted_on_read_and_never_signs() -> None:
    old = keys(OLD_KEY).sign("t", 0, None, b"v")
    rotated = keys(KEY, OLD_KEY)
    assert rotated.verify("t", 0, None, b"v", [old])
    assert rotated.sign("t", 0, None, b"v") == keys(KEY).sign("t", 0, None, b"v")


def test_keys_come_from_the_environment_and_are_long_enough() -> None:
    assert record_keys({}) is None
    with pytest.raises(RecordKeyError, match=KEY_ENV):
        record_keys({KEY_ENV: "short"})
    with pytest.raises(RecordKeyError, match=PREVIOUS_KEY_ENV):
        record_keys({KEY_ENV: KEY, PREVIOUS_KEY_ENV: "short"})


def refused(key: bytes) -> float:
    return metrics.CONTROL_REFUSED.labels(key.decode())._value.get()


def record(
    key: bytes,
    value: dict[str, Any] | None,
    at_ms: int,
    signer: RecordKeys | None,
    released: str = "",
) -> tuple[bytes, bytes | None, list[tuple[str, str | bytes | None]]]:
    """A control record as :func:`~processor.pipeline.control_topic.write_control` writes it."""
    body = None if value is None else orjson.dumps({**value, "at_ms": at_ms})
    headers: list[tuple[str, str | bytes | None]] = [(AT_HEADER, str(at_ms).encode())]
    if released:
        headers.append((RELEASED_HEADER, released.encode()))
    if signer is not None:
        headers.append(signer.sign(TOPIC, 0, key, body, headers))
    return key, body, headers


def test_with_a_key_only_signed_control_records_are_obeyed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    signer = keys(KEY)
    view = ControlView(CONFIG)
    before = refused(LIFECYCLE)
    view.apply(*record(LIFECYCLE, {"state": "STOPPED"}, 1_000, None))
    view.apply(*record(LIFECYCLE, {"state": "STOPPED"}, 1_000, keys(OLD_KEY)))
    assert view.lifecycle is Lifecycle.RUNNING
    assert refused(LIFECYCLE) == before + 2
    view.apply(*record(LIFECYCLE, {"state": "STOPPED"}, 1_000, signer))
    assert view.lifecycle is Lifecycle.STOPPED
    # An unsigned tombstone deletes nothing.
    view.apply(LIFECYCLE, None, [(AT_HEADER, b"2000")])
    assert view.lifecycle is Lifecycle.STOPPED
    assert refused(LIFECYCLE) == before + 3


def test_an_old_control_record_written_again_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of a signed record is still signed: its time, older than the key's newest
    record, gives it away. Clocks of two writers may differ by up to REPLAY_SKEW_MS."""
    monkeypatch.setenv(KEY_ENV, KEY)
    signer = keys(KEY)
    view = ControlView(CONFIG)
    stopped = record(LIFECYCLE, {"state": "STOPPED"}, 1_000_000, signer)
    view.apply(*stopped)
    view.apply(*record(LIFECYCLE, {"state": "RUNNING"}, 1_000_000 + REPLAY_SKEW_MS + 1, signer))
    before = refused(LIFECYCLE)
    view.apply(*stopped)
    assert view.lifecycle is Lifecycle.RUNNING
    assert refused(LIFECYCLE) == before + 1
    # A writer whose clock is a little behind is obeyed.
    view.apply(*record(LIFECYCLE, {"state": "PAUSED"}, 1_000_002, signer))
    assert view.lifecycle is Lifecycle.PAUSED


def test_a_released_plan_written_again_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A completed offsets write, written again, would look abandoned a minute later and
    be applied again over a running pipeline's rebuilt state."""
    monkeypatch.setenv(KEY_ENV, KEY)
    signer = keys(KEY)
    view = ControlView(CONFIG)
    written = record(OFFSETS_WRITE, plan(writer="offsets-1"), 5_000, signer)
    view.apply(*written)
    assert view.offsets_write is not None
    view.apply(*record(OFFSETS_WRITE, None, 9_000, signer, released="offsets-1"))
    assert view.offsets_write is None
    before = refused(OFFSETS_WRITE)
    view.apply(*written)
    assert view.offsets_write is None
    assert refused(OFFSETS_WRITE) == before + 1
    # A plan of another writer is not a copy.
    view.apply(*record(OFFSETS_WRITE, plan(writer="offsets-2"), 9_001, signer))
    assert view.offsets_write is not None and view.offsets_write["writer"] == "offsets-2"


def test_without_a_key_records_are_read_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    view = ControlView(CONFIG)
    view.apply(LIFECYCLE, orjson.dumps({"state": "PAUSED"}))  # no headers: an older release
    assert view.lifecycle is Lifecycle.PAUSED


def test_a_copy_appended_long_after_it_was_written_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Compaction keeps the newest record of a key: a copy of an old one written after it
    outlives the original, and a reader that starts later sees only the copy. The broker's
    append time (the control topic's LogAppendTime) gives it away."""
    monkeypatch.setenv(KEY_ENV, KEY)
    signer = keys(KEY)
    view = ControlView(CONFIG)
    stopped = record(LIFECYCLE, {"state": "STOPPED"}, 1_000_000, signer)
    before = refused(LIFECYCLE)
    view.apply(*stopped, 1_000_000 + REPLAY_SKEW_MS + 1)
    assert view.lifecycle is Lifecycle.RUNNING
    assert refused(LIFECYCLE) == before + 1
    view.apply(*stopped, 1_000_000 - 2_000)  # a writer's clock a little ahead
    assert view.lifecycle is Lifecycle.STOPPED


def test_a_release_of_another_writer_leaves_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer whose plan was claimed meanwhile releases its own writer's name: the
    claimer's plan stays (it releases it itself), as it does against an old release
    written again."""
    monkeypatch.setenv(KEY_ENV, KEY)
    signer = keys(KEY)
    view = ControlView(CONFIG)
    view.apply(*record(OFFSETS_WRITE, plan(writer="offsets-2"), 5_000, signer))
    view.apply(*record(OFFSETS_WRITE, None, 6_000, signer, released="offsets-1"))
    assert view.offsets_write is not None and view.offsets_write["writer"] == "offsets-2"
    view.apply(*record(OFFSETS_WRITE, None, 7_000, signer, released="offsets-2"))
    assert view.offsets_write is None
