"""A randomized write workload against real PostgreSQL, run while processors come and go."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from tidemark.core.config import Config


@dataclass
class Table:
    """A test table: a single integer key, or a composite (integer, text) key."""

    name: str
    composite: bool = False
    replica_full: bool = False
    live: set[tuple[Any, ...]] = field(default_factory=set)

    def create(self, conn: psycopg.Connection[Any]) -> None:
        ident = sql.Identifier("public", self.name)
        if self.composite:
            columns = "a integer, b text, name text, n bigint, PRIMARY KEY (a, b)"
        else:
            columns = "id integer PRIMARY KEY, name text, n bigint"
        conn.execute(sql.SQL("CREATE TABLE {} (" + columns + ")").format(ident))
        if self.replica_full:
            conn.execute(sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL").format(ident))

    def key_columns(self) -> list[str]:
        return ["a", "b"] if self.composite else ["id"]

    def random_key(self, rng: random.Random, keys: int) -> tuple[Any, ...]:
        number = rng.randrange(keys)
        return (number, f"k{number % 7}") if self.composite else (number,)


class Workload:
    """Random transactions (inserts, updates, deletes, re-inserts) until stopped."""

    def __init__(self, config: Config, tables: list[Table], seed: int, keys: int = 60) -> None:
        self.config, self.tables, self.keys = config, tables, keys
        self.rng = random.Random(seed)
        self.transactions = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def create_tables(self) -> None:
        with psycopg.connect(**self.config.owner_conninfo(), autocommit=True) as conn:
            for table in self.tables:
                table.create(conn)

    def run_some(self, transactions: int) -> None:
        """Apply ``transactions`` transactions now (one that deadlocks is drawn again)."""
        with psycopg.connect(**self.config.owner_conninfo()) as conn:
            done = 0
            while done < transactions:
                changed: list[tuple[Table, tuple[Any, ...], bool]] = []
                try:
                    with conn.transaction():
                        for _ in range(self.rng.randint(1, 4)):
                            self._change(conn, self.rng.choice(self.tables), changed)
                except psycopg.errors.DeadlockDetected:
                    continue
                for table, key, live in changed:
                    (table.live.add if live else table.live.discard)(key)
                done += 1
                self.transactions += 1

    def bulk(self, transactions: int) -> None:
        """``transactions`` transactions that each update every row of every table (a backlog)."""
        with psycopg.connect(**self.config.owner_conninfo()) as conn:
            done = 0
            while done < transactions:
                try:
                    with conn.transaction():
                        for table in self.tables:
                            ident = sql.Identifier("public", table.name)
                            conn.execute(sql.SQL("UPDATE {} SET n = n + 1").format(ident))
                except psycopg.errors.DeadlockDetected:
                    continue
                done += 1
                self.transactions += 1

    def start(self) -> None:
        """Run in a thread until :meth:`stop`."""

        def loop() -> None:
            try:
                while not self._stop.is_set():
                    self.run_some(5)
                    self._stop.wait(0.02)
            except BaseException as exc:  # reported by stop()
                self.error = exc

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        if self.error is not None:
            raise self.error

    def _change(
        self,
        conn: psycopg.Connection[Any],
        table: Table,
        changed: list[tuple[Table, tuple[Any, ...], bool]],
    ) -> None:
        """One statement; ``changed`` says which keys it made live or deleted."""
        key = table.random_key(self.rng, self.keys)
        live = set(table.live)
        for other, changed_key, alive in changed:
            if other is table:
                (live.add if alive else live.discard)(changed_key)
        ident = sql.Identifier("public", table.name)
        where = sql.SQL(" AND ").join(
            sql.SQL("{} = %s").format(sql.Identifier(c)) for c in table.key_columns()
        )
        value = self.rng.randrange(1_000_000)
        name = self.rng.choice(["alpha", "beta", None, "gamma " * self.rng.randint(1, 5)])
        if key in live and self.rng.random() < 0.25:
            conn.execute(sql.SQL("DELETE FROM {} WHERE ").format(ident) + where, key)
            changed.append((table, key, False))
        elif key in live:
            conn.execute(
                sql.SQL("UPDATE {} SET n = %s, name = %s WHERE ").format(ident) + where,
                (value, name, *key),
            )
        else:
            columns = sql.SQL(", ").join(
                sql.Identifier(c) for c in [*table.key_columns(), "name", "n"]
            )
            marks = sql.SQL(", ").join(sql.Placeholder() * (len(key) + 2))
            conn.execute(
                sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(ident, columns, marks),
                (*key, name, value),
            )
            changed.append((table, key, True))


def source_rows(config: Config, table: Table) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The table's rows by key, as dicts."""
    with psycopg.connect(**config.owner_conninfo()) as conn:
        cur = conn.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier("public", table.name)))
        names = [c.name for c in cur.description or []]
        rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    return {tuple(r[c] for c in table.key_columns()): r for r in rows}
