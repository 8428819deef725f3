"""The sink's MERGE against the size of the table: batch time per layout and key spread.

For each table size (``--sizes``, rows) and layout (``--layouts``, of :data:`LAYOUTS`),
a fresh Iceberg table is made by the sink's own code (:class:`spark_sink.writer.Table`,
``create`` then ``lay_out``, so the partition spec, sort order and format version are
the ones a configured layout gives) in a hadoop catalog in a temporary folder, and
filled by one Spark ``INSERT INTO ... SELECT ... FROM range(N)`` (the rows of
``bench/sink.py``'s prefill, written in the table's layout). Then, for each key spread,
``--batches`` batches of ``--changes`` changes each go through
:meth:`spark_sink.writer.Table.merge`, the sink's MERGE (newest per key, then one
``MERGE INTO`` with the offsets in its commit):

- ``uniform``: keys spread over the whole table;
- ``recent``: nine changes in ten on the newest 2% of the keys (the highest ids of
  the fill), one in ten anywhere.

One change in twenty deletes its row; the others update it (or insert it again). The
batch is made by Spark from ``range`` (no Kafka: reading and decoding a batch costs the
same whatever the table's size, and ``bench/sink.py`` measures it), so each figure is
the MERGE's own time. Each batch reports its seconds and its snapshot's file counts
(data files added and removed, delete files added); a layout's figure is the median of
its batches. After the batches the table's rows are counted against the generator's.

Spark ``local[2]`` with the sink's session settings (``--spark-conf`` adds to them), in
a process of its own per table. Prints a table and writes
``bench/results/merge_curve.json``.

    python bench/merge_curve.py [--sizes 1000000,10000000,30000000] [--layouts cow,...]
                                [--changes 50000] [--batches 3] [--spark-conf KEY=VALUE]
"""

# ruff: noqa: S608 - Spark SQL built from this file's constants and numbers only

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from results_file import write_results

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The rows and the fill of bench/sink.py's tables: the same input as its merge-into runs.
from sink import EPOCH_US, PREFILL, SPECS  # noqa: E402

from spark_sink.layout import Layout, layout_change, parse_partition, parse_sort  # noqa: E402
from spark_sink.session import create_session, stop_session  # noqa: E402
from spark_sink.writer import DELETED, OFFSET, TIME, Table  # noqa: E402
from tidemark.core.config import Config, SinkConfig  # noqa: E402

#: Where a change's key comes from: an expression of ``h`` (a hash of the change) and
#: ``n`` (the table's size).
SPREADS = {
    "uniform": "pmod(h, {n})",
    "recent": "IF(pmod(h, 10) = 0, pmod(h DIV 10, {n}), {n} - 1 - pmod(h DIV 10, {n} DIV 50))",
}
BUCKETED = (parse_partition("bucket(16, id)"),)
SORTED = (parse_sort("id"),)
#: Candidate layouts: (the table's layout, its write mode).
LAYOUTS: dict[str, tuple[Layout, str]] = {
    "cow": (Layout(), "copy-on-write"),  # the default until now
    "sorted-cow": (Layout(sort_by=SORTED), "copy-on-write"),
    "bucket-sorted-cow": (Layout(BUCKETED, SORTED), "copy-on-write"),
    "mor-v2": (Layout(), "merge-on-read"),
    "mor-v3": (Layout(format_version=3), "merge-on-read"),
    "sorted-mor-v3": (Layout(sort_by=SORTED, format_version=3), "merge-on-read"),
    "bucket-sorted-mor-v3": (Layout(BUCKETED, SORTED, format_version=3), "merge-on-read"),
}


def batch_sql(view: str, spread: str, rows: int, changes: int, seed: int) -> str:
    """A batch of ``changes`` changes in the sink's batch columns (offset, deleted, time,
    then the table's), keys by ``spread`` over a table of ``rows``."""
    key = SPREADS[spread].format(n=rows)
    return (
        f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT id + {seed * changes} AS {OFFSET}, "
        f"pmod(h DIV 7, 20) = 0 AS {DELETED}, 0L AS {TIME}, {key} AS id, "
        f"concat('changed-', CAST({seed} AS STRING)) AS name, CAST({seed} AS INT) AS qty, "
        f"CAST({seed} AS DOUBLE) AS amount, "
        f"CAST(timestamp_micros({EPOCH_US} + {seed}) AS TIMESTAMP_NTZ) AS updated_at "
        f"FROM (SELECT id, abs(xxhash64({seed}, id)) AS h FROM range({changes}))"
    )


def expected_rows(spark: Any, views: list[str], rows: int) -> int:
    """Rows the table should hold after the batches of ``views`` (newest change per key
    wins, by batch then offset)."""
    union = " UNION ALL ".join(f"SELECT id, {OFFSET}, {DELETED} FROM {v}" for v in views)
    counted = spark.sql(
        f"SELECT count_if(id < {rows} AND deleted) AS gone, count_if(id >= {rows} AND NOT "
        f"deleted) AS new FROM (SELECT id, max_by({DELETED}, {OFFSET}) AS deleted FROM "
        f"({union}) GROUP BY id)"
    ).collect()[0]
    return rows - int(counted["gone"]) + int(counted["new"])


