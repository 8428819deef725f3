"""Chunk reads against the session's real PostgreSQL: keyset pages, snapshots, refusals."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import psycopg
import pytest

from processor.errors import ChunkError, FilterError
from processor.snapshot.chunk_reader import TableInfo
from processor.snapshot.postgres.reader import PostgresChunkReader
from tidemark.devstack.stack import DevStack


@pytest.fixture(scope="module")
def reader(stack: DevStack) -> PostgresChunkReader:
    with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
        conn.execute(
            'CREATE TABLE "iso_chunks_Weird Table" (region text, "select" int, v text, '
            'PRIMARY KEY (region, "select"))'
        )
        conn.execute(
            'INSERT INTO "iso_chunks_Weird Table" SELECT r, n, r || n '
            "FROM unnest(ARRAY['eu', 'us', 'ap']) r, generate_series(1, 40) n"
        )
        conn.execute("CREATE TABLE iso_chunks_nokey (a int, b text)")
        conn.execute("CREATE TABLE iso_chunks_surrogate (code text, v int)")
        conn.execute("CREATE UNIQUE INDEX ON iso_chunks_surrogate (code)")
        conn.execute("CREATE SEQUENCE iso_chunks_seq")
        conn.execute(
            "INSERT INTO iso_chunks_surrogate SELECT 'c' || g, g FROM generate_series(1, 9) g"
        )
        conn.execute("CREATE TABLE iso_chunks_canary (a int)")
        conn.execute(
            "CREATE FUNCTION iso_chunks_side_effect() RETURNS boolean LANGUAGE plpgsql AS "
            "$$ BEGIN INSERT INTO public.iso_chunks_canary VALUES (1); RETURN true; END $$"
        )
        # Rights the processor's role must never have, given here so that the read-only
        # session is what stops the writes below (without them, the role's rights do).
        role = psycopg.sql.Identifier(stack.config.source.user)
        conn.execute(psycopg.sql.SQL("GRANT USAGE ON iso_chunks_seq TO {}").format(role))
        conn.execute(psycopg.sql.SQL("GRANT INSERT ON iso_chunks_canary TO {}").format(role))
    return PostgresChunkReader(stack.config.source.session(read_only=True))


def named(info: TableInfo, rows: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """A chunk's rows as dicts by column."""
    return [dict(zip(info.columns, row, strict=True)) for row in rows]


def test_pages_cover_the_table_once_in_key_order(reader: PostgresChunkReader) -> None:
    info = reader.table_info("public.iso_chunks_Weird Table")
    assert info.key == ("region", "select")
    top = reader.max_key(info)
    assert top == ("us", 40)
    seen, after, parts = [], None, 0
    while after != top:
        end = reader.boundary(info, after, top, 7)
        rows = named(info, reader.read_chunk(info, after, end or top).rows)
        assert len(rows) == 7 or end is None
        assert (rows[-1]["region"], rows[-1]["select"]) == (end or top)
        seen += [(r["region"], r["select"]) for r in rows]
        after, parts = end or top, parts + 1
    assert parts == 18  # 120 rows in parts of 7
    assert seen == sorted((r, n) for r in ("ap", "eu", "us") for n in range(1, 41))


def test_the_max_key_bounds_the_snapshot_and_a_filter_narrows_it(
    stack: DevStack, reader: PostgresChunkReader
) -> None:
    info = reader.table_info("public.iso_chunks_Weird Table")
    top = reader.max_key(info, "region = 'eu'")
    assert top == ("eu", 40)
    with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
        conn.execute("""INSERT INTO "iso_chunks_Weird Table" VALUES ('eu', 99, 'late')""")
    rows = named(info, reader.read_chunk(info, None, top, "region = 'eu'").rows)
    assert [r["select"] for r in rows] == list(range(1, 41))  # 99 is above the bound


def test_a_chunk_snapshot_shows_a_concurrent_transaction_in_progress(
    stack: DevStack, reader: PostgresChunkReader
) -> None:
    info = reader.table_info("public.iso_chunks_Weird Table")
    with psycopg.connect(**stack.config.owner_conninfo()) as writer:
        writer.execute("""UPDATE "iso_chunks_Weird Table" SET v = 'moved' WHERE region = 'ap'""")
        xid = writer.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
        assert xid is not None
        chunk = reader.read_chunk(info, None, ("ap", 40))
        writer.rollback()
    # In progress: listed in xip, or at or above xmax (newer than every completed one).
    assert xid[0] in chunk.snapshot.xip or xid[0] >= chunk.snapshot.xmax
    assert not chunk.snapshot.visible(xid[0] % (1 << 32))
    assert {r["v"] for r in named(info, chunk.rows)} == {f"ap{n}" for n in range(1, 41)}


