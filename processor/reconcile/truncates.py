"""TRUNCATE: every row of a table goes, in every partition, at the truncate's position.

Debezium writes a truncate event (``op: t``, no key, no rows) when its
``skipped.operations`` lets it, into *one* partition of the table's topic; the table's
keys are spread over all of them. Under ``debezium-upsert`` the truncate is applied in
three steps, each a pure rule over partition state:

1. **Marker.** The batch that reads the truncate writes a copy of it, a *marker*, into
   every partition of the table's backfill topic (:func:`markers`), in the transaction
   that commits the truncate's offset. Partition ``p`` of the backfill topic is decided
   against the state of input partition ``p`` (:mod:`processor.events.chunk_tag`), so
   each partition's owner, on whichever instance, gets the truncate once.
2. **Floor.** The marker sets the partition's *floor* (:data:`FLOOR`): a change of a key
   without state below the truncate's position, read later (the input partition lagged
   behind the one the truncate was in), is dropped, and so is a chunk row of a key
   without state read in a snapshot that does not see the truncate. A key with state
   needs no floor: its tombstone (step 3) orders it. The floor stays for chunk rows; for
   changes it is *passed* once the partition reads a change at or above the truncate,
   after which no older change of an unseen key can come (the fused paths, which do not
   read the floor, decide the partition only once it is passed).
3. **Wipe.** Every key whose entry is older than the truncate (a change below its
   position, a chunk row whose snapshot does not see it) becomes a tombstone at the
   truncate's position and transaction id, and the key's row, if it had one, is deleted
   in the output: a delete event (the retraction, reason ``truncate``) and a tombstone.
   The keys are taken :data:`WIPE_PAGE` at a time, one page per batch, from a cursor
   kept in state (:data:`WIPE`), so a table of any size never makes one batch large,
   and a crash resumes the wipe where its last batch ended. Changes and chunk rows of
   keys not yet wiped are decided as usual: an older one is wiped in its turn, a newer
   one stays.

A delete's output key must be the bytes of the key's own events (Kafka compacts and
partitions by them). State holds a key's payload only, so each partition keeps its
keys' *frame* (:data:`KEY_FRAME`): the bytes around the payload in its last event's key
(a JSON key's schema, an Avro key's header), the same for every key of a table.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from processor.errors import StateFormatError
from processor.events.change import Version
from processor.events.visibility import PgSnapshot, Window
from processor.reconcile.envelopes import ENTRY, KeyState
from processor.reconcile.versions import Entry

#: The key of a marker record: this prefix, then the truncate's input partition and offset.
MARKER = b"\x00tidemark:truncate:"
_ORIGIN = struct.Struct(">iq")
#: A partition's floor: :meth:`Floor.encode`'s bytes.
FLOOR = b"\x00tidemark:truncated"
#: A partition's wipe in progress: :meth:`Wipe.encode`'s bytes.
WIPE = b"\x00tidemark:wipe"
#: A partition's key frame: :func:`frame_of`'s bytes.
KEY_FRAME = b"\x00tidemark:key-frame"
#: Keys looked at per partition and batch while a wipe runs.
WIPE_PAGE = 5000
_FORMAT = 1
_FLOOR = struct.Struct(">BqqqqB")  # format, version, txid, lsn, passed
_WIPE_HEAD = struct.Struct(">BqqqqiqI")  # format, version, txid, lsn, origin, cursor length
_FRAME_HEAD = struct.Struct(">BI")  # format, prefix length
_NO_TXID = -(1 << 63)


class Truncate(NamedTuple):
    """Where a truncate lies: its version (source position), transaction id, WAL position."""

    version: Version
    txid: int | None
    lsn: int

    def sees(self, entry: Entry) -> bool:
        """Whether ``entry`` is at or after this truncate (it stays), else older (wiped)."""
        if entry.snapshot is not None:
            if self.txid is None:
                return False
            return entry.snapshot.visible(self.txid, self.lsn)
        return entry.version >= self.version

    def seen_by(self, read_in: PgSnapshot | Window) -> bool:
        """Whether a chunk read ``read_in`` (a snapshot, or a signal-table window) was read
        after this truncate committed."""
        if isinstance(read_in, Window):
            return read_in.high >= self.version
        return self.txid is not None and read_in.visible(self.txid, self.lsn)


def truncate_of(version: Version, txid: int | None, event: object) -> Truncate:
    """The :class:`Truncate` of a truncate event's change (its ``source.lsn``: the WAL
    position the chunk snapshots are placed against; its version's if it has none)."""
    source = event.get("source") if isinstance(event, dict) else None
    lsn = source.get("lsn") if isinstance(source, dict) else None
    if not isinstance(lsn, int) or isinstance(lsn, bool) or not 0 <= lsn < 1 << 63:
        lsn = version[1]
    return Truncate(version, txid, lsn)


