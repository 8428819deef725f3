"""Errors of the command line, the development stack and the checks against the source."""

from __future__ import annotations

from tidemark.errors import TidemarkError


class DevStackError(TidemarkError):
    """A component of the embedded development stack could not start or stop."""


class NotCaughtUpError(TidemarkError):
    """The pipeline (Debezium or the processor) did not catch up with the source in time."""
