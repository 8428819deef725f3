"""Chunk rows encoded as Debezium encodes them, column type by column type (JSON with schemas).

A table with every supported type gets rows with edge values (negative and
variable-scale decimals, times before the epoch, time zones, NULLs); Debezium
streams them. Tidemark reads the same rows with its chunk reader and encodes
them: the key bytes must be Debezium's exactly, so is the partition murmur2
gives them, and every ``after`` column must equal Debezium's. The Avro stack's
test does the same for Avro (``test_avro.py``).
"""

from __future__ import annotations

import contextlib
from typing import Any

import orjson
import psycopg
import pytest

from processor.errors import UnsupportedTypeError
from processor.snapshot.chunk_events import TableShape
from processor.snapshot.chunk_reader import TableInfo
from processor.snapshot.connect_values import Column
from processor.snapshot.postgres.connect_schemas import key_and_row_fields
from processor.snapshot.postgres.reader import PostgresChunkReader
from processor.snapshot.postgres.values import column
from processor.snapshot.template_event import template_event
from tests.integration.processes import Debezium, decoder, read_topic, records_if_any, wait_for
from tidemark.cli.verify import source_lsn, wait_debezium
from tidemark.core.config import Config
from tidemark.core.debezium_settings import ValueSettings
from tidemark.core.json_envelope import PAYLOAD_HEAD, SCHEMA_HEAD
from tidemark.core.partitioners import partition_of
from tidemark.core.schema_registry import SchemaCache
from tidemark.devstack.stack import DevStack

KINDS = """CREATE TABLE {name} (
  id int, region text, i2 smallint, i8 bigint, f4 real, f8 double precision, b boolean,
  n numeric(12,3), nv numeric, money_c money, t text, vc varchar(10), ch char(3),
  d date, ts timestamp, ts3 timestamp(3), tstz timestamptz, tm time, tmtz timetz,
  iv interval, u uuid, j json, jb jsonb, ba bytea, ip inet, arr int[], tarr text[], x xml,
  e_mood iso_mood, tstz3 timestamptz(3), tstz0 timestamptz(0), tzarr timestamptz[], tm3 time(3),
  hs hstore, PRIMARY KEY (id, region))"""
ROWS = """INSERT INTO {name} VALUES
  (1, 'eu', -3, 9007199254740993, 1.5, 0.1, true, 123.450, 1.10, 12.30, 'héllo', 'v', 'ab',
   '2024-02-29', '2025-12-01 08:00:00.120000', '2025-12-01 08:00:00.1',
   '2026-01-01 10:00:00.120000+02', '13:14:15.5', '13:14:15+02',
   '1 year 2 months 3 days 04:05:06.7', '5f81ae80-1f21-448e-9ae9-6a3b3ee4cf76',
   '{{"b": 1, "a": [1, 2.50]}}', '{{"b": 1, "a": [1, 2.50]}}', '\\x00ff10', '10.0.0.1/24',
   '{{1,2}}', '{{"x","y z"}}', '<a>1</a>', 'happy', '2026-01-01 10:00:00.1204+02',
   '2026-01-01 10:00:00.7+02', '{{"2026-01-01 10:00:00.5+02","1999-12-31 23:59:59+00"}}'),
  (2, 'us', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
   '2026-01-01 10:00:00+00', '00:00:00', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
   NULL, NULL, NULL, NULL, NULL, NULL),
  (3, 'eu', 0, -1, 0.1, 1e20, false, -0.5, 100, -5, '', 'x', 'abc', '1969-07-20',
   '1969-12-31 23:59:59.5', '1900-01-01 00:00:00.001', '1999-12-31 23:59:59.123456-08',
   '23:59:59.999999', '01:02:03.25-05', '-1 day 02:00:00', '00000000-0000-0000-0000-000000000000',
   '[]', '{{}}', '\\x', '::1', '{{}}', '{{}}', '<b/>', 'sad', '1969-12-31 23:59:59.999+00',
   '1900-01-01 00:00:00+00', '{{}}'),
  (4, 'ap', 1, 2, -2.5e-7, -0.0, true, 0, 0.000, 0, 'x', 'y', 'z', '2262-01-01',
   '2262-01-01 00:00:00', '2000-01-01', '2026-06-30 23:00:00+00', '12:00', '12:00:00+00',
   '1 mon', 'ffffffff-ffff-ffff-ffff-ffffffffffff', 'null', '"s"', '\\xff', '10.1.2.3',
   '{{-1,0}}', '{{""}}', '<c>é</c>', 'happy', '2026-06-30 23:00:00+00',
   '2026-06-30 23:00:00+00', NULL)"""


def debezium_events(config: Config, topic: str) -> dict[tuple[Any, ...], tuple[int, bytes, bytes]]:
    """Debezium's latest event per key: ``(partition, key bytes, value bytes)``."""
    events = {}
    for record in read_topic(config, topic):
        if record.key is None or record.value is None:
            continue
        key = orjson.loads(record.key)
        payload = key.get("payload", key)
        events[tuple(payload.values())] = (record.partition, record.key, record.value)
    return events


