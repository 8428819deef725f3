"""One validating pass over a Debezium JSON change event, compiled (``tidemark/core/_jsonscan.c``).

:func:`scan_change` reads the payload of a Debezium event, ``buf[start:end]``, and
returns where its parts are and its position, without making a Python object of it:

- ``BEFORE``/``BEFORE_END``, ``AFTER``/``AFTER_END``: the byte spans of ``before`` and
  ``after`` (a row object or ``null``); ``BEFORE_ROW``: whether ``before`` is a row;
- ``OP``: the op's character code (``c``, ``u``, ``d`` or ``r``);
- ``MAJOR``, ``MINOR``: the version (:func:`processor.events.change.source_version`):
  PostgreSQL's ``source.sequence`` pair, else ``(lsn, lsn)``;
- ``TXID``: ``source.txId``, or ``None``;
- ``SNAPSHOT``: 0 none, 1 Debezium's initial snapshot, 2 incremental (as
  :func:`processor.events.change.snapshot_kind`);
- ``CONNECTOR``: 0 none, 1 ``postgresql``, 2 ``mysql``, 3 another;
- ``TOAST``: whether ``after`` holds the unchanged-TOAST placeholder;
- ``OPEN``, ``CLOSE``: the offsets of the payload's opening and closing braces.

It validates as it goes: the bytes must be one JSON value (RFC 8259, valid UTF-8)
with ``before``, ``after``, ``op``, ``source`` and a non-null ``ts_ms``, shaped as
:func:`processor.events.change.debezium_change` requires. Anything else, and what it
does not judge (escaped member names, lone surrogates, duplicates of the members it
reads, a ``tidemark`` member, MySQL positions, numbers it reads beyond 64 bits,
nesting deeper than 256), is declined: ``None``, and the general path (orjson)
decides, so a message is never rejected here that orjson would take.

:func:`scan_envelope` reads the payload of a reconciled event (the processor's output),
``buf[start:end]``, for what the sink's decoder needs of it
(:meth:`spark_sink.events.EventDecoder.decode`):
``(op, row, after, after_end)``. ``op`` is the op's character code when ``op`` is a
one-byte string, else 0 (no ``op``, another string, another value); ``after``/``after_end``
is the byte span of ``after``, a row object (``row`` true) or ``null``, and ``-1, -1``
when there is no ``after`` member. Any other members are taken (``tidemark``, an empty
``source``, none at all). It validates the whole payload as :func:`scan_change` does and
declines what it does not judge: an escaped member name or ``op``, a duplicate ``op`` or
``after``, an ``after`` that is neither a row nor ``null``, lone surrogates, numbers orjson
may refuse, nesting deeper than 256.

:func:`sequence_version` reads a ``source.sequence`` string of PostgreSQL's own form,
``["<digits>","<digits>"]`` (either element may be ``null``), within 64 bits, as
:func:`processor.events.change.source_version` does; ``None`` for any other string, which
that function then reads the general way.

:func:`scan_object` says whether the bytes are exactly one JSON object,
:func:`scan_key` whether they are one of given members and kinds, in order, and
:func:`scan_bare_key` whether they are an object with a member and no member named
``schema`` or ``payload`` (a key without JsonConverter's envelope).

``tests/unit/test_json_scan.py`` holds them to orjson with hypothesis and feeds them
random and truncated bytes.
"""

from __future__ import annotations

from typing import Final

from tidemark.core._jsonscan import (
    scan_bare_key,
    scan_change,
    scan_envelope,
    scan_key,
    scan_object,
    sequence_version,
)

__all__ = [
    "Envelope",
    "Scan",
    "scan_bare_key",
    "scan_change",
    "scan_envelope",
    "scan_key",
    "scan_object",
    "sequence_version",
]

#: What :func:`scan_change` returns, indexed by the names below.
Scan = tuple[int, int, int, int, bool, int, int, int, int | None, int, int, int, int, int]

BEFORE: Final = 0
BEFORE_END: Final = 1
AFTER: Final = 2
AFTER_END: Final = 3
BEFORE_ROW: Final = 4
OP: Final = 5
MAJOR: Final = 6
MINOR: Final = 7
TXID: Final = 8
SNAPSHOT: Final = 9
CONNECTOR: Final = 10
TOAST: Final = 11
OPEN: Final = 12
CLOSE: Final = 13

#: What :func:`scan_envelope` returns: ``(op, row, after, after_end)``.
Envelope = tuple[int, bool, int, int]
