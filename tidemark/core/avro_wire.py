"""The Confluent Avro wire format: ``0x00``, a big-endian 4-byte schema id, then the Avro body.

Both the processor's codecs and the sink's decoder read messages in this
framing; rows kept in state use it too. A message whose first byte is ``0x00``
is Avro (no JSON text starts with it). Bodies are read by :mod:`tidemark.core.avro_read`
(compiled, fastavro's values and errors).
"""

from __future__ import annotations

import struct
from typing import Any

from tidemark.core.avro_read import read
from tidemark.core.errors import InputError
from tidemark.core.messages import RawMessage

MAGIC = b"\x00"
HEADER = struct.Struct(">bI")


def schema_id_of(raw: bytes, msg: RawMessage, what: str) -> int:
    """The schema id of a Confluent wire-format key or value."""
    if len(raw) < HEADER.size or raw[0] != 0:
        raise InputError(f"{what} is not in the Confluent Avro wire format", msg, "malformed")
    return int(HEADER.unpack_from(raw)[1])


def read_avro(raw: bytes, start: int, parsed: Any, msg: RawMessage, what: str) -> tuple[Any, int]:
    """One Avro datum read from ``raw[start:]`` and the offset where it ends; an
    :class:`InputError` when it is not valid.

    The compiled reader (:mod:`tidemark.core.avro_read`) reads it when it takes the schema,
    fastavro otherwise; either way the value, and the error, are fastavro's.
    """
    try:
        return read(parsed, raw, start)
    except Exception as exc:  # fastavro raises EOFError, ValueError, IndexError, ...
        reason = f"{what} is not valid Avro for its schema: {type(exc).__name__}: {exc}"
        raise InputError(reason, msg, "malformed") from None


def at_end(end: int, raw: bytes, msg: RawMessage) -> None:
    """An :class:`InputError` unless the datum that ends at ``end`` ends the value."""
    if end != len(raw):
        raise InputError(f"value has {len(raw) - end} bytes after its Avro body", msg, "malformed")
