"""The chaos run's writes: random transactions from two connections until stopped.

Each transaction changes one to eight rows of the three tables (multi-table
transactions): an upsert (an insert, or an update of a key that exists: a
re-inserted key once deleted) or a delete. A connection that PostgreSQL cuts
(a restart the schedule sent) reconnects; a deadlock is drawn again.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql

from tidemark.core.config import Config

#: ``(table, key columns)``: integer keys, and one composite (integer, text) key.
TABLES = {"iso_chaos_a": ("id",), "iso_chaos_b": ("id",), "iso_chaos_c": ("a", "b")}


def create_tables(config: Config) -> None:
    with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
        for table, key in TABLES.items():
            columns = "id integer" if key == ("id",) else "a integer, b text"
            conn.execute(
                sql.SQL(
                    "CREATE TABLE {} (" + columns + ", name text, n bigint, "
                    "PRIMARY KEY (" + ", ".join(key) + "))"
                ).format(sql.Identifier("public", table))
            )
        # The classic debezium envelope's table: its deletes carry the whole row.
        conn.execute("ALTER TABLE public.iso_chaos_b REPLICA IDENTITY FULL")


class Workload:
    """Two connections writing about ``rate`` row changes a second in all, until
    :meth:`stop`; ``changes`` counts committed row changes."""

    def __init__(self, config: Config, seed: int, keys: int, rate: float) -> None:
        self.config, self.seed, self.keys = config, seed, keys
        self.pace = 2 / rate  # seconds per row change, per connection
        self.changes = 0
        self.reconnects = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        #: Cleared while the workload is paused; transactions under way, counted.
        self._go = threading.Event()
        self._go.set()
        self._active = 0
        self._threads = [
            threading.Thread(target=self._run, args=(random.Random(seed * 2 + i),), daemon=True)
            for i in range(2)
        ]
        self.error: BaseException | None = None

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)
        if self.error is not None:
            raise self.error

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No transaction starts inside, and none is under way."""
        with self._lock:
            self._go.clear()
        try:
            while True:
                with self._lock:
                    if self._active == 0:
                        break
                time.sleep(0.05)
            yield
        finally:
            self._go.set()

    def _begin(self) -> bool:
        """Wait while paused, then count a transaction under way; ``False`` once stopped."""
        while not self._stop.is_set():
            with self._lock:
                if self._go.is_set():
                    self._active += 1
                    return True
            self._go.wait(0.5)
        return False

    def _run(self, rng: random.Random) -> None:
        try:
            while not self._stop.is_set():
                try:
                    with psycopg.connect(**self.config.owner_conninfo()) as conn:
                        while self._begin():
                            started = time.monotonic()
                            try:
                                changed = self._transaction(conn, rng)
                            finally:
                                with self._lock:
                                    self._active -= 1
                            self._stop.wait(changed * self.pace - (time.monotonic() - started))
                except psycopg.OperationalError:
                    with self._lock:
                        self.reconnects += 1
                    self._stop.wait(0.5)  # PostgreSQL restarting
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def _transaction(self, conn: psycopg.Connection[Any], rng: random.Random) -> int:
        """One transaction; the rows it changed."""
        changed = 0
        try:
            with conn.transaction():
                for _ in range(rng.randint(1, 8)):
                    changed += self._statement(conn, rng)
        except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure):
            return 0
        with self._lock:
            self.changes += changed
        return changed

    def _statement(self, conn: psycopg.Connection[Any], rng: random.Random) -> int:
        table = rng.choice(list(TABLES))
        columns = TABLES[table]
        number = rng.randrange(self.keys)
        key = (number,) if columns == ("id",) else (number, f"k{number % 7}")
        ident = sql.Identifier("public", table)
        if rng.random() < 0.2:
            where = sql.SQL(" AND ").join(
                sql.SQL("{} = %s").format(sql.Identifier(c)) for c in columns
            )
            cursor = conn.execute(sql.SQL("DELETE FROM {} WHERE ").format(ident) + where, key)
            return cursor.rowcount
        name = rng.choice(["alpha", "beta", None, "gamma " * rng.randint(1, 5)])
        names = sql.SQL(", ").join(sql.Identifier(c) for c in (*columns, "name", "n"))
        marks = sql.SQL(", ").join(sql.Placeholder() * (len(columns) + 2))
        conn.execute(
            sql.SQL(
                "INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) "
                "DO UPDATE SET name = EXCLUDED.name, n = EXCLUDED.n"
            ).format(ident, names, marks, sql.SQL(", ").join(map(sql.Identifier, columns))),
            (*key, name, rng.randrange(10**12)),
        )
        return 1
