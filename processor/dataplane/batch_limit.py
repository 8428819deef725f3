"""How many records the data plane takes a batch: as many as it commits well within the
poll deadline.

A batch's commit costs about one broker request's share per partition it wrote to:
its outputs, changelogs and transaction markers. With hundreds of partitions in each
batch, a batch of ``processor.batch_size`` records can take longer than
``kafka.max_poll_interval_ms``: the group then takes every partition away, and the
instance joins again, over and over (measured at 200 and 500 tables on the embedded
broker). So the limit halves after a batch that took more than its budget, a quarter
of the poll interval, and doubles back towards ``processor.batch_size`` after one that
took less than a quarter of the budget.
"""

from __future__ import annotations

#: The fewest records a batch is cut down to.
MIN_RECORDS = 100


def next_batch_limit(current: int, seconds: float, budget: float, ceiling: int) -> int:
    """The next batch's record limit after one of ``current`` that took ``seconds``."""
    if seconds > budget:
        current //= 2
    elif seconds < budget / 4:
        current *= 2
    return max(min(MIN_RECORDS, ceiling), min(ceiling, current))
