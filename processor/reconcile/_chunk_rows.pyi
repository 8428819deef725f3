"""Types of the compiled chunk-row loop (``processor/reconcile/_chunk_rows.c``); see
:func:`processor.reconcile.debezium_fast_path.decide_chunk_rows`."""

from collections.abc import Callable
from typing import Any

from tidemark.messages import RawMessage

def take_fresh_rows(
    run: list[RawMessage],
    keys: list[bytes],
    start: int,
    tag: Any,
    cache: dict[bytes, bytes | None],
    updates: dict[bytes, bytes | None],
    entry: bytes,
    prefix: bytes,
    head: bytes,
    tail: bytes,
    limit: int,
    placeholders: tuple[bytes, ...],
    scan: Callable[[bytes, int, int], bool],
    opening: bytes,
    rest: bytes,
    closing: bytes,
    output: str,
    records: list[tuple[str, int, bytes | None, bytes | None]],
) -> int: ...
