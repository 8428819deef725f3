"""``benchmarks.md``: tables of every results file in ``bench/results/``.

No figure is typed by hand: each comes from a results file, formatted (thousands
separated, long fractions rounded) and, for the comparisons, divided (the change
from before to after). Each file gets its heading, what made it (its ``command``,
``commit`` and ``machine``), the first paragraph of the docstring of the script that
wrote it, and its tables. A file of a kind this module does not know still gets a
generic rendering of every field, so none is left out.
"""

from __future__ import annotations

import ast
import json
import math
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from refs.markdown import code, first_paragraph, page, rst, table

RESULTS = "bench/results"
#: The top-level fields every benchmark's file has (``bench/results_file.py``).
COMMON = ("benchmark", "command", "commit", "machine")
MISSING = "—"


def number(value: float) -> str:
    """A figure as the page shows it: integers with thousands separated; a fraction with
    at most three decimals as written, a longer one to three significant digits."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if math.isnan(value) or math.isinf(value):
        return str(value)
    text = repr(value)
    if "e" not in text and len(text.split(".")[1]) <= 3:
        whole, _, fraction = text.lstrip("-").partition(".")
        sign = "-" if text.startswith("-") else ""
        return f"{sign}{int(whole):,}.{fraction}"
    if abs(value) < 1:
        return f"{value:.3g}"
    digits = len(str(int(abs(value))))
    return f"{value:,.{max(1, 3 - digits)}f}"


def value(item: Any, nested: bool = False) -> str:
    """Any field's value for a table cell: a number, ``median (min–max)`` of a spread,
    ``key value`` pairs of another mapping, a list joined (``;`` between items, as
    numbers have thousands separated by commas; `` / `` in a list inside a mapping)."""
    if item is None:
        return MISSING
    if isinstance(item, bool | int | float):
        return number(item)
    if isinstance(item, str):
        return item
    if isinstance(item, Mapping):
        if set(item) == {"min", "median", "max"}:
            low, mid, high = item["min"], item["median"], item["max"]
            if low == mid == high:
                return value(mid)
            return f"{value(mid)} ({value(low)}–{value(high)})"
        return "; ".join(f"{k} {value(v, nested=True)}" for k, v in item.items()) or MISSING
    if isinstance(item, Sequence):
        joiner = " / " if nested else "; "
        return joiner.join(value(v, nested=True) for v in item) or MISSING
    return str(item)


def total_first(item: Any) -> str:
    """A CPU breakdown with its ``total`` first: ``26.6 (processor 13.4, ...)``."""
    if not isinstance(item, Mapping) or "total" not in item:
        return value(item)
    rest = {k: v for k, v in item.items() if k != "total"}
    return f"{value(item['total'])} ({value(rest)})" if rest else value(item["total"])


@dataclass(frozen=True)
class Column:
    """A column of a results table: the row's field, its header and how it is shown."""

    key: str
    header: str
    show: Callable[[Any], str] = value


def rows_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column]) -> str:
    """A table of ``rows`` with those of ``columns`` that some row has."""
    if not all(isinstance(r, Mapping) for r in rows):
        raise TypeError("rows of a results table are mappings")
    used = [c for c in columns if any(c.key in r for r in rows)]
    body = [[c.show(r[c.key]) if c.key in r else MISSING for c in used] for r in rows]
    return table([c.header for c in used], body)


