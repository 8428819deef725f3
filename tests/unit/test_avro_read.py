"""The compiled Avro reader against its oracle, ``fastavro.schemaless_reader``.

Schemas are drawn (records, unions, arrays, maps, enums, fixed, named types and
references to them, a record that holds itself, every logical type fastavro converts
and some it does not, Debezium's ``connect.*`` annotations) with values, written by
fastavro: the compiled reader takes every such schema and reads the values as fastavro
does, to the same end. Mutated, truncated and random bytes: where it does not decline,
it raises exactly when fastavro raises, and otherwise gives fastavro's value and end; it
never looks past the end it was given.
"""

from __future__ import annotations

import datetime
import decimal
import io
import json
import random
import re
import struct
import uuid
from dataclasses import dataclass, field
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from processor.events.avro_codec import SCANNED
from processor.events.avro_schemas import avro_long, envelope_layout
from processor.events.change import DECIDING_FIELDS
from tests.unit.fuzzing import SCALE
from tests.unit.probe import SCHEMAS, frame, probe_event
from tidemark.core._avroread import read as compiled_read
from tidemark.core._avroread import skip
from tidemark.core.avro_read import (
    CONVERTED,
    OMIT,
    RECORD,
    AvroReadError,
    Program,
    compile_schema,
    program_of,
    read,
    write_offset_position,
)
from tidemark.core.avro_read import LONG as LONG_KIND
from tidemark.core.avro_wire import read_avro
from tidemark.core.errors import InputError
from tidemark.core.messages import RawMessage

#: ``make fuzz`` runs these properties and the byte fuzzing this many times longer.

INT = st.integers(-(2**31), 2**31 - 1)
LONG = st.integers(-(2**63), 2**63 - 1)

#: Logical types (and annotations) over a primitive: the schema and its values as written.
LOGICAL: list[tuple[dict[str, Any], st.SearchStrategy[Any]]] = [
    ({"type": "int", "logicalType": "date"}, st.integers(-719_162, 2_932_896) | INT),
    ({"type": "int", "logicalType": "time-millis"}, st.integers(0, 86_399_999) | INT),
    ({"type": "long", "logicalType": "time-micros"}, st.integers(0, 86_399_999_999) | LONG),
    ({"type": "long", "logicalType": "timestamp-millis"}, st.integers(-(2**45), 2**45) | LONG),
    ({"type": "long", "logicalType": "timestamp-micros"}, st.integers(-(2**55), 2**55) | LONG),
    ({"type": "long", "logicalType": "local-timestamp-millis"}, st.integers(0, 2**45) | LONG),
    ({"type": "long", "logicalType": "local-timestamp-micros"}, st.integers(0, 2**55) | LONG),
    ({"type": "string", "logicalType": "uuid"}, st.uuids().map(str) | st.text(max_size=8)),
    ({"type": "long", "logicalType": "timestamp-nanos"}, LONG),  # not converted by fastavro
    ({"type": "string", "logicalType": "json"}, st.text(max_size=8)),
    ({"type": "string", "logicalType": ""}, st.text(max_size=8)),
    ({"type": "int", "connect.name": "io.debezium.time.Date", "connect.version": 1}, INT),
    ({"type": "string", "connect.name": "io.debezium.data.Json", "connect.version": 1}, st.text()),
    ({"type": "long", "connect.name": "io.debezium.time.MicroTimestamp"}, LONG),
]
PRIMITIVES: list[tuple[str, st.SearchStrategy[Any]]] = [
    ("null", st.none()),
    ("boolean", st.booleans()),
    ("int", INT),
    ("long", LONG),
    ("float", st.floats(width=32)),
    ("double", st.floats()),
    ("bytes", st.binary(max_size=12)),
    ("string", st.text(max_size=12)),
]


@dataclass
class Drawn:
    """What one drawn schema defines: named types by full name, a counter for new names."""

    named: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The full names of the named types, by the id of their schema, with the schema: a
    #: schema drawn and then dropped (a union's duplicate branch) is freed, and its id
    #: can be a new schema's, which its entry must not name.
    full: dict[int, tuple[dict[str, Any], str]] = field(default_factory=dict)
    count: int = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def define(self, schema: dict[str, Any], namespace: str) -> None:
        name = schema["name"]
        full = f"{namespace}.{name}" if namespace and "." not in name else name
        self.named[full] = schema
        self.full[id(schema)] = (schema, full)


def type_key(schema: Any, drawn: Drawn) -> str:
    """What a union branch is called (fastavro's tuple notation); unique within a union."""
    if isinstance(schema, str):
        return schema
    entry = drawn.full.get(id(schema))
    if entry is not None and entry[0] is schema:
        return entry[1]
    return str(schema["type"])


