"""The Confluent Avro wire format: ``0x00``, a big-endian 4-byte schema id, then the Avro body.

Both the processor's codecs and the sink's decoder read messages in this
framing; rows kept in state use it too. A message whose first byte is ``0x00``
is Avro (no JSON text starts with it).
"""

from __future__ import annotations

import io
import struct
from typing import Any

import fastavro

from tidemark.errors import InputError
from tidemark.messages import RawMessage

MAGIC = b"\x00"
HEADER = struct.Struct(">bI")


def schema_id_of(raw: bytes, msg: RawMessage, what: str) -> int:
    """The schema id of a Confluent wire-format key or value."""
    if len(raw) < HEADER.size or raw[0] != 0:
        raise InputError(f"{what} is not in the Confluent Avro wire format", msg, "malformed")
    return int(HEADER.unpack_from(raw)[1])


def read_avro(stream: io.BytesIO, start: int, parsed: Any, msg: RawMessage, what: str) -> Any:
    """One Avro datum read from ``start``; an :class:`InputError` when it is not valid."""
    stream.seek(start)
    try:
        return fastavro.schemaless_reader(stream, parsed, None)
    except Exception as exc:  # fastavro raises EOFError, ValueError, IndexError, ...
        reason = f"{what} is not valid Avro for its schema: {type(exc).__name__}: {exc}"
        raise InputError(reason, msg, "malformed") from None


def at_end(stream: io.BytesIO, raw: bytes, msg: RawMessage) -> None:
    """An :class:`InputError` unless the datum just read ends the value."""
    if stream.tell() != len(raw):
        extra = len(raw) - stream.tell()
        raise InputError(f"value has {extra} bytes after its Avro body", msg, "malformed")
