"""Several key-value pairs in one Kafka record, in C (``tidemark/core/_records.c``).

A frame is a pair's key and value, each a big-endian 4-byte length and its bytes:
``[len][key][len][value]``, then the next pair's. :func:`frame` joins ``pairs[start:stop]``
into one buffer; :func:`unframe` gives a buffer's keys and values back, flat (``[key,
value, key, value, ...]``), or ``None`` for bytes that are not whole frames (a length
past the end, a key without its value); :func:`unframe_messages` gives each pair as a
message (:class:`tidemark.core.messages.RawMessage`) with the pair as its key and value. They
never read past the buffer, whatever its bytes: ``tests/unit/test_frames.py`` holds them
to a round trip with hypothesis and feeds them random and truncated bytes.
"""

from __future__ import annotations

from tidemark.core._records import frame, unframe, unframe_messages

__all__ = ["FRAMING", "frame", "unframe", "unframe_messages"]

#: The bytes a frame adds to its pair: two lengths.
FRAMING = 8
