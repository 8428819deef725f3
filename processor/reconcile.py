"""The version rule every stateful envelope shares, and the state entry it keeps per key.

A *version* orders the changes of one key (DESIGN.md, "Versions, and the
decision rules"). For a key whose state holds version ``v``, a change with
version ``e``:

- ``e < v``: drop it; it replays a change the output already reflects;
- ``e = v``: re-emit it; a replay after a crash may be the only copy that
  reached the output (I5: at-least-once, downstream is idempotent);
- ``e > v``: apply and emit it.

A delete keeps a tombstone entry with its version, so a replayed older change
of a deleted key is dropped rather than resurrecting the row.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

Version = tuple[int, int]

_VERSION = struct.Struct(">qqB")
_PRESENT, _DELETED = 1, 0


class Action(enum.Enum):
    """What to do with a change."""

    APPLY = "applied"
    REEMIT = "replayed"
    DROP = "dropped"


def decide(incoming: Version, stored: Version | None) -> Action:
    """The decision for a change of version ``incoming`` against state version ``stored``."""
    if stored is None or incoming > stored:
        return Action.APPLY
    if incoming == stored:
        return Action.REEMIT
    return Action.DROP


@dataclass(frozen=True, slots=True)
class Entry:
    """State of one key: the version last applied and its value (``None``: deleted)."""

    version: Version
    value: bytes | None

    def encode(self) -> bytes:
        """Bytes for the store: the version, a presence flag, then the value."""
        flag = _DELETED if self.value is None else _PRESENT
        return _VERSION.pack(self.version[0], self.version[1], flag) + (self.value or b"")

    @staticmethod
    def decode(raw: bytes) -> Entry:
        """Inverse of :meth:`encode`."""
        major, minor, flag = _VERSION.unpack_from(raw)
        return Entry((major, minor), raw[_VERSION.size :] if flag == _PRESENT else None)
