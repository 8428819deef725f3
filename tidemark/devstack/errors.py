"""Errors of the embedded development stack."""

from __future__ import annotations

from tidemark.core.errors import TidemarkError


class DevStackError(TidemarkError):
    """A component of the embedded development stack could not start or stop."""
