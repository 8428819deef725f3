"""The snapshot progress record read back: every field checked before it is believed.

The progress record is the coordinator's whole memory: which tables to read, with
which filters, from which key, and how far the signal channels were read. A record
that does not parse, or whose fields are not of their types, used to raise from deep in
the coordinator as it took the lead, and the next leader read the same record and
failed the same way, on every instance in turn. :func:`decode` checks the record whole
and raises :class:`ProgressRecordError` with the reason; the coordinator then refuses to
coordinate (:mod:`processor.snapshot.coordinator`) until the record is readable again,
and the data plane goes on.

With a record key (:mod:`tidemark.core.record_auth`) the record is signed like the
control records, since it gives orders too: a table and its filter in the queue is a
read of the source.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

import orjson
from confluent_kafka import Consumer

from processor.errors import ProcessorError
from processor.snapshot.progress import (
    FORMAT_VERSION,
    PROGRESS_KEY,
    STATUSES,
    KeyRange,
    SnapshotState,
    TableProgress,
)
from tidemark.core.kafka import headers_of, last_message
from tidemark.core.record_auth import RecordKeys

_MAX_INT = (1 << 63) - 1


class ProgressRecordError(ProcessorError):
    """A progress record that is not one the coordinator wrote: the reason."""


def read_progress(consumer: Consumer, topic: str, keys: RecordKeys | None) -> SnapshotState | None:
    """The progress record of ``topic`` (``None``: no snapshot ever ran), checked, and
    signed under ``keys`` if there are keys; :class:`ProgressRecordError` otherwise."""
    msg = last_message(consumer, topic, PROGRESS_KEY)
    if msg is None or msg.value() is None:
        return None
    return decode(msg.value() or b"", keys, topic, PROGRESS_KEY, headers_of(msg))


def decode(
    raw: bytes,
    keys: RecordKeys | None = None,
    topic: str = "",
    key: bytes | None = None,
    headers: Any = None,
) -> SnapshotState:
    """The state ``raw`` holds (``keys``: the record, of ``topic`` under ``key`` with
    ``headers``, must be signed under them), or :class:`ProgressRecordError`."""
    if keys is not None and not keys.verify(topic, 0, key, raw, headers):
        raise ProgressRecordError("not signed with the pipeline's record key")
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ProgressRecordError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ProgressRecordError("not a JSON object")
    if doc.get("format") != FORMAT_VERSION:
        raise ProgressRecordError(f"unknown format {str(doc.get('format'))[:40]!r}")
    tables = doc.get("tables")
    if not isinstance(tables, list):
        raise ProgressRecordError("tables is not a list")
    paused, sequence = doc.get("paused"), doc.get("chunk_sequence")
    if not isinstance(paused, bool):
        raise ProgressRecordError("paused is not true or false")
    if not isinstance(sequence, int) or not _fits(sequence, int):
        raise ProgressRecordError("chunk_sequence is not a chunk number")
    return SnapshotState(
        [_table(t, i) for i, t in enumerate(tables)],
        paused,
        sequence,
        _signal_offsets(doc.get("signal_offsets")),
    )


def _table(doc: object, index: int) -> TableProgress:
    where = f"tables[{index}]"
    fields = _fields(TableProgress, doc, where)
    ranges = fields.get("ranges", [])
    if not isinstance(ranges, list):
        raise ProgressRecordError(f"{where}.ranges is not a list")
    fields["ranges"] = [
        KeyRange(**_fields(KeyRange, r, f"{where}.ranges[{i}]")) for i, r in enumerate(ranges)
    ]
    for name in ("deliver_from", "deliver_upto"):
        offsets = fields.get(name)
        if offsets is not None and not all(_partition(p) for p in offsets):
            raise ProgressRecordError(f"{where}.{name} names a partition that is not a number")
    table = TableProgress(**fields)
    if table.status not in STATUSES:
        raise ProgressRecordError(
            f"{where}.status {table.status[:40]!r} is none of {sorted(STATUSES)}"
        )
    return table


def _fields(cls: type[Any], doc: object, where: str) -> dict[str, Any]:
    """``doc``'s fields for dataclass ``cls``, each of its type; none unknown, none of
    the required missing."""
    if not isinstance(doc, dict):
        raise ProgressRecordError(f"{where} is not an object")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(doc) - set(known)
    if unknown:
        raise ProgressRecordError(f"{where} has unknown fields {sorted(unknown)[:5]}")
    for name, spec in known.items():
        if name not in doc:
            required = spec.default is dataclasses.MISSING
            if required and spec.default_factory is dataclasses.MISSING:
                raise ProgressRecordError(f"{where}.{name} is missing")
            continue
        if name != "ranges" and not _fits(doc[name], hints[name]):
            raise ProgressRecordError(f"{where}.{name} is not of type {hints[name]}")
    return dict(doc)


def _fits(value: object, hint: Any) -> bool:
    """Whether ``value`` (decoded JSON) is of type ``hint``."""
    if hint is Any:
        return True
    if hint is None or hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        return any(_fits(value, arm) for arm in typing.get_args(hint))
    if origin is list:
        (item,) = typing.get_args(hint)
        return isinstance(value, list) and all(_fits(v, item) for v in value)
    if origin is dict:
        key_hint, value_hint = typing.get_args(hint)
        return isinstance(value, dict) and all(
            _fits(k, key_hint) and _fits(v, value_hint) for k, v in value.items()
        )
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_INT
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
    if hint is str:
        return isinstance(value, str)
    return False


def _partition(text: str) -> bool:
    """Whether ``text`` is a partition's number, as JSON keeps it."""
    return text.isascii() and text.isdigit() and len(text) < 10


def _signal_offsets(doc: object) -> dict[str, dict[int, int]]:
    if not isinstance(doc, dict):
        raise ProgressRecordError("signal_offsets is not an object")
    offsets: dict[str, dict[int, int]] = {}
    for topic, partitions in doc.items():
        if not isinstance(partitions, dict):
            raise ProgressRecordError(f"signal_offsets of {topic[:80]!r} is not an object")
        found = offsets[topic] = {}
        for partition, offset in partitions.items():
            if not _partition(partition) or not _fits(offset, int):
                raise ProgressRecordError(f"signal_offsets of {topic[:80]!r} is not offsets")
            found[int(partition)] = offset
    return offsets
