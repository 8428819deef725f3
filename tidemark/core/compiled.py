"""The compiled modules, and the digest of the C sources each was built from.

``setup.py`` builds every extension listed here with :func:`sources_digest` of all the
project's C sources and headers, which the module keeps as ``SOURCES_DIGEST``. The tests
check it against the files on disk before they start (:func:`stale_modules`), so a test
never runs a module built from other sources than those being edited. Standard library
only: ``setup.py`` loads this file by its path, before anything is built.
"""

from __future__ import annotations

import hashlib
import importlib
from pathlib import Path

#: Each compiled module, with its C source (relative to the project's root).
EXTENSIONS = {
    "tidemark.core._jsonscan": "tidemark/core/_jsonscan.c",
    "tidemark.core._avroread": "tidemark/core/_avroread.c",
    "tidemark.core._records": "tidemark/core/_records.c",
    "processor.reconcile._fused": "processor/reconcile/_fused.c",
}
#: The folders whose ``*.c`` and ``*.h`` files the modules are built from.
SOURCE_FOLDERS = ("tidemark", "processor", "state", "spark_sink")
#: Where the shared headers are (``-I``).
INCLUDE_FOLDER = "tidemark/core"


def c_sources(root: Path) -> list[Path]:
    """Every C source and header of the project under ``root``, in a stable order."""
    found = [
        path
        for folder in SOURCE_FOLDERS
        for pattern in ("*.c", "*.h")
        for path in (root / folder).rglob(pattern)
    ]
    return sorted(found, key=lambda path: path.relative_to(root).as_posix())


def sources_digest(root: Path) -> str:
    """SHA-256 of every C source and header (their paths and bytes) under ``root``."""
    digest = hashlib.sha256()
    for path in c_sources(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def stale_modules(root: Path) -> list[str]:
    """The compiled modules not built from the sources now under ``root`` (or missing)."""
    expected = sources_digest(root)
    stale = []
    for name in EXTENSIONS:
        try:
            built = getattr(importlib.import_module(name), "SOURCES_DIGEST", None)
        except ImportError:
            built = None
        if built != expected:
            stale.append(name)
    return stale
