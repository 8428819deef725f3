"""``tidemark snapshot status``: the snapshot progress as text, a bar per table."""

from __future__ import annotations

import time
from typing import Any

import orjson

from processor.snapshot.client import read_state
from processor.snapshot.progress import UNFINISHED, SnapshotState, TableProgress
from tidemark.core.config import Config

BAR = 24


def render_status(state: SnapshotState | None) -> str:
    """A table of the snapshots with a progress bar per table."""
    if state is None:
        return "no incremental snapshot has run in this pipeline"
    lines = ["incremental snapshots" + (" (PAUSED)" if state.paused else "")]
    if not state.tables:
        lines.append("  none requested")
    for t in state.tables:
        lines.append(_line(t))
    return "\n".join(lines)


def _line(t: TableProgress) -> str:
    percent = t.percent
    filled = round(BAR * (percent or 0) / 100)
    bar = "[" + "#" * filled + "." * (BAR - filled) + "]"
    shown = f"{percent:5.1f}%" if percent is not None else "    ?%"
    left = t.seconds_left
    eta = f"  ~{_duration(left)} left" if left is not None else ""
    key = _key(t.last_key)
    line = (
        f"  {t.table:<28} {t.status:<10} {bar} {shown}  {t.rows} rows, {t.chunks} chunks, "
        f"last key {key}{eta}  (request {t.request_id})"
    )
    reading = [r for r in t.ranges if r.chunk and r.rows is None]
    if reading:
        parts = ", ".join(f"{_key(r.after)}..{_key(r.upto)} (chunk {r.chunk})" for r in reading)
        line += f"\n      reading {parts}"
    if t.waiting:
        line += f"\n      waiting: {t.waiting}"
    if t.status == "delivering":
        line += "\n      read whole: waiting for the data plane to read its rows"
    if t.error:
        line += f"\n      error: {t.error}"
    return line


def _key(key: list[Any] | None) -> str:
    return orjson.dumps(key).decode() if key is not None else "-"


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def render_tables(tables: list[TableProgress]) -> str:
    """Some tables' progress, one line each."""
    return "\n".join(_line(t) for t in tables)


def wait_for_request(config: Config, request_id: str, every: float = 1.0) -> list[TableProgress]:
    """Wait until every table of request ``request_id`` completed or was aborted (once the
    coordinator has queued them); those tables."""
    while True:
        state = read_state(config)
        tables = [t for t in state.tables if t.request_id == request_id] if state else []
        if tables and not any(t.status in UNFINISHED for t in tables):
            return tables
        time.sleep(every)


def watch(config: Config, every: float) -> None:
    """Print the status every ``every`` seconds until interrupted."""
    while True:
        print(render_status(read_state(config)), flush=True)
        time.sleep(every)
