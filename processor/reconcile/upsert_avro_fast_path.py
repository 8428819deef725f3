"""The ``upsert`` envelope on flat Avro rows, decided a batch at a time without decoding them.

:func:`decide_flat` is :func:`processor.reconcile.upsert_fast_path.decide_flat` (the same
rule, the same state) for rows in the Confluent wire format, fused with
:class:`processor.events.avro_codec.AvroCodec`'s decoding and encoding: a row of a
schema the codec has met is checked by
:meth:`~processor.events.avro_codec.AvroCodec.scan_row` (skipped, or read when its
schema has ``ExtractNewRecordState``'s ``__txId`` or ``__deleted``), goes to state as
its own bytes, and its output is the bytes
:meth:`~processor.events.avro_codec.AvroCodec.encode` writes for it: the output
schema's header, the row stored before (the retraction), the row, the op, a null
``ts_ms`` and the ``tidemark`` block.

It stops at the first message it does not take (a JSON key or value, a null value, a
schema the codec has not met, a row the scan declines, a stored row of another schema
or format, a key whose entry is a chunk row's) and leaves the rest of the group to the
general path. ``tests/unit/test_upsert_avro_fast_path.py`` holds it to the general
path: the same outputs, dead letters and state, byte for byte.
"""

from __future__ import annotations

from processor.events.avro_codec import AvroCodec
from processor.events.avro_schemas import avro_string
from processor.reconcile.debezium_avro_fast_path import state_keys
from processor.reconcile.debezium_fast_path import Record
from processor.reconcile.envelopes import ENTRY
from processor.reconcile.upsert_fast_path import judge
from processor.reconcile.versions import Action, Entry
from state.batch import BatchState
from tidemark.core.avro_wire import HEADER
from tidemark.core.messages import RawMessage

_APPLY, _REEMIT = Action.APPLY, Action.REEMIT
_APPLIED, _REPLAYED = _APPLY.value, _REEMIT.value
#: The output's ``op`` (and a null ``ts_ms``) after its rows, by op.
_OPS = {op: avro_string(op) + b"\x00" for op in "cud"}


def decide_flat(
    codec: AvroCodec,
    group: list[RawMessage],
    state: BatchState,
    output: str,
    records: list[Record],
    flushed: int,
    limit: int,
) -> tuple[int, int]:
    """Decide ``group``'s leading messages that take this path, appending their records.

    As :func:`processor.reconcile.upsert_fast_path.decide_flat`: returns how many
    messages were taken and how many of them were dropped.
    """
    get, put, append = state.get, state.put, records.append
    taken = dropped = 0
    entry_keys = [ENTRY + k for k in state_keys(codec, group)]
    state.prefetch(entry_keys)
    for msg, entry_key in zip(group, entry_keys, strict=False):
        key, value = msg.key, msg.value
        if value is None or len(value) + len(key or b"") > limit:
            break
        scan = codec.scan_row(value)
        if scan is None:
            break
        layout, txid, deleted = scan
        header = value[:5]
        offset = msg.offset
        judged = judge(get(entry_key), offset, flushed, deleted and txid is None)
        if judged is None:
            break  # a chunk row's, a pending or another format's entry: not a change's
        action, previous = judged
        if previous is not None and previous[:5] != header:
            break  # a row of another schema or format: the general path converts it
        taken += 1
        if action is None:
            dropped += 1
            continue
        version = (0, offset)
        row = None if deleted else value
        if action is _APPLY:
            if txid is None:
                put(entry_key, Entry.encode_row(version, row))
            else:
                put(entry_key, Entry.encode_change(version, row, txid))
        op = "d" if deleted else "u" if previous is not None else "c"
        event = b"".join(
            (
                HEADER.pack(0, layout.output_id),
                layout.null_byte if previous is None else layout.row_byte + previous[5:],
                layout.null_byte if deleted else layout.row_byte + value[5:],
                _OPS[op],
                codec.tidemark_block(msg, version, _APPLIED if action is _APPLY else _REPLAYED),
            )
        )
        out_key = codec.output_key(msg)
        append((output, msg.partition, out_key, event))
        if deleted:
            append((output, msg.partition, out_key, None))
    return taken, dropped