def test_a_change_written_before_a_chunk_by_a_transaction_still_open_is_not_in_it(
    stack: DevStack, reader: PostgresChunkReader
) -> None:
    """An open transaction newer than every completed one is in no ``xip``: the snapshot's
    ``xmax`` is the latest completed id plus one, not the next id to assign. Its change,
    written before the chunk's snapshot, must still be placed as not in it."""
    info = reader.table_info("public.iso_chunks_Weird Table")
    with psycopg.connect(**stack.config.owner_conninfo()) as writer:
        writer.execute("""UPDATE "iso_chunks_Weird Table" SET v = 'moved' WHERE region = 'eu'""")
        found = writer.execute(
            "SELECT pg_current_xact_id()::text::bigint, pg_current_wal_insert_lsn() - '0/0'::pg_lsn"
        ).fetchone()
        assert found is not None
        xid, written = int(found[0]), int(found[1])  # ``written``: past the update's records
        chunk = reader.read_chunk(info, ("ap", 40), ("eu", 40))
        writer.rollback()
    snapshot = chunk.snapshot
    assert snapshot.before is not None and written <= snapshot.before
    assert {r["v"] for r in named(info, chunk.rows)} == {f"eu{n}" for n in range(1, 41)}
    # A position inside the update's records: before the snapshot's ``before``.
    assert not snapshot.visible(xid % (1 << 32), written - 1)
    assert not snapshot.visible(xid % (1 << 32))


def test_tables_without_a_usable_key_are_refused(reader: PostgresChunkReader) -> None:
    with pytest.raises(ChunkError, match="no primary key"):
        reader.table_info("public.iso_chunks_nokey")
    with pytest.raises(ChunkError, match="no unique index"):
        reader.table_info("public.iso_chunks_nokey", surrogate_key="a")
    with pytest.raises(ChunkError, match="does not exist"):
        reader.table_info("public.iso_chunks_missing")
    info = reader.table_info("public.iso_chunks_surrogate", surrogate_key="code")
    assert info.key == ("code",)
    rows = named(info, reader.read_chunk(info, ("c3",), ("c7",)).rows)
    assert [r["code"] for r in rows] == ["c4", "c5", "c6", "c7"]


def test_chunks_are_read_only_whatever_the_filter(reader: PostgresChunkReader) -> None:
    """Past the filter check (called here without it): a sequence named by its schema is
    found, and advancing it is refused by the read-only transaction; named bare, it is
    not even found (the session's search path is pg_catalog alone)."""
    info = reader.table_info("public.iso_chunks_surrogate", surrogate_key="code")
    with pytest.raises(ChunkError, match="read-only transaction"):
        reader.read_chunk(info, None, ("c9",), "(SELECT nextval('public.iso_chunks_seq')) > 0")
    with pytest.raises(ChunkError, match='relation "iso_chunks_seq" does not exist'):
        reader.read_chunk(info, None, ("c9",), "(SELECT nextval('iso_chunks_seq')) > 0")


def test_keys_read_again_select_exactly_those_rows_whatever_their_text(
    reader: PostgresChunkReader,
) -> None:
    """A ``keys`` request's filter: the rows of the named keys, values quoted (a quote in a
    key is data); keys of other columns or of types the keys do not carry are refused."""
    info = reader.table_info("public.iso_chunks_Weird Table")
    keys: list[dict[str, Any]] = [
        {"region": "eu", "select": 3},
        {"region": "us", "select": 40},
        {"region": "x') OR (true", "select": 1},
    ]
    condition = reader.key_condition(info, keys)
    top = reader.max_key(info, condition)
    assert top == ("us", 40)
    rows = named(info, reader.read_chunk(info, None, top, condition).rows)
    assert [(r["region"], r["select"]) for r in rows] == [("eu", 3), ("us", 40)]
    with pytest.raises(ChunkError, match=r"names \['region'\], not") as raised:
        reader.key_condition(info, [{"region": "eu"}])
    assert "eu" not in str(raised.value)  # a key's values are personal data: not in errors
    with pytest.raises(ChunkError, match="its select is not int4") as raised:
        reader.key_condition(info, [{"region": "eu", "select": "3"}])
    assert "eu" not in str(raised.value)
    surrogate = reader.table_info("public.iso_chunks_surrogate", "code")
    with pytest.raises(ChunkError, match="no primary key"):
        reader.key_condition(surrogate, [{"code": "c1"}])