@st.composite
def nodes(draw: st.DrawFn, drawn: Drawn, depth: int, namespace: str = "") -> Any:
    kinds = ["primitive", "logical", "decimal", "enum", "fixed"]
    if depth > 0:
        kinds += ["array", "map", "union", "record"]
    # A name without a dot is looked up in the enclosing namespace.
    known = sorted(name for name in drawn.named if "." in name or not namespace)
    if known:
        kinds.append("reference")
    kind = draw(st.sampled_from(kinds))
    if kind == "primitive":
        return draw(st.sampled_from([name for name, _ in PRIMITIVES]))
    if kind == "logical":
        return dict(draw(st.sampled_from([schema for schema, _ in LOGICAL])))
    if kind == "reference":
        return draw(st.sampled_from(known))
    if kind == "array":
        return {"type": "array", "items": draw(nodes(drawn, depth - 1, namespace))}
    if kind == "map":
        return {"type": "map", "values": draw(nodes(drawn, depth - 1, namespace))}
    if kind == "union":
        branches: list[Any] = []
        keys: set[str] = set()
        for _ in range(draw(st.integers(1, 4))):
            defined = set(drawn.named)
            branch = draw(nodes(drawn, depth - 1, namespace))
            key = None if isinstance(branch, list) else type_key(branch, drawn)
            if key is None or key in keys:  # Avro: no union in a union, one branch per type
                for name in set(drawn.named) - defined:
                    del drawn.named[name]
                continue
            keys.add(key)
            branches.append(branch)
        return branches or "null"
    schema: dict[str, Any]
    if kind == "decimal":
        precision = draw(st.integers(1, 20))
        schema = {"logicalType": "decimal", "precision": precision}
        if draw(st.booleans()):
            schema["scale"] = draw(st.integers(0, precision))
        if draw(st.booleans()):
            return {"type": "bytes", **schema}
        size = draw(st.integers(precision // 2 + 1, 12))  # room for the precision
        schema = {"type": "fixed", "name": drawn.name("D"), "size": size, **schema}
    elif kind == "enum":
        symbols = draw(st.lists(st.sampled_from("ABCDE"), min_size=1, max_size=5, unique=True))
        schema = {"type": "enum", "name": drawn.name("E"), "symbols": symbols}
    elif kind == "fixed":
        schema = {"type": "fixed", "name": drawn.name("F"), "size": draw(st.integers(0, 5))}
    else:
        schema = {"type": "record", "name": drawn.name("R"), "fields": []}
        if draw(st.booleans()):
            namespace = draw(st.sampled_from(["ns", "io.debezium", namespace or "ns2"]))
            schema["namespace"] = namespace
        full = f"{namespace}.{schema['name']}" if namespace else schema["name"]
        schema["fields"] = [
            {"name": f"f{i}", "type": draw(nodes(drawn, depth - 1, namespace))}
            for i in range(draw(st.integers(0, 4)))
        ]
        if draw(st.booleans()):  # a record that holds itself
            schema["fields"].append({"name": "next", "type": ["null", full]})
    drawn.define(schema, namespace)
    return schema


def underlying(schema: Any) -> Any:
    """``schema`` without its logical types: what fastavro writes the raw values with."""
    if isinstance(schema, list):
        return [underlying(branch) for branch in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: value for key, value in schema.items() if key != "logicalType"}
    if "fields" in out:
        out["fields"] = [dict(f, type=underlying(f["type"])) for f in out["fields"]]
    for key in ("items", "values"):
        if key in out:
            out[key] = underlying(out[key])
    return out


@st.composite
def values(draw: st.DrawFn, schema: Any, drawn: Drawn, budget: int) -> Any:
    """A value of ``schema`` as fastavro writes it (unions in its tuple notation)."""
    if isinstance(schema, list):
        if not schema:
            raise AssertionError("no empty unions are drawn")
        keys = [type_key(branch, drawn) for branch in schema]
        if budget <= 0 and "null" in keys:
            return ("null", None)
        at = draw(st.integers(0, len(schema) - 1))
        return (keys[at], draw(values(schema[at], drawn, budget - 1)))
    if isinstance(schema, str):
        for name, strategy in PRIMITIVES:
            if name == schema:
                return draw(strategy)
        return draw(values(drawn.named[schema], drawn, budget - 1))
    kind = schema["type"]
    if schema.get("logicalType") == "decimal":
        size = schema.get("size")
        return draw(st.binary(min_size=size or 0, max_size=size or 12))
    for logical, strategy in LOGICAL:
        if logical == schema:
            return draw(strategy)
    if kind == "enum":
        return draw(st.sampled_from(schema["symbols"]))
    if kind == "fixed":
        return draw(st.binary(min_size=schema["size"], max_size=schema["size"]))
    if kind == "array":
        size = 0 if budget <= 0 else draw(st.integers(0, 3))
        return [draw(values(schema["items"], drawn, budget - 1)) for _ in range(size)]
    if kind == "map":
        keys = [] if budget <= 0 else draw(st.lists(st.text(max_size=4), max_size=3, unique=True))
        return {key: draw(values(schema["values"], drawn, budget - 1)) for key in keys}
    if kind == "record":
        return {f["name"]: draw(values(f["type"], drawn, budget - 1)) for f in schema["fields"]}
    return draw(values(kind, drawn, budget))


@st.composite
def schemas_with_bytes(draw: st.DrawFn) -> tuple[Any, bytes]:
    """A drawn schema (as fastavro parses it) and a value of it, written by fastavro."""
    drawn = Drawn()
    schema = draw(nodes(drawn, 3))
    assume(schema != [])
    value = draw(values(schema, drawn, 4))
    parsed = fastavro.parse_schema(schema, {})
    writer = fastavro.parse_schema(underlying(schema), {})
    out = io.BytesIO()
    fastavro.schemaless_writer(out, writer, value)
    return parsed, out.getvalue()


# -- the oracle ----------------------------------------------------------------


def canonical(value: Any) -> Any:
    """``value`` in a form where equal means the same: floats by their bits, types kept."""
    if isinstance(value, float):
        return ("float", struct.pack("<d", value))
    if isinstance(value, dict):
        return ("dict", [(key, canonical(item)) for key, item in value.items()])
    if isinstance(value, list):
        return ("list", [canonical(item) for item in value])
    return (type(value).__name__, repr(value))


def fastavro_reads(parsed: Any, buf: bytes, start: int) -> Any:
    """fastavro's ``(value, end)``, or the exception it raises."""
    stream = io.BytesIO(buf)
    stream.seek(start)
    try:
        return canonical(fastavro.schemaless_reader(stream, parsed, None)), stream.tell()
    except Exception as exc:
        return exc


def compiled_reads(program: Program, buf: bytes, start: int, stop: int | None = None) -> Any:
    """The compiled reader's ``(value, end)``, ``None`` (declined) or its exception."""
    try:
        found = (
            compiled_read(program, buf, start)
            if stop is None
            else compiled_read(program, buf, start, stop)
        )
    except Exception as exc:
        return exc
    return None if found is None else (canonical(found[0]), found[1])


def outcome(found: Any) -> Any:
    """A read's result, its exception as its type and message (comparable)."""
    return (type(found), str(found)) if isinstance(found, Exception) else found


def skips_alike(program: Program, buf: bytes, start: int, stop: int | None = None) -> None:
    """Asserts that :func:`skip` ends where the compiled read ends, and is ``None`` where the
    read declines or raises."""
    ours = compiled_reads(program, buf, start, stop)
    try:
        found = skip(program, buf, start) if stop is None else skip(program, buf, start, stop)
    except ValueError as exc:  # a start past the bytes: an argument error, raised by both
        assert outcome(exc) == outcome(ours)
        return
    assert found == (ours[1] if isinstance(ours, tuple) else None), (ours, found, buf)


def agrees(program: Program, parsed: Any, buf: bytes, start: int = 0) -> bool:
    """Asserts that the compiled reader agrees with fastavro on ``buf[start:]`` (and
    :func:`skip` with it); False when it declined (fastavro is not asked then: what is
    declined may take it very long)."""
    skips_alike(program, buf, start)
    ours = compiled_reads(program, buf, start)
    if ours is None:
        return False
    theirs = fastavro_reads(parsed, buf, start)
    if isinstance(ours, Exception):
        assert isinstance(theirs, Exception), (ours, theirs, buf)
        # ours is a ValueError, or what fastavro's own logical-type converter raised
        assert isinstance(ours, ValueError) or type(ours) is type(theirs), (ours, theirs)
    else:
        assert not isinstance(theirs, Exception), (theirs, ours, buf)
        assert ours == theirs, buf
    return True


# -- drawn schemas -----------------------------------------------------------------


@pytest.mark.fuzz
@settings(max_examples=500 * SCALE, deadline=None, suppress_health_check=list(HealthCheck))
@given(drawn=schemas_with_bytes(), prefix=st.binary(max_size=3), suffix=st.binary(max_size=3))
def test_drawn_values_read_as_fastavro_reads_them(
    drawn: tuple[Any, bytes], prefix: bytes, suffix: bytes
) -> None:
    parsed, body = drawn
    program = compile_schema(parsed)
    assert program is not None  # every schema drawn is taken
    buf = prefix + body + suffix
    assert compiled_reads(program, buf, len(prefix)) is not None  # fastavro's bytes are taken
    assert agrees(program, parsed, buf, len(prefix))
    theirs = fastavro_reads(parsed, buf, len(prefix))
    if not isinstance(theirs, Exception):  # a logical value out of range fails in both
        assert theirs[1] == len(prefix) + len(body)
        datum, end = read(parsed, buf, len(prefix))
        assert (canonical(datum), end) == theirs


def mutations(body: bytes, rng: random.Random) -> bytes:
    raw = bytearray(body)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(raw) + 1)
        kind = rng.randrange(4)
        if kind == 0 and at < len(raw):
            raw[at] = rng.randrange(256)
        elif kind == 1:
            raw[at:at] = bytes([rng.choice(b"\x00\x01\x02\x03\x7f\x80\xff\xc3\xed\xf4\x81")])
        elif kind == 2 and at < len(raw):
            raw[at] ^= 1 << rng.randrange(8)
        elif at < len(raw):
            del raw[at]
    return bytes(raw)


@pytest.mark.fuzz
@settings(max_examples=500 * SCALE, deadline=None, suppress_health_check=list(HealthCheck))
@given(drawn=schemas_with_bytes(), seed=st.integers(0, 2**32))
def test_mutated_and_truncated_bytes_raise_where_fastavro_raises(
    drawn: tuple[Any, bytes], seed: int
) -> None:
    """Flipped, inserted and deleted bytes, and prefixes: both raise, or both read the same
    value to the same end; a read never looks past the end it was given."""
    parsed, body = drawn
    program = compile_schema(parsed)
    assert program is not None
    rng = random.Random(seed)
    data = mutations(body, rng) if rng.random() < 0.8 else body
    for end in {len(data), *(rng.randrange(len(data) + 1) for _ in range(4))}:
        agrees(program, parsed, data[:end])
        # The bytes go on past ``stop``: reading past it would see them.
        padded = data[:end] + bytes([rng.randrange(256) for _ in range(8)])
        assert outcome(compiled_reads(program, padded, 0, end)) == outcome(
            compiled_reads(program, data[:end], 0)
        )
        skips_alike(program, padded, 0, end)


# -- Debezium --------------------------------------------------------------------------

VALUE = fastavro.parse_schema(SCHEMAS["value"], {})
KEY = fastavro.parse_schema(SCHEMAS["key"], {})

rows = st.fixed_dictionaries(
    {
        "id": INT,
        "name": st.none() | st.text(),
        "amount": st.none()
        | st.decimals(min_value=-(10**8) + 1, max_value=10**8 - 1, places=2, allow_nan=False),
        "at": st.none() | st.just("2026-11-23T04:58:38.190775Z"),
        "u": st.none() | st.uuids().map(str),
        "j": st.none() | st.just('{"x": 1}') | st.text(max_size=4),
        "d": st.none() | INT,
    }
)


@pytest.mark.fuzz
@settings(max_examples=100 * SCALE, deadline=None)
@given(
    before=st.none() | rows,
    after=st.none() | rows,
    op=st.sampled_from("cudr"),
    sequence=st.none() | st.just('["10","12"]'),
    seed=st.integers(0, 2**32),
)
def test_debezium_envelopes_read_as_fastavro_reads_them(
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    op: str,
    sequence: str | None,
    seed: int,
) -> None:
    """Debezium 3.6's envelope of a PostgreSQL table (a decimal, a Uuid, a Json, a Date)."""
    event = dict(probe_event(op, after), before=before)
    event["source"]["sequence"] = sequence
    raw = frame(2, SCHEMAS["value"], event)
    program = program_of(VALUE)
    assert program is not None
    assert agrees(program, VALUE, raw, 5)
    datum, end = read(VALUE, raw, 5)
    assert end == len(raw) and datum["after"] == after and datum["before"] == before
    rng = random.Random(seed)
    for _ in range(4):
        agrees(program, VALUE, mutations(raw, rng), 5)
        agrees(program, VALUE, raw[: rng.randrange(len(raw))], 5)
    key = frame(1, SCHEMAS["key"], {"id": 7})
    assert read(KEY, key, 5) == ({"id": 7}, len(key))


@pytest.mark.fuzz
def test_random_bytes_raise_where_fastavro_raises() -> None:
    rng = random.Random(11)
    everything = fastavro.parse_schema(
        {
            "type": "record",
            "name": "All",
            "fields": [{"name": name, "type": ["null", name]} for name, _ in PRIMITIVES[1:]]
            + [
                {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
                {"name": "x", "type": {"type": "fixed", "name": "X", "size": 2}},
                {"name": "a", "type": {"type": "array", "items": ["null", "long", "string"]}},
                {"name": "m", "type": {"type": "map", "values": "E"}},
                {"name": "t", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            ],
        },
        {},
    )
    programs = [(VALUE, program_of(VALUE)), (everything, program_of(everything))]
    alphabet = b"\x00\x01\x02\x03\x04\x05\x06\x08\x0a\x7f\x80\x81\xfe\xff\xc3\xa9\xedab"
    taken = 0
    for _ in range(4_000 * SCALE):
        data = bytes(rng.choice(alphabet) for _ in range(rng.randrange(48)))
        for parsed, program in programs:
            assert program is not None
            taken += agrees(program, parsed, data)
    assert taken > 7_000 * SCALE


# -- what fastavro does with odd bytes, and what is declined ------------------------

ENUM = {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}


@pytest.mark.parametrize(
    ("schema", "data"),
    [
        ("long", b""),  # no long
        ("long", b"\x80"),  # a varint cut off
        ("long", b"\xff" * 9),
        ("boolean", b""),
        ("float", b"\x00\x00\x00"),
        ("double", b"\x00" * 7),
        ("string", b"\x03"),  # a negative length
        ("bytes", b"\x06ab"),  # a length past the end
        ("string", b"\x04\xc3\x28"),  # not UTF-8
        ("string", b"\x06\xed\xa0\x80"),  # a surrogate in UTF-8
        ("string", b"\x04\xc0\xaf"),  # an overlong encoding
        ({"type": "map", "values": "long"}, b"\x02\x02\xff\x02\x00"),  # a key not UTF-8
        (["null", "string"], b"\x04"),  # union index 2 of 2
        (["null", "string"], b"\x05"),  # union index -3 of 2
        (ENUM, b"\x06"),  # enum index 3 of 3
        (ENUM, b"\x07"),  # enum index -4 of 3
        ({"type": "fixed", "name": "F", "size": 4}, b"abc"),
        ({"type": "array", "items": "long"}, b"\x06\x02\x04"),  # fewer items than counted
        ({"type": "array", "items": "long"}, b"\x02\x02"),  # no end of the array
        ({"type": "map", "values": "null"}, b"\x7e\x00"),  # 63 entries, no bytes for them
        ({"type": "int", "logicalType": "date"}, avro_long(2**31 - 1)),  # past year 9999
        ({"type": "long", "logicalType": "timestamp-millis"}, avro_long(2**62)),
        ({"type": "string", "logicalType": "uuid"}, b"\x06abc"),
        ({"type": "int", "logicalType": "time-millis"}, avro_long(90_000_000)),  # hour 25
    ],
)
def test_what_fastavro_refuses_raises(schema: Any, data: bytes) -> None:
    parsed = fastavro.parse_schema(schema, {})
    theirs = fastavro_reads(parsed, data, 0)
    assert isinstance(theirs, Exception)
    program = compile_schema(parsed)
    assert program is not None
    ours = compiled_reads(program, data, 0)
    assert isinstance(ours, Exception)
    assert isinstance(ours, ValueError) or type(ours) is type(theirs)
    with pytest.raises(type(theirs)) as info:  # the front raises fastavro's own error
        read(parsed, data)
    address = re.compile(" at 0x[0-9a-f]+")  # fastavro names the stream it read
    assert address.sub("", str(info.value)) == address.sub("", str(theirs))


@pytest.mark.parametrize(
    ("schema", "data"),
    [
        (["null", "string"], b"\x01\x02a"),  # union index -1: the last branch
        (["null", "string"], b"\x03"),  # -2: the first
        (ENUM, b"\x01"),  # enum index -1: the last symbol
        ("boolean", b"\x07"),  # any byte but 0 is true
        ("int", b"\xfe\xff\xff\xff\xff\x01"),  # an int past 32 bits
        ("long", b"\xff" * 9 + b"\x7f"),  # ten bytes; the last gives one bit
        ("long", b"\xfe" * 9 + b"\x01"),
        ({"type": "array", "items": "long"}, b"\x03\x04\x02\x04\x02\x06\x00"),  # -2, then 1
        ({"type": "map", "values": "long"}, b"\x01\x04\x02a\x02\x02\x02b\x04\x00"),
        ({"type": "map", "values": "long"}, b"\x04\x02a\x02\x02a\x04\x00"),  # a key twice
        ({"type": "array", "items": "null"}, b"\xfe\x3f\x00"),  # 4,095 nulls in no bytes
        (
            {"type": "bytes", "logicalType": "decimal", "precision": 3, "scale": 1},
            b"\x06\x7f\xff\xff",
        ),
        ({"type": "float"}, b"\x01\x00\x80\x7f"),  # a signalling NaN
        ({"type": "long", "logicalType": "timestamp-micros"}, avro_long(-(2**40))),
        ({"type": "string", "logicalType": "uuid"}, b"\x40" + b"a" * 32),
        ({"type": "int", "logicalType": "time-millis"}, avro_long(-1)),  # 00:00:00.999
    ],
)
def test_what_fastavro_takes_is_read_alike(schema: Any, data: bytes) -> None:
    parsed = fastavro.parse_schema(schema, {})
    program = compile_schema(parsed)
    assert program is not None
    theirs = fastavro_reads(parsed, data + b"\x99", 0)
    assert not isinstance(theirs, Exception)
    assert compiled_reads(program, data + b"\x99", 0) == theirs == (theirs[0], len(data))


@pytest.mark.parametrize(
    ("schema", "data"),
    [
        ("long", b"\xff" * 10 + b"\x01"),  # eleven bytes: fastavro shifts past 64 bits
        ("long", b"\x80" * 11 + b"\x01"),
        ({"type": "array", "items": "long"}, b"\xff" * 9 + b"\x01\x00\x00"),  # count -2**63
        ({"type": "array", "items": "null"}, avro_long(4097) + b"\x00"),  # 4,097 nulls
        (
            {"type": "array", "items": {"type": "record", "name": "Z", "fields": []}},
            avro_long(2048) + avro_long(2049) + b"\x00",
        ),
    ],
)
def test_what_is_declined_is_read_by_fastavro(schema: Any, data: bytes) -> None:
    parsed = fastavro.parse_schema(schema, {})
    program = compile_schema(parsed)
    assert program is not None
    assert compiled_read(program, data, 0) is None
    expected = fastavro_reads(parsed, data, 0)
    try:
        datum, end = read(parsed, data)
    except Exception as exc:
        assert outcome(exc) == outcome(expected)
    else:
        assert (canonical(datum), end) == expected


def test_a_huge_count_of_items_that_take_no_bytes_is_declined_unread() -> None:
    """fastavro would make a list of 2**62 nulls: declined before one is made."""
    program = compile_schema({"type": "array", "items": "null"})
    assert program is not None
    assert compiled_read(program, avro_long(4000) + avro_long(2**62) + b"\x00", 0) is None
    assert compiled_read(program, avro_long(2**63 - 1) + b"\x00", 0) is None


def test_deep_nesting_is_declined() -> None:
    schema = {
        "type": "record",
        "name": "Node",
        "fields": [{"name": "next", "type": ["null", "Node"]}],
    }
    parsed = fastavro.parse_schema(schema, {})
    program = compile_schema(parsed)
    assert program is not None
    shallow = b"\x02" * 50 + b"\x00"
    assert agrees(program, parsed, shallow)
    deep = b"\x02" * 150 + b"\x00"
    assert compiled_read(program, deep, 0) is None  # deeper than 200 ops: fastavro's
    assert read(parsed, deep)[1] == len(deep)


# -- logical types ---------------------------------------------------------------------


def test_the_converted_logical_types_are_fastavros() -> None:
    from fastavro.logical_readers import LOGICAL_READERS

    assert set(LOGICAL_READERS) == CONVERTED


@pytest.mark.parametrize(
    ("schema", "datum"),
    [
        ({"type": "int", "logicalType": "date"}, datetime.date(2026, 11, 23)),
        ({"type": "int", "logicalType": "time-millis"}, datetime.time(4, 58, 38, 190000)),
        ({"type": "long", "logicalType": "time-micros"}, datetime.time(4, 58, 38, 190775)),
        (
            {"type": "long", "logicalType": "timestamp-millis"},
            datetime.datetime(2026, 11, 23, 4, 58, 38, 190000, tzinfo=datetime.UTC),
        ),
        (
            {"type": "long", "logicalType": "timestamp-micros"},
            datetime.datetime(2026, 11, 23, 4, 58, 38, 190775, tzinfo=datetime.UTC),
        ),
        (
            {"type": "long", "logicalType": "local-timestamp-millis"},
            datetime.datetime(2026, 11, 23, 4, 58, 38, 190000),  # noqa: DTZ001 - local
        ),
        (
            {"type": "long", "logicalType": "local-timestamp-micros"},
            datetime.datetime(2026, 11, 23, 4, 58, 38, 190775),  # noqa: DTZ001 - local
        ),
        (
            {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
            decimal.Decimal("-12345678.90"),
        ),
        (
            {"type": "fixed", "name": "D", "size": 8, "logicalType": "decimal", "precision": 18},
            decimal.Decimal("123456789012345678"),
        ),
        ({"type": "string", "logicalType": "uuid"}, uuid.UUID(int=2**128 - 1)),
    ],
)
def test_each_converted_logical_type_gives_fastavros_value(schema: Any, datum: Any) -> None:
    parsed = fastavro.parse_schema(schema, {})
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, datum)
    data = out.getvalue()
    program = compile_schema(parsed)
    assert program is not None
    value, end = read(parsed, data)
    assert value == datum and type(value) is type(datum) and end == len(data)
    assert compiled_reads(program, data, 0) == fastavro_reads(parsed, data, 0)


def test_a_logical_type_fastavro_converts_but_this_reader_does_not_know_is_declined(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fastavro.logical_readers import LOGICAL_READERS

    monkeypatch.setitem(LOGICAL_READERS, "long-tenths", lambda data, *_: data / 10)
    schema = {"type": "record", "name": "T", "fields": [{"name": "t", "type": "long"}]}
    assert compile_schema(fastavro.parse_schema(schema, {})) is not None
    schema["fields"][0]["type"] = {"type": "long", "logicalType": "tenths"}
    parsed = fastavro.parse_schema(schema, {})
    assert compile_schema(parsed) is None
    assert read(parsed, b"\x28") == ({"t": 2.0}, 1)  # fastavro reads it


def test_a_logical_type_fastavro_does_not_convert_is_its_underlying_value() -> None:
    for schema, data, value in [
        ({"type": "long", "logicalType": "timestamp-nanos"}, b"\x04", 2),
        ({"type": "fixed", "name": "Dur", "size": 2, "logicalType": "duration"}, b"ab", b"ab"),
        ({"type": "string", "logicalType": 7}, b"\x02a", "a"),
    ]:
        parsed = fastavro.parse_schema(schema, {})
        program = compile_schema(parsed)
        assert program is not None
        assert compiled_read(program, data, 0) == (value, len(data))
        assert fastavro_reads(parsed, data, 0) == (canonical(value), len(data))


# -- the front: compiling, caching, dead letters --------------------------------------


def test_programs_are_compiled_once_per_schema_object() -> None:
    schema = {"type": "record", "name": "Once", "fields": [{"name": "a", "type": "long"}]}
    parsed = fastavro.parse_schema(schema, {})
    program = program_of(parsed)
    assert program is not None and program_of(parsed) is program
    assert program_of(fastavro.parse_schema(schema, {})) is not program
    assert program_of("string") is not None and read("string", b"\x02a") == ("a", 2)


def test_schemas_fastavro_cannot_read_are_declined() -> None:
    unknown = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "Nope"}]}
    assert compile_schema(unknown) is None
    assert compile_schema(["null", {"type": "nope"}]) is None


def test_a_dead_letter_says_what_fastavro_said() -> None:
    msg = RawMessage("t", 0, 0, None, b"\x00\x00\x00\x00\x01\x06ab")
    with pytest.raises(
        InputError, match="value is not valid Avro for its schema: EOFError: Expected 3 bytes"
    ) as info:
        read_avro(b"\x00\x00\x00\x00\x01\x06ab", 5, "string", msg, "value")
    assert info.value.kind == "malformed"
    assert read_avro(b"\x00\x00\x00\x00\x01\x04ab!", 5, "string", msg, "value") == ("ab", 8)


def test_a_program_is_checked_when_it_is_made() -> None:
    record = (12, 0, -1, (1,), ("a",), None, None)
    assert Program([record, (2, 0, -1, (), None, None, None)])
    for ops in (
        [],
        [(12, 0, -1, (5,), ("a",), None, None)],  # a field op out of range
        [(12, 0, -1, (0, 0), ("a",), None, None)],  # a name per field
        [(12, 0, -1, (0,), (1,), None, None)],  # names are str
        [(9, 0, 3, (), None, None, None)],  # array items out of range
        [(11, 0, -1, (-1,), None, None, None)],
        [(7, -1, -1, (), None, None, None)],  # a negative fixed size
        [(99, 0, -1, (), None, None, None)],
        [(2, 0, -1, (), None, 5, None)],  # convert not callable
        [(8, 0, -1, (), ["A"], None, None)],  # enum symbols not a tuple
        ["long"],
    ):
        with pytest.raises((ValueError, TypeError)):
            Program(ops)


def test_bad_arguments_are_errors() -> None:
    program = compile_schema("long")
    assert program is not None
    with pytest.raises(ValueError):
        compiled_read(program, b"\x02", 2)
    with pytest.raises(ValueError):
        compiled_read(program, b"\x02", 0, 2)
    with pytest.raises(ValueError):
        compiled_read(program, b"\x02", -1)
    with pytest.raises(TypeError):
        compiled_read(program, bytearray(b"\x02"), 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        compiled_read("long", b"\x02", 0)  # type: ignore[arg-type]
    with pytest.raises(AvroReadError):
        compiled_read(program, b"\x02", 1)


def test_the_benchmark_envelope_is_read_alike() -> None:
    """The envelope of bench/envelopes.py (no logical types), its row and its key."""
    row = {
        "type": "record",
        "name": "Value",
        "namespace": "bench.public.items",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "customer", "type": ["null", "string"], "default": None},
            {"name": "amount", "type": ["null", "double"], "default": None},
        ],
    }
    envelope = {
        "type": "record",
        "name": "Envelope",
        "namespace": "bench.public.items",
        "fields": [
            {"name": "before", "type": ["null", row], "default": None},
            {"name": "after", "type": ["null", "Value"], "default": None},
            {"name": "op", "type": "string"},
        ],
    }
    parsed = fastavro.parse_schema(envelope, {})
    datum = {"before": None, "after": {"id": 1, "customer": "c", "amount": 0.37}, "op": "u"}
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, datum)
    assert read(parsed, out.getvalue()) == (datum, len(out.getvalue()))
    assert json.dumps(read(parsed, out.getvalue())[0]) == json.dumps(datum)


