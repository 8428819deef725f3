"""Errors of the state layer."""

from __future__ import annotations

from tidemark.core.errors import TidemarkError


class StateError(TidemarkError):
    """State could not be opened, read or written."""