def test_a_filter_that_ends_its_statement_runs_nothing_more(
    stack: DevStack, reader: PostgresChunkReader
) -> None:
    """Past the filter check (called here without it): every query that carries a filter is
    one statement (the extended protocol), so the statement after ``;`` never runs."""
    info = reader.table_info("public.iso_chunks_surrogate", surrogate_key="code")
    injected = "true); CREATE TABLE iso_chunks_injected (a int); SELECT (true"
    calls = [
        lambda: reader.max_key(info, injected),
        lambda: reader.estimate_rows(info, injected),
        lambda: reader.boundary(info, None, ("c9",), 3, injected),
        lambda: reader.read_chunk(info, None, ("c9",), injected),
    ]
    for call in calls:
        with pytest.raises(ChunkError, match="cannot insert multiple commands"):
            call()
    with pytest.raises(FilterError, match="closes a parenthesis"):
        reader.check_filter("public.iso_chunks_surrogate", injected)
    with psycopg.connect(**stack.config.owner_conninfo()) as conn:
        found = conn.execute("SELECT to_regclass('public.iso_chunks_injected')").fetchone()
    assert found == (None,)


def test_a_filter_that_turns_the_session_writable_leaves_every_later_read_read_only(
    stack: DevStack, reader: PostgresChunkReader
) -> None:
    info = reader.table_info("public.iso_chunks_surrogate", surrogate_key="code")
    opened = "set_config('default_transaction_read_only', 'off', false) = 'off'"
    assert len(reader.read_chunk(info, None, ("c9",), opened).rows) == 9
    for writing in (
        "public.iso_chunks_side_effect()",
        "(SELECT nextval('public.iso_chunks_seq')) > 0",
    ):
        with pytest.raises(ChunkError, match="read-only transaction"):
            reader.read_chunk(info, None, ("c9",), writing)
    with psycopg.connect(**stack.config.owner_conninfo()) as conn:
        assert conn.execute("SELECT count(*) FROM iso_chunks_canary").fetchone() == (0,)


def test_a_filter_past_the_statement_timeout_is_its_tables_fault(stack: DevStack) -> None:
    """``pg_sleep(600)`` ends at ``source.statement_timeout_ms``, as the table's error (its
    snapshot is aborted), not as an unreachable source (which would be tried again)."""
    source = dataclasses.replace(stack.config.source, statement_timeout_ms=500)
    slow = PostgresChunkReader(source.session(read_only=True))
    try:
        info = slow.table_info("public.iso_chunks_surrogate", surrogate_key="code")
        with pytest.raises(ChunkError, match="statement timeout"):
            slow.read_chunk(info, None, ("c9",), "pg_sleep(600) IS NOT NULL")
    finally:
        slow.close()


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("statement_timeout", "0"),
        ("lock_timeout", "0"),
        ("standard_conforming_strings", "off"),
        ("search_path", "public"),
    ],
)
def test_a_setting_a_filter_changed_for_the_session_is_back_in_the_next_transaction(
    stack: DevStack, setting: str, value: str
) -> None:
    """Past the filter check (called here without it): ``set_config(..., false)`` lasts
    for the session, and the reader's connection lives long; every transaction starts
    from the connection's own settings again, so the timeouts still bound a later
    filter, and strings read as the filter check reads them."""
    source = dataclasses.replace(stack.config.source, statement_timeout_ms=500)
    slow = PostgresChunkReader(source.session(read_only=True))
    try:
        info = slow.table_info("public.iso_chunks_surrogate", surrogate_key="code")
        changed = f"set_config('{setting}', '{value}', false) = '{value}'"
        assert len(slow.read_chunk(info, None, ("c9",), changed).rows) == 9
        shown = f"current_setting('{setting}') <> '{value}'"
        assert len(slow.read_chunk(info, None, ("c9",), shown).rows) == 9
        started = time.monotonic()
        with pytest.raises(ChunkError, match="statement timeout"):
            slow.read_chunk(info, None, ("c9",), "pg_sleep(600) IS NOT NULL")
        assert time.monotonic() - started < 30
    finally:
        slow.close()