def all_keys(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every field of ``rows``, in the order they first appear."""
    return list(dict.fromkeys(k for r in rows for k in r))


def generic_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Every field of ``rows`` as a column."""
    return rows_table(rows, [Column(k, code(k)) for k in all_keys(rows)])


def transposed(rows: Sequence[Mapping[str, Any]], label: str) -> str:
    """``rows`` side by side, a column each (headed by its ``label`` field), a field a row."""
    keys = [k for k in all_keys(rows) if k != label]
    body = [[code(k), *(value(r.get(k)) for r in rows)] for k in keys]
    return table(["Field", *(code(r.get(label, "?")) for r in rows)], body)


def fields_table(document: Mapping[str, Any], skip: Sequence[str]) -> str:
    """The top-level fields of ``document`` not in ``skip`` and not shown elsewhere, as
    ``Field | Value`` (a list of records as a table of its own is left to the caller)."""
    rows = [
        (code(k), value(v))
        for k, v in document.items()
        if k not in skip and k not in COMMON and not _records(v)
    ]
    return table(["Field", "Value"], rows) if rows else ""


def _records(item: Any) -> bool:
    """A non-empty list of mappings: rendered as a table."""
    return isinstance(item, list) and bool(item) and all(isinstance(r, Mapping) for r in item)


# The known files -----------------------------------------------------------------------

Renderer = Callable[[Mapping[str, Any]], list[str]]


def _envelopes(doc: Mapping[str, Any]) -> list[str]:
    columns = [
        Column("program", "Program", code),
        Column("input", "Input", code),
        Column("keys", "Keys"),
        Column("events", "Events"),
        Column("events_per_s", "Events/s (median)"),
        Column("events_per_s_runs", "Events/s of each run"),
        Column("cpu_s_per_million", "CPU-s per million events"),
        Column("peak_rss_mb", "Peak RSS (MB)"),
        Column("state_mb", "State on disk (MB)"),
    ]
    return [fields_table(doc, ["results"]), rows_table(doc["results"], columns)]


def _restore(doc: Mapping[str, Any]) -> list[str]:
    columns = [
        Column("keys", "Keys"),
        Column("records", "Changelog records"),
        Column("seconds", "Seconds"),
        Column("records_per_s", "Records/s"),
        Column("cpu_s", "CPU-s"),
        Column("state_mb", "State (MB)"),
    ]
    return [fields_table(doc, ["results"]), rows_table(doc["results"], columns)]


def _backfill(doc: Mapping[str, Any]) -> list[str]:
    columns = [
        Column("program", "Program", code),
        Column("chunk_size", "Chunk size"),
        Column("watermarks", "Watermarks"),
        Column("readers", "Readers"),
        Column("rows", "Rows"),
        Column("rows_per_s", "Rows/s (median)"),
        Column("rows_per_s_runs", "Rows/s of each run"),
        Column("seconds", "Seconds"),
        Column("chunks", "Chunks"),
        Column("writes", "Source writes meanwhile"),
        Column("cpu_us_per_row", "CPU µs per row: total (by process)", total_first),
        Column("peak_rss_mb", "Peak RSS (MB)"),
        Column("reader_peak_rss_mb", "Readers' peak RSS (MB)"),
    ]
    return [fields_table(doc, ["results"]), rows_table(doc["results"], columns)]


def _sink(doc: Mapping[str, Any]) -> list[str]:
    batched = [r for r in doc["results"] if "batch_size" in r]
    others = [r for r in doc["results"] if "batch_size" not in r]
    columns = [
        Column("program", "Program", code),
        Column("batch_size", "Records per partition and batch"),
        Column("events", "Events"),
        Column("seconds", "Seconds"),
        Column("events_per_s", "Events/s"),
        Column("batches", "Batches"),
        Column("batch_seconds", "Seconds per batch: median (min–max)"),
        Column("files_per_batch", "Files written per batch"),
        Column("rewritten_files_per_batch", "Files rewritten per batch"),
        Column("rows", "Rows in the table"),
    ]
    blocks = [fields_table(doc, ["results"])]
    if batched:
        blocks.append(rows_table(batched, columns))
    if others:
        blocks += [
            "Other runs (spreads as median (min–max); lags as p50, p95, max):",
            transposed(others, "program"),
        ]
    return blocks


def _merge_curve(doc: Mapping[str, Any]) -> list[str]:
    columns = [
        Column("layout", "Layout", code),
        Column("rows", "Rows in the table"),
        Column("spread", "Keys"),
        Column("write_mode", "Write mode"),
        Column("format_version", "Format"),
        Column("batch_seconds", "Seconds per MERGE: median (min–max)"),
        Column("files_after_fill", "Data files after the fill"),
    ]
    results = doc["results"]
    smallest = {
        (r["layout"], r["spread"]): r["batch_seconds"]["median"]
        for r in sorted(results, key=lambda r: -r["rows"])
    }
    growth = [
        (
            code(r["layout"]),
            value(r["rows"]),
            r["spread"],
            f"{r['batch_seconds']['median'] / smallest[(r['layout'], r['spread'])]:.2f}x",
        )
        for r in results
    ]
    return [
        fields_table(doc, ["results"]),
        rows_table(results, columns),
        "Each median against the same layout's and keys' at the smallest table:",
        table(["Layout", "Rows", "Keys", "Time against the smallest table"], growth),
    ]


def _console(doc: Mapping[str, Any]) -> list[str]:
    blocks = [fields_table(doc, ["results", "api"])]
    api = doc.get("api")
    if isinstance(api, Mapping):
        rows = [
            (code(path), value(m.get("median_ms")), value(m.get("bytes")))
            for path, m in api.items()
        ]
        blocks += [
            "Each API read the pages make:",
            table(["Request", "Median (ms)", "Bytes"], rows),
        ]
    blocks += [
        "Each page, over its loads (median (min–max); times in ms from the navigation's start):",
        transposed(doc["results"], "page"),
    ]
    return blocks


def _fidelity(doc: Mapping[str, Any]) -> list[str]:
    columns = [
        Column("format", "Format", code),
        Column("setting", "Setting", code),
        Column("value", "Value", code),
        Column("columns_compared", "Columns compared"),
        Column("passed", "Passed"),
        Column("refused_under_the_defaults", "Refused under the defaults"),
        Column("seconds", "Seconds"),
    ]
    return [fields_table(doc, ["runs"]), rows_table(doc["runs"], columns)]


def _compare(doc: Mapping[str, Any]) -> list[str]:
    results = doc["results"]
    pairs: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
    for row in results:
        pairs.setdefault((row.get("program", ""), row.get("input", "")), {})[
            str(row.get("version"))
        ] = row
    shown = ["results", "before", "after"]
    if not all(set(p) == {"before", "after"} for p in pairs.values()):
        return [fields_table(doc, shown), generic_table(results)]

    def change(before: Any, after: Any) -> str:
        if not isinstance(before, int | float) or not isinstance(after, int | float) or not before:
            return MISSING
        return f"{(after - before) / before * 100:+.1f}%"

    rows = []
    for (program, source), pair in pairs.items():
        before, after = pair["before"], pair["after"]
        rows.append(
            (
                code(program),
                code(source),
                value(before.get("events_per_s")),
                value(after.get("events_per_s")),
                change(before.get("events_per_s"), after.get("events_per_s")),
                value(before.get("cpu_us_per_event")),
                value(after.get("cpu_us_per_event")),
                change(before.get("cpu_us_per_event"), after.get("cpu_us_per_event")),
            )
        )
    headers = [
        "Program",
        "Input",
        "Events/s before",
        "Events/s after",
        "Change",
        "CPU µs/event before",
        "CPU µs/event after",
        "Change",
    ]
    runs = [
        (
            code(r.get("program")),
            code(r.get("input")),
            str(r.get("version")),
            value(r.get("events_per_s_runs")),
        )
        for r in results
    ]
    return [
        fields_table(doc, shown),
        "Medians of the rounds, and the change from before to after:",
        table(headers, rows),
        "Events/s of each round:",
        table(["Program", "Input", "Version", "Events/s of each round"], runs),
    ]


def _test_time(doc: Mapping[str, Any]) -> list[str]:
    columns = [
        Column("commit", "Commit", code),
        Column("command", "Command", code),
        Column("passed", "Passed"),
        Column("failed", "Failed"),
        Column("seconds", "pytest's seconds"),
        Column("whole_run_seconds", "Whole run (s)"),
        Column("note", "Note", rst),
    ]
    blocks = [fields_table(doc, ["runs", "what", "fault_tests"]), rows_table(doc["runs"], columns)]
    tests = doc.get("fault_tests")
    if isinstance(tests, list) and tests:
        blocks += [
            f"The fault tests ({code('fault_tests')}):",
            "\n".join(f"- {code(t)}" for t in tests),
        ]
    return blocks


def _generic(doc: Mapping[str, Any]) -> list[str]:
    blocks = [fields_table(doc, [])]
    for key, item in doc.items():
        if _records(item):
            blocks += [f"{code(key)}:", generic_table(item)]
    return blocks


#: Known files by name (a ``compare-*`` file is a comparison), in the page's order.
RENDERERS: dict[str, tuple[str, Renderer]] = {
    "envelopes": ("Envelopes", _envelopes),
    "fused-paths": ("The fused paths against the general path", _envelopes),
    "restore": ("State restore", _restore),
    "backfill": ("Backfills", _backfill),
    "sink": ("The Spark sink", _sink),
    "sink_tables": ("The Spark sink with many tables", _generic),
    "merge_curve": ("The sink's MERGE against the table's size", _merge_curve),
    "console": ("The console", _console),
    "chaos": ("The chaos run", _generic),
    "lifetime": ("The lifetime run", _generic),
    "scale": ("An estate of tables", _generic),
    "fetch_wait": ("The data plane's long poll", _generic),
    "fidelity": ("Value fidelity", _fidelity),
    "compare": ("Comparison", _compare),
    "test_time": ("Test time", _test_time),
}


def renderer_of(stem: str) -> tuple[str, Renderer, bool]:
    """The title and renderer of results file ``stem``, and whether it is a known kind."""
    if stem in RENDERERS:
        title, render = RENDERERS[stem]
        return title, render, True
    if stem.startswith("compare-"):
        return f"Comparison: {stem.removeprefix('compare-')}", _compare, True
    if stem.startswith("backfill-"):
        return f"Backfills: {stem.removeprefix('backfill-')}", _backfill, True
    return stem, _generic, False


def order(stem: str) -> tuple[int, str]:
    """Known files in :data:`RENDERERS`' order (comparisons after ``compare``), then the rest."""
    names = list(RENDERERS)
    if stem in RENDERERS:
        return names.index(stem), stem
    if stem.startswith("compare-"):
        return names.index("compare"), stem
    if stem.startswith("backfill-"):
        return names.index("backfill"), stem
    return len(names), stem


def script_of(command: str, root: Path) -> Path | None:
    """The script a ``python [-m module | path] ...`` command runs, if it is in ``root``."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if len(words) < 2 or not Path(words[0]).name.startswith("python"):
        return None
    if words[1] == "-m" and len(words) > 2:
        path = root / (words[2].replace(".", "/") + ".py")
    else:
        path = root / words[1]
    return path if path.is_file() else None


def _machine(item: Any) -> str:
    if not isinstance(item, Mapping):
        return "not recorded"
    parts = []
    if "python" in item:
        parts.append(f"Python {item['python']}")
    if "cpu" in item:
        parts.append(str(item["cpu"]))
    if "cores" in item:
        parts.append(f"{value(item['cores'])} cores")
    rest = {k: v for k, v in item.items() if k not in ("python", "cpu", "cores")}
    if rest:
        parts.append(value(rest))
    return ", ".join(parts)


def _anchor(stem: str) -> str:
    """A section's id: its file's name (``#test_time``, ``#compare-session``)."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", stem)


def section(path: Path, root: Path) -> str:
    """The section of results file ``path`` (``root``: the repository, for its script)."""
    document = json.loads(path.read_text())
    stem = path.stem
    title, render, known = renderer_of(stem)
    if not isinstance(document, Mapping):
        document, render = {"value": document}, _generic
    try:
        blocks = render(document)
    except (KeyError, TypeError, AttributeError):  # a known name, an unknown shape
        blocks, known = _generic(document), False
    command = document.get("command")
    script = script_of(command, root) if isinstance(command, str) else None
    about = first_paragraph(ast.get_docstring(ast.parse(script.read_text()))) if script else ""
    if not about and isinstance(document.get("what"), str):
        about = rst(document["what"].strip())
        about += "" if about.endswith(".") else "."
    records = [r for v in document.values() if _records(v) for r in v]
    per_run = "each run's, in the table"
    facts = [f"- Results file: {code(f'{RESULTS}/{path.name}')}"]
    if command:
        facts.append(f"- Command: {code(command)}")
    else:
        facts.append(
            f"- Command: {per_run if any('command' in r for r in records) else 'not recorded'}"
        )
    if "commit" in document:
        facts.append(f"- Commit: {code(document['commit'])}")
    elif "after" in document:
        facts.append(f"- Commit: not recorded; the after tree's: {code(document['after'])}")
    else:
        facts.append(
            f"- Commit: {per_run if any('commit' in r for r in records) else 'not recorded'}"
        )
    if "before" in document and "after" in document:
        facts.append(
            f"- Compared: {code(document['before'])} (before) with {code(document['after'])} "
            "(after)"
        )
    facts.append(f"- Machine: {_machine(document.get('machine'))}")
    if not known:
        facts.append("- Shown field by field: the generator knows no layout for this file.")
    parts = [f"## {title} {{#{_anchor(stem)}}}", about, "\n".join(facts), *blocks]
    return "\n\n".join(p for p in parts if p)


def benchmarks_page(results: Path, root: Path) -> str:
    """The page for every ``*.json`` file of ``results``."""
    files = sorted(results.glob("*.json"), key=lambda p: order(p.stem))
    opening = (
        "The figures of Tidemark's benchmarks and long test runs, a section per results "
        "file. Every figure on this page comes from the committed results file named under "
        f"its heading, in {code(RESULTS + '/')}: the page is generated from those files "
        "(see `docs/gen/refs/benchmarks.py`), none is typed by hand."
    )
    how = (
        "To reproduce them, `make bench` runs the benchmarks again, each rewriting its file "
        "(`make chaos` and `make fidelity` the chaos and fidelity runs); the command under "
        "a heading is the one that wrote that file. A commit ending in `+` had changes not "
        "committed yet. The figures are those of the machine named under each heading: "
        "compare figures of one machine only."
    )
    index_rows = []
    sections = []
    for path in files:
        title = renderer_of(path.stem)[0]
        index_rows.append((f"[{title}](#{_anchor(path.stem)})", code(path.name)))
        sections.append(section(path, root))
    index = table(["Section", "Results file"], index_rows)
    return page("Benchmarks", opening, how, index, *sections)


def generate(root: Path = Path()) -> str:
    """The page for the repository at ``root`` (the working directory by default)."""
    return benchmarks_page(root / RESULTS, root)
