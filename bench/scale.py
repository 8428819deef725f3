"""An estate of many tables: start-up, failover, resources, latency and throughput.

Starts the development stack (Tansu, a private PostgreSQL, real Debezium) in a
temporary folder (removed at the end, but kept with its logs after a phase that
failed), creates ``--tables`` tables (each change topic of the stack's
3 partitions) with a row in each, and runs ``--instances`` processors of one
pipeline over them. Measures, each figure printed and written to
``bench/results/scale.json``:

- ``start_s``: from starting the processors until every input partition is
  assigned, its state restored, and the group's committed offsets reach each
  partition's end (every table's first row reconciled and committed);
- per instance, after start-up and again at the end: threads, open file
  descriptors, resident and peak memory (``/proc``);
- ``metrics_series``: per instance after start-up, the series its ``/metrics``
  serves at each ``processor.metrics_detail`` (served at ``partition``, the others
  aggregated from it as the processor would);
- ``latency``: with ``--rate`` changes a second spread over every table for
  ``--seconds``, each reconciled record's timestamp minus its change event's
  (Debezium's producer and the data plane's both stamp ``CreateTime``): p50, p90,
  p99 over every change of the run;
- ``failover_s``: one instance killed (SIGKILL) while changes go on, until the other
  holds every partition and its committed offsets reach the ends again;
- ``throughput``: one processor of a fresh pipeline draining ``--events`` change
  events produced beforehand (no Debezium), spread over every table's topic and
  then over one topic of 3 partitions, events a second from assignment to the
  last commit, and their ratio.

    python bench/scale.py [--tables 500] [--instances 2] [--rate 5000] [--seconds 60]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from results_file import write_results

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402
import psycopg  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from psycopg import sql  # noqa: E402

from processor.metrics_detail import DETAILS, DROPPED, coarsen  # noqa: E402
from tidemark.cli.verify import source_lsn, wait_debezium  # noqa: E402
from tidemark.core.config import Config, ProcessorConfig, dump_config  # noqa: E402
from tidemark.core.errors import TidemarkError  # noqa: E402
from tidemark.core.kafka import (  # noqa: E402
    Acknowledgements,
    client_config,
    data_messages,
    ensure_topics,
    exact_end_offsets,
)
from tidemark.core.ports import free_port  # noqa: E402
from tidemark.core.topics import change_topic, dataplane_group, output_topic  # noqa: E402
from tidemark.devstack.procs import pid_alive  # noqa: E402
from tidemark.devstack.stack import DevStack  # noqa: E402

PARTITIONS = 3
#: The issue's targets: (figure, how it is read from the results, at most or at least).
TARGETS = {
    "start_s": {"at_most": 60},
    "failover_s": {"at_most": 60},
    "threads": {"at_most": 300},
    "fds": {"at_most": 2000},
    "rss_mb": {"at_most": 1536},
    "latency_p50_s": {"at_most": 2},
    "throughput_ratio": {"at_least": 0.7},
}


def met(results: dict[str, Any]) -> dict[str, bool]:
    """Whether each target is met (per instance figures: the worst instance's)."""
    statuses = [
        status
        for phase in ("after_start", "after_load")
        for name, status in results.get(phase, {}).items()
        if name.startswith("scale-")
    ]
    if "survivor" in results:
        statuses.append(results["survivor"])
    figures = {
        "start_s": results.get("start_s"),
        "failover_s": results.get("failover_s"),
        "threads": max((s["threads"] for s in statuses), default=None),
        "fds": max((s["fds"] for s in statuses), default=None),
        "rss_mb": max((s["peak_rss_mb"] for s in statuses), default=None),
        "latency_p50_s": results.get("latency_s", {}).get("p50"),
        "throughput_ratio": results.get("throughput", {}).get("ratio"),
    }
    verdict = {}
    for name, target in TARGETS.items():
        value = figures[name]
        if value is None:
            continue
        if "at_most" in target:
            verdict[name] = value <= target["at_most"]
        else:
            verdict[name] = value >= target["at_least"]
    return verdict


# -- the processes -------------------------------------------------------------------


def proc_status(pid: int) -> dict[str, float]:
    """CPU seconds so far, threads, file descriptors, resident and peak memory (MB) of
    ``pid``."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        fields[name] = value.split()
    ticks = os.sysconf("SC_CLK_TCK")
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return {
        "cpu_s": round((int(stat[11]) + int(stat[12])) / ticks, 1),
        "threads": int(fields["Threads"][0]),
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "rss_mb": round(int(fields["VmRSS"][0]) / 1024, 1),
        "peak_rss_mb": round(int(fields["VmHWM"][0]) / 1024, 1),
    }


def statuses(stack: DevStack, instances: list[Instance]) -> dict[str, dict[str, float]]:
    """:func:`proc_status` of each live processor, the broker and Debezium."""
    found = {i.name: proc_status(i.pid) for i in instances if pid_alive(i.pid)}
    for name in ("broker", "debezium"):
        pid = stack.process_pid(name)
        if pid is not None and pid_alive(pid):
            found[name] = proc_status(pid)
    return found


@dataclasses.dataclass
class Instance:
    name: str
    config: Config
    pid: int = 0

    def metrics_series(self) -> dict[str, int]:
        """The series of its ``/metrics`` at each detail."""
        url = f"http://127.0.0.1:{self.config.processor.web_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as resp:
            families = list(text_string_to_metric_families(resp.read().decode()))
        return {
            detail: sum(len(coarsen(f, DROPPED[detail]).samples) for f in families)
            for detail in DETAILS
        }

    def health(self) -> dict[str, Any]:
        url = f"http://127.0.0.1:{self.config.processor.web_port}/health"
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return dict(orjson.loads(resp.read()))
        except OSError:
            return {}


def pipeline(stack: DevStack, name: str, pattern: str, instance: int) -> Config:
    return dataclasses.replace(
        stack.config,
        processor=ProcessorConfig(
            pipeline=name,
            input_pattern=pattern,
            state_dir=str(stack.run_dir / f"{name}-{instance}-state"),
            web_port=free_port(),
        ),
    )


def start(stack: DevStack, config: Config, name: str) -> Instance:
    path = stack.run_dir / f"{name}.yaml"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds a password
    with os.fdopen(fd, "w") as out:
        out.write(dump_config(config))
    cmd = [sys.executable, "-m", "tidemark.cli", "process", "--config", str(path)]
    return Instance(name, config, stack.start_process(name, cmd))


def wait(what: str, check: Any, timeout: float, every: float = 0.2) -> float:
    """Seconds until ``check()`` holds (polled ``every`` seconds)."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)
    return time.monotonic() - started


#: How often a wait asks whether the data plane caught up: each ask reads the end of
#: every input partition and the group's committed offsets, which at 1,500 partitions
#: costs the embedded broker more than the pipeline's own work when asked every 0.2 s.
CAUGHT_UP_EVERY_S = 2.0


def caught_up(config: Config, topics: list[str]) -> bool:
    """Whether the data plane's committed offsets reach every input partition's end."""
    return not behind(config, topics)


def behind(config: Config, topics: list[str]) -> list[str]:
    """The input partitions whose committed offset is short of their end."""
    tps = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
    client = client_config(config.kafka)
    probe = Consumer({**client, "group.id": dataplane_group(config.processor.pipeline)})
    try:
        ends = exact_end_offsets(probe, tps)
        committed = probe.committed(tps, timeout=30)
    finally:
        probe.close()
    return [
        f"{c.topic}[{c.partition}]"
        for c in committed
        if max(c.offset, 0) < ends[(c.topic, c.partition)]
    ]


# -- the source ----------------------------------------------------------------------


def create_tables(config: Config, names: list[str]) -> None:
    with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
        for name in names:
            table = sql.Identifier("public", name)
            conn.execute(
                sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v bigint, note text)").format(table)
            )
            conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 0, 'first')").format(table))
    wait_debezium(config, source_lsn(config))


