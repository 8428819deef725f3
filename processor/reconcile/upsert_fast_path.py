"""The ``upsert`` envelope on flat JSON rows, decided a batch at a time without per-event objects.

This is :func:`processor.reconcile.envelopes.upsert` (the version rule
:func:`processor.reconcile.versions.decide`, the state :class:`~processor.reconcile.versions.Entry`)
and :class:`processor.events.json_codec.JsonCodec`'s decoding and encoding, fused
for the message they see most: a JSON key, and a value that is either null (a
delete) or one JSON object, bare or inside the envelope of the schema the codec
already knows. Such a message costs a parse of its value and a few byte
operations; no :class:`~processor.events.change.Change`, ``Emit`` or output dict is made.
Rows go to state and to the output as the input's own bytes.

It stops at the first message of a group it does not take (an Avro key or
value, an unknown schema, bytes that are not one JSON object, a missing key, a
stored row in another format) and leaves the rest of the group to the general
path, so every error and every unusual case is handled there, once. The
property test in ``tests/unit/test_upsert_fast_path.py`` holds the two paths to the
same outputs and the same state on random batches.
"""

from __future__ import annotations

import orjson

from processor.events.change import FLAT_DELETED, FLAT_TXID, in_64_bits
from processor.events.json_codec import JsonCodec
from processor.reconcile.envelopes import ENTRY
from processor.reconcile.versions import (
    CHANGE_ROW_AT,
    FORMAT_BYTE,
    HEAD,
    PRESENT_FLAG,
    Action,
    Entry,
    decide,
)
from state.batch import BatchState
from tidemark.core.avro_wire import MAGIC
from tidemark.core.messages import RawMessage

Record = tuple[str, int, bytes | None, bytes | None]

_EVENT = (
    b'{"before":%b,"after":%b,"op":"%b","source":null,"ts_ms":%d,'
    b'"tidemark":{"topic":%b,"partition":%d,"offset":%d,"position":"0,%d",'
    b'"envelope":"upsert","reason":"%b"}}'
)
_APPLY, _REEMIT, _DROP = Action.APPLY, Action.REEMIT, Action.DROP
_APPLIED, _REPLAYED = _APPLY.value.encode(), _REEMIT.value.encode()


def judge(
    stored: bytes | None, offset: int, flushed: int, bare_delete: bool
) -> tuple[Action | None, bytes | None] | None:
    """What ``upsert`` does with the row at input ``offset`` of a key whose entry in state
    is ``stored``, and the row stored (the output's retraction): ``None`` for an entry
    that is not a change's (a chunk row's, a pending one or one of another format: the
    general path's), and no
    action for a row dropped. That is a replay below ``flushed``, or a ``bare_delete`` (a
    delete without a transaction id) of a key already deleted, which adds nothing."""
    previous: bytes | None = None
    stored_version = None
    if stored is not None:
        if stored[:1] != FORMAT_BYTE or len(stored) < HEAD.size:
            return None
        _format, major, minor, flags = HEAD.unpack_from(stored)
        row_at = CHANGE_ROW_AT.get(flags)
        if row_at is None or len(stored) < row_at:  # damaged: the general path says why
            return None
        stored_version = (major, minor)
        if flags & PRESENT_FLAG:
            previous = stored[row_at:]
    action = decide((0, offset), stored_version)
    if (
        action is _DROP
        or (action is _REEMIT and offset < flushed)
        or (action is _APPLY and bare_delete and stored is not None and not previous)
    ):
        return None, previous
    return action, previous


def decide_flat(
    codec: JsonCodec,
    group: list[RawMessage],
    state: BatchState,
    output: str,
    records: list[Record],
    flushed: int,
    now_ms: int,
    limit: int,
) -> tuple[int, int]:
    """Decide ``group``'s leading messages that take this path, appending their records.

    ``flushed`` is the input offset below which outputs are already in Kafka (a
    replayed equal version there is not emitted again); ``now_ms`` the events'
    ``ts_ms``; a message larger than ``limit`` bytes is left to the general path. Returns
    how many messages were taken and how many of them were dropped.
    """
    splitter = codec.values
    prefix, schema = splitter.prefix, splitter.schema
    head = codec.output_head(schema) if schema is not None else b""
    skip = len(prefix)
    topic = orjson.dumps(group[0].topic)
    # Avro keys are left out: their state keys are decoded on the general path.
    state.prefetch([ENTRY + m.key for m in group if m.key is not None and m.key[:1] != MAGIC])
    get, put, append = state.get, state.put, records.append
    taken = dropped = 0
    for msg in group:
        key, value = msg.key, msg.value
        if key is None or key[:1] == MAGIC:
            break
        txid = None
        deleted = False  # a flattened delete: a row that says so, with the event's schema
        if value is not None:
            if value[:1] == MAGIC or len(value) + len(key) > limit:
                break
            if prefix:
                if not (value.startswith(prefix) and value.endswith(b"}")):
                    break
                value = value[skip:-1]
            try:
                row = orjson.loads(value)
            except orjson.JSONDecodeError:
                break
            if type(row) is not dict or (not prefix and "schema" in row and "payload" in row):
                break
            txid = row.get(FLAT_TXID)
            if type(txid) is not int:
                txid = None
            elif not in_64_bits(txid):
                break  # a dead letter, on the general path
            if row.get(FLAT_DELETED) == "true":
                deleted, value = True, None
        state_key = ENTRY + key
        offset = msg.offset
        judged = judge(get(state_key), offset, flushed, value is None and txid is None)
        if judged is None:
            break  # a chunk row's, a pending or another format's entry: not a change's
        action, previous = judged
        if previous is not None and previous[:1] == MAGIC:
            break  # an Avro row: the general path converts it
        taken += 1
        if action is None:
            dropped += 1
            continue
        version = (0, offset)
        if action is _APPLY:
            if txid is None:
                put(state_key, Entry.encode_row(version, value))
            else:
                put(state_key, Entry(version, value, txid).encode())
        event = _EVENT % (
            previous if previous is not None else b"null",
            value if value is not None else b"null",
            b"d" if value is None else b"u" if previous is not None else b"c",
            now_ms,
            topic,
            msg.partition,
            offset,
            offset,
            _APPLIED if action is _APPLY else _REPLAYED,
        )
        if head and (value is not None or deleted):  # a null value has no schema
            event = head + event + b"}"
        append((output, msg.partition, key, event))
        if value is None:
            append((output, msg.partition, key, None))
    return taken, dropped
