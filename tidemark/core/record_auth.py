"""Records that give orders, signed: write access to a topic is not operator access.

Tidemark's control records (the lifecycle, offsets-write plans) and its backfill records
(chunk rows, truncate markers) are obeyed by every data plane. With a record key in the
environment (:data:`KEY_ENV`), each is written with a ``tidemark.mac`` header, an
HMAC-SHA256 over the topic and partition, the record's key, its value and its other
headers. A reader
with the key refuses a record without a MAC that one of its keys gives, so a record made
by anyone else, or moved to another topic or key, is refused, however well formed.
:data:`PREVIOUS_KEY_ENV` is accepted on read only, for rotating the key without a stop.

Without a key, records are written and read unsigned, as before; the processor says so
in its log at start (the security page says how to turn it on).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tidemark.core.errors import ConfigError

MAC_HEADER = "tidemark.mac"
#: The record key: at least :data:`MIN_KEY_CHARS` characters, from the environment only.
KEY_ENV = "TIDEMARK_RECORD_KEY"
#: The key before the last rotation, accepted on read only.
PREVIOUS_KEY_ENV = "TIDEMARK_RECORD_KEY_PREVIOUS"
MIN_KEY_CHARS = 32
_DOMAIN = b"tidemark-record-1\0"

Header = tuple[str, str | bytes | None]


class RecordKeyError(ConfigError):
    """A record key that is too short to be one."""


class RecordKeys:
    """The keys records are signed with (the first) and checked against (any)."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        self._keys = list(keys)

    def sign(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Iterable[Header] = (),
    ) -> Header:
        """The ``tidemark.mac`` header of a record of ``topic[partition]`` with these bytes
        and ``headers``."""
        return MAC_HEADER, _mac(self._keys[0], topic, partition, key, value, headers)

    def verify(
        self, topic: str, partition: int, key: bytes | None, value: bytes | None, headers: Any
    ) -> bool:
        """Whether a record as read (``headers``: the message's, its MAC among them) was
        signed under one of the keys, for this partition (a copy moved to another
        partition of its topic, where its key does not belong, is refused)."""
        given = None
        others = []
        for name, header in headers or ():
            if name == MAC_HEADER:
                given = header
            else:
                others.append((name, header))
        if not isinstance(given, bytes):
            return False
        return any(
            hmac.compare_digest(given, _mac(k, topic, partition, key, value, others))
            for k in self._keys
        )


def record_keys(environ: Mapping[str, str] = os.environ) -> RecordKeys | None:
    """The record keys the environment gives; ``None`` when it gives none (unsigned)."""
    current = environ.get(KEY_ENV, "")
    if not current:
        return None
    keys = [current, *filter(None, [environ.get(PREVIOUS_KEY_ENV, "")])]
    for name, value in zip((KEY_ENV, PREVIOUS_KEY_ENV), keys, strict=False):
        if len(value) < MIN_KEY_CHARS:
            raise RecordKeyError(
                f"{name} is {len(value)} characters: use at least {MIN_KEY_CHARS} "
                "(for example: openssl rand -hex 32)"
            )
    return RecordKeys([k.encode() for k in keys])


def _mac(
    secret: bytes,
    topic: str,
    partition: int,
    key: bytes | None,
    value: bytes | None,
    headers: Iterable[Header],
) -> bytes:
    mac = hmac.new(secret, _DOMAIN, hashlib.sha256)
    mac.update(_field(topic.encode()))
    mac.update(partition.to_bytes(8, "big", signed=True))
    mac.update(_field(key))
    mac.update(_field(value))
    named = ((n, h.encode() if isinstance(h, str) else h) for n, h in headers if n != MAC_HEADER)
    for name, header in sorted(named, key=lambda pair: pair[0]):
        mac.update(_field(name.encode()))
        mac.update(_field(header))
    return mac.digest()


def _field(data: bytes | None) -> bytes:
    """``data`` with its length first (``None`` apart from empty), so that no two records'
    fields run together into the same bytes."""
    if data is None:
        return b"\xff" * 8
    return len(data).to_bytes(8, "big") + data
