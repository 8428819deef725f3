"""Tidemark's Avro reader: a schema compiled once, read in C (``tidemark/core/_avroread.c``).

:func:`read` gives what ``fastavro.schemaless_reader(stream, schema, None)`` gives, the
datum and the offset where it ends, at about a tenth of its cost. The contract:

- :func:`compile_schema` turns a schema into a :class:`Program`, an array of ops, one
  per schema node (null, boolean, int/long, float, double, bytes, string, fixed,
  enum, array, map, union, record; named types resolved), from what
  ``fastavro.parse_schema`` makes of it, exactly as ``schemaless_reader`` does. It
  returns ``None`` (declined: fastavro stays the reader of that schema) for what it
  does not take exactly, such as a logical type outside :data:`CONVERTED`.
- Logical types: fastavro converts ``date``, ``time-millis``, ``time-micros``,
  ``timestamp-millis``/``-micros``, ``local-timestamp-millis``/``-micros``, ``decimal``
  (bytes or fixed) and ``uuid`` (string). The compiled reader reads the underlying
  value in C and hands it to fastavro's own converter, so the value, and the error
  for a value it cannot convert, are fastavro's. Other logical types are read as
  their underlying type, as fastavro reads them.
- The compiled ``read`` raises (:class:`AvroReadError`, a ``ValueError``, or
  ``UnicodeDecodeError`` for a string that is not UTF-8) where fastavro raises, and
  never reads past ``stop``. It declines (``None``) what it does not judge: varints
  longer than ten bytes, a block count of ``-2**63``, nesting deeper than 200, more
  than 4,096 items that take no bytes in one array. :func:`read` then asks fastavro.
- On an error :func:`read` lets fastavro read the bytes again and raise its own
  error, so a dead letter says what it said before this reader existed.

A program compiled with ``keep`` reads only the record fields it names: the others are
*omitted*, checked as :func:`skip` checks them but made into no value, so the read ends,
declines and raises where the whole read does. The Debezium fast paths read the fields
after ``after`` so (``processor.events.avro_codec.SCANNED``).

:func:`write_long` is Avro's encoding of a ``long``, for the codecs' outputs;
:func:`write_offset_position` writes an offset and a ``"major,minor"`` string after it
(the varying part of an output's ``tidemark`` record).

:func:`skip` gives the offset where the compiled ``read`` would end, making no value, and
``None`` where it declines or raises; :func:`read_compiled` is the compiled ``read`` with
``None`` for both. The fast paths use them, and leave to :func:`read` what they decline.

``tests/unit/test_avro_read.py`` holds the compiled reader to fastavro with hypothesis
over drawn schemas and values, and feeds it mutated, truncated and random bytes.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any, Final

import fastavro
from fastavro.logical_readers import LOGICAL_READERS

from tidemark.core._avroread import AvroReadError, Program, skip, write_long, write_offset_position
from tidemark.core._avroread import read as read_program

__all__ = [
    "CONVERTED",
    "AvroReadError",
    "Program",
    "compile_schema",
    "program_of",
    "read",
    "read_compiled",
    "skip",
    "write_long",
    "write_offset_position",
]

#: The kinds of op, numbered as ``tidemark/core/_avroread.c`` numbers them.
NULL, BOOLEAN, LONG, FLOAT, DOUBLE, BYTES, STRING = range(7)
FIXED, ENUM, ARRAY, MAP, UNION, RECORD, OMIT = range(7, 14)

#: Which fields of a record a read makes (:func:`compile_schema`'s ``keep``): a field's
#: name, with ``None`` (the whole value) or, for a field that is a record, what to keep of
#: that record in turn.
Keep = Mapping[str, "Keep | None"]

_PRIMITIVES: Final = {
    "null": NULL,
    "boolean": BOOLEAN,
    "int": LONG,
    "long": LONG,
    "float": FLOAT,
    "double": DOUBLE,
    "bytes": BYTES,
    "string": STRING,
}

#: The logical types (``<type>-<logicalType>``, fastavro's keys) the compiled reader
#: converts, with fastavro's own converter. A schema with another key fastavro
#: converts (one registered later, say) is declined.
CONVERTED: Final = frozenset(
    {
        "int-date",
        "int-time-millis",
        "long-time-micros",
        "long-timestamp-millis",
        "long-timestamp-micros",
        "long-local-timestamp-millis",
        "long-local-timestamp-micros",
        "bytes-decimal",
        "fixed-decimal",
        "string-uuid",
    }
)

#: An op as :class:`Program` takes it: (kind, size, target, links, names, convert, schema).
Op = tuple[int, int, int, tuple[int, ...], tuple[Any, ...] | None, Any, Any]


class _Declined(Exception):
    """A schema the compiled reader does not take."""


class _Compiler:
    """The ops of one schema; ``named`` are its named types, as fastavro parsed them."""

    def __init__(self, named: dict[str, Any]) -> None:
        self.named = named
        self.ops: list[Op | None] = []
        self.done: dict[int, int] = {}  # id of a schema dict (alive while compiling) -> op
        self.primitives: dict[str, int] = {}

    def op(self, schema: Any, keep: Keep | None = None) -> int:
        if keep is not None and isinstance(schema, str) and schema in self.named:
            schema = self.named[schema]
        if keep is not None and isinstance(schema, dict) and schema.get("type") == "record":
            return self._kept(schema, keep)
        if isinstance(schema, list):
            at = self._reserve()
            branches = tuple(self.op(branch) for branch in schema)
            self.ops[at] = (UNION, 0, -1, branches, None, None, None)
            return at
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                found = self.primitives.get(schema)
                if found is None:
                    found = self.primitives[schema] = self._emit(
                        (_PRIMITIVES[schema], 0, -1, (), None, None, None)
                    )
                return found
            target = self.named.get(schema)
            if target is None:
                raise _Declined(f"unknown named type {schema!r}")
            return self.op(target)
        if not isinstance(schema, dict):
            raise _Declined(f"not a schema: {schema!r}")
        found = self.done.get(id(schema))
        if found is not None:
            return found
        kind = schema["type"]
        if not isinstance(kind, str):
            raise _Declined(f"type {kind!r}")
        convert = _converter(schema, kind)
        if kind in _PRIMITIVES:
            at = self._emit((_PRIMITIVES[kind], 0, -1, (), None, convert, schema))
        elif kind == "fixed":
            size = schema["size"]
            if type(size) is not int or size < 0:
                raise _Declined(f"fixed size {size!r}")
            at = self._emit((FIXED, size, -1, (), None, convert, schema))
        elif kind == "enum":
            symbols = schema["symbols"]
            if not isinstance(symbols, list):
                raise _Declined("enum symbols that are not a list")
            at = self._emit((ENUM, 0, -1, (), tuple(symbols), convert, schema))
        elif kind in ("array", "map", "record", "error"):
            at = self._reserve()
            self.done[id(schema)] = at  # a record may hold itself
            if kind == "record" or kind == "error":
                fields = schema["fields"]
                names = tuple(field["name"] for field in fields)
                if not all(type(name) is str for name in names):
                    raise _Declined("a field name that is not a str")
                links = tuple(self.op(field["type"]) for field in fields)
                self.ops[at] = (RECORD, 0, -1, links, names, convert, schema)
            else:
                container = ARRAY if kind == "array" else MAP
                target = self.op(schema["items" if kind == "array" else "values"])
                self.ops[at] = (container, 0, target, (), None, convert, schema)
        else:  # "union" or a name in a dict: parse_schema makes neither
            raise _Declined(f"type {kind!r}")
        self.done[id(schema)] = at
        return at

    def _kept(self, schema: dict[str, Any], keep: Keep) -> int:
        """A record of ``schema``'s fields, of which those not in ``keep`` are omitted: an
        op of its own, not shared with the record's whole reading."""
        at = self._reserve()
        fields = schema["fields"]
        names = tuple(field["name"] for field in fields)
        if not all(type(name) is str for name in names):
            raise _Declined("a field name that is not a str")
        links = []
        for name, field in zip(names, fields, strict=True):
            if name in keep:
                links.append(self.op(field["type"], keep[name]))
            else:
                links.append(self._emit((OMIT, 0, self.op(field["type"]), (), None, None, None)))
        self.ops[at] = (RECORD, 0, -1, tuple(links), names, None, schema)
        return at

    def _reserve(self) -> int:
        self.ops.append(None)
        return len(self.ops) - 1

    def _emit(self, op: Op) -> int:
        self.ops.append(op)
        return len(self.ops) - 1


