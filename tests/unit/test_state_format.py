"""State written by a release is read by the next: golden changelogs, one per entry format.

A partition's changelog holds its state's keys and values as the rules wrote them. Each
file ``golden/state-format-N.json`` keeps, per envelope, the changelog a scripted
history wrote in format ``N``, a continuation of that history, and the outputs the
continuation gave when it was recorded. Every release must restore each file's
changelog and decide its continuation to the same outputs; the file of the format this
release writes must also be what the script writes now, byte for byte. A change of the
format therefore adds a file and keeps the old ones passing.

``TIDEMARK_WRITE_GOLDEN=1 pytest tests/unit/test_state_format.py`` writes the file of the
current format (only when the format changed: the old files are history).
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from processor.events.change import TOAST_PLACEHOLDER
from processor.events.visibility import PgSnapshot
from processor.reconcile.batch import Reconciler
from processor.reconcile.envelopes import ENTRY
from processor.reconcile.versions import FORMAT, Entry
from state.memory import MemoryPartitionStore
from state.store import Checkpoint
from tests.unit.probe import TOPIC, probe_event
from tidemark.core.config import Config, ProcessorConfig
from tidemark.core.messages import RawMessage

#: The wall clock the reconciler reads (when keys are asked for again): fixed, so that
#: runs compare and write the same bytes.
NOW = 1_800_000_000.0

GOLDEN = Path(__file__).parent / "golden"
TP = (TOPIC, 0)
Message = tuple[bytes | None, bytes | None]


def _row(key: int, name: str | None) -> dict[str, Any]:
    return {"id": key, "name": name, "amount": None, "at": None, "u": None, "j": None, "d": None}


def _change(key: int, op: str, name: str | None, position: int, **extra: Any) -> Message:
    event = probe_event(
        op, None if name is None else _row(key, name), f'["{position}","{position}"]',
        txid=position, lsn=position,
    )  # fmt: skip
    event.update(extra)
    return orjson.dumps({"id": key}), orjson.dumps(event)


def _snapshot_row(key: int, name: str, position: int) -> Message:
    """A row of Debezium's own snapshot (``op: r``), with its old row for ``debezium``."""
    key_bytes, value = _change(key, "r", name, position)
    event = orjson.loads(value or b"")
    event["source"]["snapshot"] = "true"
    return key_bytes, orjson.dumps(event)


def _full(key: int, op: str, before: str | None, after: str | None, position: int) -> Message:
    """A change with its old row (``REPLICA IDENTITY FULL``), as ``debezium`` needs."""
    return _change(key, op, after, position, before=None if before is None else _row(key, before))


def _flat(key: int, name: str | None) -> Message:
    return orjson.dumps({"id": key}), None if name is None else orjson.dumps(_row(key, name))


#: Entries the scripted history cannot reach through messages alone: a chunk row read in a
#: snapshot with WAL positions, and one read inside a signal-table window (its close).
EXTRA_ENTRIES = {
    b'{"id":5}': Entry(
        (0, 0), orjson.dumps(_row(5, "e")), None, 3, PgSnapshot(40, 44, frozenset({41}), 200, 210)
    ),
    b'{"id":6}': Entry((215, 215), orjson.dumps(_row(6, "f")), None, 4),
}

#: Per envelope: the history that writes the changelog, and the continuation decided on it.
SCENARIOS: dict[str, tuple[list[Message], list[Message]]] = {
    "debezium-upsert": (
        [
            _change(1, "c", "a", 100),
            _change(2, "c", "b", 101),
            _change(1, "u", "a2", 102),
            _change(2, "d", None, 103),
            (orjson.dumps({"id": 2}), None),
            _change(3, "u", TOAST_PLACEHOLDER, 104),  # no state: pending
            _change(4, "c", "d", 105),
            (orjson.dumps({"id": 4}), b"{not json"),  # a dead letter: pending
        ],
        [
            _change(1, "u", "a3", 300),
            _change(1, "u", "a2", 102),  # a replay below state: dropped
            _change(2, "c", "b2", 301),
            _change(3, "u", TOAST_PLACEHOLDER, 302),  # still pending: asked again
            _change(4, "u", TOAST_PLACEHOLDER, 303),  # pending: asked again
            _change(5, "u", "e2", 304),  # txId 304 after the chunk's xmax 44: applied
            _change(6, "u", "f2", 214),  # below the window's close: dropped
            _change(6, "u", "f3", 305),
        ],
    ),
    "upsert": (
        [_flat(1, "a"), _flat(2, "b"), _flat(1, "a2"), _flat(2, None)],
        [_flat(1, "a3"), _flat(2, "b2"), _flat(3, "c")],
    ),
    "debezium": (
        [
            _snapshot_row(1, "a", 50),
            _snapshot_row(2, "b", 50),
            _full(3, "c", None, "c", 60),
            _full(1, "u", "a", "a2", 61),
        ],
        [
            _snapshot_row(2, "b", 50),  # a replayed snapshot row: dropped
            _full(1, "u", "a", "a2", 61),  # a replay: dropped
            _full(3, "u", "c", "c2", 62),
            _full(2, "d", "b", None, 63),
        ],
    ),
}


def _messages(messages: list[Message], first: int) -> list[RawMessage]:
    return [RawMessage(TOPIC, 0, first + i, k, v) for i, (k, v) in enumerate(messages)]


