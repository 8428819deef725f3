"""Module docstrings written into hand-written pages, so that a page says what the code
says in the code's own words: a line ``<!-- generated: path/to/module.py -->`` becomes the
docstring of that module (``docs/concepts/commit-protocol.md`` takes the commit
protocol's steps from ``processor/dataplane/commit.py`` this way)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

from refs.markdown import need, rst

MARKER = re.compile(r"^<!-- generated: ([\w/.-]+\.py) -->$", re.MULTILINE)


def docstring_markdown(module: Path) -> str:
    """The module's docstring with its reStructuredText roles as code spans."""
    text = ast.get_docstring(ast.parse(module.read_text()), clean=False)
    return rst(inspect.cleandoc(need(text, f"the module {module}")))


def fill(page: str, root: Path) -> str:
    """``page`` with each marker replaced by its module's docstring (a missing module or
    docstring stops the build)."""
    return MARKER.sub(lambda found: docstring_markdown(root / found.group(1)), page)


def pages(docs: Path) -> list[Path]:
    """The pages under ``docs`` that hold a marker."""
    return sorted(p for p in docs.rglob("*.md") if MARKER.search(p.read_text()))