@given(LONG)
def test_a_long_is_written_as_fastavro_writes_it(value: int) -> None:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, "long", value)
    assert avro_long(value) == out.getvalue()
    assert read("long", avro_long(value)) == (value, len(out.getvalue()))


def test_a_long_beyond_64_bits_is_not_written() -> None:
    for value in (2**63, -(2**63) - 1, 2**70):
        with pytest.raises(OverflowError):
            avro_long(value)
        with pytest.raises(OverflowError):
            write_offset_position(0, 1, value)
    with pytest.raises(TypeError):
        avro_long("1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        write_offset_position(0, 1)  # type: ignore[call-arg]


@given(LONG, LONG, LONG)
def test_an_offset_and_a_position_are_written_as_a_long_and_a_string(
    offset: int, major: int, minor: int
) -> None:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, "long", offset)
    fastavro.schemaless_writer(out, "string", f"{major},{minor}")
    assert write_offset_position(offset, major, minor) == out.getvalue()


# -- reads that keep some fields ---------------------------------------------------------


@st.composite
def keeps(draw: st.DrawFn, schema: Any, named: dict[str, Any], depth: int = 2) -> Any:
    """What to keep of ``schema`` (a record's fields, a random part of them; nested for a
    field that is a record), or ``None`` (the whole value)."""
    if isinstance(schema, str):
        schema = named.get(schema, schema)
    if depth == 0 or not (isinstance(schema, dict) and schema.get("type") == "record"):
        return None
    fields = schema["fields"]
    kept = draw(st.lists(st.sampled_from(fields), unique_by=id)) if fields else []
    return {f["name"]: draw(keeps(f["type"], named, depth - 1)) for f in kept}


