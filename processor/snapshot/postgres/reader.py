"""Read-only chunks of a PostgreSQL table: every chunk in one transaction with its snapshot.

Every chunk is one ``REPEATABLE READ READ ONLY`` transaction that locks the table
in ``ACCESS SHARE`` mode (so its columns cannot change until the chunk is read,
and an ``ALTER TABLE`` in progress is waited for), takes ``pg_current_snapshot()``,
checks that the columns are still those the backfill learned, and reads the page,
so the snapshot is exactly the one the rows were read in. The other reads of a
table's rows (a part's end, its largest key) lock it first too. Nothing is
written to the source.

Composite keys compare as row values, ``(k1, k2) > (%s, %s)``, which
PostgreSQL answers from the key's index. Identifiers are quoted by psycopg's
``sql`` module; the optional filter (Debezium's ``additional-conditions``) is
SQL by design and is the only text taken as it is. It is checked first
(:mod:`processor.snapshot.filters`), and every query that carries it has
parameters, so psycopg sends it by the extended protocol, which takes exactly
one statement: text that ended the statement could not run another. The
session is read-only (:meth:`tidemark.core.config.SourceConfig.session`), and every
transaction is ``READ ONLY`` on its own and starts with ``RESET ALL``, so a filter
that changes a setting for the session (its default read-only mode, its timeouts)
changes no later transaction.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.string import TextLoader

from processor.errors import ChunkError, FilterError, SourceUnavailableError, TableChangedError
from processor.events.visibility import PgSnapshot
from processor.snapshot.chunk_reader import Chunk, ChunkReader, Key, TableInfo
from processor.snapshot.filters import check_filter
from processor.snapshot.postgres.positions import committed_position

#: A chunk's snapshot, the WAL insert position after it, and how many ids past its
#: ``xmax`` the next id to assign is: ``age(xid)`` counts from that next id (the
#: transaction has none of its own), read once per transaction, after the snapshot.
_SNAPSHOT = (
    "SELECT pg_current_snapshot()::text, pg_current_wal_insert_lsn() - '0/0'::pg_lsn, "
    "age((pg_snapshot_xmax(pg_current_snapshot())::text::numeric % 4294967296)::text::xid)"
)


class PostgresChunkReader(ChunkReader):
    """Read-only chunks of a PostgreSQL table (one connection, one transaction per chunk)."""

    def __init__(self, conninfo: dict[str, Any]) -> None:
        try:
            self._conn = psycopg.connect(**conninfo, autocommit=False)
        except psycopg.Error as exc:
            raise SourceUnavailableError(
                f"cannot connect to the source for chunk reads: {exc}"
            ) from None
        self._conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        self._conn.read_only = True
        #: Types loaded as their text (their output function's, not a cast's).
        self._as_text: set[int] = set()

    def table_info(self, table: str, surrogate_key: str | None = None) -> TableInfo:
        schema, _, name = table.partition(".")
        relation = _regclass(schema, name)
        with self._transaction(f"the catalog of {table}"):
            found = self._conn.execute("SELECT to_regclass(%s)", (relation,)).fetchone()
            if found is None or found[0] is None:
                raise ChunkError(f"table {table} does not exist")
            described = self._conn.execute(
                "SELECT a.attname, t.typname, a.atttypmod, t.typcategory, e.typname, t.oid, "
                "a.attnotnull, pg_get_expr(d.adbin, d.adrelid), "
                "(SELECT array_agg(l.enumlabel ORDER BY l.enumsortorder) FROM pg_enum l "
                "WHERE l.enumtypid = t.oid) "
                "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
                "LEFT JOIN pg_type e ON e.oid = t.typelem AND t.typcategory = 'A' "
                "LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
                "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped "
                "ORDER BY a.attnum",
                (relation,),
            ).fetchall()
            columns = [r[0] for r in described]
            published = self._conn.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_publication_tables "
                "WHERE schemaname = %s AND tablename = %s)",
                (schema, name),
            ).fetchone()
            primary = self._indexes(relation, "i.indisprimary")
            unique = self._indexes(relation, "i.indisunique AND i.indpred IS NULL")
        if surrogate_key is not None:
            if surrogate_key not in columns:
                raise ChunkError(f"surrogate key {surrogate_key!r} is not a column of {table}")
            if [surrogate_key] not in unique:
                raise ChunkError(
                    f"surrogate key {surrogate_key!r} of {table} has no unique index: "
                    "paging by a column with duplicates could skip rows"
                )
            key = [surrogate_key]
        elif primary:
            key = primary[0]
        else:
            raise ChunkError(
                f"table {table} has no primary key: give a unique column as "
                "'surrogate-key' in the execute-snapshot signal"
            )
        types = tuple((r[1], r[2], r[3], r[4]) for r in described)
        oids = tuple(int(r[5]) for r in described)
        return TableInfo(
            schema,
            name,
            tuple(key),
            tuple(columns),
            types,
            oids,
            primary=tuple(primary[0]) if primary else (),
            not_null=tuple(bool(r[6]) for r in described),
            defaults=tuple(r[7] for r in described),
            labels=tuple(None if r[8] is None else tuple(r[8]) for r in described),
            captured=bool(published and published[0]),
        )

    def key_condition(self, info: TableInfo, keys: list[dict[str, Any]]) -> str:
        columns = info.primary
        if not columns:
            raise ChunkError(f"{info.name} has no primary key to read keys by")
        for column in columns:
            kind = info.types[info.columns.index(column)][0]
            if kind not in _KEY_TYPES:
                raise ChunkError(
                    f"keys of {info.name} cannot be read again: its key column {column} is "
                    f"{kind} (readable: {', '.join(sorted(_KEY_TYPES))})"
                )
        rows = []
        for key in keys:
            if set(key) != set(columns):
                raise ChunkError(  # its columns, not its values: personal data
                    f"a key of {info.name} names {sorted(key)}, not {list(columns)}"
                )
            values = []
            for column in columns:
                value, kind = key[column], info.types[info.columns.index(column)][0]
                if not isinstance(value, _KEY_TYPES[kind]) or (
                    isinstance(value, bool) and kind != "bool"
                ):
                    raise ChunkError(f"a key of {info.name}: its {column} is not {kind}")
                values.append(sql.Literal(value))
            rows.append(sql.SQL("({})").format(sql.SQL(", ").join(values)))
        condition = sql.SQL("({}) IN ({})").format(_columns(columns), sql.SQL(", ").join(rows))
        return condition.as_string(self._conn)

    def check_filter(self, table: str, condition: str) -> None:
        """:class:`FilterError` if ``condition`` is not one expression, or if PostgreSQL cannot
        plan it over ``table`` (a syntax or type error, an unknown column): ``EXPLAIN``, which
        runs nothing, in a read-only transaction."""
        check_filter(condition)
        schema, _, name = table.partition(".")
        query = sql.SQL("EXPLAIN SELECT 1 FROM {} WHERE %s AND ({})").format(
            sql.Identifier(schema, name), sql.SQL(condition)
        )
        try:
            with self._transaction("PostgreSQL cannot plan it"):
                self._conn.execute(query, (True,))
        except TableChangedError:
            raise
        except ChunkError as exc:
            raise FilterError(str(exc)) from None

    def max_key(self, info: TableInfo, condition: str | None = None) -> Key | None:
        order = sql.SQL(", ").join(sql.SQL("{} DESC").format(sql.Identifier(k)) for k in info.key)
        query = sql.SQL("SELECT {} FROM {}{} ORDER BY {} LIMIT %s").format(
            _columns(info.key), sql.Identifier(info.schema, info.table), _where(condition), order
        )
        with self._locked(info, f"the largest key of {info.name}"):
            row = self._conn.execute(query, (1,)).fetchone()
        return None if row is None else tuple(row)

    def estimate_rows(self, info: TableInfo, condition: str | None = None) -> int:
        """The planner's estimate (``pg_class.reltuples``); a count where there is none or a
        filter applies."""
        relation = _regclass(info.schema, info.table)
        with self._locked(info, f"the size of {info.name}"):
            if not condition:
                row = self._conn.execute(
                    "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass", (relation,)
                ).fetchone()
                if row is not None and row[0] >= 0:
                    return int(row[0])
            query = sql.SQL("SELECT count(*) FROM {} WHERE %s{}").format(
                sql.Identifier(info.schema, info.table), _and(condition)
            )
            counted = self._conn.execute(query, (True,)).fetchone()
        return int(counted[0]) if counted else 0

    def boundary(
        self, info: TableInfo, after: Key | None, upto: Key, rows: int, condition: str | None = None
    ) -> Key | None:
        where, params = _range(info, after, upto, condition)
        query = sql.SQL("SELECT {} FROM {} WHERE {} ORDER BY {} OFFSET {} LIMIT 1").format(
            _columns(info.key),
            sql.Identifier(info.schema, info.table),
            where,
            _columns(info.key),
            sql.Literal(max(0, int(rows) - 1)),
        )
        with self._locked(info, f"a part of {info.name}"):  # no key: personal data
            row = self._conn.execute(query, params).fetchone()
        return None if row is None else tuple(row)

    def read_chunk(
        self,
        info: TableInfo,
        after: Key | None,
        upto: Key,
        condition: str | None = None,
        casts: Mapping[str, str] | None = None,
    ) -> Chunk:
        where, params = _range(info, after, upto, condition)
        query = sql.SQL("SELECT {} FROM {} WHERE {} ORDER BY {}").format(
            _selected(info.columns, casts or {}),
            sql.Identifier(info.schema, info.table),
            where,
            _columns(info.key),
        )
        for name, oid in zip(info.columns, info.oids, strict=False):
            if (casts or {}).get(name) == "text" and oid not in self._as_text:
                self._conn.adapters.register_loader(oid, TextLoader)
                self._as_text.add(oid)
        started = time.perf_counter()
        # The WAL insert position before the snapshot, in a transaction of its own (the
        # chunk's first query takes its snapshot), and after it, in the snapshot's
        # statement: they place a change against the snapshot by its LSN
        # (processor.events.visibility).
        with self._transaction(f"the WAL position before a chunk of {info.name}"):
            before = committed_position(self._conn)
        with self._locked(info, f"a chunk of {info.name}"):  # no key: personal data
            taken = self._conn.execute(_SNAPSHOT).fetchone()
            self._check_columns(info)
            # the text forms processor.snapshot.postgres.values converts
            self._conn.execute(
                "SET LOCAL intervalstyle = 'iso_8601'; SET LOCAL timezone = 'UTC'; "
                "SET LOCAL datestyle = 'ISO'"
            )
            rows = self._conn.execute(query, params).fetchall()
        assert taken is not None
        read = dataclasses.replace(PgSnapshot.parse(taken[0]), before=before, after=int(taken[1]))
        snapshot = read.with_next_xid(read.xmax + int(taken[2]))
        return Chunk(rows, snapshot, time.perf_counter() - started)

    def close(self) -> None:
        self._conn.close()

    @contextlib.contextmanager
    def _locked(self, info: TableInfo, what: str) -> Iterator[None]:
        """A transaction that reads ``info``'s rows: the table locked in ``ACCESS SHARE``
        mode before its snapshot is taken.

        The lock waits for an ``ALTER TABLE`` in progress, and its columns cannot change
        until the transaction ends. Taking it first matters: ``LOCK TABLE`` takes no
        snapshot, so the first query's comes after the ``ALTER``. A rewriting ``ALTER``
        (a new column type) gives every row its own transaction id, and a snapshot taken
        before it commits sees the table empty.
        """
        with source_errors(what), self._conn.transaction():
            self._conn.execute(  # RESET ALL as in _transaction, in the same round trip
                sql.SQL("RESET ALL; LOCK TABLE {} IN ACCESS SHARE MODE").format(
                    sql.Identifier(info.schema, info.table)
                )
            )
            yield

    @contextlib.contextmanager
    def _transaction(self, what: str) -> Iterator[None]:
        """A transaction that starts from the connection's own settings.

        A filter's ``set_config(name, value, false)`` lasts for the session, past its
        read-only transaction, and this connection lives long: without ``RESET ALL`` a
        filter could lift the timeouts from every later read, or turn
        ``standard_conforming_strings`` off under the filter check's reading of quotes.
        ``RESET ALL`` brings back the connection's startup options
        (:meth:`tidemark.core.config.SourceConfig.session`).
        """
        with source_errors(what), self._conn.transaction():
            self._conn.execute("RESET ALL")
            yield

    def _check_columns(self, info: TableInfo) -> None:
        """:class:`TableChangedError` if the table's columns (names, types and type modifiers
        such as a ``numeric``'s scale or a ``timestamp``'s precision, in order) are no
        longer ``info``'s."""
        now = self._conn.execute(
            "SELECT a.attname, t.typname, a.atttypmod "
            "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
            "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped "
            "ORDER BY a.attnum",
            (_regclass(info.schema, info.table),),
        ).fetchall()
        learned = [
            (name, kind[0], kind[1]) for name, kind in zip(info.columns, info.types, strict=True)
        ]
        found = [tuple(r) for r in now]
        if found != learned:
            retyped = sorted({c[0] for c in set(found) ^ set(learned)})
            raise TableChangedError(
                f"the columns of {info.name} changed: {[r[0] for r in now]}, "
                f"not {list(info.columns)} (added, dropped or retyped: {retyped})"
            )

    def _indexes(self, relation: str, which: str) -> list[list[str]]:
        """The columns of each index of ``relation`` that matches ``which`` (SQL over ``i``)."""
        query = sql.SQL(
            "SELECT i.indexrelid, array_agg(a.attname ORDER BY array_position(i.indkey, a.attnum)) "
            "FROM pg_index i JOIN pg_attribute a "
            "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            "WHERE i.indrelid = %s::regclass AND {} GROUP BY i.indexrelid ORDER BY i.indexrelid"
        ).format(sql.SQL(which))
        return [list(r[1]) for r in self._conn.execute(query, (relation,)).fetchall()]


