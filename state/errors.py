"""Errors of the state layer."""

from __future__ import annotations

from tidemark.errors import TidemarkError


class StateError(TidemarkError):
    """State could not be opened, read or written."""
