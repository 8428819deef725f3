"""Two versions of Tidemark's data plane on the same topics, in alternating rounds.

What a change to the commit protocol or the rules costs: each of the two
trees (a checkout of another commit, and this one) runs ``bench/envelopes.py``'s
own programs (``--child tidemark-<envelope>``) on the same loaded topics, on
one broker, round after round (A, B, A, B, ...), so the machine's drift hits
both alike. Prints the median of each and writes ``bench/results/compare.json``.

    git worktree add /tmp/before <commit>
    python bench/compare.py /tmp/before [--programs tidemark-upsert,...] [--rounds 3] \
        [--results compare]

The "after" tree is the one this file lies in: to measure one commit against its
parent, copy this file into a worktree of that commit and run it from there.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import envelopes
from results_file import commit_of, write_results

ROOT = Path(__file__).resolve().parent.parent
#: The input each program reads (the envelope benchmark's formats).
INPUTS = {
    "tidemark-upsert": "flat",
    "tidemark-debezium-upsert": "json",
    "tidemark-debezium": "json",
    "tidemark-upsert-avro": "avro-flat",
    "tidemark-debezium-upsert-avro": "avro",
    "tidemark-debezium-avro": "avro",
}


def run(tree: Path, program: str, bootstrap: str, topic: str, events: int, registry: str) -> Any:
    """One run of ``program`` from ``tree``'s code; its figures."""
    cmd = [
        sys.executable,
        str(tree / "bench" / "envelopes.py"),
        *("--child", program, "--bootstrap", bootstrap, "--topic", topic),
        *("--events", str(events), "--registry", registry),
    ]
    done = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(tree)),
        cwd=tree,
        timeout=900,
        check=False,
    )
    lines = [line[line.index("{") :] for line in done.stdout.splitlines() if '{"events"' in line]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{program} from {tree} failed: {done.stderr[-3000:]}")
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path, help="a checkout of the version to compare with")
    parser.add_argument(
        "--programs", default="tidemark-upsert,tidemark-debezium-upsert,tidemark-debezium"
    )
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--input",
        choices=sorted(set(INPUTS.values()) | {"json-schema", "json-toast"}),
        help="the input of every program (default: each program's own, INPUTS)",
    )
    parser.add_argument(
        "--results", default="compare", help="the results file's name (bench/results/<name>.json)"
    )
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": ROOT}
    programs = args.programs.split(",")
    inputs = {p: args.input or INPUTS[p] for p in programs}

    from tidemark.core.schema_registry import HttpRegistry
    from tidemark.devstack import broker
    from tidemark.devstack.procs import stop_pid
    from tidemark.devstack.registry import make_server

    run_dir = Path(tempfile.mkdtemp(prefix="tidemark-compare-"))
    pid, port = broker.start_broker(run_dir)
    server = make_server(0, None)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    registry = f"http://127.0.0.1:{server.server_address[1]}"
    bootstrap = f"127.0.0.1:{port}"
    measured: dict[tuple[str, str], list[Any]] = {}
    try:
        client = HttpRegistry(registry)
        ids = {
            "key": client.register("bench-key", json.dumps(envelopes.KEY_SCHEMA)),
            "value": client.register("bench-value", json.dumps(envelopes.VALUE_SCHEMA)),
            "row": client.register("bench-row", json.dumps(envelopes.ROW_SCHEMA)),
        }
        topics = {fmt: f"bench.public.compare_{fmt.replace('-', '_')}" for fmt in inputs.values()}
        for fmt in set(inputs.values()):
            envelopes.load(bootstrap, topics[fmt], args.events, args.keys, fmt, ids)
        for _ in range(args.rounds):
            for program in programs:
                for label, tree in trees.items():
                    figures = run(
                        tree, program, bootstrap, topics[inputs[program]], args.events, registry
                    )
                    measured.setdefault((program, label), []).append(figures)
    finally:
        server.shutdown()
        server.server_close()
        stop_pid(pid, broker.MARKER)
        shutil.rmtree(run_dir, ignore_errors=True)
    results = []
    for (program, label), runs in sorted(measured.items()):
        rates = sorted(r["events"] / r["seconds"] for r in runs)
        cpu = statistics.median(r["cpu_s"] / r["events"] * 1e6 for r in runs)
        results.append(
            {
                "program": program,
                "version": label,
                "input": inputs[program],
                "events_per_s": round(statistics.median(rates)),
                "events_per_s_runs": [round(r) for r in rates],
                "cpu_us_per_event": round(cpu, 2),
            }
        )
        print(
            f"{program:32} {label:7} {results[-1]['events_per_s']:>9,} events/s  {cpu:5.1f} CPU-µs"
        )
    versions = {label: commit_of(tree) for label, tree in trees.items()}
    write_results(
        args.results,
        results,
        "bench/compare.py",
        **versions,
        events=args.events,
        rounds=args.rounds,
    )


if __name__ == "__main__":
    main()
