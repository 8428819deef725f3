"""Benchmarks: print figures and write them to bench/results/*.json.

``reconcile``: the processor's per-event work without Kafka (decode a Debezium
JSON event with schema, reconcile against in-memory state, encode the output
event), beside a plain orjson pass-through (decode, take ``after``, encode) as
the floor, in one run on the same events.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

import orjson

from processor.codec import decode_debezium, encode_output
from processor.errors import RawMessage
from processor.reconcile import Entry, reconcile

RESULTS = Path(__file__).parent / "results"
EVENTS = 200_000
KEYS = 20_000


def events() -> list[RawMessage]:
    schema = {
        "type": "struct",
        "name": "b.public.t.Envelope",
        "fields": [
            {"type": "struct", "field": "before", "optional": True, "fields": []},
            {
                "type": "struct",
                "field": "after",
                "optional": True,
                "fields": [
                    {"type": "int64", "field": "id"},
                    {"type": "string", "field": "name"},
                    {"type": "double", "field": "amount"},
                ],
            },
            {"type": "string", "field": "op"},
        ],
    }
    out = []
    for i in range(EVENTS):
        key = i % KEYS
        payload = {
            "before": None,
            "after": {"id": key, "name": f"row {i}", "amount": i * 0.5},
            "op": "u",
            "source": {"sequence": f'["{i}","{i}"]', "lsn": i, "txId": i},
            "ts_ms": 0,
        }
        value = orjson.dumps({"schema": schema, "payload": payload})
        out.append(RawMessage("b.public.t", 0, i, orjson.dumps({"id": key}), value))
    return out


def passthrough(msgs: list[RawMessage]) -> None:
    for m in msgs:
        assert m.value is not None
        orjson.dumps(orjson.loads(m.value)["payload"]["after"])


def tidemark(msgs: list[RawMessage]) -> None:
    state: dict[bytes, bytes] = {}
    for m in msgs:
        assert m.key is not None
        change = decode_debezium(m)
        stored = state.get(m.key)
        outcome = reconcile(
            change.version, change.after, Entry.decode(stored) if stored is not None else None
        )
        if outcome.entry is not None:
            state[m.key] = outcome.entry.encode()
        encode_output(change, outcome.previous, outcome.action.value, "debezium-upsert", m)


def main() -> None:
    msgs = events()
    figures = {}
    for name, fn in (("orjson pass-through", passthrough), ("tidemark reconcile", tidemark)):
        runs = []
        for _ in range(3):
            started = time.perf_counter()
            fn(msgs)
            runs.append(EVENTS / (time.perf_counter() - started))
        figures[name] = {
            "events_per_s_min": round(min(runs)),
            "events_per_s_median": round(sorted(runs)[1]),
            "events_per_s_max": round(max(runs)),
        }
        f = figures[name]
        print(
            f"{name:<22} median {f['events_per_s_median']:>9,} events/s "
            f"(min {f['events_per_s_min']:,}, max {f['events_per_s_max']:,})"
        )
    RESULTS.mkdir(exist_ok=True)
    result = {
        "benchmark": "reconcile",
        "events": EVENTS,
        "keys": KEYS,
        "machine": {"python": platform.python_version(), "cpu": platform.machine()},
        "figures": figures,
    }
    (RESULTS / "reconcile.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"written: {RESULTS / 'reconcile.json'}")


if __name__ == "__main__":
    main()
