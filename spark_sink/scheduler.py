"""Which tables the sink merges next, and a few of them at once.

A table's round reads its topic's ends, merges what its table lacks up to them (at most
``sink.max_records_per_partition`` a partition) and commits. Rounds of different tables
run side by side in one Spark driver, at most ``sink.concurrent_tables`` at once
(:class:`TablePool`): while one table's tasks hold the cores, another's driver work
(planning, the Iceberg commit, reading offsets) goes on. A round that ran one after
another grew with the number of active tables, and so did every table's lag.

A table is due (:class:`Schedule`) ``sink.trigger_interval_s`` after a round that read
all it found, at once after a round that left records (cut short by the per-partition
cap). Whenever a place is free, it goes to the table due the longest; among tables due
alike (at start, or ``--once``), to the stalest (:func:`stalest_first`): the one whose
table lacks the oldest record. So a table with a long backlog takes its turn with the
others, and does not starve them.

The same pool runs ``--once`` and :meth:`~spark_sink.job.Sink.run_batch`: every table
up to fixed targets, a round each, side by side. Later, a transaction-consistent cut
will give those targets (``../design/transaction-cuts.md``).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import TracebackType

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    """What one round of a table did."""

    #: Ranges (topic-partitions) it read.
    read: int
    #: It left records it found unread: its next round is due at once.
    more: bool


def stalest_first(topics: Iterable[str], fresh_until: Mapping[str, int | None]) -> list[str]:
    """``topics``, the stalest first: by the time (ms) up to which their table holds every
    record, unknown (a table not read yet) first; then by name."""
    return sorted(topics, key=lambda topic: (fresh_until.get(topic) or 0, topic))


class Schedule:
    """When each table is due for its next round (times are ``time.monotonic()``)."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._due: dict[str, float] = {}

    def due(self, topics: Iterable[str], now: float) -> list[str]:
        """The tables of ``topics`` due at ``now`` (a table never run is due)."""
        return [topic for topic in topics if self._due.get(topic, 0.0) <= now]

    def done(self, topic: str, outcome: Outcome, now: float) -> None:
        """``topic``'s round ended at ``now`` with ``outcome``."""
        self._due[topic] = now if outcome.more else now + self.interval_s

    def order(self, topics: Iterable[str], fresh_until: Mapping[str, int | None]) -> list[str]:
        """``topics``, the one due the longest first; the stalest among those due alike."""
        stalest = stalest_first(topics, fresh_until)
        return sorted(stalest, key=lambda topic: self._due.get(topic, 0.0))  # stable

    def wait_s(self, topics: Iterable[str], now: float) -> float:
        """Seconds until the first of ``topics`` is due (0: one is), at most the interval."""
        waits = [self._due.get(topic, 0.0) - now for topic in topics]
        return max(0.0, min(waits, default=self.interval_s))

    def forget(self, keep: Iterable[str]) -> None:
        """Forget tables not in ``keep`` (their topics are gone)."""
        kept = set(keep)
        for topic in [t for t in self._due if t not in kept]:
            del self._due[topic]


class TablePool:
    """Rounds of tables in threads, at most ``workers`` at once, one per table.

    A round that raises ends the pool: :meth:`finished` raises it once the rounds in
    flight are over, so that none is cut off in the middle of its commit.
    """

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)
        self._executor = concurrent.futures.ThreadPoolExecutor(
            self.workers, thread_name_prefix="sink-table"
        )
        self._running: dict[concurrent.futures.Future[Outcome], str] = {}

    @property
    def running(self) -> set[str]:
        """The tables whose round is in flight."""
        return set(self._running.values())

    @property
    def free(self) -> int:
        """How many more rounds can start now."""
        return self.workers - len(self._running)

    def start(self, topic: str, round_of: Callable[[str], Outcome]) -> None:
        """Start ``round_of(topic)`` (a place must be free, and ``topic`` not running)."""
        assert self.free > 0 and topic not in self.running
        self._running[self._executor.submit(round_of, topic)] = topic

    def finished(self, timeout: float | None) -> list[tuple[str, Outcome]]:
        """The rounds that ended within ``timeout`` seconds (at least one, unless the
        time ran out or none runs); the first error of a round, once none runs."""
        if not self._running:
            return []
        done, _ = concurrent.futures.wait(
            self._running, timeout, concurrent.futures.FIRST_COMPLETED
        )
        ended = []
        errors = []
        for future in done:
            topic = self._running.pop(future)
            exc = future.exception()
            if exc is None:
                ended.append((topic, future.result()))
            else:
                errors.append((topic, exc))
        if errors:
            for topic, exc in errors[1:]:
                log.error("%s: its round failed too: %s", topic, exc)
            self.drain()
            raise errors[0][1]
        return ended

    def run_all(
        self,
        topics: list[str],
        round_of: Callable[[str], Outcome],
        stop: threading.Event | None = None,
    ) -> int:
        """One round of each of ``topics`` (in their order as places free up), none started
        once ``stop`` is set; the ranges they read together."""
        pending = list(reversed(topics))
        read = 0
        while pending or self._running:
            while pending and self.free and not (stop and stop.is_set()):
                self.start(pending.pop(), round_of)
            if not self._running:
                break
            read += sum(outcome.read for _topic, outcome in self.finished(None))
        return read

    def drain(self) -> BaseException | None:
        """Wait for the rounds in flight; the first error among them (each is logged)."""
        first = None
        for future in concurrent.futures.as_completed(list(self._running)):
            topic = self._running.pop(future)
            exc = future.exception()
            if exc is not None:
                log.error("%s: its round failed: %s", topic, exc)
                first = first or exc
        return first

    def __enter__(self) -> TablePool:
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _exc: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        error = self.drain()
        self._executor.shutdown(wait=True)
        if error is not None and _exc is None:  # a round that failed while stopping
            raise error
