"""Helpers for integration tests: processors of their own, workloads, reading reconciled topics.

Tests that need processors of their own use tables named ``iso_<test>_...``:
the session's shared processor never reads them (see ``conftest.py``), so each
test's pipeline owns its input and output topics. Every process is started
through the stack, which records its pid; tests stop (or kill) exactly those.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import fastavro
import orjson
import psycopg
from confluent_kafka import Consumer, KafkaError, TopicPartition

from processor.events.chunk_records import ROWS_HEADER, rows_of
from tidemark.core.config import Config, dump_config
from tidemark.core.kafka import client_config, exact_end_offsets
from tidemark.core.partitioners import Partitioner
from tidemark.core.ports import free_port
from tidemark.core.schema_registry import HttpRegistry
from tidemark.devstack.procs import pid_alive
from tidemark.devstack.stack import DevStack


def without_table(config: Config, table: str) -> Config:
    """``config`` whose input leaves ``public.<table>`` out (to wait for the others)."""
    prefix = re.escape(config.source.topic_prefix)
    pattern = config.processor.input_pattern.replace("^", rf"^(?!{prefix}\.public\.{table}$)", 1)
    return dataclasses.replace(
        config, processor=dataclasses.replace(config.processor, input_pattern=pattern)
    )


def pipeline_config(stack: DevStack, name: str, **processor: Any) -> Config:
    """The stack's configuration for a pipeline ``name`` reading only ``iso_<name>_*`` tables."""
    prefix = stack.config.source.topic_prefix
    settings: dict[str, Any] = {
        "pipeline": name,
        "input_pattern": rf"^{prefix}\.public\.iso_{name}_[a-z0-9_]+$",
        "state_dir": str(stack.run_dir / f"{name}-state"),
        "web_port": free_port(),
    }
    settings.update(processor)
    return dataclasses.replace(
        stack.config, processor=dataclasses.replace(stack.config.processor, **settings)
    )


#: How tests start the ``tidemark`` command.
TIDEMARK = [sys.executable, "-m", "tidemark.cli"]


class Processor:
    """One ``tidemark process`` of a test, started through the stack (pid recorded);
    ``command`` replaces how ``tidemark`` is started."""

    def __init__(
        self, stack: DevStack, config: Config, name: str, command: list[str] = TIDEMARK
    ) -> None:
        self.stack, self.config, self.name, self.command = stack, config, name, command
        self.path = stack.run_dir / f"{name}.yaml"
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(dump_config(config))
        self.pid = 0

    @property
    def log(self) -> Path:
        return self.stack.run_dir / f"{self.name}.log"

    def start(
        self,
        timeout: float = 90,
        failpoint: str = "",
        env: dict[str, str] | None = None,
        healthy: bool = True,
    ) -> Processor:
        """Start and (``healthy``) wait until healthy; ``failpoint``: ``TIDEMARK_FAILPOINT``
        for the process; ``env``: more environment variables."""
        cmd = [*self.command, "process", "--config", str(self.path)]
        extra = dict(env or {}, **({"TIDEMARK_FAILPOINT": failpoint} if failpoint else {}))
        self.pid = self.stack.start_process(self.name, cmd, extra)
        deadline = time.monotonic() + timeout
        while healthy and self.health().get("status") != "ok":
            assert pid_alive(self.pid), self.log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"{self.name} did not become healthy"
            time.sleep(0.3)
        return self

    def kill(self) -> None:
        """SIGKILL, no goodbye: the crash the commit protocol must survive."""
        os.killpg(self.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while pid_alive(self.pid) and time.monotonic() < deadline:
            try:
                os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                break
            time.sleep(0.05)
        assert not pid_alive(self.pid)
        self.stack.stop_process(self.name)  # forget the record (the pid is gone)

    def crashed(self, timeout: float = 60) -> None:
        """Wait for the process to die by itself (a failpoint), then forget it."""
        deadline = time.monotonic() + timeout
        while pid_alive(self.pid):
            assert time.monotonic() < deadline, f"{self.name} did not crash"
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, os.WNOHANG)
            time.sleep(0.05)
        self.stack.stop_process(self.name)

    def stop(self) -> None:
        self.stack.stop_process(self.name)

    def health(self) -> dict[str, Any]:
        try:
            url = f"http://127.0.0.1:{self.config.processor.web_port}/health"
            with urllib.request.urlopen(url, timeout=2) as resp:
                return dict(json.loads(resp.read()))
        except OSError:
            return {}

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.config.processor.web_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            return str(resp.read().decode())