@pytest.mark.parametrize(
    "condition",
    [
        "v > 3",
        "code = 'it''s (here'",
        "code = E'\\')'",
        "$$;)$$ = code",
        "code ~ '^a;b--c/*d$'",
        "\"code\" IN ('c1', 'c2')",
    ],
)
def test_filters_that_are_one_expression_are_planned(
    reader: PostgresChunkReader, condition: str
) -> None:
    reader.check_filter("public.iso_chunks_surrogate", condition)


@pytest.mark.parametrize(
    ("condition", "reason"),
    [
        ("v >", "syntax error"),
        ("nosuch > 1", 'column "nosuch" does not exist'),
        ("v", "must be type boolean, not type integer"),
        ("true) OR (true", "closes a parenthesis it did not open"),
    ],
)
def test_filters_the_source_cannot_plan_are_refused_with_its_reason(
    reader: PostgresChunkReader, condition: str, reason: str
) -> None:
    with pytest.raises(FilterError, match=reason):
        reader.check_filter("public.iso_chunks_surrogate", condition)


def test_the_processors_role_reads_the_tables_and_writes_only_its_signal_table(
    stack: DevStack, reader: PostgresChunkReader
) -> None:
    """The dev stack's processor role (README, Security: its grants), on a plain session:
    it reads a captured table, writes none, creates nothing, and may insert into and
    delete from Tidemark's signal table only (signal-table watermarks)."""
    config = stack.config
    assert config.source.user != config.owner_conninfo()["user"]
    with psycopg.connect(**config.source.conninfo(), autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM iso_chunks_surrogate").fetchone() == (9,)
        for statement in (
            "INSERT INTO iso_chunks_surrogate VALUES ('x', 1)",
            "UPDATE iso_chunks_surrogate SET v = 0",
            "DELETE FROM iso_chunks_surrogate",
            "TRUNCATE iso_chunks_surrogate",
            "CREATE TABLE iso_chunks_mine (a int)",
            "COPY (SELECT 1) TO PROGRAM 'true'",
            "SELECT pg_read_file('/etc/hostname')",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)  # type: ignore[arg-type] - the test's own literals
        conn.execute("INSERT INTO public.tidemark_signal (id, type) VALUES ('role-test', 'x')")
        conn.execute("DELETE FROM public.tidemark_signal WHERE id = 'role-test'")
    with psycopg.connect(**config.owner_conninfo()) as conn:
        assert conn.execute("SELECT count(*) FROM iso_chunks_surrogate").fetchone() == (9,)


@pytest.mark.parametrize("query", ["boundary", "max_key"])
def test_a_part_planned_while_the_table_is_rewritten_sees_its_rows(
    stack: DevStack, query: str
) -> None:
    """A rewriting ``ALTER TABLE`` (a new column type) gives every row the ``ALTER``'s
    transaction id, so a snapshot taken before it commits sees the table empty. A part's
    end (or the table's largest key) asked for while the ``ALTER`` holds its lock is
    answered after it, from the rows it left: not ``None``, which would plan the rest of
    the table as one part, or end the backfill with nothing read."""
    name = f"iso_chunks_rewrite_{query}"
    table = psycopg.sql.Identifier(name)
    with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v int)").format(table))
        conn.execute(
            psycopg.sql.SQL("INSERT INTO {} SELECT g, g FROM generate_series(1, 100) g").format(
                table
            )
        )
    own = PostgresChunkReader(stack.config.source.session(read_only=True))
    answers: list[Any] = []
    try:
        info = own.table_info(f"public.{name}")
        ask = {
            "boundary": lambda: own.boundary(info, (10,), (100,), 20),
            "max_key": lambda: own.max_key(info),
        }[query]
        with psycopg.connect(**stack.config.owner_conninfo()) as alter:
            alter.execute(psycopg.sql.SQL("ALTER TABLE {} ALTER v TYPE bigint").format(table))
            asking = threading.Thread(target=lambda: answers.append(ask()))
            asking.start()
            waiting = "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = %s::regclass"
            deadline = time.monotonic() + 30
            while alter.execute(waiting, (name,)).fetchone() != (1,):
                assert time.monotonic() < deadline, "the query never waited for the ALTER"
                time.sleep(0.05)
            alter.commit()
            asking.join(30)
    finally:
        own.close()
    assert answers == [{"boundary": (30,), "max_key": (100,)}[query]]
