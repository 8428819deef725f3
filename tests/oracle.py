"""The verdict on a reconciled topic, from its source's history and rows: the crash tests'
and the chaos run's.

- ``lost``: keys whose folded output (the last row per key) differs from the
  source table's row, present or absent.
- ``split_keys``: keys found in more than one partition of the topic.
- ``stale``: emitted rows that go back in the key's history. The history is the
  change topic's (Debezium's) sequence of rows per key; an emitted row is one of
  them (a backfill's row is the row at its snapshot). At least once lets a crash
  send again a run of rows already emitted, in order: such re-sent runs are
  removed first (:func:`strip_resent`); what is left must move forward.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

Key = tuple[Any, ...]
Row = dict[str, Any]
#: A row as compared: its columns' JSON text (``None``: the key is absent, deleted).
Digest = bytes | None


def digest(row: Row | None) -> Digest:
    return None if row is None else orjson.dumps(row, option=orjson.OPT_SORT_KEYS)


@dataclass
class Verdict:
    """What one topic's check found (every count must be 0 but ``changes_checked``)."""

    changes_checked: int = 0
    lost: int = 0
    stale: int = 0
    split_keys: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, other: Verdict) -> None:
        self.changes_checked += other.changes_checked
        self.lost += other.lost
        self.stale += other.stale
        self.split_keys += other.split_keys
        self.examples += other.examples[: max(0, 20 - len(self.examples))]


def with_truncates(
    events: Mapping[Key, list[tuple[int, Digest]]], truncates: list[int]
) -> dict[Key, list[Digest]]:
    """Each key's history (``None`` first) from its ``(position, row)`` events in the
    order they were written, with a delete wherever they cross the position of one of
    ``truncates`` (a truncate event has no key), and after the last one when a truncate
    came later. Positions are the source's (an LSN): an event that goes back (the
    connector's snapshot again) crosses nothing."""
    marks = sorted(truncates)
    history: dict[Key, list[Digest]] = {}
    for key, rows in events.items():
        kept: list[Digest] = [None]
        reached = -1
        for position, row in rows:
            if kept[-1] is not None and any(reached < t < position for t in marks):
                kept.append(None)
            reached = max(reached, position)
            kept.append(row)
        if kept[-1] is not None and any(t > reached for t in marks):
            kept.append(None)
        history[key] = kept
    return history


def strip_resent(indices: list[int]) -> tuple[list[int], int]:
    """Positions in a key's history, as emitted, without their re-sent runs; and how many
    went back without being one (stale).

    A re-sent run starts at a position emitted before and goes on through the positions
    emitted after it, in order. What remains moves strictly forward.
    """
    kept: list[int] = []
    stale = 0
    at = 0
    while at < len(indices):
        position = indices[at]
        at += 1
        if not kept or position > kept[-1]:
            kept.append(position)
            continue
        if position not in kept:
            stale += 1
            continue
        follows = kept.index(position) + 1
        while at < len(indices) and follows < len(kept) and indices[at] == kept[follows]:
            at += 1
            follows += 1
    return kept, stale


def positions(history: list[Digest], emitted: list[Digest]) -> list[int]:
    """Where each emitted row is in ``history``: the next occurrence after the last one
    found, else the latest before it (a re-send), else -1 (never in the history).

    A key whose history holds the same row twice (a value set back) is ambiguous: a
    re-sent row may read as the later copy and the rest of its run as going back. When
    that first reading has stale rows, any reading without them is taken instead
    (:func:`_reading_without_stale`): the rows are the same bytes either way.
    """
    found = _first_reading(history, emitted)
    if -1 in found or not strip_resent(found)[1]:
        return found
    options = [[i for i, h in enumerate(history) if h == row] for row in emitted]
    if all(len(o) == 1 for o in options):
        return found
    return _reading_without_stale(options) or found


def _first_reading(history: list[Digest], emitted: list[Digest]) -> list[int]:
    found: list[int] = []
    cursor = 0
    for row in emitted:
        at = next((i for i in range(cursor, len(history)) if history[i] == row), None)
        if at is None:
            at = next(
                (i for i in range(min(cursor, len(history) - 1), -1, -1) if history[i] == row), -1
            )
        else:
            cursor = at
        found.append(at)
    return found


def _reading_without_stale(options: list[list[int]], budget: int = 20_000) -> list[int] | None:
    """One position per emitted row, from its ``options``, with no stale row; ``None`` if
    there is none (or the search ran out of ``budget`` steps). A prefix with a stale row
    stays stale however it goes on, so the search drops it at once."""
    chosen: list[int] = []
    steps = [budget]

    def extend(at: int) -> bool:
        if at == len(options):
            return True
        for position in options[at]:
            steps[0] -= 1
            if steps[0] < 0:
                return False
            chosen.append(position)
            if not strip_resent(chosen)[1] and extend(at + 1):
                return True
            chosen.pop()
        return False

    return chosen if extend(0) else None


def check_topic(
    history: Mapping[Key, list[Digest]],
    emitted: Iterable[tuple[Key, int, Digest]],
    source: Mapping[Key, Digest],
    name: str,
) -> Verdict:
    """``emitted``: ``(key, partition, row)`` in partition and offset order (tombstones
    left out); ``history``: each key's rows from the change topic, ``None`` first;
    ``source``: the table's rows now."""
    verdict = Verdict()
    by_key: dict[Key, list[Digest]] = {}
    partitions: dict[Key, set[int]] = {}
    for key, partition, row in emitted:
        by_key.setdefault(key, []).append(row)
        partitions.setdefault(key, set()).add(partition)
        verdict.changes_checked += 1
    for key in set(by_key) | set(source):
        rows = by_key.get(key, [])
        last = rows[-1] if rows else None
        if last != source.get(key):
            verdict.lost += 1
            verdict.examples.append(f"{name} {key}: output {last!r:.200} != source")
        if len(partitions.get(key, ())) > 1:
            verdict.split_keys += 1
            verdict.examples.append(f"{name} {key}: in partitions {sorted(partitions[key])}")
        if rows:
            indices = positions(history.get(key, [None]), rows)
            unknown = indices.count(-1)
            _kept, stale = strip_resent([i for i in indices if i >= 0])
            if unknown or stale:
                verdict.stale += unknown + stale
                verdict.examples.append(f"{name} {key}: went back in history {indices[-20:]}")
    return verdict