def payload(raw: bytes) -> dict[str, Any]:
    document = orjson.loads(raw)
    return dict(document.get("payload", document))


def test_chunk_rows_are_debeziums_own_events(stack: DevStack) -> None:
    config = stack.config
    name = "iso_types_kinds"
    with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
        with contextlib.suppress(psycopg.errors.DuplicateObject):
            conn.execute("CREATE TYPE iso_mood AS ENUM ('sad', 'happy')")
        conn.execute(KINDS.format(name=name))
        conn.execute(ROWS.format(name=name))
    wait_debezium(config, source_lsn(config))
    topic = f"{config.source.topic_prefix}.public.{name}"
    theirs = debezium_events(config, topic)
    assert len(theirs) == 4

    reader = PostgresChunkReader(config.owner_conninfo())
    try:
        info = reader.table_info(f"public.{name}")
        columns = [column(n, *t) for n, t in zip(info.columns, info.types, strict=True)]
        casts = {c.name: c.cast for c in columns if c.cast}
        top = reader.max_key(info)
        assert top is not None
        rows = reader.read_chunk(info, None, top, casts=casts).rows
    finally:
        reader.close()
    any_event = next(iter(theirs.values()))
    shape = TableShape.learn(any_event[1], any_event[2], None)
    assert shape.key_columns == ("id", "region")
    compared = 0
    for values, (key, value) in zip(rows, shape.encode_chunk(rows, columns), strict=True):
        row = dict(zip(info.columns, values, strict=True))
        partition, their_key, their_value = theirs[(row["id"], row["region"])]
        assert key == their_key  # byte for byte: the same partition, the same compaction key
        assert partition_of("murmur2", key, 3) == partition
        ours, debezium = payload(value), payload(their_value)
        for col in info.columns:
            assert ours["after"][col] == debezium["after"][col], (row["id"], col)
            compared += 1
        assert ours["op"] == "r" and ours["before"] is None
        assert ours["source"]["snapshot"] == "incremental" and ours["source"]["lsn"] is None
        assert ours["source"]["table"] == name and set(ours) == set(debezium)
        assert value.startswith(their_value[: their_value.index(b',"payload":')])  # same schema
    assert compared == 4 * 34
    sibling = (any_event[1], any_event[2])
    quiet_table_events_are_the_same(info, ValueSettings(), sibling, topic, rows, columns, shape)


#: Values the settings' encodings turn on: seconds that a double cannot hold exactly, a
#: fraction below a millisecond, variable-scale trailing zeros, bytes of every base64 form,
#: an hstore of escapes, a NULL, control characters and enough keys to grow a HashMap.
EDGES = """INSERT INTO {name} (id, region, n, nv, money_c, d, ts, ts3, tm, iv, ba, tm3, hs) VALUES
  (5, 'eu', 1.5, 1.500, 1234.56, '1969-12-31', '1969-12-31 23:59:59.999999',
   '2019-07-09 02:28:57', '13:51:30.123999', '00:00:01.003691', '\\x010203fbff', '13:51:30.5',
   hstore('"q\\"x"=>"\\\\y", "n"=>NULL, "é"=>"ü"') || hstore('ctl', 'a' || chr(9) || chr(31))
   || (SELECT hstore(array_agg('k' || g), array_agg(g::text)) FROM generate_series(1, 30) g)),
  (6, 'eu', -0.001, 1e-7, -0.01, '2000-01-01', '2019-07-09 02:28:57.1', '1970-01-01 00:00:00',
   '00:00:00', '-1 years -2 mons +3 days -04:05:06.78', '\\xfbff', '00:00:00.001', '')"""

#: One Debezium run per format; together they give every setting a value other than its
#: default (``make fidelity`` runs each value on its own).
SETTINGS = {
    "json": {
        "decimal.handling.mode": "string",
        "time.precision.mode": "isostring",
        "binary.handling.mode": "hex",
        "interval.handling.mode": "string",
        "hstore.handling.mode": "map",
    },
    "json-schemaless": {
        "decimal.handling.mode": "double",
        "time.precision.mode": "connect",
        "binary.handling.mode": "base64-url-safe",
    },
    "avro": {
        "money.fraction.digits": "3",
        "time.precision.mode": "adaptive_time_microseconds",
        "binary.handling.mode": "base64",
        "interval.handling.mode": "string",
        "hstore.handling.mode": "map",
    },
}


