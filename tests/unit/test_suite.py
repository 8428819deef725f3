"""The suite's own rules: what make rebuilds, what the tests run, what make fuzz selects."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

from tidemark.core.compiled import EXTENSIONS, c_sources, stale_modules

ROOT = Path(__file__).resolve().parents[2]


def _make_question(*args: str) -> int:
    """``make -q`` of the compiled modules' target: 0 up to date, 1 to be rebuilt."""
    venv = Path(sys.prefix)
    command = ["make", "-q", "-C", str(ROOT), f"VENV={venv}", *args, f"{venv}/.compiled"]
    return subprocess.run(command, capture_output=True, check=False).returncode


def test_make_builds_the_modules_again_after_any_c_source_or_header_changes() -> None:
    sources = c_sources(ROOT)
    assert {p.suffix for p in sources} == {".c", ".h"}
    assert {p.relative_to(ROOT).as_posix() for p in sources} >= set(EXTENSIONS.values())
    assert _make_question() == 0, "the compiled modules are not up to date: run make setup"
    for path in sources:
        edited = path.relative_to(ROOT).as_posix()  # as the Makefile names it
        assert _make_question("-W", edited) == 1, f"make does not rebuild after {edited}"


def test_an_edited_source_or_header_makes_every_module_stale(tmp_path: Path) -> None:
    """What tests/conftest.py checks before a session: the modules loaded were built from
    the sources on disk, and any edit of any of them tells."""
    assert stale_modules(ROOT) == []
    for edited in (ROOT / "tidemark/core/_records.c", ROOT / "tidemark/core/jsonscan_api.h"):
        copy = tmp_path / edited.name
        for path in c_sources(ROOT):
            target = copy / path.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        assert stale_modules(copy) == []
        with (copy / edited.relative_to(ROOT)).open("a") as source:
            source.write("/* an edit */\n")
        assert stale_modules(copy) == list(EXTENSIONS)


def _marked_fuzz(node: ast.FunctionDef) -> bool:
    return any(ast.unparse(d) == "pytest.mark.fuzz" for d in node.decorator_list)


def test_a_test_is_marked_fuzz_exactly_when_it_reads_the_fuzz_scale() -> None:
    """make fuzz selects by the marker; a scaled test without it would be left out."""
    scaled = 0
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test"):
                continue
            names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            reads = "SCALE" in names
            assert reads == _marked_fuzz(node), f"{path.name}::{node.name}"
            scaled += reads
    assert scaled >= 25
