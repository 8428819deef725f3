"""What every test session checks first, and the marker each test gets from its folder.

- ``tests/unit/``: ``unit``, the tests that need no real component (``make unit``);
- ``tests/integration/``: ``integration``, the tests against real components
  (``make integration``).

A test anywhere else is an error, so that no test can miss both loops. Before any test
runs, the compiled modules are checked against the C sources on disk: a module built
from older sources would test code nobody is editing (``make`` rebuilds them).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

from tidemark.core.compiled import stale_modules

TESTS = Path(__file__).parent
#: A test's first folder under ``tests/`` and the marker it gives.
FOLDER_MARKERS = {"unit": "unit", "integration": "integration"}

# No example fails for its time: a loaded machine, or a build with the sanitizers, is
# slower, not wrong (the suite never asserts a wall-clock time).
settings.register_profile("tidemark", deadline=None)
settings.load_profile("tidemark")


def pytest_sessionstart(session: pytest.Session) -> None:
    stale = stale_modules(TESTS.parent)
    if stale:
        raise pytest.UsageError(
            "compiled modules built from other sources than those on disk: "
            + ", ".join(stale)
            + " (make setup rebuilds them)"
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        folder = item.path.relative_to(TESTS).parts[0]
        marker = FOLDER_MARKERS.get(folder)
        if marker is None:
            raise pytest.UsageError(
                f"{item.nodeid}: a test lives in tests/unit or tests/integration"
            )
        item.add_marker(getattr(pytest.mark, marker))