class Changes:
    """Updates of random rows of random tables, ``per_s`` a second in transactions of 20,
    until stopped; each sets ``v`` to a number of its own."""

    def __init__(self, config: Config, tables: list[str], per_s: float, keys: int = 50) -> None:
        self.config, self.tables, self.per_s, self.keys = config, tables, per_s, keys
        self.done = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Changes:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        rng = random.Random(1)
        queries = {
            t: sql.SQL(
                "INSERT INTO {} VALUES (%s, %s, 'x') ON CONFLICT (id) DO UPDATE SET v = excluded.v"
            ).format(sql.Identifier("public", t))
            for t in self.tables
        }
        started = time.monotonic()
        with psycopg.connect(**self.config.owner_conninfo()) as conn:
            while not self._stop.is_set():
                with conn.transaction():
                    for _ in range(20):
                        self.done += 1
                        table = rng.choice(self.tables)
                        conn.execute(queries[table], (rng.randint(1, self.keys), self.done))
                ahead = self.done / self.per_s - (time.monotonic() - started)
                if ahead > 0:
                    self._stop.wait(ahead)


def latencies(config: Config, topics: list[str], since_ms: int) -> list[float]:
    """Seconds from each change event (at or after ``since_ms``) to its reconciled record."""
    prefix = config.source.topic_prefix
    born: dict[tuple[str, int], int] = {}
    for topic, value, stamp in read_all(config, topics, since_ms):
        after = after_of(value)
        if after and after.get("v"):
            born[(topic, after["v"])] = stamp
    found = []
    outputs = {output_topic(prefix, t): t for t in topics}
    for topic, value, stamp in read_all(config, list(outputs), since_ms):
        after = after_of(value)
        if after and after.get("v"):
            change = born.get((outputs[topic], after["v"]))
            if change is not None:
                found.append((stamp - change) / 1000)
    return found


