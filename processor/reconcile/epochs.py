"""Positions that go back: a new position epoch of the source, told from a replay.

Versions are source positions (:func:`processor.events.change.source_version`). Within
one epoch of a source (one primary's WAL, one binlog history) a later commit has a
later position. Positions go back in two ways:

- **a replay**: Debezium sends a range again after a restart (at-least-once). The events
  are the same ones, with the same commit times, all at or before the newest commit seen;
- **a new epoch**: an asynchronous failover to a replica whose WAL is shorter, a migration
  to another cluster, MySQL's ``RESET MASTER``. New commits then come at positions below
  those already seen, and every change of a key with state would be dropped as older.

A change at a position below the newest seen, but committed *after* it, can only be the
second: this module says so, and the data plane stops the partition before deciding
it (:meth:`processor.reconcile.batch.Reconciler.decide`), with the reason, instead of
dropping the new epoch's changes in silence. Commit times come from Debezium's
``source.ts_ms``; a margin absorbs a failover's clock difference between servers.

The newest change seen is kept in the partition's state (:data:`NEWEST_SEEN`), written
with the batch that saw it, so a processor started later, or another replica given the
partition, compares with it too.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from processor.errors import StateFormatError
from processor.events.change import Version

#: How much later (ms) a change committed at an older position must be to mark a new
#: epoch: more than clock differences between a primary and its replicas.
CLOCK_MARGIN_MS = 1_000


#: The state key of a partition's newest change seen: :meth:`Seen.encode`'s bytes.
NEWEST_SEEN = b"\x00tidemark:newest-seen"
#: Format byte, version (two parts), commit time: the only layout this release writes.
_SEEN = struct.Struct(">Bqqq")
_SEEN_FORMAT = 1


class Seen(NamedTuple):
    """The newest change of a partition: its position and its commit time (ms)."""

    version: Version
    committed_ms: int

    def encode(self) -> bytes:
        return _SEEN.pack(_SEEN_FORMAT, *self.version, self.committed_ms)

    @staticmethod
    def decode(raw: bytes) -> Seen:
        """From :meth:`encode`'s bytes; another layout raises :class:`StateFormatError`."""
        if len(raw) != _SEEN.size or raw[0] != _SEEN_FORMAT:
            raise StateFormatError(
                f"the newest change seen is stored in a form this release does not know "
                f"(format {raw[:1].hex() or 'none'}, {len(raw)} bytes)"
            )
        _format, major, minor, committed_ms = _SEEN.unpack(raw)
        return Seen((major, minor), committed_ms)


def seen_of(version: Version, event: Any) -> Seen | None:
    """The position and commit time of a change (``None``: its event has no commit time)."""
    source = event.get("source") if isinstance(event, dict) else None
    ts_ms = source.get("ts_ms") if isinstance(source, dict) else None
    if not isinstance(ts_ms, int) or isinstance(ts_ms, bool):
        return None
    return Seen(version, ts_ms)


def went_back(newest: Seen | None, change: Seen) -> bool:
    """Whether ``change`` is of a new position epoch: below the ``newest`` position seen,
    yet committed more than :data:`CLOCK_MARGIN_MS` after it (a replay never is)."""
    return (
        newest is not None
        and change.version < newest.version
        and change.committed_ms > newest.committed_ms + CLOCK_MARGIN_MS
    )


def newer(newest: Seen | None, change: Seen) -> Seen:
    """The newest of the two, by position."""
    return change if newest is None or change.version > newest.version else newest
