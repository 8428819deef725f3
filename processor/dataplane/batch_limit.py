"""How much the data plane takes a batch: rows up to a limit, and a limit it commits well
within the poll deadline.

A batch's memory grows with its rows, not its records: a backfill record frames up to
:data:`~processor.events.chunk_records.ROWS_PER_RECORD` rows, and 5,000 framed records
made a batch of 80,000 rows and a processor of 1.7 GB (``bench/backfill.py``). So the
limit counts rows, and :func:`take_batch` takes records until they hold it.

A batch's commit costs about one broker request's share per partition it wrote to:
its outputs, changelogs and transaction markers. With hundreds of partitions in each
batch, a batch of ``processor.batch_size`` rows can take longer than
``kafka.max_poll_interval_ms``: the group then takes every partition away, and the
instance joins again, over and over (measured at 200 and 500 tables on the embedded
broker). So the limit halves after a batch that took more than its budget, a quarter
of the poll interval, and doubles back towards ``processor.batch_size`` after one that
took less than a quarter of the budget.

An assignment starts the limit again at its floor (:func:`after_assignment`): the first
batch after it takes the backlog of every partition just assigned, hundreds of
partitions at once, and one such batch past the poll interval undoes the assignment
(measured at 500 tables: 11.4 s against 10 s). Then each batch within the budget doubles
it, back up to the limit it had before the assignment (as TCP's slow start climbs back
to its threshold), and the rule above takes over; a batch past the budget ends the climb.
Since the climb doubles only after a batch within the budget, a batch whose cost grows
with its rows takes at most twice the budget: half the poll interval.
A batch within the budget but not quick would not double the limit under the rule
above, and a limit left at the floor after every assignment would stay there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from processor.events.chunk_records import ROWS_PER_RECORD

#: The fewest rows a batch is cut down to.
MIN_ROWS = 100

Record = TypeVar("Record")


@dataclass(frozen=True)
class Limit:
    """A batch's row limit; while it climbs back after an assignment, the limit it climbs
    back to (0: none)."""

    rows: int
    climb_to: int = 0


def after_assignment(limit: Limit, ceiling: int) -> Limit:
    """The limit of the first batch after an assignment."""
    return Limit(min(MIN_ROWS, ceiling), max(limit.rows, limit.climb_to))


def next_limit(limit: Limit, seconds: float, budget: float, ceiling: int) -> Limit:
    """The limit after a batch of ``limit.rows`` that took ``seconds``."""
    if limit.climb_to and seconds <= budget:
        rows = min(limit.rows * 2, limit.climb_to, ceiling)
        return Limit(rows, limit.climb_to if rows < min(limit.climb_to, ceiling) else 0)
    return Limit(next_batch_limit(limit.rows, seconds, budget, ceiling))


def next_batch_limit(current: int, seconds: float, budget: float, ceiling: int) -> int:
    """The next batch's row limit after one of ``current`` that took ``seconds``."""
    if seconds > budget:
        current //= 2
    elif seconds < budget / 4:
        current *= 2
    return max(min(MIN_ROWS, ceiling), min(ceiling, current))


def take_batch(
    consume: Callable[[int, float], list[Record]],
    rows: int,
    timeout: float,
    rows_in: Callable[[Record], int],
    rebalances: Callable[[], int],
) -> list[Record]:
    """Records that hold ``rows`` rows, one record's more at most, in the consumer's
    order, waiting at most ``timeout`` seconds for them.

    ``consume(count, timeout)`` is the consumer's: up to ``count`` records, fewer only
    when the wait ran out. A record's rows are known only once it is taken, so each call
    asks for as many records as the rows left allow were each a full backfill record
    (``rows_in`` gives at most :data:`ROWS_PER_RECORD`), and one at least. Plain records
    then take a few dozen calls a batch, each under a microsecond. The batch ends when
    the rows are there, or when a call comes back short.

    A rebalance callback runs inside a call (``rebalances()`` counts them). The records
    earlier calls took may then be of partitions revoked since, and every partition
    assigned starts again at its committed offset; librdkafka drops such records from
    the call that ran the callback, so the batch is that call's records alone.
    """
    deadline = time.monotonic() + timeout
    batch: list[Record] = []
    left, wait = rows, timeout
    while True:
        count = max(1, left // ROWS_PER_RECORD)
        before = rebalances()
        taken = consume(count, wait)
        if rebalances() != before:
            return taken
        batch += taken
        left -= sum(map(rows_in, taken))
        if len(taken) < count or left <= 0:
            return batch
        wait = max(0.0, deadline - time.monotonic())