def markers(
    backfill: str, partitions: int, origin: tuple[int, int], value: bytes
) -> list[tuple[str, int, bytes, bytes]]:
    """The marker records of a truncate event (its ``value``, read at ``origin``: input
    partition and offset): one per partition of the backfill topic."""
    key = MARKER + _ORIGIN.pack(*origin)
    return [(backfill, p, key, value) for p in range(partitions)]


def origin_of(key: bytes | None) -> tuple[int, int] | None:
    """The input partition and offset a marker's key names (``None``: not a marker's)."""
    if key is None or len(key) != len(MARKER) + _ORIGIN.size or not key.startswith(MARKER):
        return None
    partition, offset = _ORIGIN.unpack_from(key, len(MARKER))
    return (partition, offset) if partition >= 0 and offset >= 0 else None


class Floor(NamedTuple):
    """The newest truncate a partition received, and whether its changes passed it."""

    truncate: Truncate
    passed: bool

    def encode(self) -> bytes:
        t = self.truncate
        txid = _NO_TXID if t.txid is None else t.txid
        return _FLOOR.pack(_FORMAT, *t.version, txid, t.lsn, self.passed)

    @staticmethod
    def decode(raw: bytes) -> Floor:
        if len(raw) != _FLOOR.size or raw[0] != _FORMAT:
            raise StateFormatError(_unknown("truncate floor", raw))
        _format, major, minor, txid, lsn, passed = _FLOOR.unpack(raw)
        truncate = Truncate((major, minor), None if txid == _NO_TXID else txid, lsn)
        return Floor(truncate, bool(passed))


class Wipe(NamedTuple):
    """A wipe in progress: its truncate, the truncate event (the template of its delete
    events) and where it came from, and the last key wiped (``b""``: none yet)."""

    truncate: Truncate
    event: bytes
    origin: tuple[int, int]
    cursor: bytes

    def encode(self) -> bytes:
        t = self.truncate
        txid = _NO_TXID if t.txid is None else t.txid
        head = _WIPE_HEAD.pack(_FORMAT, *t.version, txid, t.lsn, *self.origin, len(self.cursor))
        return head + self.cursor + self.event

    @staticmethod
    def decode(raw: bytes) -> Wipe:
        if len(raw) < _WIPE_HEAD.size or raw[0] != _FORMAT:
            raise StateFormatError(_unknown("truncate in progress", raw))
        _format, major, minor, txid, lsn, partition, offset, size = _WIPE_HEAD.unpack_from(raw)
        end = _WIPE_HEAD.size + size
        if end > len(raw):
            raise StateFormatError(_unknown("truncate in progress", raw))
        truncate = Truncate((major, minor), None if txid == _NO_TXID else txid, lsn)
        return Wipe(truncate, raw[end:], (partition, offset), raw[_WIPE_HEAD.size : end])


def _unknown(what: str, raw: bytes) -> str:
    return (
        f"a {what} stored in a form this release does not know (format "
        f"{raw[:1].hex() or 'none'}, {len(raw)} bytes): run the release that wrote it, or "
        "rebuild the partition's state (tidemark offsets reset --reset-state)"
    )


def floor(state: KeyState) -> Floor | None:
    """The partition's floor, if a truncate reached it."""
    raw = state.get(FLOOR)
    return None if raw is None else Floor.decode(raw)


