"""``make fidelity``: every value of every Debezium value setting, one connector run each.

For each format (JSON with schemas, schemaless JSON, Avro) and each value other
than the connector's default (one setting at a time, the others at their
defaults), a Debezium bridge of its own streams the rows of a table of every
supported type, and :func:`~tests.integration.test_chunk_events.compare_under_settings`
compares chunk rows encoded under the same settings with its events, column by
column, and checks that the defaults would be refused. ``make test`` runs one
combined run per format; this is the full matrix. Writes ``bench/results/fidelity.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from tests.integration.test_chunk_events import compare_under_settings
from tidemark.core.config import Config, DevConfig, ProcessorConfig
from tidemark.core.debezium_settings import CHOICES
from tidemark.core.ports import free_port
from tidemark.core.schema_registry import HttpRegistry, SchemaCache
from tidemark.devstack.stack import DevStack

FORMATS = ("json", "json-schemaless", "avro")
VALUES = [(setting, value) for setting, choices in CHOICES.items() for value in choices[1:]] + [
    ("money.fraction.digits", "0"),
    ("money.fraction.digits", "4"),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/fidelity.json"))
    args = parser.parse_args(argv)
    run_dir = tempfile.mkdtemp(prefix="tidemark-fidelity-")
    base = Config(
        processor=ProcessorConfig(web_port=free_port(), state_dir=f"{run_dir}/state"),
        dev=DevConfig(debezium_format="avro"),  # the registry; JSON bridges ignore it
    )
    stack = DevStack(Path(run_dir), base)
    stack.up()
    runs: list[dict[str, Any]] = []
    try:
        schemas = SchemaCache(HttpRegistry(stack.config.kafka.schema_registry_url))
        for fmt in FORMATS:
            for setting, value in VALUES:
                started = time.monotonic()
                run: dict[str, Any] = {"format": fmt, "setting": setting, "value": value}
                try:
                    run["columns_compared"], refused = compare_under_settings(
                        stack,
                        fmt,
                        schemas if fmt == "avro" else None,
                        {setting: value},
                        f"iso_fid_{len(runs)}",
                    )
                    run["passed"] = True
                    run["refused_under_the_defaults"] = sorted(refused)
                except AssertionError:
                    run["passed"], run["error"] = False, traceback.format_exc()[-2000:]
                run["seconds"] = round(time.monotonic() - started, 1)
                print(json.dumps(run), flush=True)
                runs.append(run)
    finally:
        stack.down()
        shutil.rmtree(run_dir, ignore_errors=True)
    failed = sum(not r["passed"] for r in runs)
    result = {
        "runs": runs,
        "passed": len(runs) - failed,
        "failed": failed,
        "command": " ".join(["python -m tests.fidelity.run", *sys.argv[1:]]),
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