def after_of(value: bytes) -> dict[str, Any] | None:
    """The row after a change (events with or without their JSON schema)."""
    event = orjson.loads(value)
    if isinstance(event, dict) and "payload" in event:
        event = event["payload"]
    after = event.get("after") if isinstance(event, dict) else None
    return after if isinstance(after, dict) else None


def read_all(config: Config, topics: list[str], since_ms: int) -> list[tuple[str, bytes, int]]:
    """Every record of ``topics`` stamped at or after ``since_ms``: topic, value, stamp."""
    client = client_config(config.kafka)
    consumer = Consumer({**client, "group.id": "bench-scale-reader", "enable.auto.commit": False})
    try:
        tps = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
        ends = exact_end_offsets(consumer, tps)
        starts = consumer.offsets_for_times(
            [TopicPartition(t, p, since_ms) for t, p in ends], timeout=30
        )
        wanted = {(tp.topic, tp.partition) for tp in starts if ends[(tp.topic, tp.partition)] > 0}
        consumer.assign([tp for tp in starts if (tp.topic, tp.partition) in wanted])
        found = []
        deadline = time.monotonic() + 300
        left = set(wanted)
        while left and time.monotonic() < deadline:
            for msg in data_messages(consumer.consume(10_000, 1.0)):
                stamp = msg.timestamp()[1]
                if stamp >= since_ms and msg.value() is not None:
                    found.append((msg.topic() or "", msg.value() or b"", stamp))
            # Positions, not offsets of messages: transaction markers take offsets too.
            at = consumer.position([TopicPartition(t, p) for t, p in left])
            left -= {
                (tp.topic, tp.partition) for tp in at if tp.offset >= ends[(tp.topic, tp.partition)]
            }
        return found
    finally:
        consumer.close()


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(share * len(ordered)))], 3)


