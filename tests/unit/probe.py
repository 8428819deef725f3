"""The ``public.probe`` table of the unit tests: Debezium's own Avro schemas for it, and events.

The schemas are the ones Debezium 3.6's AvroConverter registered for this
PostgreSQL table (``data/debezium_avro_schemas.json``).
"""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path
from typing import Any

import fastavro

SCHEMAS = json.loads((Path(__file__).parent / "data" / "debezium_avro_schemas.json").read_text())
TOPIC = "tidemark.public.probe"


def frame(schema_id: int, schema: Any, datum: Any) -> bytes:
    """``datum`` in the Confluent wire format under ``schema_id``."""
    out = io.BytesIO()
    out.write(struct.pack(">bI", 0, schema_id))
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema, {}), datum)
    return out.getvalue()


def probe_event(
    op: str,
    after: dict[str, Any] | None,
    sequence: str = '["10","12"]',
    txid: int = 732,
    lsn: int = 12,
) -> dict[str, Any]:
    """A Debezium change event of the probe table, as the PostgreSQL connector writes it."""
    return {
        "before": None,
        "after": after,
        "source": {
            "version": "3.6.3.Final",
            "connector": "postgresql",
            "name": "tidemark",
            "ts_ms": 1,
            "snapshot": "false",
            "db": "tidemark",
            "sequence": sequence,
            "schema": "public",
            "table": "probe",
            "txId": txid,
            "lsn": lsn,
        },
        "transaction": None,
        "op": op,
        "ts_ms": 2,
    }
