"""What a table keeps: each key's current row (``merge``) or every version of it
(``append``), and Tidemark's metadata columns beside the source's.

An ``append`` table is a change history: one row per version that reached the
reconciled topic, deletes included (their key columns and ``tidemark_op = 'd'``). The
processor may send a version again after a crash (with the same position), so rows are
deduplicated on the key and ``tidemark_position``, within a batch and against the
table. The metadata columns come from each event: Debezium's ``op``, ``source.ts_ms``
(the source's commit time), ``source.lsn`` and ``source.txId``, Tidemark's
``tidemark.position``; and the time the sink wrote the row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spark_sink.schema import Spec
from tidemark.core.config import SinkConfig, TableLayout

MERGE, APPEND = "merge", "append"
#: The table property that records a table's mode (absent: ``merge``).
MODE_PROPERTY = "tidemark.mode"

#: The metadata columns, as the table has them.
OP = "tidemark_op"
COMMITTED_AT = "tidemark_committed_at"
LSN = "tidemark_lsn"
TXID = "tidemark_txid"
POSITION = "tidemark_position"
INGESTED_AT = "tidemark_ingested_at"
COLUMNS = (
    Spec(OP, "string"),
    Spec(COMMITTED_AT, "timestamp"),
    Spec(LSN, "bigint"),
    Spec(TXID, "bigint"),
    Spec(POSITION, "string"),
    Spec(INGESTED_AT, "timestamp"),
)
NAMES = frozenset(c.name for c in COLUMNS)

#: The batch's columns that carry an event's metadata, after the planned columns, with
#: the SQL that makes each table column of them (``s``: the batch's alias).
BATCH_COLUMNS = (
    ("__tidemark_op", "string", OP, "s.__tidemark_op"),
    ("__tidemark_source_ms", "bigint", COMMITTED_AT, "timestamp_millis(s.__tidemark_source_ms)"),
    ("__tidemark_lsn", "bigint", LSN, "s.__tidemark_lsn"),
    ("__tidemark_txid", "bigint", TXID, "s.__tidemark_txid"),
    ("__tidemark_position", "string", POSITION, "s.__tidemark_position"),
)
#: The batch's column of the position, the version that identifies a row of history.
BATCH_POSITION = BATCH_COLUMNS[-1][0]

#: One event's metadata, in :data:`BATCH_COLUMNS`' order.
Metadata = tuple[str | None, int | None, int | None, int | None, str | None]


@dataclass(frozen=True)
class Keeping:
    """What one table keeps."""

    mode: str = MERGE
    #: Whether it has the metadata columns (always in ``append``).
    metadata: bool = False

    @property
    def append(self) -> bool:
        return self.mode == APPEND


MERGE_ONLY = Keeping()
NO_METADATA: Metadata = (None, None, None, None, None)


def keeping(sink: SinkConfig, table: str) -> Keeping:
    """What ``sink`` configures ``table`` (``<schema>.<table>``) to keep: its own entry
    in ``sink.tables``, then ``sink.layout``, then ``merge`` without metadata."""
    own = sink.tables.get(table, TableLayout())
    mode = own.mode or sink.layout.mode or MERGE
    metadata = own.metadata_columns
    if metadata is None:
        metadata = bool(sink.layout.metadata_columns)
    return Keeping(mode, metadata or mode == APPEND)


def event_metadata(payload: dict[str, Any]) -> Metadata:
    """The metadata of one reconciled event's payload (a Debezium envelope with
    Tidemark's block); a member missing or of the wrong type is ``None``."""
    source = payload.get("source")
    block = payload.get("tidemark")
    source = source if isinstance(source, dict) else {}
    block = block if isinstance(block, dict) else {}
    op = payload.get("op")
    position = block.get("position")
    return (
        op if isinstance(op, str) else None,
        _integer(source.get("ts_ms")),
        _integer(source.get("lsn")),
        _integer(source.get("txId")),
        position if isinstance(position, str) else None,
    )


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