def _reconciler(envelope: str) -> Reconciler:
    return Reconciler(Config(processor=ProcessorConfig(envelope=envelope)), clock=lambda: NOW)


def write_changelog(envelope: str) -> list[tuple[bytes, bytes | None]]:
    """The changelog records the history of ``envelope`` writes, in order (each batch's
    updates, then the entries messages cannot reach)."""
    history, _rest = SCENARIOS[envelope]
    store = MemoryPartitionStore()
    records: list[tuple[bytes, bytes | None]] = []
    reconciler = _reconciler(envelope)
    raw = _messages(history, 0)
    for start in range(0, len(raw), 3):
        batch = reconciler.decide({TP: raw[start : start + 3]}, {TP: store})
        updates = batch.states[TP].updates
        records += sorted(updates.items())
        store.commit(updates, Checkpoint(raw[min(start + 3, len(raw)) - 1].offset + 1))
    if envelope == "debezium-upsert":
        records += [(ENTRY + key, entry.encode()) for key, entry in EXTRA_ENTRIES.items()]
    return records


def decide_continuation(envelope: str, changelog: list[tuple[bytes, bytes | None]]) -> Any:
    """Restore ``changelog`` as a new instance would, then decide the continuation: its
    outputs (op, before, after), dead letters and keys asked again, as JSON values."""
    history, rest = SCENARIOS[envelope]
    store = MemoryPartitionStore()
    restored: dict[bytes, bytes | None] = {}
    for key, value in changelog:
        restored[key] = value
    store.commit(restored, Checkpoint(len(history), len(changelog)))
    batch = _reconciler(envelope).decide({TP: _messages(rest, len(history))}, {TP: store})
    outputs = []
    for _topic, _partition, key, value in batch.records:
        payload = None if value is None else orjson.loads(value)
        if payload is not None:
            payload = [payload["op"], payload["before"], payload["after"]]
        outputs.append([(key or b"").decode(), payload])
    return {
        "outputs": outputs,
        "dead_letters": [letter.message.offset for letter in batch.dead_letters],
        "read_again": sorted(k.decode() for k in batch.read_again.get(TP, {})),
        "next_offset": batch.next_offsets.get(TP),
    }


def _encode(records: list[tuple[bytes, bytes | None]]) -> list[list[str | None]]:
    return [
        [base64.b64encode(k).decode(), None if v is None else base64.b64encode(v).decode()]
        for k, v in records
    ]


def _decode(records: list[list[str | None]]) -> list[tuple[bytes, bytes | None]]:
    return [
        (base64.b64decode(k or ""), None if v is None else base64.b64decode(v)) for k, v in records
    ]


def _golden(format_: int) -> Path:
    return GOLDEN / f"state-format-{format_}.json"


def _recorded() -> dict[str, Any]:
    return {
        envelope: {
            "changelog": _encode(changelog := write_changelog(envelope)),
            "decided": decide_continuation(envelope, changelog),
        }
        for envelope in SCENARIOS
    }


if os.environ.get("TIDEMARK_WRITE_GOLDEN") == "1":  # pragma: no cover - a tool, not a test
    _golden(FORMAT).write_text(json.dumps({"format": FORMAT, **_recorded()}, indent=1) + "\n")

FILES = sorted(GOLDEN.glob("state-format-*.json"))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_a_changelog_of_each_known_format_restores_and_decides_as_recorded(path: Path) -> None:
    golden = json.loads(path.read_text())
    for envelope in SCENARIOS:
        recorded = golden[envelope]
        assert decide_continuation(envelope, _decode(recorded["changelog"])) == recorded["decided"]


def test_this_release_writes_the_format_of_its_golden_file() -> None:
    """A change of the entry format needs a new golden file (and the old ones kept)."""
    path = _golden(FORMAT)
    assert path in FILES, f"no {path.name}: record it with TIDEMARK_WRITE_GOLDEN=1"
    golden = json.loads(path.read_text())
    assert golden["format"] == FORMAT
    for envelope in SCENARIOS:
        assert _encode(write_changelog(envelope)) == golden[envelope]["changelog"], envelope


def test_the_golden_histories_reach_every_kind_of_entry() -> None:
    """The histories are worth keeping: they write changes with and without transaction
    ids, deletes, pending entries, chunk rows of both kinds and the classic envelope's
    marks, and their continuations emit, drop and ask again."""
    entries = [
        Entry.decode(v) for k, v in write_changelog("debezium-upsert") if v and k[:1] == ENTRY
    ]
    assert any(e.pending and e.value is None for e in entries)  # a TOAST update, no state
    assert any(e.pending and e.value is not None for e in entries)  # after a dead letter
    assert any(e.value is None and not e.pending for e in entries)  # a delete
    assert any(e.snapshot is not None and e.snapshot.positioned for e in entries)
    assert any(e.chunk is not None and e.snapshot is None for e in entries)
    classic = dict(write_changelog("debezium"))
    assert any(k.startswith(b"\x00tidemark:high-water") for k in classic)
    assert any(k.startswith(b"s") for k in classic)  # a snapshot group's keys
    decided = decide_continuation("debezium-upsert", write_changelog("debezium-upsert"))
    assert decided["read_again"] == ['{"id":3}', '{"id":4}']
    names = [o[1][2]["name"] for o in decided["outputs"] if o[1] is not None]
    assert names == ["a3", "b2", "e2", "f3"]