# -- throughput ------------------------------------------------------------------------


def synthetic_event(table: str, key: int, version: int) -> bytes:
    source = {
        "version": "3.6.3.Final",
        "connector": "postgresql",
        "name": "tidemark",
        "ts_ms": 1,
        "snapshot": "false",
        "db": "postgres",
        "sequence": f'["{version}","{version}"]',
        "schema": "public",
        "table": table,
        "txId": version,
        "lsn": version,
    }
    after = {"id": key, "v": version, "note": "x" * 40}
    return orjson.dumps({"before": None, "after": after, "source": source, "op": "u", "ts_ms": 2})


def drain(stack: DevStack, name: str, tables: list[str], events: int) -> dict[str, Any]:
    """``events`` change events over ``tables`` (3 partitions each) in topics of their own,
    drained by one processor: events a second from its assignment to its last commit."""
    prefix = f"tput{name}"
    topics = [f"{prefix}.public.{t}" for t in tables]
    admin = AdminClient(client_config(stack.config.kafka))
    ensure_topics(admin, dict.fromkeys(topics, PARTITIONS), 1)
    producer = Producer({**client_config(stack.config.kafka), "linger.ms": 20})
    acks = Acknowledgements(producer)
    rng = random.Random(2)
    for version in range(1, events + 1):
        table = rng.randrange(len(tables))
        key = rng.randint(1, 5_000)
        producer.produce(
            topics[table],
            synthetic_event(tables[table], key, version),
            orjson.dumps({"id": key}),
            on_delivery=acks.on_delivery,
        )
        if version % 50_000 == 0:
            producer.poll(0)
    acks.wait("the events")
    config = dataclasses.replace(
        pipeline(stack, f"tput-{name}", rf"^{prefix}\.public\.[a-z0-9_]+$", 0),
        source=dataclasses.replace(stack.config.source, topic_prefix=prefix),
    )
    instance = start(stack, config, f"tput-{name}")
    try:
        wait(
            "the throughput run's assignment",
            lambda: instance.health().get("assigned_partitions") == len(topics) * PARTITIONS,
            300,
        )
        started = time.monotonic()
        wait("the drain", lambda: caught_up(config, topics), 1800, CAUGHT_UP_EVERY_S)
        seconds = time.monotonic() - started
        return {
            "tables": len(tables),
            "partitions": len(tables) * PARTITIONS,
            "events": events,
            "seconds": round(seconds, 2),
            "events_per_s": round(events / seconds),
            "instance": proc_status(instance.pid),
        }
    finally:
        stack.stop_process(instance.name)


# -- the run ---------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tables", type=int, default=500)
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--rate", type=float, default=5000, help="changes a second")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--events", type=int, default=1_000_000)
    args = parser.parse_args()
    # Stopped from outside, it still takes its stack down (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    run_dir = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    stack = DevStack(run_dir, Config())
    stack.up()
    results: dict[str, Any] = {
        "tables": args.tables,
        "partitions": args.tables * PARTITIONS,
        "instances": args.instances,
    }
    try:
        names = [f"scale_t{i:03d}" for i in range(args.tables)]
        started = time.monotonic()
        create_tables(stack.config, names)
        results["create_tables_s"] = round(time.monotonic() - started, 1)
        prefix = stack.config.source.topic_prefix
        topics = [change_topic(prefix, f"public.{n}") for n in names]
        pattern = rf"^{prefix}\.public\.scale_t[0-9]+$"
        instances = [
            start(stack, pipeline(stack, "scale", pattern, i), f"scale-{i}")
            for i in range(args.instances)
        ]
        try:
            measure(stack, args, names, topics, instances, results)
        except (RuntimeError, TidemarkError) as exc:
            # What was measured stands; the phase that failed is said, with the partitions
            # whose committed offsets stayed short of their ends.
            stuck = behind(instances[0].config, topics)
            results["failed"] = {"error": str(exc), "partitions_behind": len(stuck)}
            results["failed"]["examples"] = stuck[:10]
            results["at_failure"] = statuses(stack, instances)
            print(f"failed: {results['failed']}", flush=True)
    finally:
        stack.down()
        if "failed" in results:  # the processors' and the broker's logs tell why
            print(f"logs kept in {run_dir}", flush=True)
        else:
            shutil.rmtree(run_dir, ignore_errors=True)
    write_results("scale", [results], targets=TARGETS, met=met(results))


