"""PostgreSQL values as Debezium's PostgreSQL connector encodes them (its default modes).

Chunk rows of Tidemark's incremental snapshot must be indistinguishable from
Debezium's own events, so each column is converted the way the connector
converts it with ``decimal.handling.mode=precise``,
``time.precision.mode=adaptive``, ``binary.handling.mode=bytes`` and
``interval.handling.mode=numeric``. :func:`column` makes, from the catalog
type, the :class:`~processor.snapshot.connect_values.Column` that says how the
chunk query selects the column (some as their text form, which is what
Debezium reads from the replication stream) and how its value becomes a
Connect value: a ``Decimal`` logical type at the column's scale, Debezium's
``VariableScaleDecimal``, its time types. A column's ``json`` goes from the
query's value to the JSON form in one step (a chunk's hot path: no
intermediate Connect value where it can be skipped).

The integration tests compare every supported type with Debezium's own
events of the same rows. A type not listed here is refused, never guessed.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Callable
from typing import Any

from processor.errors import UnsupportedTypeError
from processor.snapshot.connect_values import (
    Column,
    base64_text,
    same,
    to_json,
    twos_complement,
)

EPOCH = dt.datetime(1970, 1, 1)  # noqa: DTZ001 - timestamp without time zone
EPOCH_DATE = dt.date(1970, 1, 1)
DAYS_PER_MONTH = 365.25 / 12  # Debezium's average month (interval.handling.mode=numeric)
#: PostgreSQL's numeric holds up to 131072 digits before the point; never round them.
_EXACT = decimal.Context(prec=200_000, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)

#: Types read as their text form (what the replication stream carries).
_TEXT_TYPES = {
    "text", "varchar", "name", "citext", "uuid", "json", "jsonb", "xml", "inet",
    "cidr", "macaddr", "macaddr8", "tsvector", "tsquery", "ltree", "bit", "varbit",
    "int4range", "int8range", "numrange", "tsrange", "tstzrange", "daterange",
}  # fmt: skip


def column(name: str, type_name: str, typmod: int, category: str, element: str | None) -> Column:
    """The :class:`Column` of a catalog type (``typname``, ``atttypmod``, ``typcategory``)."""
    if category == "A" and element is not None:
        inner = column(name, element, typmod, "", None)
        # an array's elements come as Python values (timestamptz's converter takes both)
        if inner.cast is not None and element not in ("text", "varchar", "bpchar", "timestamptz"):
            raise UnsupportedTypeError(f"column {name}: arrays of {element} are not supported")
        convert = _array(inner.convert)
        return Column(name, type_name, None, convert, lambda v: to_json(convert(v)))
    if category == "E" or type_name in _TEXT_TYPES:
        return Column(name, type_name, "text", same)
    if type_name not in _CONVERTERS:
        raise UnsupportedTypeError(
            f"column {name}: type {type_name} is not supported by Tidemark's backfill encoder"
        )
    cast = _READ_AS.get(type_name)
    convert = _CONVERTERS[type_name](typmod)
    if type_name == "numeric" and typmod >= 4:
        return Column(name, type_name, cast, convert, _fixed_decimal_json((typmod - 4) & 0xFFFF))
    if type_name == "money":
        return Column(name, type_name, cast, convert, _fixed_decimal_json(2))
    return _with_json(Column(name, type_name, cast, convert))


#: Types read other than as themselves: their text form (timestamptz's in UTC, as
#: :func:`processor.snapshot.chunk_reader.PostgresChunkReader.read_chunk` sets it), or a cast.
_READ_AS = {"interval": "text", "float4": "text", "timestamptz": "text", "money": "numeric"}


def _with_json(col: Column) -> Column:
    """``col`` with its JSON form: its conversion, composed with :func:`to_json` where the
    Connect value may hold bytes or decimals (``bytea``, variable-scale ``numeric``)."""
    convert = col.convert
    if col.type_name in ("bytea", "numeric"):
        return Column(col.name, col.type_name, col.cast, convert, lambda v: to_json(convert(v)))
    return col if convert is same else Column(col.name, col.type_name, col.cast, convert, convert)


def _fixed_decimal_json(scale: int) -> Callable[[Any], Any]:
    """A ``Decimal`` at ``scale`` straight to the JSON converter's form (base64 unscaled)."""
    exponent = decimal.Decimal(1).scaleb(-scale)

    def encode(value: Any) -> Any:
        if value is None:
            return None
        unscaled = int(value.quantize(exponent, context=_EXACT).scaleb(scale, context=_EXACT))
        return base64_text(twos_complement(unscaled))

    return encode


