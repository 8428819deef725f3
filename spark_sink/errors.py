"""Errors of the sink, and the two signals its executors send the driver.

:class:`SchemaDrift`, :class:`TableStop` and :class:`TableRetry` keep names that
say what happens rather than ``...Error``: they are deliberate control flow. An
executor raises one, Spark carries its text (with a marker) to the driver, and
the driver re-plans the batch, stops the table or tries the batch again
(:mod:`spark_sink.job`).
"""

from __future__ import annotations

from tidemark.core.errors import TidemarkError

#: Markers that carry an executor's verdict through Spark's exception text to the driver.
DRIFT_MARKER = "tidemark-schema-drift"
STOP_MARKER = "tidemark-table-stop"
RETRY_MARKER = "tidemark-table-retry"


class SchemaError(TidemarkError):
    """A reconciled topic's schema cannot be mapped to its table; the table stops."""


class SchemaDrift(TidemarkError):  # noqa: N818 - a signal to re-plan, not a failure
    """An event does not fit the batch's plan: plan again from every schema in the batch."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"{DRIFT_MARKER}: {reason}")


class TableStop(TidemarkError):  # noqa: N818 - named for what happens
    """An event cannot be materialized; its table stops with this message."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"{STOP_MARKER}: {reason}")


class TableRetry(TidemarkError):  # noqa: N818 - named for what happens
    """A table's batch did not finish for a passing reason (a read stalled, Kafka did not
    answer, a commit met a concurrent one): it is tried again, from the table's commits."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"{RETRY_MARKER}: {reason}")
        self.reason = reason
