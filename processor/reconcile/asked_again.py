"""Keys asked again: pending keys are asked for their row until it comes.

A pending key (:class:`processor.reconcile.versions.Entry`) emits nothing until its row,
read again from the source, arrives. The request to read it can fail to come back: the
coordinator refuses it (the table's encoding disagrees with its topic, the queue is
full), or the backfill that serves it is aborted. So every key asked for is also noted
in the partition's state, under ``ASKED + when + key``, with its key columns; once that
time has passed, a batch asks again for each noted key that is still pending, and notes
it again twice as far ahead (at most :data:`LONGEST_WAIT_S`), and forgets the others.
Noted in state, the index is written and removed with the batches that ask, so a crash
or another replica asks again too.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, NamedTuple

import orjson

from processor.errors import StateFormatError
from processor.reconcile.envelopes import ENTRY, KeyState
from processor.reconcile.versions import Entry
from state.store import PartitionStore

ASKED = b"a"
#: The longest wait between two requests for one key.
LONGEST_WAIT_S = 3600.0
#: Noted keys looked at per partition and batch.
PAGE = 2000
_WHEN = struct.Struct(">Q")
_HEAD = struct.Struct(">BI")  # format, requests made so far
_FORMAT = 1


class Due(NamedTuple):
    """A noted key whose time has come."""

    key: bytes  # the key's bytes in state
    fields: dict[str, Any]  # its key columns, as the request names them
    asked: int  # requests made so far


def note(
    state: KeyState, key: bytes, fields: Mapping[str, Any], now_ms: int, first_s: float, asked: int
) -> int:
    """Note that ``key`` was asked for (the ``asked``-th time): it is asked again after
    ``first_s`` doubled ``asked - 1`` times. Returns when, in ms."""
    wait_s = min(first_s * 2 ** min(asked - 1, 32), max(first_s, LONGEST_WAIT_S))
    when = now_ms + int(wait_s * 1000)
    value = _HEAD.pack(_FORMAT, asked) + orjson.dumps(dict(fields))
    state.put(ASKED + _WHEN.pack(when) + key, value)
    return when


def next_due(state: KeyState | PartitionStore) -> int | None:
    """When the first noted key is due (ms), or ``None``: none is noted."""
    first = state.keys(ASKED, limit=1)
    return _WHEN.unpack_from(first[0], len(ASKED))[0] if first else None


def take_due(state: KeyState, now_ms: int, limit: int = PAGE) -> list[Due]:
    """Remove the noted keys due by ``now_ms`` (at most ``limit``) and return those still
    pending. A note in a form this release does not know raises
    :class:`StateFormatError`."""
    due = []
    before = ASKED + _WHEN.pack(now_ms + 1)
    for noted in state.keys(ASKED, before=before, limit=limit):
        value = state.get(noted)
        state.put(noted, None)
        if value is None:
            continue
        if len(value) < _HEAD.size or value[0] != _FORMAT:
            raise StateFormatError(
                f"a key asked again is noted in a form this release does not know "
                f"(format {value[:1].hex() or 'none'})"
            )
        key = noted[len(ASKED) + _WHEN.size :]
        stored = state.get(ENTRY + key)
        if stored is None or not Entry.decode(stored).pending:
            continue  # its row came, or a change replaced it
        fields = orjson.loads(value[_HEAD.size :])
        due.append(Due(key, fields, _HEAD.unpack_from(value)[1]))
    return due