def measure(
    stack: DevStack,
    args: argparse.Namespace,
    names: list[str],
    topics: list[str],
    instances: list[Instance],
    results: dict[str, Any],
) -> None:
    """Start-up, load, failover and throughput, each figure into ``results`` as measured."""
    config = instances[0].config
    total = len(topics) * PARTITIONS

    def assigned() -> int:
        return sum(int(i.health().get("assigned_partitions", 0)) for i in instances)

    started = time.monotonic()
    results["assigned_s"] = round(wait("the assignment", lambda: assigned() == total, 600), 1)
    wait("the first rows", lambda: caught_up(config, topics), 300, CAUGHT_UP_EVERY_S)
    results["start_s"] = round(time.monotonic() - started, 1)
    results["after_start"] = statuses(stack, instances)
    results["metrics_series"] = {i.name: i.metrics_series() for i in instances}
    print(f"start: {results['start_s']} s; {results['after_start']}", flush=True)

    since = int(time.time() * 1000)
    with Changes(stack.config, names, args.rate) as changes:
        time.sleep(args.seconds)
    measured = time.monotonic()
    wait_debezium(stack.config, source_lsn(stack.config), timeout=600)
    wait("the load's outputs", lambda: caught_up(config, topics), 900, CAUGHT_UP_EVERY_S)
    found = latencies(config, topics, since)
    results["load"] = {
        "changes": changes.done,
        "seconds": args.seconds,
        "changes_per_s": round(changes.done / args.seconds),
        "drained_after_s": round(time.monotonic() - measured, 1),
    }
    results["latency_s"] = {
        "records": len(found),
        "p50": percentile(found, 0.5),
        "p90": percentile(found, 0.9),
        "p99": percentile(found, 0.99),
        "mean": round(statistics.fmean(found), 3),
    }
    results["after_load"] = statuses(stack, instances)
    print(f"load: {results['load']}; latency {results['latency_s']}", flush=True)

    if len(instances) > 1:
        victim, survivor = instances[0], instances[1]
        with Changes(stack.config, names, min(args.rate, 500)):
            time.sleep(3)
            os.killpg(victim.pid, signal.SIGKILL)
            killed = time.monotonic()
            with contextlib.suppress(ChildProcessError):
                os.waitpid(victim.pid, 0)
            assert not pid_alive(victim.pid)
            stack.stop_process(victim.name)
            took = wait(
                "the survivor's assignment",
                lambda: survivor.health().get("assigned_partitions") == total,
                600,
            )
            results["failover_assigned_s"] = round(took, 1)
        wait("the survivor's outputs", lambda: caught_up(config, topics), 600, CAUGHT_UP_EVERY_S)
        results["failover_s"] = round(time.monotonic() - killed, 1)
        results["survivor"] = proc_status(survivor.pid)
        print(f"failover: {results['failover_s']} s; {results['survivor']}", flush=True)
    for instance in instances:
        stack.stop_process(instance.name)

    many = drain(stack, "many", names, args.events)
    one = drain(stack, "one", ["scale_one"], args.events)
    results["throughput"] = {
        "many_tables": many,
        "one_table": one,
        "ratio": round(many["events_per_s"] / one["events_per_s"], 2),
    }
    print(f"throughput: {results['throughput']}", flush=True)


if __name__ == "__main__":
    main()