def run_cli(
    processor: Processor, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``tidemark <args> --config <the processor's file>`` as a process (``env``: more
    environment variables); the finished process."""
    return subprocess.run(
        [*TIDEMARK, *args, "--config", str(processor.path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )


def wait_for(what: str, check: Callable[[], Any], timeout: float = 120) -> Any:
    """Poll ``check`` until it returns something true, and return that."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text (labels in any order), 0 when absent."""
    for line in text.splitlines():
        sample, _, value = line.rpartition(" ")
        found, _, rest = sample.partition("{")
        if found != name:
            continue
        pairs = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        if pairs == labels:
            return float(value)
    return 0.0


@dataclass(frozen=True)
class Event:
    """One record of a reconciled topic, decoded."""

    partition: int
    offset: int
    key: dict[str, Any]
    value: dict[str, Any] | None  # the payload; None for a tombstone

    @property
    def after(self) -> dict[str, Any] | None:
        return None if self.value is None else self.value["after"]


class Record(NamedTuple):
    """One Kafka record as read back."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]


def read_topic(config: Config, topic: str) -> list[Record]:
    """Every record of ``topic`` (all partitions, to their current end).

    Read uncommitted: every record that landed counts (the embedded broker shows aborted
    ones to committed reads too), and the broker's last stable offset can stay behind at a
    transaction it has not closed: in CI, after a processor was killed, a committed read
    of a reconciled topic found no record at all.
    """
    consumer = Consumer(
        client_config(
            config.kafka,
            **{
                "group.id": "tests-reader",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": "read_uncommitted",
            },
        )
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        tps = [TopicPartition(topic, p) for p in partitions]
        ends = exact_end_offsets(consumer, tps)
        records = []
        for tp in tps:
            end = ends[(topic, tp.partition)]
            if end == 0:
                continue
            consumer.assign([TopicPartition(topic, tp.partition, 0)])
            position = 0
            while position < end:
                msg = consumer.poll(10)
                assert msg is not None, f"{topic}[{tp.partition}] stopped at {position} of {end}"
                err = msg.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, err
                    # the end, perhaps past a transaction's commit marker, which is no record
                    position = max(position, msg.offset() or 0)
                    continue
                headers = {k: v or b"" for k, v in msg.headers() or []}
                records.append(
                    Record(tp.partition, msg.offset() or 0, msg.key(), msg.value(), headers)
                )
                position = (msg.offset() or 0) + 1
        return records
    finally:
        consumer.close()


def read_backfill(config: Config, topic: str) -> list[Record]:
    """The chunk rows in backfill topic ``topic``: each framed record's rows, each a
    record at its offset with its headers (:mod:`processor.events.chunk_records`)."""
    rows = []
    for record in read_topic(config, topic):
        count = record.headers.get(ROWS_HEADER)
        framed = rows_of(topic, record.partition, record.offset, record.value, None, count or b"")
        assert count is not None and framed is not None, f"not framed rows: {record}"
        rows += [record._replace(key=row.key, value=row.value) for row in framed]
    return rows


def records_if_any(config: Config, topic: str) -> list[Record]:
    """:func:`read_topic`, or nothing while ``topic`` does not exist."""
    admin_view = Consumer(client_config(config.kafka, **{"group.id": "tests-lister"}))
    try:
        listed = admin_view.list_topics(timeout=10).topics
    finally:
        admin_view.close()
    if topic not in listed or not listed[topic].partitions:
        return []
    return read_topic(config, topic)


def decoder(config: Config) -> Callable[[bytes], Any]:
    """Decodes a JSON (with or without schema) or Confluent-Avro key or value."""
    registry = (
        HttpRegistry(config.kafka.schema_registry_url) if config.kafka.schema_registry_url else None
    )
    schemas: dict[int, Any] = {}

    def decode(raw: bytes) -> Any:
        if raw[:1] == b"\x00":
            assert registry is not None
            schema_id = struct.unpack(">I", raw[1:5])[0]
            if schema_id not in schemas:
                schemas[schema_id] = fastavro.parse_schema(
                    json.loads(registry.schema(schema_id)), {}
                )
            return fastavro.schemaless_reader(io.BytesIO(raw[5:]), schemas[schema_id], None)
        doc = orjson.loads(raw)
        if isinstance(doc, dict) and set(doc) == {"schema", "payload"}:
            return doc["payload"]
        return doc

    return decode


def reconciled(config: Config, table: str) -> list[Event]:
    """The decoded records of ``table``'s reconciled topic, by partition then offset."""
    prefix = config.source.topic_prefix
    decode = decoder(config)
    records = read_topic(config, f"{prefix}.reconciled.public.{table}")
    return [
        Event(r.partition, r.offset, decode(r.key), None if r.value is None else decode(r.value))
        for r in records
        if r.key is not None
    ]