@contextlib.contextmanager
def source_errors(what: str) -> Iterator[None]:
    """psycopg's errors as Tidemark's, naming ``what`` was asked: a broken connection or a
    lock not granted in time as :class:`SourceUnavailableError` (worth trying again),
    anything else the source refused (a filter's syntax or types, a missing column, a
    statement past the timeout) as :class:`ChunkError`: the table's fault, which aborts
    its snapshot."""
    try:
        yield
    except psycopg.errors.QueryCanceled as exc:  # the statement timeout: the query's fault
        raise ChunkError(f"{what}: {exc} (source.statement_timeout_ms)") from None
    except psycopg.OperationalError as exc:
        raise SourceUnavailableError(f"{what}: the source cannot be reached: {exc}") from None
    except psycopg.Error as exc:
        raise ChunkError(f"{what}: {exc}") from None


def _range(
    info: TableInfo, after: Key | None, upto: Key, condition: str | None
) -> tuple[sql.Composed, list[Any]]:
    """``after < key <= upto`` (row values) and the filter, with their parameters."""
    key = sql.SQL("({})").format(_columns(info.key))
    marks = sql.SQL("({})").format(sql.SQL(", ").join(sql.Placeholder() * len(info.key)))
    bounds = [sql.SQL("{} <= {}").format(key, marks)]
    params: list[Any] = list(upto)
    if after is not None:
        bounds.insert(0, sql.SQL("{} > {}").format(key, marks))
        params = [*after, *params]
    if condition:
        bounds.append(sql.SQL("({})").format(sql.SQL(condition)))
    return sql.SQL(" AND ").join(bounds), params


