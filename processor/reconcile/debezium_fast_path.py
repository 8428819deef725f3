"""The Debezium envelopes on Debezium JSON events, decided a batch at a time without
parsing them.

:func:`decide_debezium_upsert` is :func:`processor.reconcile.envelopes.debezium_upsert`
(the version rule :func:`processor.reconcile.versions.decide_change`, the state
:class:`~processor.reconcile.versions.Entry`), :func:`decide_debezium` is
:func:`processor.reconcile.envelopes.debezium` (the high-water mark), each fused with
:class:`processor.events.json_codec.JsonCodec`'s decoding and encoding for the message
they see most: a change event whose payload the compiled scanner
(:mod:`tidemark.core.json_scan`) takes, bare or inside the envelope of the schema the codec
already knows, with no unchanged-TOAST placeholder (and, for ``debezium``, outside a
snapshot). Such a message costs one validating pass, a state read and a few byte
operations: its rows go to state and to the output as the input's own bytes, the output
being its payload with the emitted ``before`` in place
(:func:`~processor.events.json_codec.splice_event`), as the general path writes it for
the same message.

Each stops at the first message it does not take (an Avro key or value, a new schema, a
declined, TOASTed or snapshot event, a key that is not a JSON object, a stored row in
another format, a change the envelope refuses) and leaves the rest of the group to the
general path, so every error and every unusual case is handled there, once.
``tests/unit/test_debezium_fast_path.py`` holds both to the general path: the same
outputs, state and positions, byte for byte.
"""

from __future__ import annotations

import orjson

from processor.errors import StateFormatError
from processor.events.change import (
    TOAST_PLACEHOLDER_BASE64_BYTES,
    TOAST_PLACEHOLDER_BYTES,
    Version,
)
from processor.events.chunk_tag import UNSIGNED, ChunkTag
from processor.events.json_codec import JsonCodec, splice_event, tidemark_format
from processor.events.visibility import PgSnapshot
from processor.reconcile._fused import take_changes, take_fresh_rows
from processor.reconcile.envelopes import ENTRY, HIGH_WATER, HIGH_WATER_MARK, SEEN_STALE
from processor.reconcile.versions import (
    CHANGE_ROW_AT,
    FORMAT_BYTE,
    HEAD,
    PRESENT_FLAG,
    Action,
    Entry,
    decide,
    decide_change,
    decide_row,
)
from state.batch import BatchState
from tidemark.core.avro_wire import MAGIC
from tidemark.core.errors import InputError
from tidemark.core.json_scan import (
    AFTER,
    AFTER_END,
    BEFORE,
    BEFORE_END,
    BEFORE_ROW,
    CONNECTOR,
    MAJOR,
    MINOR,
    OP,
    SNAPSHOT,
    TOAST,
    TXID,
    Scan,
    scan_change,
    scan_object,
)
from tidemark.core.messages import RawMessage

Record = tuple[str, int, bytes | None, bytes | None]

_APPLY, _REEMIT, _DROP = Action.APPLY, Action.REEMIT, Action.DROP
_REPLAYED = Action.REEMIT.value.encode()
_DELETE = ord("d")
_ENVELOPE = b"debezium-upsert"
_APPLIED = Action.APPLY.value.encode()
#: ``source.connector`` codes of the scanner whose positions ``debezium`` orders.
_ORDERED = frozenset({1, 2})
_SNAPSHOT = b"snapshot"
_PLACEHOLDERS = (TOAST_PLACEHOLDER_BYTES, TOAST_PLACEHOLDER_BASE64_BYTES)
#: A chunk row's payload up to its ``before``, and between ``before`` and its row.
_OPENING, _BETWEEN = b'{"before":', b',"after":'

_NEEDS_BEFORE = frozenset({ord("u"), ord("d")})