def kept(value: Any, schema: Any, keep: Any, named: dict[str, Any]) -> Any:
    """``value`` of ``schema`` with only what ``keep`` keeps of it."""
    if isinstance(schema, str):
        schema = named.get(schema, schema)
    if keep is None or not (isinstance(schema, dict) and schema.get("type") == "record"):
        return value
    types = {f["name"]: f["type"] for f in schema["fields"]}
    return {
        name: kept(item, types[name], keep[name], named)
        for name, item in value.items()
        if name in keep
    }


def kind(found: Any) -> str:
    return "declined" if found is None else "raised" if isinstance(found, Exception) else "read"


@pytest.mark.fuzz
@settings(max_examples=300 * SCALE, deadline=None, suppress_health_check=list(HealthCheck))
@given(drawn=schemas_with_bytes(), data=st.data(), seed=st.integers(0, 2**32))
def test_a_read_that_keeps_some_fields_is_the_whole_read_less_the_others(
    drawn: tuple[Any, bytes], data: st.DataObject, seed: int
) -> None:
    """The same end, the same refusals (a field left out is still checked), and the kept
    fields' values: on fastavro's bytes, and on mutated and truncated ones."""
    parsed, body = drawn
    named: dict[str, Any] = {}
    fastavro.parse_schema(parsed, named)
    keep = data.draw(keeps(parsed, named))
    assume(keep is not None)
    whole, part = compile_schema(parsed), compile_schema(parsed, keep)
    assert whole is not None and part is not None
    rng = random.Random(seed)
    for buf in (body, mutations(body, rng), body[: rng.randrange(len(body) + 1)]):
        ours, theirs = compiled_reads(part, buf, 0), compiled_reads(whole, buf, 0)
        assert kind(ours) == kind(theirs), (ours, theirs, buf)
        if kind(theirs) == "read":
            value = compiled_read(whole, buf, 0)
            assert value is not None
            expected = (canonical(kept(value[0], parsed, keep, named)), value[1])
            assert ours == expected
        assert skip(part, buf, 0) == skip(whole, buf, 0)


