"""Where the benchmarks write their figures: ``bench/results/<name>.json``, with the machine."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def write_results(
    name: str, results: list[dict[str, Any]], script: str = "", **fields: Any
) -> Path:
    """Write a benchmark's document (its command line, ``fields``, the machine, the results)
    to ``<name>.json``; ``script``: the benchmark's file when not ``bench/<name>.py``."""
    document = {
        "benchmark": name,
        "command": " ".join(["python", script or f"bench/{name}.py", *sys.argv[1:]]),
        "commit": commit_of(RESULTS.parent.parent),
        **fields,
        "machine": {
            "python": platform.python_version(),
            "cpu": platform.machine(),
            "cores": os.cpu_count(),
        },
        "results": results,
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(document, indent=2) + "\n")
    print(f"written: {path}")
    return path


def commit_of(tree: Path) -> str:
    """The commit ``tree`` is checked out at (``+`` when it has changes not committed, the
    results files aside)."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(tree), *args], capture_output=True, text=True, check=False
        )
        return done.stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results")
    return git("rev-parse", "--short", "HEAD") + ("+" if dirty else "")