def compare_under_settings(
    stack: DevStack, fmt: str, schemas: SchemaCache | None, settings: dict[str, str], name: str
) -> tuple[int, set[str]]:
    """Debezium with ``settings`` streams the kinds rows into table ``name``; chunk rows
    encoded under the same settings equal its events column by column, and under the
    defaults they are refused, naming each setting. The columns compared, and the settings
    named by the refusal under the defaults."""
    with psycopg.connect(**stack.config.owner_conninfo(), autocommit=True) as conn:
        with contextlib.suppress(psycopg.errors.DuplicateObject):
            conn.execute("CREATE TYPE iso_mood AS ENUM ('sad', 'happy')")
        conn.execute(KINDS.format(name=name))
    debezium = Debezium(stack, name.replace("_", ""), [f"public.{name}"], settings, fmt).start()
    config = debezium.config
    try:
        with psycopg.connect(**config.owner_conninfo(), autocommit=True) as conn:
            conn.execute(ROWS.format(name=name))
            conn.execute(EDGES.format(name=name))
        wait_debezium(config, source_lsn(config))
        decode = decoder(config)
        topic = f"{config.source.topic_prefix}.public.{name}"

        def all_six() -> dict[tuple[Any, ...], tuple[bytes, bytes]] | None:
            found = {}
            for record in records_if_any(config, topic):
                if record.key is not None and record.value is not None:
                    found[tuple(decode(record.key).values())] = (record.key, record.value)
            return found if len(found) == 6 else None

        # the broker may list a topic it has just created without its partitions
        theirs = wait_for("Debezium's events of the six rows", all_six)
    finally:
        debezium.stop()
    reader = PostgresChunkReader(config.owner_conninfo())
    try:
        info = reader.table_info(f"public.{name}")
        value_settings = config.source.value_settings()
        columns = [
            column(n, *t, value_settings) for n, t in zip(info.columns, info.types, strict=True)
        ]
        top = reader.max_key(info)
        assert top is not None
        rows = reader.read_chunk(
            info, None, top, casts={c.name: c.cast for c in columns if c.cast}
        ).rows
    finally:
        reader.close()
    any_key, any_value = next(iter(theirs.values()))
    shape = TableShape.learn(any_key, any_value, schemas)
    assert shape.disagreements(columns, value_settings) == []
    defaults = [column(n, *t) for n, t in zip(info.columns, info.types, strict=True)]
    others = [value for _key, value in theirs.values()]
    refused = {d.setting for d in shape.disagreements(defaults, ValueSettings(), others)}
    moved = {c.setting for c, d in zip(columns, defaults, strict=True) if c.schema != d.schema}
    # the fraction digits move no schema, and adaptive_time_microseconds only time(0..3)'s
    assert moved == set(settings) - {"money.fraction.digits"}
    # schemaless events show shapes only: a setting whose values look alike (bytes and
    # base64 are both base64 text; milliseconds and microseconds both integers) is not seen
    assert refused == moved if fmt != "json-schemaless" else refused <= moved
    compared = 0
    for values, (key, value) in zip(rows, shape.encode_chunk(rows, columns), strict=True):
        row = dict(zip(info.columns, values, strict=True))
        their_key, their_value = theirs[(row["id"], row["region"])]
        assert key == their_key
        ours, debezium_event = decode(value), decode(their_value)
        for col in info.columns:
            mine, its = ours["after"][col], debezium_event["after"][col]
            assert mine == its, (row["id"], col, fmt)
            if isinstance(its, dict):  # a map's entries in the connector's order too
                assert list(mine) == list(its), (row["id"], col, fmt)
            compared += 1
    assert compared == 6 * 34
    if fmt != "avro":
        quiet_table_events_are_the_same(
            info, value_settings, (any_key, any_value), topic, rows, columns, shape
        )
    return compared, refused


def quiet_table_events_are_the_same(
    info: TableInfo,
    settings: ValueSettings,
    sibling: tuple[bytes, bytes],
    topic: str,
    rows: list[tuple[Any, ...]],
    columns: list[Column],
    learned: TableShape,
) -> None:
    """Events built from the catalog for a table with no event yet (``sibling`` gives the
    envelope) are those learned from Debezium's: the same key bytes, the same schemas byte
    for byte, the same rows."""
    key_fields, row_fields = key_and_row_fields(info, settings)
    template = template_event(sibling, topic, (info.schema, info.table), key_fields, row_fields)
    quiet = TableShape.learn(*template, None)
    built, copied = quiet.encode_chunk(rows, columns), learned.encode_chunk(rows, columns)
    for (key, value), (their_key, their_value) in zip(built, copied, strict=True):
        assert key == their_key
        assert schema_part(value) == schema_part(their_value)
        assert payload(value)["after"] == payload(their_value)["after"]


def schema_part(value: bytes) -> bytes:
    """A JSON converter's event up to its payload (its schema); nothing without one."""
    return value[: value.index(PAYLOAD_HEAD)] if value.startswith(SCHEMA_HEAD) else b""


def test_chunk_rows_follow_debeziums_value_settings_in_json(stack: DevStack) -> None:
    compare_under_settings(stack, "json", None, SETTINGS["json"], "iso_modes_json")


def test_chunk_rows_follow_debeziums_value_settings_in_schemaless_json(stack: DevStack) -> None:
    settings = SETTINGS["json-schemaless"]
    _, refused = compare_under_settings(
        stack, "json-schemaless", None, settings, "iso_modes_schemaless"
    )
    assert "decimal.handling.mode" in refused  # doubles are numbers, not base64 text


def test_a_type_without_a_known_encoding_is_refused() -> None:
    with pytest.raises(UnsupportedTypeError, match="point"):
        column("where", "point", -1, "G", None)