def _converter(schema: dict[str, Any], kind: str) -> Any:
    """fastavro's converter of ``schema``'s logical type, found as fastavro finds it."""
    if "logicalType" not in schema:
        return None
    logical = schema.get("logicalType")
    if not logical:
        return None
    key = f"{kind}-{logical}"
    convert = LOGICAL_READERS.get(key)
    if convert is not None and key not in CONVERTED:
        raise _Declined(f"logical type {key}")
    return convert


def compile_schema(schema: Any, keep: Keep | None = None) -> Program | None:
    """``schema`` (fastavro's parsed schema, or what ``schemaless_reader`` takes) compiled,
    or ``None`` when the compiled reader does not take it.

    With ``keep``, a record schema's read makes only the fields ``keep`` names (nested
    for a field that is a record, not a union of one); the others are checked as
    :func:`skip` checks them, so the read ends, declines and raises where the whole
    read does, and left out."""
    named: dict[str, Any] = {}
    try:
        parsed = fastavro.parse_schema(schema, named)  # what schemaless_reader does per call
        compiler = _Compiler(named)
        if compiler.op(parsed, keep) != 0:  # the program starts at its first op
            raise _Declined("the schema is not the first op")
        return Program(compiler.ops)
    except Exception:  # declined, or what fastavro itself fails on: fastavro reads it
        return None


_MAX_PROGRAMS = 4096
#: Compiled programs by the id of their schema, with the schema itself (so the id is not
#: reused while the entry lives). Schemas are parsed once per id (SchemaCache, Layout).
_programs: dict[int, tuple[Any, Program | None]] = {}


def program_of(schema: Any) -> Program | None:
    """The compiled program of ``schema`` (compiled once per schema object), or ``None``."""
    found = _programs.get(id(schema))
    if found is not None and found[0] is schema:
        return found[1]
    program = compile_schema(schema)
    if len(_programs) >= _MAX_PROGRAMS:
        _programs.clear()
    _programs[id(schema)] = (schema, program)
    return program


def read(schema: Any, raw: bytes, start: int = 0) -> tuple[Any, int]:
    """The Avro datum of ``schema`` at ``raw[start:]`` and the offset where it ends.

    What ``fastavro.schemaless_reader`` returns, and raises, for the same bytes.
    """
    program = program_of(schema)
    if program is not None:
        try:
            found = read_program(program, raw, start)
        except Exception:  # fastavro reads it again, and raises its own error
            found = None
        if found is not None:
            return found
    stream = io.BytesIO(raw)
    stream.seek(start)
    datum = fastavro.schemaless_reader(stream, schema, None)
    return datum, stream.tell()


def read_compiled(program: Program, raw: bytes, start: int) -> tuple[Any, int] | None:
    """The compiled read of ``raw[start:]``, or ``None`` where it declines or raises."""
    try:
        return read_program(program, raw, start)
    except Exception:  # read() reads it again, and raises fastavro's error
        return None