def _regclass(schema: str, name: str) -> str:
    """A ``regclass`` literal with both parts quoted (names are case-sensitive)."""
    return '"{}"."{}"'.format(schema.replace('"', '""'), name.replace('"', '""'))


def _columns(names: Sequence[str]) -> sql.Composed:
    return sql.SQL(", ").join(sql.Identifier(n) for n in names)


_CASTS = {"numeric": sql.SQL("numeric")}
#: Key column types whose values Debezium's key carries as they are (so that a key can
#: be read again by them), and the Python type of those values.
_KEY_TYPES: dict[str, type | tuple[type, ...]] = {
    "int2": int,
    "int4": int,
    "int8": int,
    "bool": bool,
    "text": str,
    "varchar": str,
    "bpchar": str,
    "uuid": str,
}


def _selected(names: Sequence[str], casts: Mapping[str, str]) -> sql.Composed:
    """The select list: each column, cast where ``casts`` says, under its own name."""
    items: list[sql.Composable] = []
    for name in names:
        column = sql.Identifier(name)
        cast = casts.get(name)
        if cast not in _CASTS:  # none, or text: loaded as text, not cast
            items.append(column)
        else:
            items.append(sql.SQL("{}::{} AS {}").format(column, _CASTS[cast], column))
    return sql.SQL(", ").join(items)


def _where(condition: str | None) -> sql.Composable:
    if not condition:
        return sql.SQL("")
    return sql.SQL(" WHERE ({})").format(sql.SQL(condition))


def _and(condition: str | None) -> sql.Composable:
    return sql.SQL(" AND ({})").format(sql.SQL(condition)) if condition else sql.SQL("")