def test_the_scanned_fields_of_a_debezium_envelope_are_its_op_and_deciding_source() -> None:
    """What the Avro fast paths decode of Debezium 3.6's envelope: ``op`` and the
    :data:`DECIDING_FIELDS` of ``source``; not ``transaction``, the timestamps, or the
    rest of ``source``."""
    event = probe_event("u", {"id": 1, "name": "a"})
    raw = frame(2, SCHEMAS["value"], event)
    layout = envelope_layout(2, SCHEMAS["value"])
    before, after = program_of(layout.before), program_of(layout.after)
    program = compile_schema(layout.rest, SCANNED)
    assert before is not None and after is not None and program is not None
    after_at = skip(before, raw, 5)
    assert after_at is not None
    rest_at = skip(after, raw, after_at)
    assert rest_at is not None
    found = compiled_read(program, raw, rest_at)
    assert found is not None and found[1] == len(raw)
    source = event["source"]
    assert found[0] == {
        "source": {k: source[k] for k in DECIDING_FIELDS if k in source},  # PostgreSQL's
        "op": "u",
    }
    assert source.items() <= read(layout.rest, raw, rest_at)[0]["source"].items()


def test_an_omit_is_checked_when_the_program_is_made() -> None:
    with pytest.raises(ValueError, match="an omit of an omit"):
        Program([(RECORD, 0, -1, (1,), ("a",), None, None), (OMIT, 0, 1, (), None, None, None)])
    with pytest.raises(ValueError, match="an omit has no logical type"):
        Program([(OMIT, 0, 1, (), None, len, None), (LONG_KIND, 0, -1, (), None, None, None)])


def test_a_dropped_named_type_names_no_later_schema() -> None:
    """The generator's own rule: a named type drawn for a union branch and dropped (its
    type already in the union) is freed, and a schema drawn later can get its id. It
    must not take the dropped type's name: a value would then be written under a union
    branch its union does not have (what made this file's properties fail now and then)."""
    drawn = Drawn()
    for i in range(200):
        drawn.define({"type": "enum", "name": f"E{i}", "symbols": ["A"]}, "")
        del drawn.named[f"E{i}"]  # dropped, as nodes() drops a union's duplicate branch
        later = {"type": "bytes", "logicalType": "decimal", "precision": 4}
        assert type_key(later, drawn) == "bytes"