def decide_debezium_upsert(
    codec: JsonCodec,
    group: list[RawMessage],
    state: BatchState,
    output: str,
    records: list[Record],
    flushed: int,
    limit: int,
) -> tuple[int, int, bytes | None]:
    """Decide ``group``'s leading messages that take this path, appending their records.

    ``flushed`` is the input offset below which outputs are already in Kafka (a
    replayed equal version there is not emitted again); a message larger than
    ``limit`` bytes is left to the general path. Returns how many messages were taken,
    how many of them were dropped, and the payload of the last change taken (its
    source position).
    """
    prefix, head = _schema(codec)
    block = tidemark_format(orjson.dumps(group[0].topic) if group else b"", _ENVELOPE)
    get, put, append = state.get, state.put, records.append
    cache, updates = state.maps()
    parts = _block_parts(block)
    taken = dropped = 0
    last: bytes | None = None
    entry_keys = [ENTRY + k for k in _state_keys(codec, group)]
    state.prefetch(entry_keys)
    count = len(entry_keys)
    while taken < count:
        # The common events in C; the loop below decides the one it leaves, or stops.
        taken, more, last_at, stop = take_changes(
            group, entry_keys, taken, cache, updates, prefix, head, limit, flushed, parts,
            output, records,
        )  # fmt: skip
        dropped += more
        if last_at >= 0:
            last = group[last_at].value
        if stop or taken == count:
            break
        msg, entry_key = group[taken], entry_keys[taken]
        key, value = msg.key, msg.value
        if value is None:
            taken += 1  # Debezium's tombstone after a delete: its delete event emitted both
            continue
        scan = _scan(value, key, prefix, limit)
        if scan is None:
            break
        version = (scan[MAJOR], scan[MINOR])
        txid = scan[TXID]
        judged = judge(get(entry_key), version, txid)
        if judged is None:
            break  # an entry of another format: the general path stops at it
        action, previous = judged
        if previous is not None and previous[:1] == MAGIC:
            break  # an Avro row: the general path converts it
        taken += 1
        last = value
        if action is _DROP or (action is _REEMIT and msg.offset < flushed):
            dropped += 1
            continue
        after = value[scan[AFTER] : scan[AFTER_END]]
        deleted = scan[OP] == _DELETE
        if action is _APPLY:
            row = None if deleted else after
            if txid is None:
                put(entry_key, Entry.encode_row(version, row))
            else:
                put(entry_key, Entry.encode_change(version, row, txid))
        partition = msg.partition
        reason = _APPLIED if action is _APPLY else _REPLAYED  # a dict of Enum keys: slow
        tail = block % (partition, msg.offset, version[0], version[1], reason)
        event = splice_event(value, scan, b"null" if previous is None else previous, after, tail)
        if head:
            event = head + event + b"}"
        append((output, partition, key, event))
        if deleted:
            append((output, partition, key, None))
    return taken, dropped, _payload(last, prefix)


def judge(
    stored: bytes | None, version: Version, txid: int | None
) -> tuple[Action, bytes | None] | None:
    """What ``debezium-upsert`` does with a change of ``version`` (and ``txid``) to a key whose
    entry in state is ``stored`` (:func:`~processor.reconcile.versions.decide_change`), and
    the row stored (the output's retraction), read without decoding the entry when it
    holds a change's row; ``None`` for an entry of another format (the general path's)."""
    if stored is None:
        return _APPLY, None
    if stored[:1] != FORMAT_BYTE or len(stored) < HEAD.size:
        return None
    _format, major, minor, flags = HEAD.unpack_from(stored)
    row_at = CHANGE_ROW_AT.get(flags)
    if row_at is not None and len(stored) >= row_at:  # a change's row: by version alone
        return decide(version, (major, minor)), stored[row_at:] if flags & PRESENT_FLAG else None
    try:
        entry = Entry.decode(stored)  # a chunk row's or a pending entry
    except StateFormatError:
        return None  # damaged: the general path stops the partition with the reason
    return decide_change(version, txid, entry, positions=True), entry.value


