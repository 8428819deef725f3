"""``tidemark dev up`` / ``dev down``: broker, PostgreSQL and Debezium on loopback.

With ``dev.debezium_format: avro`` the stack also runs a schema registry
(:mod:`tidemark.devstack.registry`) and writes its URL into the configuration.

What the stack starts is recorded in ``<run_dir>/stack.json`` as soon as it
runs, so ``dev down`` (or a failed ``dev up`` cleaning after itself) stops
exactly those processes by pid and nothing else. The generated configuration
(``<run_dir>/tidemark.yaml``, mode 0600 because it holds the database
password) is ready for ``tidemark process``, ``tidemark sink`` and the tests.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import psycopg

from tidemark.core.binaries import find_java, java_home
from tidemark.core.config import Config, ProcessorConfig, SinkConfig, dump_config
from tidemark.devstack import broker, postgres, registry
from tidemark.devstack.debezium import DEBEZIUM_SIGNAL_TABLE, HEARTBEAT_TABLE
from tidemark.devstack.errors import DevStackError
from tidemark.devstack.procs import pid_alive, start_detached, stop_pid, wait_for

log = logging.getLogger(__name__)

STATE_FILE = "stack.json"
CONFIG_FILE = "tidemark.yaml"


class DevStack:
    """The processes of one development stack, kept in ``run_dir``."""

    def __init__(self, run_dir: Path, base: Config | None = None) -> None:
        self.run_dir = run_dir.resolve()
        self.config = base or Config()
        self._state: dict[str, Any] = {"processes": {}}

    @property
    def config_path(self) -> Path:
        """Where the stack's configuration is written."""
        return self.run_dir / CONFIG_FILE

    # -- start -------------------------------------------------------------

    def up(self) -> Path:
        """Start broker, PostgreSQL and Debezium; return the configuration's path.

        Spark's scratch space (``SPARK_LOCAL_DIRS``) of this process and of those it
        starts goes under the run directory, unless set already: a sink that is killed
        leaves its scratch (tens of MB) there, not in ``/tmp``."""
        scratch = self.run_dir / "spark-scratch"
        scratch.mkdir(parents=True, exist_ok=True)
        os.environ.setdefault("SPARK_LOCAL_DIRS", str(scratch))
        self.start_infrastructure()
        self.start_debezium()
        return self.config_path

    def start_infrastructure(self) -> None:
        """Start the broker and PostgreSQL and write the configuration."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self._load_state():
            raise DevStackError(
                f"a development stack already runs in {self.run_dir}; "
                f"run 'tidemark dev down --run-dir {self.run_dir}' first"
            )
        find_java()  # fail before starting anything when Java is missing
        # The broker and the cluster start empty: Debezium offsets from an earlier
        # stack in this folder would point into a WAL that no longer exists.
        (self.run_dir / "debezium-offsets.dat").unlink(missing_ok=True)
        try:
            pid, port = broker.start_broker(self.run_dir, self.config.dev.broker_port)
            self._record_process("broker", pid, broker.MARKER)
            cluster = postgres.start_cluster(self.run_dir, self.config.dev.postgres_port)
            self._state["postgres"] = {
                "data_dir": str(cluster.data_dir),
                "os_user": cluster.os_user,
                "port": cluster.port,
            }
            self._save_state()
            self._create_signal_tables(cluster)
            processor_password = postgres.create_processor_role(
                cluster, self.config.snapshot.signal_table
            )
            registry_url = self.config.kafka.schema_registry_url
            if self.config.dev.debezium_format == "avro":
                registry_pid, registry_port = registry.start_registry(self.run_dir, sys.executable)
                self._record_process("registry", registry_pid, registry.MARKER)
                registry_url = f"http://127.0.0.1:{registry_port}"
            self.config = dataclasses.replace(
                self.config,
                kafka=dataclasses.replace(
                    self.config.kafka,
                    bootstrap_servers=f"127.0.0.1:{port}",
                    schema_registry_url=registry_url,
                ),
                source=dataclasses.replace(
                    self.config.source, **cluster.processor_login(processor_password)
                ),
                dev=dataclasses.replace(
                    self.config.dev,
                    run_dir=str(self.run_dir),
                    owner_user=postgres.SUPERUSER,
                    owner_password=cluster.password,
                ),
            )
            self.config = _state_in_run_dir(self.config, self.run_dir)
            self._write_config()
        except BaseException:
            self.down()
            raise

    def start_debezium(self) -> None:
        """Start the Debezium bridge and wait until its replication slot streams."""
        try:
            self.start_process(
                "debezium",
                [
                    sys.executable,
                    "-m",
                    "tidemark.cli",
                    "dev",
                    "debezium",
                    "--config",
                    str(self.config_path),
                ],
            )
            log_file = self.run_dir / "debezium.log"
            pid = self._state["processes"]["debezium"]["pid"]
            wait_for(self._slot_active, 180, "Debezium", log_file, alive=lambda: pid_alive(pid))
        except BaseException:
            self.down()
            raise

    def start_process(
        self, name: str, cmd: list[str], extra_env: dict[str, str] | None = None
    ) -> int:
        """Start a Tidemark child process (logs in ``<run_dir>/<name>.log``) and record it."""
        env = dict(
            os.environ, JAVA_HOME=str(java_home()), PYTHONUNBUFFERED="1", **(extra_env or {})
        )
        pid = start_detached(cmd, self.run_dir / f"{name}.log", env=env, cwd=self.run_dir)
        # What the process's command line must hold for a later stop to signal it.
        marker = cmd[cmd.index("-m") + 1] if "-m" in cmd else cmd[min(1, len(cmd) - 1)]
        self._record_process(name, pid, marker)
        return pid

    def process_pid(self, name: str) -> int | None:
        """The pid of a recorded process, or ``None``."""
        entry = self._state["processes"].get(name)
        return int(entry["pid"]) if entry else None

    def stop_process(self, name: str) -> None:
        """Stop one recorded process."""
        self._load_state()
        entry = self._state["processes"].pop(name, None)
        if entry:
            stop_pid(entry["pid"], entry["marker"])
            self._save_state()

    # -- stop --------------------------------------------------------------

    def down(self) -> list[str]:
        """Stop everything recorded in the state file; return what was stopped."""
        self._load_state()
        processes = self._state["processes"]
        # Debezium first (it writes to both), the broker last (everything writes to it).
        order = sorted(processes, key=lambda n: {"debezium": 0, "broker": 2}.get(n, 1))
        stopped = []
        for name in order:
            if name == "broker":
                stopped += self._stop_postgres()
            stop_pid(processes[name]["pid"], processes[name]["marker"])
            stopped.append(name)
        if "broker" not in processes:
            stopped += self._stop_postgres()
        with contextlib.suppress(FileNotFoundError):
            (self.run_dir / STATE_FILE).unlink()
        self._state = {"processes": {}}
        return stopped

    # -- internals ---------------------------------------------------------

    def restart_postgres(self) -> None:
        """Restart the private PostgreSQL (fast shutdown: every connection is cut)."""
        self._load_state()
        pg = self._state["postgres"]
        postgres.restart_cluster(Path(pg["data_dir"]), pg["os_user"])

    def _stop_postgres(self) -> list[str]:
        pg = self._state.pop("postgres", None)
        if not pg:
            return []
        postgres.stop_cluster(Path(pg["data_dir"]), pg["os_user"])
        return ["postgres"]

    def _slot_active(self) -> bool:
        try:
            with psycopg.connect(**self.config.source.conninfo(), connect_timeout=2) as conn:
                row = conn.execute(
                    "SELECT active FROM pg_replication_slots WHERE slot_name = %s",
                    (self.config.source.replication_slot,),
                ).fetchone()
                return bool(row and row[0])
        except psycopg.OperationalError:
            return False

    def _create_signal_tables(self, cluster: postgres.PostgresCluster) -> None:
        """Debezium's signal table and Tidemark's own (never the same), and the heartbeat's."""
        with psycopg.connect(**cluster.conninfo(), autocommit=True) as conn:  # type: ignore[arg-type]
            for table in (DEBEZIUM_SIGNAL_TABLE, self.config.snapshot.signal_table):
                schema, name = table.split(".")
                conn.execute(
                    psycopg.sql.SQL(
                        "CREATE TABLE {} (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, "
                        "data varchar(2048))"
                    ).format(psycopg.sql.Identifier(schema, name))
                )
            schema, name = HEARTBEAT_TABLE.split(".")
            conn.execute(
                psycopg.sql.SQL("CREATE TABLE {} (id integer PRIMARY KEY, ts timestamptz)").format(
                    psycopg.sql.Identifier(schema, name)
                )
            )

    def _write_config(self) -> None:
        fd = os.open(self.config_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write("# Written by 'tidemark dev up' for the stack in this folder.\n")
            out.write(dump_config(self.config))

    def _record_process(self, name: str, pid: int, marker: str) -> None:
        self._state["processes"][name] = {"pid": pid, "marker": marker}
        self._save_state()

    def _save_state(self) -> None:
        (self.run_dir / STATE_FILE).write_text(json.dumps(self._state, indent=2))

    def _load_state(self) -> bool:
        """Read the state file; whether any recorded process still runs."""
        path = self.run_dir / STATE_FILE
        if path.exists():
            self._state = json.loads(path.read_text())
        return any(pid_alive(p["pid"]) for p in self._state["processes"].values()) or bool(
            self._state.get("postgres")
        )


def _state_in_run_dir(config: Config, run_dir: Path) -> Config:
    """``config`` with the processor's state and the sink's warehouse in ``run_dir`` where
    they were left at their defaults: the stack's broker starts empty, so state kept from
    another stack would hold offsets and keys of topics that no longer exist."""
    processor, sink = config.processor, config.sink
    if processor.state_dir == ProcessorConfig().state_dir:
        processor = dataclasses.replace(processor, state_dir=str(run_dir / "state"))
    if sink.warehouse == SinkConfig().warehouse:
        sink = dataclasses.replace(sink, warehouse=str(run_dir / "warehouse"))
    return dataclasses.replace(config, processor=processor, sink=sink)
