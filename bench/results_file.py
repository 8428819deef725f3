"""Where the benchmarks write their figures: ``bench/results/<name>.json``, with the machine."""

from __future__ import annotations

import json
import os
import platform
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
