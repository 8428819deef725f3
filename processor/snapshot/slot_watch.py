"""Debezium's replication slot, shown as metrics: every processor instance reads it every
:data:`WATCH_EVERY_S` through its connector (PostgreSQL: :mod:`.postgres.slot`).

A slot that nobody reads holds WAL back without bound, and one that PostgreSQL
invalidated under ``max_slot_wal_keep_size`` (``wal_status`` ``lost``) cannot stream
again: Debezium then has to take a new snapshot. The alerts on these metrics and their
runbook are in ``docs: Troubleshooting``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from processor import metrics
from processor.errors import ProcessorError

log = logging.getLogger(__name__)

#: Seconds between two readings of the slot.
WATCH_EVERY_S = 30.0
#: ``wal_status`` values (PostgreSQL 13 and later), from safe to lost.
WAL_STATUSES = ("reserved", "extended", "unreserved", "lost")


@dataclass(frozen=True)
class SlotState:
    """One reading of a replication slot; ``exists`` false when there is no such slot."""

    exists: bool
    active: bool = False
    #: Bytes of WAL the slot holds back (from its restart position to the insert position).
    retained_wal_bytes: int = 0
    #: One of :data:`WAL_STATUSES` (``''`` for no slot).
    wal_status: str = ""
    #: Bytes of WAL that may still be written before the slot is lost; ``None`` when
    #: ``max_slot_wal_keep_size`` is unlimited.
    safe_wal_bytes: int | None = None


def show(slot: str, state: SlotState) -> None:
    """Set the slot's metrics from ``state``."""
    metrics.SLOT_MISSING.labels(slot).set(0 if state.exists else 1)
    metrics.SLOT_ACTIVE.labels(slot).set(1 if state.active else 0)
    metrics.SLOT_RETAINED_WAL.labels(slot).set(state.retained_wal_bytes)
    for status in WAL_STATUSES:
        metrics.SLOT_WAL_STATUS.labels(slot, status).set(1 if state.wal_status == status else 0)
    safe = -1 if state.safe_wal_bytes is None else state.safe_wal_bytes
    metrics.SLOT_SAFE_WAL.labels(slot).set(safe)


def watch(slot: str, read: Callable[[], SlotState | None]) -> None:
    """Read the slot once and show it; a reading that fails (the source cannot be reached,
    or refused) is counted and logged, never raised: the next reading tries again."""
    try:
        state = read()
    except ProcessorError as exc:
        metrics.SLOT_READ_FAILURES.inc()
        log.warning("the replication slot %s was not read: %s", slot, exc)
        return
    if state is not None:
        show(slot, state)
