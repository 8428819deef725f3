"""The chaos run: a random fault schedule against the whole pipeline, judged by PostgreSQL.

``make chaos`` (``SEED=n`` to repeat one) starts a development stack of its own
(schemaless JSON: the broker keeps every record in memory) and runs
:func:`run_chaos`; CI runs a short schedule on the test session's stack
(``tests/integration/test_chaos.py``).

1. Three tables, written by two connections (:mod:`tests.chaos.workload`), are
   reconciled by two processor instances of one pipeline; one table uses the
   classic ``debezium`` envelope.
2. While the workload runs, faults drawn from the seed (:func:`schedule`), one
   after another with a pause between: SIGKILL of an instance (restarted), an
   instance restarted with a failpoint that SIGKILLs it at the Nth pass of a
   point of the commit protocol, SIGSTOP of an instance for up to 15 s (past the
   session timeout it is a zombie) then SIGCONT, the broker paused, PostgreSQL
   restarted, poison records in a change topic, a backfill started. ``--lifetime`` adds
   forged records, an instance stopped right after a commit, and (on a stack of its
   own) Debezium restarted without its offsets and a table truncated.
3. Once the changes are written and the processors caught up, the sink runs
   continuously into Iceberg and is SIGKILLed and restarted on the way.
4. The verdict (:mod:`tests.oracle`): per table, the reconciled topic
   folded per key equals the table; no key in two partitions; per key no row
   goes back in history (re-sent runs aside); every poison record is a dead
   letter; every backfill completed; the Iceberg tables equal the tables; no
   process exited unless the schedule killed it (``unplanned_restarts``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import psycopg
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from psycopg import sql

from tests.chaos.workload import TABLES, Workload, create_tables
from tests.integration.processes import (
    Processor,
    SinkProcess,
    decoder,
    pipeline_config,
    read_topic,
    reconciled,
    run_cli,
)
from tests.integration.test_recovery import other_instance
from tests.oracle import Verdict, check_topic, digest, with_truncates
from tidemark.cli.verify import compare_table, source_lsn, wait_caught_up, wait_debezium
from tidemark.core.config import Config, DevConfig, ProcessorConfig, SinkConfig, SourceConfig
from tidemark.core.group_repair import pipeline_groups, repair_group
from tidemark.core.kafka import (
    Acknowledgements,
    client_config,
    exact_end_offsets,
    partition_counts,
    produce_waiting,
    producer_config,
)
from tidemark.core.partitioners import partitions_of
from tidemark.core.ports import free_port
from tidemark.core.record_auth import KEY_ENV
from tidemark.core.topics import backfill_topic, control_topic, dataplane_group
from tidemark.devstack.debezium import HEARTBEAT_QUERY
from tidemark.devstack.procs import exit_code, pid_alive, process_state
from tidemark.devstack.stack import DevStack

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PIPELINE = "chaos"
#: A record header as the producer takes it.
Header = tuple[str, str | bytes | None]
#: Seconds an instance may stay alive but not up before the run repairs Faust's group
#: (a start takes about 10 s here).
GROUP_STALL_S = 60
#: Fault kinds of the processors' phase and their weights.
KINDS = {
    "kill": 25,
    "failpoint": 20,
    "stall": 15,
    "broker-pause": 8,
    "pg-restart": 7,
    "poison": 15,
    "backfill": 10,
}
#: The lifetime schedule's kinds besides (issue 45), with the record key set: records
#: forged in the control topic (a lifecycle that is not JSON, an unsigned STOPPED, an
#: unsigned offsets write that would skip every input to its end), unsigned chunk rows
#: in a backfill topic that would beat every real row, and an instance SIGSTOPped at its
#: Nth batch right after the transaction committed (before its state and checkpoint),
#: resumed once the other instance has taken over.
LIFETIME_KINDS = {"control-forged": 10, "backfill-forged": 10, "commit-stop": 10}
#: Kinds only a run with a stack of its own draws (the test session's stack serves other
#: tests): Debezium restarted without its offsets, which snapshots every captured table
#: again, and a TRUNCATE of a ``debezium-upsert`` table, which needs a connector that
#: writes truncate events (``skipped.operations: none``).
OWN_STACK_KINDS = {"debezium-reset": 3, "truncate": 2}
#: The connector settings of a run with a stack of its own.
OWN_STACK_DEBEZIUM = {"skipped.operations": "none"}
#: Seconds an instance stopped right after a commit stays stopped: past the session
#: timeout, so that the other instance takes its partitions over and writes.
COMMIT_STOP_S = 15.0
#: The record key of a lifetime run (TIDEMARK_RECORD_KEY).
RECORD_KEY = "chaos-record-key-" + "0" * 32
#: The tables' envelopes (``debezium-upsert`` but those named).
ENVELOPES = {"public.iso_chaos_b": "debezium"}
#: Tables a backfill may run on: incremental snapshots need ``debezium-upsert``.
BACKFILLED = [t for t in TABLES if f"public.{t}" not in ENVELOPES]
#: Points of the commit protocol a failpoint kills an instance at (``tidemark.core.failpoints``).
POINTS = ("batch-decided", "outputs-acked", "after-flush", "window-release")
POISON = [
    b"{not json",
    b'{"payload": {"op": "x", "after": {"id": 1}}}',
    b'{"op": "u", "after": {"id": 1}, "source": {"lsn": [1, 2], "ts_ms": 1}}',
    b'{"op": "c", "after": {"id": 1}, "source": {"lsn": 123456789012345678901234567890}}',
    b"[]",
]


@dataclass(frozen=True)
class Fault:
    """One fault: its kind, the instance it hits, an amount (seconds, a count or the Nth
    pass), the failpoint, and the pause before the next fault."""

    kind: str
    instance: int
    amount: float
    point: str
    pause_s: float


def schedule(
    seed: int, faults: int, lifetime: bool = False, own_stack: bool = False
) -> list[Fault]:
    """The faults of a run, drawn from ``seed`` alone (``lifetime``: with
    :data:`LIFETIME_KINDS`, and :data:`OWN_STACK_KINDS` on a stack of its own)."""
    rng = random.Random(seed)
    drawn_from = {**KINDS, **LIFETIME_KINDS} if lifetime else KINDS
    if lifetime and own_stack:
        drawn_from = {**drawn_from, **OWN_STACK_KINDS}
    kinds, weights = list(drawn_from), list(drawn_from.values())
    drawn = []
    for _ in range(faults):
        kind = rng.choices(kinds, weights)[0]
        amount = {
            "kill": rng.uniform(0, 2),
            "failpoint": rng.randint(1, 40),
            "stall": rng.uniform(1, 15),
            "broker-pause": rng.uniform(2, 15),
            "pg-restart": 0,
            "poison": rng.randint(1, 5),
            "backfill": rng.randrange(len(BACKFILLED)),
            "control-forged": 0,
            "backfill-forged": rng.randrange(len(BACKFILLED)),
            "commit-stop": rng.randint(1, 40),
            "debezium-reset": 0,
            "truncate": rng.randrange(len(BACKFILLED)),
        }[kind]
        drawn.append(Fault(kind, rng.randrange(2), amount, rng.choice(POINTS), rng.uniform(0.5, 4)))
    return drawn


@dataclass
class Instance:
    """A processor instance the run supervises: a death it did not plan is counted."""

    processor: Processor
    #: More environment variables (the record key of a lifetime run).
    env: dict[str, str] = field(default_factory=dict)
    armed: str = ""
    planned: bool = False
    #: Since when the instance has not been up (monotonic seconds), else ``None``.
    down_since: float | None = None
    #: Since when its armed ``:stop`` failpoint holds it stopped (monotonic), else ``None``.
    stopped_since: float | None = None

    def start(self, failpoint: str = "", wait: bool = False) -> None:
        """Start; ``wait``: until healthy. Otherwise :func:`watch_groups` follows it up."""
        self.armed, self.planned = failpoint, False
        self.down_since, self.stopped_since = time.monotonic(), None
        self.processor.start(timeout=180, failpoint=failpoint, env=self.env, healthy=wait)

    def exit_code(self) -> int | None:
        """The exit code once the process ended (negative: its signal), else ``None``."""
        return exit_code(self.processor.pid)


@dataclass
class Run:
    """What a run did and saw."""

    seed: int
    faults: Counter[str] = field(default_factory=Counter)
    planned_restarts: int = 0
    unplanned_restarts: int = 0
    unplanned: list[str] = field(default_factory=list)
    poison: list[tuple[str, int, int]] = field(default_factory=list)
    backfills: list[str] = field(default_factory=list)
    last_pg_restart: float = 0.0
    #: Groups repaired after the broker lost their leader (``group_repair``).
    group_repairs: Counter[str] = field(default_factory=Counter)
    #: Forged records written: the control records' offsets, where chunk rows landed.
    control_forged: list[int] = field(default_factory=list)
    backfill_forged: list[tuple[str, int, int]] = field(default_factory=list)
    #: The environment of the run's processors and commands.
    env: dict[str, str] = field(default_factory=dict)
    #: Instances a failpoint stopped right after a commit, resumed as zombies.
    commit_stops: int = 0


def run_chaos(
    stack: DevStack,
    spark: SparkSession,
    seed: int,
    changes: int,
    faults: int,
    keys: int,
    sink_kills: int,
    rate: float,
    lifetime: bool = False,
    own_stack: bool = False,
) -> dict[str, Any]:
    """One run on ``stack``; the figures of ``bench/results/chaos.json`` (``lifetime``:
    with the lifetime schedule and the record key, ``lifetime.json``; ``own_stack``: the
    stack serves this run alone)."""
    started = time.monotonic()
    config = chaos_config(stack)
    create_tables(config)
    run = Run(seed, env={KEY_ENV: RECORD_KEY} if lifetime else {})
    instances = [
        Instance(Processor(stack, other_instance(config, name), f"chaos-{name}"), run.env)
        for name in ("a", "b")
    ]
    for instance in instances:
        instance.start(wait=True)
    workload = Workload(config, seed, keys, rate)
    workload.start()
    try:
        for fault in schedule(seed, faults, lifetime, own_stack):
            supervise(stack, run, instances)
            apply(stack, config, run, instances, fault, workload)
            run.faults[fault.kind] += 1
            pause(stack, run, instances, fault.pause_s)
        while workload.changes < changes:
            pause(stack, run, instances, 1.0)
        # an instance stopped right after a commit is resumed, if its point comes
        deadline = time.monotonic() + 90
        while any(i.armed.endswith(":stop") for i in instances) and time.monotonic() < deadline:
            pause(stack, run, instances, 1.0)
    finally:
        workload.stop()
    for instance in instances:  # an armed failpoint that has not fired: disarm it
        if instance.armed and instance.exit_code() is None:
            if process_state(instance.processor.pid) == "T":  # fired, not resumed yet
                os.kill(instance.processor.pid, signal.SIGCONT)
            instance.planned = True
            instance.processor.stop()
            instance.start()
    phases = {"faults": time.monotonic() - started}
    deadline = time.monotonic() + 900
    while True:
        supervise(stack, run, instances)
        try:
            wait_caught_up(config, timeout=30)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
    phases["catch_up"] = time.monotonic() - started - sum(phases.values())
    backfills = {request: backfill_state(config, request) for request in run.backfills}
    sink = sink_phase(stack, config, spark, run, sink_kills)
    phases["sink"] = time.monotonic() - started - sum(phases.values())
    verdict = judge(config)
    dead = dead_letters(config)
    logs = [i.processor.log.read_text(errors="replace") for i in instances]
    # every instance reads every control record (again at each start), and refuses each
    # forged one by its offset
    not_refused = {
        offset
        for offset in run.control_forged
        for text in logs
        if f"of pipeline chaos at offset {offset} refused" not in text
    }
    kinds = dead_letter_kinds(config)
    for instance in instances:
        instance.processor.stop()
    lifetime_figures = {
        "control_records_forged": len(run.control_forged),
        "control_forged_not_refused": len(not_refused),
        "chunk_rows_forged": len(run.backfill_forged),
        "stopped_after_commit": run.commit_stops,
        "forged_rows_not_dead_lettered": sum(
            kinds.get(where) != "unsigned" for where in run.backfill_forged
        ),
    }
    return {
        **(lifetime_figures if lifetime else {}),
        "seed": seed,
        "faults": dict(sorted(run.faults.items())),
        "events": verdict.events,
        "changes_written": workload.changes,
        "changes_checked": verdict.total.changes_checked,
        "lost": verdict.total.lost,
        "stale": verdict.total.stale,
        "split_keys": verdict.total.split_keys,
        "unplanned_restarts": run.unplanned_restarts,
        "planned_restarts": run.planned_restarts,
        "poison_records": len(run.poison),
        "poison_not_dead_lettered": len(set(run.poison) - dead),
        "backfills": dict(Counter(backfills.values())),
        "iceberg_tables_equal": sink,
        "broker_group_repairs": {
            **run.group_repairs,
            "by the processors": sum(
                i.processor.log.read_text(errors="replace").count("repairing") for i in instances
            ),
        },
        "broker_peak_rss_mb": broker_peak_rss_mb(stack),
        "duration_s": round(time.monotonic() - started),
        "phases_s": {name: round(seconds) for name, seconds in phases.items()},
        "examples": verdict.total.examples + run.unplanned,
    }


def chaos_config(stack: DevStack) -> Config:
    config = pipeline_config(stack, PIPELINE, envelopes=ENVELOPES, batch_size=500)
    sink = dataclasses.replace(
        config.sink,
        catalog_name="chaos",
        warehouse=str(stack.run_dir / "chaos-warehouse"),
        topics=[f"{config.source.topic_prefix}.reconciled.public.{t}" for t in TABLES],
        topic_pattern="",
        metrics_port=0,
        trigger_interval_s=1.0,
        read_stall_s=10.0,
    )
    return dataclasses.replace(config, sink=sink)


def apply(
    stack: DevStack,
    config: Config,
    run: Run,
    instances: list[Instance],
    fault: Fault,
    workload: Workload,
) -> None:
    """Send one fault (and undo it: resume, restart) before returning."""
    instance = instances[fault.instance]
    pid = instance.processor.pid
    if fault.kind == "kill":
        instance.planned = True
        instance.processor.kill()
        run.planned_restarts += 1
        time.sleep(fault.amount)
        instance.start()
    elif fault.kind == "failpoint":
        instance.planned = True
        instance.processor.stop()
        run.planned_restarts += 1
        instance.start(failpoint=f"{fault.point}:{int(fault.amount)}")
    elif fault.kind == "commit-stop":  # resumed by supervise()
        instance.planned = True
        instance.processor.stop()
        run.planned_restarts += 1
        instance.start(failpoint=f"after-flush:{int(fault.amount)}:stop")
    elif fault.kind == "truncate":
        with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            truncated = sql.Identifier("public", BACKFILLED[int(fault.amount)])
            conn.execute(sql.SQL("TRUNCATE {}").format(truncated))
    elif fault.kind == "debezium-reset":
        # The source is quiet meanwhile, and Debezium caught up before it stops and after
        # it starts: a connector without offsets streams from its new snapshot, so a
        # change it had not published when it stopped, or one made before that snapshot,
        # is in the change topic only by its table's last value, or not at all (a
        # delete; docs: Guarantees). The oracle, which places every output in the change
        # topic's history, could not judge a backfill that read such a row. The run
        # tests what Tidemark can hold.
        with workload.paused():
            wait_debezium(config, source_lsn(config), timeout=300)
            stack.stop_process("debezium")
            (stack.run_dir / "debezium-offsets.dat").unlink(missing_ok=True)
            run.planned_restarts += 1
            stack.start_debezium()
            # it streams, and so confirms a new position, only once its snapshot is done
            with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
                conn.execute(HEARTBEAT_QUERY)
            wait_debezium(config, source_lsn(config), timeout=300)
    elif fault.kind == "stall":
        if pid_alive(pid):
            os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(fault.amount)
            finally:
                os.kill(pid, signal.SIGCONT)
    elif fault.kind == "broker-pause":
        with stopped(stack.process_pid("broker")):
            time.sleep(fault.amount)
    elif fault.kind == "pg-restart":
        stack.restart_postgres()
        run.last_pg_restart = time.monotonic()
    elif fault.kind == "poison":
        run.poison += produce_poison(config, int(fault.amount), fault.instance)
    elif fault.kind == "control-forged":
        run.control_forged += forge_control(config)
    elif fault.kind == "backfill-forged":
        run.backfill_forged += forge_chunk_row(config, BACKFILLED[int(fault.amount)])
    elif fault.kind == "backfill":
        table = BACKFILLED[int(fault.amount)]
        request = f"chaos-{len(run.backfills)}"
        live = [i for i in instances if i.exit_code() is None and i.processor.health()]
        if live:
            done = run_cli(
                live[0].processor,
                "snapshot",
                "start",
                f"public.{table}",
                "--id",
                request,
                env=run.env,
            )
            if done.returncode == 0:
                run.backfills.append(request)


@contextmanager
def stopped(pid: int | None) -> Iterator[None]:
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def pause(stack: DevStack, run: Run, instances: list[Instance], seconds: float) -> None:
    """Wait ``seconds``, supervising."""
    deadline = time.monotonic() + seconds
    while True:
        supervise(stack, run, instances)
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, 0.5))


def supervise(stack: DevStack, run: Run, instances: list[Instance]) -> None:
    """Restart what ended: planned when the schedule caused it (a kill, a failpoint's
    SIGKILL), else counted as unplanned, with the end of its log."""
    for instance in instances:
        code = instance.exit_code()
        if code is None:
            resume_stopped(run, instance)
            continue
        if instance.planned or (instance.armed and code == -signal.SIGKILL):
            run.planned_restarts += 1
        else:
            run.unplanned_restarts += 1
            tail = instance.processor.log.read_text(errors="replace")[-1500:]
            run.unplanned.append(f"{instance.processor.name} exited {code}: {tail}")
        instance.processor.stop()
        instance.start()
    watch_groups(stack, run, instances)
    debezium = stack.process_pid("debezium")
    if debezium is not None and not pid_alive(debezium):
        if time.monotonic() - run.last_pg_restart < 120:
            run.planned_restarts += 1
        else:
            run.unplanned_restarts += 1
            run.unplanned.append("debezium exited")
        stack.start_debezium()


def resume_stopped(run: Run, instance: Instance, hold_s: float = COMMIT_STOP_S) -> None:
    """SIGCONT an instance its ``:stop`` failpoint has held stopped for ``hold_s``: a
    zombie, whose partitions the other instance took over meanwhile, that goes on from
    right after its commit."""
    if not instance.armed.endswith(":stop") or process_state(instance.processor.pid) != "T":
        return
    now = time.monotonic()
    if instance.stopped_since is None:
        instance.stopped_since = now
    elif now - instance.stopped_since >= hold_s:
        os.kill(instance.processor.pid, signal.SIGCONT)
        instance.armed, instance.stopped_since = "", None
        run.commit_stops += 1


def watch_groups(stack: DevStack, run: Run, instances: list[Instance]) -> None:
    """Repair Faust's group when an instance has been alive but not up for
    ``GROUP_STALL_S`` since it started: a worker that never finishes joining never
    starts its data plane. (The processors repair their own groups.)"""
    now = time.monotonic()
    for instance in instances:
        if instance.down_since is None or instance.exit_code() is not None:
            continue
        if instance.processor.health().get("status") == "ok":
            instance.down_since = None
        elif now - instance.down_since > GROUP_STALL_S:
            protocol = pipeline_groups(PIPELINE)[PIPELINE]
            if repair_group(stack.config.kafka, PIPELINE, protocol):
                run.group_repairs["faust, by the run"] += 1
            instance.down_since = now


def produce_poison(config: Config, count: int, partition: int) -> list[tuple[str, int, int]]:
    """``count`` records no envelope can read, in a change topic: where they landed."""
    topic = f"{config.source.topic_prefix}.public.iso_chaos_a"
    records = [(value, b'{"id": 1}', None) for value in POISON[:count]]
    return produce_landed(config, topic, partition, records, "poison records")


def produce_landed(
    config: Config,
    topic: str,
    partition: int,
    records: Sequence[tuple[bytes, bytes, list[Header] | None]],
    what: str,
) -> list[tuple[str, int, int]]:
    """Write ``records`` (value, key, headers) to ``topic[partition]``: where each landed."""
    producer = Producer(producer_config(config.kafka))
    landed: list[tuple[str, int, int]] = []
    acks = Acknowledgements(producer)

    def delivered(err: Any, msg: Any) -> None:
        acks.on_delivery(err, msg)
        if err is None:
            landed.append((msg.topic(), msg.partition(), msg.offset()))

    for value, key, headers in records:
        produce_waiting(producer, topic, value, key, delivered, partition, headers)
    acks.wait(what)
    return landed


def forge_control(config: Config) -> list[int]:
    """Write three control records Tidemark did not: one that is not JSON, an unsigned
    ``STOPPED``, and an unsigned offsets write of the pipeline's own group that would move
    every input partition to its end (obeyed, it would skip what is not read yet, or stop
    every data plane); their offsets."""
    admin = AdminClient(client_config(config.kafka))
    inputs = [f"{config.source.topic_prefix}.public.{t}" for t in TABLES]
    counts = partition_counts(admin, inputs)
    consumer = Consumer(client_config(config.kafka, **{"group.id": "chaos-forger"}))
    try:
        ends = exact_end_offsets(
            consumer, [TopicPartition(t, p) for t, n in counts.items() for p in range(n)]
        )
    finally:
        consumer.close()
    now = int(time.time() * 1000)
    plan = {
        "group": dataplane_group(config.processor.pipeline),
        "delete_group": False,
        "offsets": [[t, p, o] for (t, p), o in sorted(ends.items())],
        "positions": [],
        "reset_state": [],
        "writer": "forger",
        "at_ms": now,
    }
    headers: list[Header] = [("tidemark.at", str(now).encode())]
    records = [
        (b"{not json", b"lifecycle", headers),
        (orjson.dumps({"state": "STOPPED", "by": "forger", "at_ms": now}), b"lifecycle", headers),
        (orjson.dumps(plan), b"offsets-write", headers),
    ]
    topic = control_topic(config.processor.pipeline)
    landed = produce_landed(config, topic, 0, records, "forged control records")
    return [offset for _t, _p, offset in landed]


def forge_chunk_row(config: Config, table: str) -> list[tuple[str, int, int]]:
    """An unsigned chunk row of key 1 in ``table``'s backfill topic, numbered above every
    real chunk, with a value no transaction wrote: where it landed (nothing while the
    topic does not exist: a producer would make it with the broker's defaults)."""
    change = f"{config.source.topic_prefix}.public.{table}"
    topic = backfill_topic(config.processor.pipeline, change)
    admin = AdminClient(client_config(config.kafka))
    if topic not in partition_counts(admin, [topic]):
        return []
    columns = TABLES[table]
    key = {"id": 1} if columns == ("id",) else {"a": 1, "b": "k1"}
    row = {**key, "name": "forged", "n": -1}
    value = {
        "before": None,
        "after": row,
        "source": {"snapshot": "incremental", "txId": None, "lsn": None, "ts_ms": 0},
        "op": "r",
        "ts_ms": 0,
    }
    headers: list[Header] = [
        ("tidemark.chunk", str(1 << 62).encode()),
        ("tidemark.snapshot", b"1:1:"),
        ("tidemark.request", b"forged"),
    ]
    key_bytes = orjson.dumps(key)
    partition = partitions_of(
        config.source.partitioner, [key_bytes], partition_counts(admin, [topic])[topic]
    )[0]
    records = [(orjson.dumps(value), key_bytes, headers)]
    return produce_landed(config, topic, partition, records, "a forged chunk row")


def backfill_state(config: Config, request: str) -> str:
    """``COMPLETED`` or ``ABORTED`` once a backfill ended (waiting up to 10 minutes)."""
    topic = f"{config.processor.pipeline}.notifications"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        for record in read_topic(config, topic):
            note = json.loads(record.value or b"{}")
            if note.get("additional_data", {}).get("request_id") == request and note.get(
                "type"
            ) in ("COMPLETED", "ABORTED"):
                return str(note["type"])
        time.sleep(2)
    return "UNFINISHED"


def sink_phase(stack: DevStack, config: Config, spark: SparkSession, run: Run, kills: int) -> bool:
    """A continuous sink, SIGKILLed ``kills`` times on the way: whether every Iceberg table
    ends equal to its source table."""
    from spark_sink.session import create_session

    rng = random.Random(run.seed)
    sink = SinkProcess(stack, config, "chaos-sink").start()
    try:
        for _ in range(kills):
            # after the run's first merge, a moment into its next one (or its idle wait)
            deadline = time.monotonic() + 120
            while "merged offsets" not in sink.output() and time.monotonic() < deadline:
                time.sleep(0.5)
            time.sleep(rng.uniform(0, 3))
            sink.kill()
            run.faults["sink-kill"] += 1
            run.planned_restarts += 1
            sink.start()
        create_session(config)  # the session learns the catalog
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if not sink.alive():
                run.unplanned_restarts += 1
                run.unplanned.append(f"the sink exited: {sink.log_tail()}")
                sink.start()
            if all(_lake_equal(config, spark, table) for table in TABLES):
                return True
            time.sleep(3)
        return False
    finally:
        if sink.alive():
            sink.terminate()
            sink.wait(120)


def _lake_equal(config: Config, spark: SparkSession, table: str) -> bool:
    try:
        spark.sql(f"REFRESH TABLE chaos.public.{table}")
        return compare_table(config, spark, "public", table).equal
    except Exception:  # the table may not exist yet
        return False


@dataclass
class Judged:
    total: Verdict
    events: int


def judge(config: Config) -> Judged:
    """The oracle on every table: history from its change topic, rows from PostgreSQL."""
    from tests.integration.workload import Table, source_rows

    decode = decoder(config)
    total, events = Verdict(), 0
    for table, columns in TABLES.items():
        written: dict[tuple[Any, ...], list[tuple[int, bytes | None]]] = {}
        truncates: list[int] = []
        topic = f"{config.source.topic_prefix}.public.{table}"
        for record in sorted(read_topic(config, topic), key=lambda r: (r.partition, r.offset)):
            event = _event(decode, record.key, record.value)
            if event is None:
                truncates += _truncate(decode, record.key, record.value)
                continue
            key, after, position = event
            written.setdefault(key, []).append((position, digest(after)))
            events += 1
        history = with_truncates(written, truncates)
        emitted = (
            (tuple(e.key.values()), e.partition, digest(e.after))
            for e in reconciled(config, table)
            if e.value is not None
        )
        rows = source_rows(config, Table(table, composite=len(columns) > 1))
        source = {key: digest(row) for key, row in rows.items()}
        total.add(check_topic(history, emitted, source, table))
    return Judged(total, events)


def _event(
    decode: Callable[[bytes], Any], key: bytes | None, value: bytes | None
) -> tuple[tuple[Any, ...], dict[str, Any] | None, int] | None:
    """A change event's key, row and LSN, or ``None`` (a tombstone, a truncate, poison)."""
    if key is None or value is None:
        return None
    try:
        decoded_key, event = decode(key), decode(value)
    except ValueError:
        return None
    if not isinstance(event, dict) or event.get("op") not in ("c", "u", "d", "r"):
        return None
    source = event.get("source")
    if not isinstance(source, dict) or not isinstance(decoded_key, dict):
        return None
    after = event.get("after")
    lsn = source.get("lsn")
    return (
        tuple(decoded_key.values()),
        after if isinstance(after, dict) else None,
        lsn if isinstance(lsn, int) else 0,
    )


def _truncate(decode: Callable[[bytes], Any], key: bytes | None, value: bytes | None) -> list[int]:
    """``[the LSN]`` of a truncate event (no key), else ``[]``."""
    if key is not None or value is None:
        return []
    try:
        event = decode(value)
    except ValueError:
        return []
    if not isinstance(event, dict) or event.get("op") != "t":
        return []
    source = event.get("source")
    if not isinstance(source, dict):
        return []
    lsn = source.get("lsn")
    return [lsn] if isinstance(lsn, int) else []


def dead_letter_kinds(config: Config) -> dict[tuple[str, int, int], str]:
    """Each dead letter's kind, by where it came from: (topic, partition, offset)."""
    found = {}
    for record in read_topic(config, f"{config.processor.pipeline}.dlq"):
        headers = record.headers
        if "tidemark.source.topic" in headers and "tidemark.error.kind" in headers:
            where = (
                headers["tidemark.source.topic"].decode(),
                int(headers["tidemark.source.partition"]),
                int(headers["tidemark.source.offset"]),
            )
            found[where] = headers["tidemark.error.kind"].decode()
    return found


def dead_letters(config: Config) -> set[tuple[str, int, int]]:
    """Where each dead letter came from: (topic, partition, offset)."""
    found = set()
    for record in read_topic(config, f"{config.processor.pipeline}.dlq"):
        headers = record.headers
        if "tidemark.source.topic" in headers:
            found.add(
                (
                    headers["tidemark.source.topic"].decode(),
                    int(headers["tidemark.source.partition"]),
                    int(headers["tidemark.source.offset"]),
                )
            )
    return found


def broker_peak_rss_mb(stack: DevStack) -> int:
    """The broker's peak resident memory so far (``VmHWM``), in MB."""
    pid = stack.process_pid("broker")
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) // 1024
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--faults", type=int, default=200)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--sink-kills", type=int, default=3)
    parser.add_argument("--rate", type=float, default=500, help="row changes a second")
    parser.add_argument("--out", type=Path, help="default: bench/results/chaos.json")
    parser.add_argument(
        "--lifetime",
        action="store_true",
        help="the lifetime schedule (forged records, the record key set): "
        "bench/results/lifetime.json",
    )
    args = parser.parse_args(argv)
    out = args.out or Path(f"bench/results/{'lifetime' if args.lifetime else 'chaos'}.json")
    from spark_sink.session import create_session, stop_session

    run_dir = tempfile.mkdtemp(prefix="tidemark-chaos-")
    base = Config(
        processor=ProcessorConfig(web_port=free_port(), state_dir=f"{run_dir}/state"),
        sink=SinkConfig(warehouse=f"{run_dir}/warehouse", metrics_port=0),
        source=SourceConfig(debezium=OWN_STACK_DEBEZIUM),
        dev=DevConfig(debezium_format="json-schemaless"),
    )
    stack = DevStack(Path(run_dir), base)
    stack.up()
    spark = create_session(stack.config)
    result: dict[str, Any] = {}
    try:
        result = run_chaos(
            stack,
            spark,
            args.seed,
            args.changes,
            args.faults,
            args.keys,
            args.sink_kills,
            args.rate,
            args.lifetime,
            own_stack=True,
        )
    finally:
        stop_session(spark)
        stack.down()
        if result and not failed(result):
            shutil.rmtree(run_dir)
        else:  # the processes' logs, for the failing seed
            print(f"logs kept in {run_dir}", file=sys.stderr)
    result["command"] = " ".join(["python -m tests.chaos.run", *sys.argv[1:]])
    text = json.dumps(result, indent=2)
    print(text)
    out.write_text(text + "\n")
    return 1 if failed(result) else 0


def failed(result: dict[str, Any]) -> bool:
    """Whether a run's figures break a promise."""
    return bool(
        result["lost"]
        or result["stale"]
        or result["split_keys"]
        or result["unplanned_restarts"]
        or result["poison_not_dead_lettered"]
        or result.get("control_forged_not_refused")
        or result.get("forged_rows_not_dead_lettered")
        or not result["iceberg_tables_equal"]
        or set(result["backfills"]) - {"COMPLETED"}
    )


if __name__ == "__main__":
    sys.exit(main())
