"""The Debezium envelopes on Debezium Avro events, decided a batch at a time without
decoding their rows.

:func:`decide_debezium_upsert` and :func:`decide_debezium` are the loops of
:mod:`processor.reconcile.debezium_fast_path` (the same rules, the same state) for Avro
in the Confluent wire format, fused with :class:`processor.events.avro_codec.AvroCodec`'s
decoding and encoding: a value of a schema the codec has met is read by
:meth:`~processor.events.avro_codec.AvroCodec.scan` (its rows skipped, of the fields
after them only ``op`` and what the change is decided by in ``source`` decoded; the
last change's ``source``, for its position, is decoded whole once the loop ends), its
row goes to state as the input's own bytes, and its output is
the bytes :meth:`~processor.events.avro_codec.AvroCodec.encode` writes for it: the
output schema's header, the emitted ``before``, the input's bytes from ``after`` on, and
the ``tidemark`` block.

Each stops at the first message it does not take (a JSON key or value, a schema the
codec has not met, a value the scan declines, a TOASTed event, a stored row of another
schema or format, a change the envelope refuses) and leaves the rest of the group to the
general path. ``tests/unit/test_debezium_avro_fast_path.py`` holds both to the general
path: the same outputs, state and positions, byte for byte.
"""

from __future__ import annotations

from processor.events.avro_codec import AvroCodec
from processor.events.change import ORDERED_CONNECTORS, Snapshot
from processor.reconcile.debezium_fast_path import HighWater, Record, judge
from processor.reconcile.envelopes import ENTRY
from processor.reconcile.versions import Action, Entry
from state.batch import BatchState
from tidemark.avro_wire import HEADER
from tidemark.messages import RawMessage

_APPLY, _DROP, _REEMIT = Action.APPLY, Action.DROP, Action.REEMIT
_APPLIED, _REPLAYED = Action.APPLY.value, Action.REEMIT.value
_NONE = Snapshot.NONE


def decide_debezium_upsert(
    codec: AvroCodec,
    group: list[RawMessage],
    state: BatchState,
    output: str,
    records: list[Record],
    flushed: int,
    limit: int,
) -> tuple[int, int, dict[str, object] | None]:
    """Decide ``group``'s leading messages that take this path, appending their records.

    As :func:`processor.reconcile.debezium_fast_path.decide_debezium_upsert`: returns how
    many messages were taken, how many of them were dropped, and the fields after
    ``after`` of the last change taken (its ``source``, the source position).
    """
    get, put, append = state.get, state.put, records.append
    taken = dropped = 0
    last: tuple[bytes, int] | None = None  # the last change taken: its value, its rest
    entry_keys = [ENTRY + k for k in state_keys(codec, group)]
    state.prefetch(entry_keys)
    for msg, entry_key in zip(group, entry_keys, strict=False):
        key, value = msg.key, msg.value
        if value is None:
            taken += 1  # Debezium's tombstone after a delete: its delete event emitted both
            continue
        scan = codec.scan(value) if len(value) + len(key or b"") <= limit else None
        if scan is None:
            break
        layout, after_at, rest_at, _before, op, version, txid, _snapshot, _connector = scan
        action, previous = judge(get(entry_key), version, txid)
        header = value[:5]
        if previous is not None and previous[:5] != header:
            break  # a row of another schema or format: the general path converts it
        taken += 1
        last = value, rest_at
        if action is _DROP or (action is _REEMIT and msg.offset < flushed):
            dropped += 1
            continue
        deleted = op == "d"
        if action is _APPLY:
            row = None if deleted else header + value[after_at + len(layout.row_byte) : rest_at]
            if txid is None:
                put(entry_key, Entry.encode_row(version, row))
            else:
                put(entry_key, Entry.encode_change(version, row, txid))
        reason = _APPLIED if action is _APPLY else _REPLAYED
        retraction = layout.null_byte if previous is None else layout.row_byte + previous[5:]
        event = b"".join(
            (
                HEADER.pack(0, layout.output_id),
                retraction,
                value[after_at:],
                codec.tidemark_block(msg, version, reason),
            )
        )
        out_key = codec.output_key(msg)
        append((output, msg.partition, out_key, event))
        if deleted:
            append((output, msg.partition, out_key, None))
    return taken, dropped, None if last is None else codec.rest(*last)


def decide_debezium(
    codec: AvroCodec,
    group: list[RawMessage],
    state: BatchState,
    output: str,
    records: list[Record],
    limit: int,
) -> tuple[int, int, dict[str, object] | None]:
    """As :func:`decide_debezium_upsert`, for the ``debezium`` envelope: a change at or
    below the partition's high-water mark is a replay and dropped; the output carries the
    input's own ``before`` and ``after``."""
    append = records.append
    taken = dropped = 0
    last: tuple[bytes, int] | None = None  # the last change taken: its value, its rest
    high_water = HighWater(state)
    for msg, _state_key in zip(group, state_keys(codec, group), strict=False):
        key, value = msg.key, msg.value
        if value is None:
            taken += 1
            continue
        scan = codec.scan(value) if len(value) + len(key or b"") <= limit else None
        if scan is None:
            break
        layout, _after_at, rest_at, before_row, op, version, _txid, snapshot, connector = scan
        if (
            snapshot is not _NONE  # snapshot groups: the general path keeps their keys
            or connector not in ORDERED_CONNECTORS
            or (op in ("u", "d") and not before_row)  # refused there
        ):
            break
        taken += 1
        last = value, rest_at
        if not high_water.passes(version):
            dropped += 1
            continue
        event = b"".join(
            (
                HEADER.pack(0, layout.output_id),
                value[5:],
                codec.tidemark_block(msg, version, _APPLIED),
            )
        )
        out_key = codec.output_key(msg)
        append((output, msg.partition, out_key, event))
        if op == "d":
            append((output, msg.partition, out_key, None))
    high_water.save()
    return taken, dropped, None if last is None else codec.rest(*last)


def state_keys(codec: AvroCodec, group: list[RawMessage]) -> list[bytes]:
    """The state keys of ``group``'s leading messages with an Avro key the codec has met."""
    keys = []
    scan_key = codec.scan_key
    for msg in group:
        state_key = scan_key(msg.key) if msg.key is not None else None
        if state_key is None:
            break
        keys.append(state_key)
    return keys