def final_rows(events: list[Event]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The last value per key, deleted keys dropped (what a compacted topic converges to)."""
    last: dict[tuple[Any, ...], dict[str, Any] | None] = {}
    for event in events:
        last[tuple(event.key.values())] = event.after
    return {k: v for k, v in last.items() if v is not None}


def differences(
    config: Config,
    table: str,
    events: list[Event],
    expected: dict[tuple[Any, ...], dict[str, Any]],
    shown: int = 3,
) -> str:
    """Why ``table``'s reconciled ``events`` do not end at ``expected``: for the first
    ``shown`` keys that differ, their records in the change topic, in the reconciled topic
    and in the dead letters (a failed comparison names its cause, not only its rows)."""
    got = final_rows(events)
    keys = sorted(k for k in expected.keys() | got.keys() if got.get(k) != expected.get(k))
    if not keys:
        return "no key differs"
    decode = decoder(config)
    prefix, pipeline = config.source.topic_prefix, config.processor.pipeline
    lines = [f"{len(keys)} keys differ: {keys[:20]}"]
    changes = read_topic(config, f"{prefix}.public.{table}")
    letters = records_if_any(config, f"{pipeline}.dlq")
    backfill = f"{pipeline}.backfill.{prefix}.public.{table}"
    rows = read_backfill(config, backfill) if records_if_any(config, backfill) else []
    for key in keys[:shown]:
        lines.append(f"key {key}: source {expected.get(key)}, reconciled {got.get(key)}")
        for r in changes:
            if r.key is not None and tuple(decode(r.key).values()) == key:
                value = None if r.value is None else decode(r.value)
                source = (value or {}).get("source") or {}
                lines.append(
                    f"  change [{r.partition}]@{r.offset}: op {(value or {}).get('op')} "
                    f"sequence {source.get('sequence')} lsn {source.get('lsn')} "
                    f"ts_ms {source.get('ts_ms')} after {(value or {}).get('after')}"
                )
        for r in rows:
            if r.key is not None and tuple(decode(r.key).values()) == key:
                after = None if r.value is None else (decode(r.value) or {}).get("after")
                lines.append(f"  chunk row [{r.partition}]@{r.offset}: {r.headers} after {after}")
        for e in events:
            if tuple(e.key.values()) == key:
                reason = None if e.value is None else e.value.get("tidemark", {}).get("reason")
                lines.append(f"  output [{e.partition}]@{e.offset}: {reason} after {e.after}")
    lines.append(f"{len(letters)} dead letters: {[r.headers for r in letters[:3]]}")
    return "\n".join(lines)


class SinkProcess:
    """One ``tidemark sink`` of a test in a process group of its own (the driver, its JVM and
    Python workers), started through the stack (pid recorded); ``command`` replaces how
    ``tidemark`` is started."""

    def __init__(
        self, stack: DevStack, config: Config, name: str, command: list[str] = TIDEMARK
    ) -> None:
        self.stack, self.name, self.command = stack, name, command
        self.path = stack.run_dir / f"{name}.yaml"
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(dump_config(config))
        self.pid = 0
        self._log_from = 0

    @property
    def log(self) -> Path:
        return self.stack.run_dir / f"{self.name}.log"

    def start(
        self, *args: str, failpoint: str = "", env: dict[str, str] | None = None
    ) -> SinkProcess:
        """``tidemark sink <args>``; ``failpoint``: ``TIDEMARK_FAILPOINT`` for the driver and
        its executors; ``env``: more environment variables (secrets)."""
        cmd = [*self.command, "sink", *args, "--config", str(self.path)]
        env = dict(env or {}, **({"TIDEMARK_FAILPOINT": failpoint} if failpoint else {}))
        self._log_from = self.log.stat().st_size if self.log.exists() else 0
        self.pid = self.stack.start_process(self.name, cmd, env)
        return self

    def alive(self) -> bool:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, os.WNOHANG)
        return pid_alive(self.pid)

    def wait(self, timeout: float = 300) -> int:
        """The exit code once the driver ended (negative: the signal that ended it); the rest
        of its group is killed."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                done, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                done, status = self.pid, 0
            if done:
                break
            assert time.monotonic() < deadline, f"{self.name} did not end: {self.log_tail()}"
            time.sleep(0.02)
        self._end_group()
        return os.waitstatus_to_exitcode(status)

    def kill(self) -> None:
        """SIGKILL the whole group at once: driver, JVM and workers."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        assert self.wait(30) == -signal.SIGKILL

    def terminate(self) -> None:
        os.kill(self.pid, signal.SIGTERM)

    def _end_group(self) -> None:
        # The group keeps the driver's pid as its id while any member lives: safe to signal.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        self.stack.stop_process(self.name)  # forget the record (the pid is gone)

    def output(self) -> str:
        """What the last run wrote to the log."""
        with open(self.log, "rb") as log:
            log.seek(self._log_from)
            return log.read().decode(errors="replace")

    def log_tail(self) -> str:
        return self.output()[-4000:]


class Debezium:
    """A Debezium bridge of a test beside the stack's own (its own topic prefix, slot and
    offsets), capturing ``tables`` under connector settings of its own."""

    def __init__(
        self,
        stack: DevStack,
        name: str,
        tables: list[str],
        settings: dict[str, str],
        fmt: str,
        partitioner: Partitioner = "murmur2",
    ) -> None:
        base = stack.config
        run_dir = stack.run_dir / f"{name}-debezium"
        run_dir.mkdir(exist_ok=True)
        source = dataclasses.replace(
            base.source,
            topic_prefix=name,
            replication_slot=name,
            tables=tables,
            debezium=settings,
            partitioner=partitioner,
        )
        dev = dataclasses.replace(base.dev, run_dir=str(run_dir), debezium_format=fmt)
        self.config = dataclasses.replace(base, source=source, dev=dev)
        self.stack, self.name = stack, name
        self.path = run_dir / "config.yaml"
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(dump_config(self.config))

    def start(self) -> Debezium:
        """Start the bridge and wait until its slot streams."""
        cmd = [*TIDEMARK, "dev", "debezium", "--config", str(self.path)]
        pid = self.stack.start_process(self.name, cmd)
        log = self.stack.run_dir / f"{self.name}.log"

        def streaming() -> bool:
            assert pid_alive(pid), log.read_text()[-3000:]
            with psycopg.connect(**self.config.owner_conninfo()) as conn:
                row = conn.execute(
                    "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (self.name,)
                ).fetchone()
                return bool(row and row[0])

        wait_for(f"{self.name}'s slot", streaming, timeout=180)
        # The slot is active from its creation, while Debezium's initial snapshot still runs
        # and before it streams: its confirmed position may then already be past changes it
        # has not published. A streamed change of the heartbeat table (written every second)
        # comes only once it streams.
        heartbeats = f"{self.name}.public.tidemark_heartbeat"
        decode = decoder(self.config)

        def streams() -> bool:
            records = [r for r in records_if_any(self.config, heartbeats) if r.value]
            if records and "op" not in decode(records[0].value or b""):
                # Rows flattened by ExtractNewRecordState may not say their op: the
                # snapshot reads the heartbeat row at most once, so a second is streamed.
                return len(records) >= 2
            return any(r.value and decode(r.value).get("op") == "u" for r in records)

        wait_for(f"{self.name} streaming", streams)
        return self

    def stop(self) -> None:
        """Stop the bridge and drop its slot (which would hold WAL back)."""
        self.stack.stop_process(self.name)
        with psycopg.connect(**self.config.owner_conninfo(), autocommit=True) as conn:
            wait_for(
                f"{self.name}'s slot released",
                lambda: (
                    not conn.execute(
                        "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (self.name,)
                    ).fetchone()[0]
                ),
                timeout=60,
            )
            conn.execute("SELECT pg_drop_replication_slot(%s)", (self.name,))
