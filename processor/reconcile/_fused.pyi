"""Types of the compiled fused loops (``processor/reconcile/_fused.c``); see
:mod:`processor.reconcile.debezium_fast_path`."""

from typing import Any

from tidemark.core.messages import RawMessage

Record = tuple[str, int, bytes | None, bytes | None]

#: The state entry's layout the loops read and write (``versions.ENTRY_LAYOUT``'s).
ENTRY_LAYOUT: dict[str, int]
#: The digest of the C sources this module was built from (:mod:`tidemark.core.compiled`).
SOURCES_DIGEST: str

def take_changes(
    group: list[RawMessage],
    entry_keys: list[bytes],
    start: int,
    cache: dict[bytes, bytes | None],
    updates: dict[bytes, bytes | None],
    prefix: bytes,
    head: bytes,
    limit: int,
    flushed: int,
    parts: tuple[bytes, bytes, bytes, bytes, bytes, bytes],
    output: str,
    records: list[Record],
) -> tuple[int, int, int, int]: ...
def take_avro_changes(
    group: list[RawMessage],
    entry_keys: list[bytes],
    start: int,
    scans: list[Any],
    base: int,
    layout: Any,
    out_header: bytes,
    null_byte: bytes,
    row_byte: bytes,
    cache: dict[bytes, bytes | None],
    updates: dict[bytes, bytes | None],
    flushed: int,
    block_head: bytes,
    applied: bytes,
    replayed: bytes,
    key_in: bytes,
    key_out: bytes,
    output: str,
    records: list[Record],
) -> tuple[int, int, int, int]: ...
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
    opening: bytes,
    rest: bytes,
    closing: bytes,
    output: str,
    records: list[Record],
) -> int: ...