def decide_chunk_rows(
    codec: JsonCodec,
    group: list[RawMessage],
    state: BatchState,
    output: str,
    records: list[Record],
    limit: int,
) -> tuple[int, int]:
    """Decide the leading chunk rows of a backfill topic's ``group`` under
    ``debezium-upsert``, as :func:`processor.reconcile.envelopes.debezium_upsert` decides a
    chunk row (:func:`~processor.reconcile.versions.decide_row`), fused with
    :class:`~processor.events.json_codec.ChunkEnvelope`'s decoding: a row inside the envelope
    of its chunk's first row (which the general path decoded in full) is validated by the
    scanner and goes to state and to the output as its own bytes.

    It takes rows of one chunk read in a PostgreSQL snapshot (a signal-table window's
    wait in the general path's window buffer), stops at the first it does not take (or
    at the next chunk's first row) and returns how many it took and how many of them it
    dropped. Rows of keys with no state entry (all of a table's first backfill) are
    taken in C (:mod:`processor.reconcile._fused`), byte for byte as this loop takes
    them; the loop takes each row the C loop stops at.
    """
    envelope = codec.chunk_envelope
    if envelope is None or not envelope.spliceable or not group:
        return 0, 0
    head, tail = envelope.head, envelope.tail
    at, after_at = len(head), -len(tail)
    rest = tail[: -2 if envelope.schema is not None else -1]  # the payload's closing brace out
    out_head = codec.output_head(envelope.schema) if envelope.schema is not None else b""
    out_tail = b"}" if out_head else b""
    block = tidemark_format(orjson.dumps(group[0].topic), _ENVELOPE)
    parts = _block_parts(block)
    opening = b"".join((out_head, _OPENING, b"null", _BETWEEN))  # a row's with no entry
    get, put, append = state.get, state.put, records.append
    cache, updates = state.maps()
    # The rows of the first row's chunk (the next chunk's first row is the general path's,
    # and its keys would be read for nothing).
    chunk, stop = group[0].chunk, 1
    while stop < len(group) and (group[stop].chunk is chunk or group[stop].chunk == chunk):
        stop += 1
    run = group[:stop]
    keys = _state_keys(codec, run)
    state.prefetch([ENTRY + k for k in keys])
    last_tag: ChunkTag | None = None
    prefix = rest_to_offset = closing = b""
    version = (0, 0)
    index, dropped = 0, 0
    count = min(len(run), len(keys))
    while index < count:
        msg, state_key = run[index], keys[index]
        value, tag = msg.value, msg.chunk
        if (
            value is None
            or tag is None
            or tag is UNSIGNED
            or len(value) + len(msg.key or b"") > limit
        ):
            break
        if tag is not last_tag:
            if not isinstance(tag.read_in, PgSnapshot):
                break
            last_tag, version = tag, (0, tag.number)
            prefix = Entry(version, b"", envelope.txid, tag.number, tag.read_in).encode()
            before_offset, after_offset = _around_offset(parts, msg.partition, version, _SNAPSHOT)
            rest_to_offset, closing = rest + before_offset, after_offset + out_tail
        # Rows of keys without an entry, in C; the loop below takes the row it stops at.
        taken = take_fresh_rows(
            run,
            keys,
            index,
            tag,
            cache,
            updates,
            ENTRY,
            prefix,
            head,
            tail,
            limit,
            _PLACEHOLDERS,
            opening,
            rest_to_offset,
            closing,
            output,
            records,
        )
        if taken > index:
            index = taken
            continue
        if (
            len(value) <= at - after_at
            or not value.startswith(head)
            or not value.endswith(tail)
            or not scan_object(value, at, len(value) + after_at)
        ):
            break
        row = value[at:after_at]
        if TOAST_PLACEHOLDER_BYTES in row or TOAST_PLACEHOLDER_BASE64_BYTES in row:
            break
        entry_key = ENTRY + state_key
        stored = get(entry_key)
        previous: bytes | None = None
        action = _APPLY
        if stored is not None:
            if stored[:1] != FORMAT_BYTE:
                break  # an entry of another format: the general path stops at it
            try:
                entry = Entry.decode(stored)
            except StateFormatError:
                break  # damaged: the same
            previous = entry.value
            if entry.pending or (previous is not None and previous[:1] == MAGIC):
                break  # a row to read again, or an Avro row: the general path's
            action = decide_row(tag.number, tag.read_in, entry, positions=True)
        index += 1
        if action is _DROP:
            dropped += 1
            continue
        if action is _APPLY:
            put(entry_key, prefix + row)
        before = b"null" if previous is None else previous
        tidemark = block % (msg.partition, msg.offset, version[0], version[1], _SNAPSHOT)
        event = b"".join((out_head, _OPENING, before, _BETWEEN, row, rest, tidemark, out_tail))
        append((output, msg.partition, msg.key, event))
    return index, dropped


def _block_parts(block: bytes) -> tuple[bytes, bytes, bytes, bytes, bytes, bytes]:
    """``block`` (a :func:`tidemark_format`: its partition, offset, the version's two parts
    and its reason, in that order) as the six pieces around them."""
    pieces = block.split(b"%d")
    assert len(pieces) == 5, block  # a topic's name holds no "%"
    reason_before, found, reason_after = pieces[4].partition(b"%b")
    assert found and b"%" not in reason_after, block
    return pieces[0], pieces[1], pieces[2], pieces[3], reason_before, reason_after


def _around_offset(
    parts: tuple[bytes, ...], partition: int, version: tuple[int, int], reason: bytes
) -> tuple[bytes, bytes]:
    """The tidemark member of a row of ``partition`` at ``version`` (``parts``: from
    :func:`_block_parts`), as the bytes before its offset and after it."""
    return parts[0] + b"%d" % partition + parts[1], b"".join(
        (parts[2], b"%d" % version[0], parts[3], b"%d" % version[1], parts[4], reason, parts[5])
    )