def summary_of(table: Table) -> dict[str, int]:
    """File counts of the table's current snapshot."""
    summary = table.iceberg().currentSnapshot().summary()
    return {
        name: int(summary.get(key) or 0)
        for name, key in (
            ("data_files_added", "added-data-files"),
            ("data_files_removed", "deleted-data-files"),
            ("delete_files_added", "added-delete-files"),
            ("data_files", "total-data-files"),
            ("delete_files", "total-delete-files"),
        )
    }


def run_layout(
    spark: Any, name: str, rows: int, changes: int, batches: int
) -> list[dict[str, Any]]:
    """Make, fill and merge into one table of ``rows`` with layout ``name``."""
    layout, write_mode = LAYOUTS[name]
    table = Table(spark, "curve", "bench", f"t_{name.replace('-', '_')}_{rows}", False)
    spark.sql(f"DROP TABLE IF EXISTS {table.name} PURGE")
    table.create(SPECS, ["id"], write_mode, layout)
    actual, properties = table.layout()
    table.lay_out(layout_change(actual, Layout(), layout, table.path), layout.record())
    started = time.monotonic()
    spark.sql(PREFILL.format(table=table.name, epoch=EPOCH_US, rows=rows))
    fill_s = time.monotonic() - started
    filled = summary_of(table)
    print(f"{name} {rows:,}: filled in {fill_s:.1f} s, {filled['data_files']} files", flush=True)
    views: list[str] = []
    found: list[dict[str, Any]] = []
    seed = 0
    for spread in SPREADS:
        timings: list[float] = []
        files: list[dict[str, int]] = []
        for _ in range(batches):
            seed += 1
            view = f"curve_batch_{seed}"
            spark.sql(batch_sql(view, spread, rows, changes, seed))
            views.append(view)
            columns = [s.name for s in SPECS]
            started = time.monotonic()
            table.merge(spark.table(view), ["id"], columns, {0: seed * changes}, {0: 0})
            timings.append(time.monotonic() - started)
            files.append(summary_of(table))
            print(f"  {spread} batch {seed}: {timings[-1]:.2f} s {files[-1]}", flush=True)
        found.append(
            {
                "layout": name,
                "rows": rows,
                "spread": spread,
                "write_mode": write_mode,
                "partition_by": [p.text() for p in layout.partition_by],
                "sort_by": [s.text() for s in layout.sort_by],
                "format_version": layout.format_version,
                "batch_seconds": {
                    "min": round(min(timings), 3),
                    "median": round(statistics.median(timings), 3),
                    "max": round(max(timings), 3),
                },
                "batches": [
                    {"seconds": round(t, 3), **f} for t, f in zip(timings, files, strict=True)
                ],
                "fill_seconds": round(fill_s, 1),
                "files_after_fill": filled["data_files"],
            }
        )
    held = spark.table(table.name).count()
    wanted = expected_rows(spark, views, rows)
    for view in views:
        spark.catalog.dropTempView(view)
    spark.sql(f"DROP TABLE IF EXISTS {table.name} PURGE")
    if held != wanted:
        raise SystemExit(f"{name} {rows}: the table holds {held} rows, the changes make {wanted}")
    return found


def measure_one(rows: int, name: str, args: argparse.Namespace, out: Path) -> None:
    """One table's figures, in this process's own Spark, written to ``out`` (JSON)."""
    folder = Path(tempfile.mkdtemp(prefix="tidemark-merge-curve-"))
    conf = dict(item.split("=", 1) for item in args.spark_conf)
    sink = SinkConfig(catalog_name="curve", warehouse=str(folder / "warehouse"), spark_conf=conf)
    spark = create_session(dataclasses.replace(Config(), sink=sink))
    try:
        out.write_text(json.dumps(run_layout(spark, name, rows, args.changes, args.batches)))
    finally:
        stop_session(spark)
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000000,10000000,30000000")
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    parser.add_argument("--changes", type=int, default=50_000)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # ROWS:LAYOUT:OUT, a child's part
    args = parser.parse_args()
    if args.one:
        rows, name, out = args.one.split(":", 2)
        measure_one(int(rows), name, args, Path(out))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    layouts = args.layouts.split(",")
    unknown = set(layouts) - set(LAYOUTS)
    if unknown:
        raise SystemExit(f"unknown layouts {sorted(unknown)}: {', '.join(LAYOUTS)}")
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tidemark-merge-curve-") as parts:
        for rows in sizes:
            for name in layouts:
                # A JVM of its own per table: one JVM for every table runs out of direct
                # memory at 3 x 10^7 rows, and no table's figures carry another's state.
                out = Path(parts) / f"{rows}-{name}.json"
                child = [sys.executable, __file__, *sys.argv[1:], "--one", f"{rows}:{name}:{out}"]
                subprocess.run(child, check=True)
                results += json.loads(out.read_text())
    print(f"{'layout':<22}{'rows':>12} {'spread':<8}{'median s':>10}")
    for r in results:
        median = r["batch_seconds"]["median"]
        print(f"{r['layout']:<22}{r['rows']:>12,} {r['spread']:<8}{median:>10}")
    write_results(
        "merge_curve",
        results,
        sizes=sizes,
        changes=args.changes,
        batches=args.batches,
        spark_master=SinkConfig().spark_master,
        spark_conf=dict(item.split("=", 1) for item in args.spark_conf),
    )


if __name__ == "__main__":
    main()
