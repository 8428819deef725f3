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

from processor.events.avro_codec import AvroCodec, AvroScan
from processor.events.change import ORDERED_CONNECTORS, Snapshot
from processor.reconcile._fused import take_avro_changes
from processor.reconcile.debezium_fast_path import HighWater, Record, judge
from processor.reconcile.envelopes import ENTRY
from processor.reconcile.versions import Action, Entry
from state.batch import BatchState
from tidemark.core.avro_wire import HEADER, MAGIC
from tidemark.core.messages import RawMessage

_APPLY, _DROP, _REEMIT = Action.APPLY, Action.DROP, Action.REEMIT
_APPLIED, _REPLAYED = Action.APPLY.value, Action.REEMIT.value
_NONE = Snapshot.NONE
#: A key header no framed key has (the group's keys are not Avro).
_NO_KEY = b"\xff" * 5


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
    ``after`` of the last change taken (its ``source``, the source position). The
    messages are scanned ahead here, and the common ones decided in C
    (:func:`processor.reconcile._fused.take_avro_changes`); the loop below decides each
    one it leaves.
    """
    get, put, append = state.get, state.put, records.append
    cache, updates = state.maps()
    taken = dropped = 0
    last: tuple[bytes, int] | None = None  # the last change taken: its value, its rest
    entry_keys = [ENTRY + k for k in state_keys(codec, group)]
    state.prefetch(entry_keys)
    count = len(entry_keys)
    scans: list[AvroScan | None] = []
    base = 0
    block_head = codec.block_head(group[0].topic, group[0].partition) if group else b""
    applied, replayed = codec.block_tail(_APPLIED), codec.block_tail(_REPLAYED)
    key_in = key_out = b""  # the output header of the keys the C loop takes: once it runs
    while taken < count:
        if taken >= base + len(scans):
            base, scans = taken, _scans(codec, group, taken, count, limit)
            if not scans:
                break
        layout = next((s[0] for s in scans[taken - base :] if s is not None), None)
        if layout is not None:
            if not key_in:
                # A key of a schema the codec has met (state_keys read it), as output_key
                # would register it for the first change it emits.
                framed = (m.key for m in group[:count] if _framed(m.key))
                key_in = next((key[:5] for key in framed if key is not None), _NO_KEY)
                key_out = key_in if key_in is _NO_KEY else codec.output_key_header(key_in)
            taken, more, last_at, stop = take_avro_changes(
                group, entry_keys, taken, scans, base, layout,
                HEADER.pack(0, layout.output_id), layout.null_byte, layout.row_byte,
                cache, updates, flushed, block_head, applied, replayed, key_in, key_out,
                output, records,
            )  # fmt: skip
            dropped += more
            if last_at >= 0:
                found, value = scans[last_at - base], group[last_at].value
                assert found is not None and value is not None
                last = value, found[2]
            if stop or taken == count or taken >= base + len(scans):
                if stop:
                    break
                continue
        msg, entry_key, scan = group[taken], entry_keys[taken], scans[taken - base]
        value = msg.value
        if value is None or scan is None:
            taken += 1  # Debezium's tombstone after a delete: its delete event emitted both
            continue
        layout, after_at, rest_at, _before, op, version, txid, _snapshot, _connector = scan
        judged = judge(get(entry_key), version, txid)
        if judged is None:
            break  # an entry of another format: the general path stops at it
        action, previous = judged
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


def _framed(key: bytes | None) -> bool:
    """Whether ``key`` is in Avro's wire format (:meth:`AvroCodec.output_key` reframes it)."""
    return key is not None and len(key) >= 5 and key[:1] == MAGIC


def _scans(
    codec: AvroCodec, group: list[RawMessage], start: int, stop: int, limit: int
) -> list[AvroScan | None]:
    """The scans of ``group[start:stop]``'s leading messages that take this path (``None``
    for a tombstone), up to the first that does not."""
    scans: list[AvroScan | None] = []
    scan = codec.scan
    for index in range(start, stop):
        msg = group[index]
        value = msg.value
        if value is None:
            scans.append(None)
            continue
        found = scan(value) if len(value) + len(msg.key or b"") <= limit else None
        if found is None:
            break
        scans.append(found)
    return scans


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