def decide_debezium(
    codec: JsonCodec,
    group: list[RawMessage],
    state: BatchState,
    output: str,
    records: list[Record],
    limit: int,
) -> tuple[int, int, bytes | None]:
    """As :func:`decide_debezium_upsert`, for the ``debezium`` envelope: a change at or
    below the partition's high-water mark is a replay and dropped; the output carries the
    input's own ``before`` and ``after``."""
    prefix, head = _schema(codec)
    block = tidemark_format(orjson.dumps(group[0].topic) if group else b"", b"debezium")
    append = records.append
    taken = dropped = 0
    last: bytes | None = None
    high_water = HighWater(state)
    for msg, _state_key in zip(group, _state_keys(codec, group), strict=False):
        key, value = msg.key, msg.value
        if value is None:
            taken += 1
            continue
        scan = _scan(value, key, prefix, limit)
        if (
            scan is None
            or scan[SNAPSHOT]  # snapshot groups: the general path keeps their keys
            or scan[CONNECTOR] not in _ORDERED
            or (scan[OP] in _NEEDS_BEFORE and not scan[BEFORE_ROW])  # refused there
        ):
            break
        taken += 1
        last = value
        version = (scan[MAJOR], scan[MINOR])
        if not high_water.passes(version):
            dropped += 1
            continue
        tail = block % (msg.partition, msg.offset, version[0], version[1], _APPLIED)
        before = value[scan[BEFORE] : scan[BEFORE_END]]
        event = splice_event(value, scan, before, value[scan[AFTER] : scan[AFTER_END]], tail)
        if head:
            event = head + event + b"}"
        append((output, msg.partition, key, event))
        if scan[OP] == _DELETE:
            append((output, msg.partition, key, None))
    high_water.save()
    return taken, dropped, _payload(last, prefix)


class HighWater:
    """A partition's high-water mark under ``debezium``, as a fused loop moves it past the
    changes it emits (:func:`processor.reconcile.envelopes.debezium` outside snapshots)."""

    __slots__ = ("_state", "_mark", "_known", "_group_open", "_moved")

    def __init__(self, state: BatchState) -> None:
        self._state = state
        raw = state.get(HIGH_WATER)
        self._known = raw is not None
        self._mark, self._group_open, self._moved = (-1 << 63, -1 << 63), False, False
        if raw is not None:
            major, minor, flag = HIGH_WATER_MARK.unpack(raw)
            self._mark, self._group_open = (major, minor), bool(flag)

    def passes(self, version: Version) -> bool:
        """Whether a change of ``version`` is past the mark, which then moves to it (else
        it is a replay)."""
        if self._known and version <= self._mark:
            return False
        if self._group_open:  # the ended group's keys: pruned a page at a time
            self._state.put(SEEN_STALE, b"")
            self._group_open = False
        self._mark, self._known, self._moved = version, True, True
        return True

    def save(self) -> None:
        """Put the mark in state, if it moved."""
        if self._moved:
            self._state.put(HIGH_WATER, HIGH_WATER_MARK.pack(*self._mark, False))


def _schema(codec: JsonCodec) -> tuple[bytes, bytes]:
    """The value schema's prefix the codec knows (or none) and its output's head."""
    splitter = codec.values
    schema = splitter.schema
    return splitter.prefix, codec.output_head(schema) if schema is not None else b""


def _state_keys(codec: JsonCodec, group: list[RawMessage]) -> list[bytes]:
    """The state keys of ``group``'s leading messages with a JSON key that decodes."""
    keys = []
    scanned = codec.scanned_key
    for msg in group:
        key = msg.key
        if key is None or key[:1] == MAGIC:
            break
        state_key = scanned(key)
        if state_key is None:
            try:
                state_key = codec.decode_key(msg)
            except InputError:
                break
        keys.append(state_key)
    return keys


def _scan(value: bytes, key: bytes | None, prefix: bytes, limit: int) -> Scan | None:
    """The scan of a value this path takes, or ``None``."""
    if value[:1] == MAGIC or len(value) + len(key or b"") > limit:
        return None
    if prefix:
        if not (value.startswith(prefix) and value.endswith(b"}")):
            return None
        scan = scan_change(value, len(prefix), len(value) - 1)
    else:
        scan = scan_change(value, 0, len(value))
    return None if scan is None or scan[TOAST] else scan


def _payload(value: bytes | None, prefix: bytes) -> bytes | None:
    """The payload of a value :func:`_scan` took."""
    if value is not None and prefix:
        return value[len(prefix) : -1]
    return value