def receive(state: KeyState, truncate: Truncate, event: bytes, origin: tuple[int, int]) -> bool:
    """A marker reached the partition: raise its floor, and start wiping (from the first
    key) unless a wipe of this truncate or a later one runs or ran. Returns whether a
    wipe starts."""
    current = floor(state)
    if current is not None and current.truncate.version >= truncate.version:
        return False  # a marker again (a replay), or an older truncate's
    state.put(FLOOR, Floor(truncate, False).encode())
    state.put(WIPE, Wipe(truncate, event, origin, b"").encode())
    return True


def pass_floor(state: KeyState, current: Floor) -> Floor:
    """The partition read a change at or above its floor's truncate: the floor is passed."""
    passed = current._replace(passed=True)
    state.put(FLOOR, passed.encode())
    return passed


def below_floor(current: Floor, version: Version, read_in: PgSnapshot | Window | None) -> bool:
    """Whether a change at ``version`` (or a chunk row ``read_in``) of a key without state
    is older than the partition's last truncate."""
    if read_in is not None:
        return not current.truncate.seen_by(read_in)
    return version < current.truncate.version


class Wiped(NamedTuple):
    """A key the wipe deletes: its bytes in state and its row before (``None``: none)."""

    key: bytes
    row: bytes | None


class Page(NamedTuple):
    """A page of a wipe, decided but not yet written (:func:`write_page`)."""

    wipe: Wipe
    #: The keys whose row goes (each one's delete is output).
    wiped: list[Wiped]
    #: The state keys that become tombstones at the truncate (``wiped``'s among them).
    tombstones: list[bytes]
    #: The last key looked at; ``None``: the wipe ends with this page.
    cursor: bytes | None


def wipe_page(state: KeyState, limit: int = WIPE_PAGE) -> Page | None:
    """The next page of the partition's wipe (``None``: none runs): its keys older than
    the truncate, to become tombstones at it."""
    raw = state.get(WIPE)
    if raw is None:
        return None
    wipe = Wipe.decode(raw)
    truncate = wipe.truncate
    after = ENTRY + wipe.cursor if wipe.cursor else None
    keys = state.keys(ENTRY, after=after, limit=limit)
    wiped, tombstones = [], []
    for key in keys:
        stored = state.get(key)
        if stored is None:
            continue
        entry = Entry.decode(stored)
        if truncate.sees(entry):
            continue
        tombstones.append(key)
        if entry.value is not None:
            wiped.append(Wiped(key[len(ENTRY) :], entry.value))
    cursor = keys[-1][len(ENTRY) :] if len(keys) == limit else None
    return Page(wipe, wiped, tombstones, cursor)


def write_page(state: KeyState, page: Page) -> None:
    """Write ``page`` to state: its tombstones, and the wipe's cursor (or its end)."""
    truncate = page.wipe.truncate
    tombstone = Entry(truncate.version, None, truncate.txid).encode()
    for key in page.tombstones:
        state.put(key, tombstone)
    if page.cursor is None:
        state.put(WIPE, None)
    else:
        state.put(WIPE, page.wipe._replace(cursor=page.cursor).encode())


def frame_of(key: bytes, state_key: bytes) -> bytes | None:
    """The frame of ``key`` around its payload ``state_key`` (``None``: the payload is not
    in it as it is, so no key of the table can be made from state)."""
    at = key.rfind(state_key)
    if at < 0:
        return None
    prefix, suffix = key[:at], key[at + len(state_key) :]
    return _FRAME_HEAD.pack(_FORMAT, len(prefix)) + prefix + suffix


def note_frame(state: KeyState, frame: bytes) -> None:
    """Keep ``frame`` as the partition's key frame (written only when it changes)."""
    if state.get(KEY_FRAME) != frame:
        state.put(KEY_FRAME, frame)


def key_of(state: KeyState, state_key: bytes) -> bytes | None:
    """The key bytes of the key whose payload is ``state_key``, by the partition's frame
    (``None``: no frame noted)."""
    raw = state.get(KEY_FRAME)
    if raw is None:
        return None
    if len(raw) < _FRAME_HEAD.size or raw[0] != _FORMAT:
        raise StateFormatError(_unknown("key frame", raw))
    size = _FRAME_HEAD.unpack_from(raw)[1]
    prefix = raw[_FRAME_HEAD.size : _FRAME_HEAD.size + size]
    return prefix + state_key + raw[_FRAME_HEAD.size + size :]
