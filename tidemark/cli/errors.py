"""Errors of the command line and of the checks against the source."""

from __future__ import annotations

from tidemark.core.errors import TidemarkError


class NotCaughtUpError(TidemarkError):
    """The pipeline (Debezium or the processor) did not catch up with the source in time."""