def _array(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda v: None if v is None else [convert(x) for x in v]


def _as_is(_typmod: int) -> Callable[[Any], Any]:
    return same


def _float_text(_typmod: int) -> Callable[[Any], Any]:
    """``real`` is read as PostgreSQL's shortest text, as Java prints a ``float``."""
    return lambda v: None if v is None else float(v)


def _numeric(typmod: int) -> Callable[[Any], Any]:
    if typmod >= 4:  # numeric(p, s): a Decimal at scale s
        scale = (typmod - 4) & 0xFFFF
        exponent = decimal.Decimal(1).scaleb(-scale)
        return lambda v: None if v is None else v.quantize(exponent, context=_EXACT)
    return _variable_scale


def _money(_typmod: int) -> Callable[[Any], Any]:
    """``money`` is read as ``numeric`` (its text follows lc_monetary); a Decimal at scale 2."""
    cents = decimal.Decimal("0.01")
    return lambda v: None if v is None else v.quantize(cents, context=_EXACT)


def _variable_scale(value: Any) -> Any:
    """Debezium's ``VariableScaleDecimal``: the value without trailing zeros, and its scale."""
    if value is None:
        return None
    normalized = value.normalize(context=_EXACT)
    if normalized.as_tuple().exponent > 0:  # Java keeps a non-negative scale: 100, not 1E+2
        normalized = normalized.quantize(decimal.Decimal(1), context=_EXACT)
    sign, digits, exponent = normalized.as_tuple()
    unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
    return {"scale": -int(exponent), "value": unscaled}


def _date(_typmod: int) -> Callable[[Any], Any]:
    return lambda v: None if v is None else (v - EPOCH_DATE).days


def _timestamp(typmod: int) -> Callable[[Any], Any]:
    if 0 <= typmod <= 3:  # io.debezium.time.Timestamp: milliseconds
        return lambda v: None if v is None else _micros(v) // 1000
    return lambda v: None if v is None else _micros(v)  # MicroTimestamp


def _micros(value: dt.datetime) -> int:
    delta = value.replace(tzinfo=None) - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _timestamptz(typmod: int) -> Callable[[Any], Any]:
    """``io.debezium.time.ZonedTimestamp``: UTC, ISO, the column's digits of fraction.

    Scalars come as PostgreSQL's text in UTC (``2026-01-01 08:00:00.12+00``),
    cheaper than a ``datetime``; array elements come as ``datetime``.
    """
    digits = typmod if 0 <= typmod <= 6 else 6
    timespec = "microseconds" if digits else "seconds"

    def convert(value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, str):
            return _utc_text(value, digits)
        text = value.astimezone(dt.UTC).replace(tzinfo=None).isoformat(timespec=timespec)
        return (text[: 20 + digits] if digits else text) + "Z"

    return convert


def _utc_text(text: str, digits: int) -> str:
    """``YYYY-MM-DD HH:MM:SS[.f]+00`` as ``YYYY-MM-DDTHH:MM:SS[.ffffff]Z`` (``digits`` of f)."""
    if len(text) < 22 or text[4] != "-" or text[10] != " " or not text.endswith("+00"):
        # BC, after year 9999, infinity: no ZonedTimestamp Tidemark can vouch for
        raise UnsupportedTypeError(f"timestamptz {text!r} is outside years 0001-9999")
    if not digits:
        return f"{text[:10]}T{text[11:19]}Z"
    fraction = text[19:-3] or "."
    return f"{text[:10]}T{text[11:19]}{fraction}{'0' * (digits + 1 - len(fraction))}Z"


def _time(typmod: int) -> Callable[[Any], Any]:
    def micros(value: Any) -> Any:
        if value is None:
            return None
        total = ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000
        return total + value.microsecond

    if 0 <= typmod <= 3:  # io.debezium.time.Time: milliseconds
        return lambda v: None if v is None else micros(v) // 1000
    return micros  # MicroTime


def _timetz(_typmod: int) -> Callable[[Any], Any]:
    """``io.debezium.time.ZonedTime``: the time in UTC, ISO, no trailing zeros in the fraction."""

    def convert(value: Any) -> Any:
        if value is None:
            return None
        offset = value.utcoffset() or dt.timedelta()
        moment = dt.datetime.combine(EPOCH_DATE, value.replace(tzinfo=None)) - offset
        text = moment.strftime("%H:%M:%S")
        if moment.microsecond:
            text += "." + f"{moment.microsecond:06d}".rstrip("0")
        return text + "Z"

    return convert


_INTERVAL = re.compile(
    r"^P(?:(-?\d+)Y)?(?:(-?\d+)M)?(?:(-?\d+)D)?(?:T(?:(-?\d+)H)?(?:(-?\d+)M)?(?:(-?[\d.]+)S)?)?$"
)


def _interval(_typmod: int) -> Callable[[Any], Any]:
    """``io.debezium.time.MicroDuration`` from the ISO 8601 text form (months of 365.25/12 days)."""

    def convert(value: Any) -> Any:
        if value is None:
            return None
        match = _INTERVAL.match(value)
        if match is None:
            raise UnsupportedTypeError(f"interval {value!r} is not in ISO 8601 form")
        years, months, days, hours, minutes = (int(g or 0) for g in match.groups()[:5])
        seconds = float(match.group(6) or 0)
        number_of_days = (years * 12 + months) * DAYS_PER_MONTH + days
        total = (((number_of_days * 24 + hours) * 60) + minutes) * 60 + seconds
        return int(total * 1e6)

    return convert


_CONVERTERS: dict[str, Callable[[int], Callable[[Any], Any]]] = {
    "int2": _as_is,
    "int4": _as_is,
    "int8": _as_is,
    "oid": _as_is,
    "float8": _as_is,
    "float4": _float_text,
    "bool": _as_is,
    "numeric": _numeric,
    "money": _money,
    "date": _date,
    "timestamp": _timestamp,
    "timestamptz": _timestamptz,
    "time": _time,
    "timetz": _timetz,
    "interval": _interval,
    "bytea": _as_is,
    # char(n) as it is: cast to text, PostgreSQL would drop the padding Debezium keeps
    "bpchar": _as_is,
}
