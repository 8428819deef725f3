"""PostgreSQL values as Debezium's PostgreSQL connector encodes them, under its value settings.

Chunk rows of Tidemark's incremental snapshot must be indistinguishable from
Debezium's own events, so each column is converted the way the connector
converts it under the deployment's ``decimal.handling.mode``,
``time.precision.mode``, ``binary.handling.mode``, ``interval.handling.mode``,
``hstore.handling.mode`` (:mod:`processor.snapshot.postgres.hstore`) and
``money.fraction.digits`` (:class:`~tidemark.core.debezium_settings.ValueSettings`,
the connector's defaults unless ``source.debezium`` says otherwise; the Java
they follow is cited in ``docs/reference/compatibility.md``). :func:`column` makes, from
the catalog type, the :class:`~processor.snapshot.connect_values.Column` that says how the
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

import base64
import dataclasses
import datetime as dt
import decimal
import re
from collections.abc import Callable
from typing import Any

from processor.errors import UnsupportedTypeError
from processor.snapshot.connect_values import (
    Column,
    VariableScale,
    base64_text,
    same,
    to_json,
    twos_complement,
)
from processor.snapshot.postgres import hstore
from tidemark.core.debezium_settings import ValueSettings

EPOCH = dt.datetime(1970, 1, 1)  # noqa: DTZ001 - timestamp without time zone
EPOCH_DATE = dt.date(1970, 1, 1)
DAYS_PER_MONTH = 365.25 / 12  # Debezium's average month (interval.handling.mode=numeric)
DEFAULTS = ValueSettings()
#: PostgreSQL's numeric holds up to 131072 digits before the point; never round them.
_EXACT = decimal.Context(prec=200_000, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)

#: Types read as their text form (what the replication stream carries).
_TEXT_TYPES = {
    "text", "varchar", "name", "citext", "uuid", "json", "jsonb", "xml", "inet",
    "cidr", "macaddr", "macaddr8", "tsvector", "tsquery", "ltree", "bit", "varbit",
    "int4range", "int8range", "numrange", "tsrange", "tstzrange", "daterange",
}  # fmt: skip


def column(
    name: str,
    type_name: str,
    typmod: int,
    category: str,
    element: str | None,
    settings: ValueSettings = DEFAULTS,
) -> Column:
    """The :class:`Column` of a catalog type (``typname``, ``atttypmod``, ``typcategory``)
    under the connector's value ``settings``."""
    if category == "A" and element is not None:
        inner = column(name, element, typmod, "", None, settings)
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
    declared = _declared(type_name, typmod, settings)
    if declared is None:
        return _encoded(name, type_name, typmod, settings)
    setting, schema = declared
    decimal = decimal_parameters(type_name, typmod, settings) if schema[1] == _DECIMAL else None
    return dataclasses.replace(
        _encoded(name, type_name, typmod, settings), schema=schema, setting=setting, decimal=decimal
    )


def decimal_parameters(
    type_name: str, typmod: int, settings: ValueSettings
) -> tuple[str | None, str]:
    """The precision and scale Debezium declares for a fixed-scale ``numeric`` or ``money``
    column (Connect's ``Decimal`` parameters, as text; money's precision is not declared)."""
    if type_name == "money":
        return None, str(settings.money_fraction_digits)
    return str((typmod - 4) >> 16), str((typmod - 4) & 0xFFFF)


def _encoded(name: str, type_name: str, typmod: int, settings: ValueSettings) -> Column:
    cast = _READ_AS.get(type_name)
    convert = _CONVERTERS[type_name](typmod, settings)
    precise = settings.decimal_handling_mode == "precise"
    if type_name == "numeric" and typmod >= 4 and precise:
        return Column(name, type_name, cast, convert, _fixed_decimal_json((typmod - 4) & 0xFFFF))
    if type_name == "money" and precise:
        return Column(
            name, type_name, cast, convert, _fixed_decimal_json(settings.money_fraction_digits)
        )
    return _with_json(Column(name, type_name, cast, convert))


_DECIMAL = "org.apache.kafka.connect.data.Decimal"


def _declared(
    type_name: str, typmod: int, settings: ValueSettings
) -> tuple[str, tuple[str, str | None]] | None:
    """The setting that decides the Connect schema of a ``type_name`` column, and that
    schema (``PostgresValueConverter.schemaBuilder``); ``None`` for a type no setting moves."""
    if type_name in ("numeric", "money"):
        mode = settings.decimal_handling_mode
        if mode == "double":
            return "decimal.handling.mode", ("double", None)
        if mode == "string":
            return "decimal.handling.mode", ("string", None)
        if type_name == "numeric" and typmod < 4:
            return "decimal.handling.mode", ("struct", "io.debezium.data.VariableScaleDecimal")
        return "decimal.handling.mode", ("bytes", _DECIMAL)
    if type_name in ("date", "time", "timestamp"):
        return "time.precision.mode", _temporal(type_name, typmod, settings.time_precision_mode)
    if type_name == "bytea":
        kind = "bytes" if settings.binary_handling_mode == "bytes" else "string"
        return "binary.handling.mode", (kind, None)
    if type_name == "hstore":
        if settings.hstore_handling_mode == "map":
            return "hstore.handling.mode", ("map", None)
        return "hstore.handling.mode", ("string", "io.debezium.data.Json")
    if type_name == "interval":
        if settings.interval_handling_mode == "string":
            return "interval.handling.mode", ("string", "io.debezium.time.Interval")
        return "interval.handling.mode", ("int64", "io.debezium.time.MicroDuration")
    return None


def declared_schema(
    type_name: str, typmod: int, settings: ValueSettings
) -> tuple[str, str | None] | None:
    """The Connect schema (type, logical name) of a column whose schema a setting decides."""
    declared = _declared(type_name, typmod, settings)
    return None if declared is None else declared[1]


def _temporal(type_name: str, typmod: int, mode: str) -> tuple[str, str | None]:
    """``TemporalPrecisionMode``'s schema of a ``date``, ``time`` or ``timestamp`` column."""
    if mode == "isostring":
        return "string", {
            "date": "io.debezium.time.IsoDate",
            "time": "io.debezium.time.IsoTime",
        }.get(type_name, "io.debezium.time.IsoTimestamp")
    if mode == "connect":
        kind = {"date": "int32", "time": "int32"}.get(type_name, "int64")
        return kind, "org.apache.kafka.connect.data." + type_name.capitalize()
    if type_name == "date":
        return "int32", "io.debezium.time.Date"
    millis = 0 <= typmod <= 3
    if type_name == "time":
        if millis and mode == "adaptive":
            return "int32", "io.debezium.time.Time"
        return "int64", "io.debezium.time.MicroTime"
    return "int64", "io.debezium.time.Timestamp" if millis else "io.debezium.time.MicroTimestamp"


#: Types read other than as themselves: their text form (timestamptz's in UTC, as
#: :func:`processor.snapshot.chunk_reader.PostgresChunkReader.read_chunk` sets it), or a cast.
_READ_AS = {
    "interval": "text",
    "float4": "text",
    "timestamptz": "text",
    "money": "numeric",
    "hstore": "text",
}


def _with_json(col: Column) -> Column:
    """``col`` with its JSON form: its conversion, composed with :func:`to_json` where the
    Connect value may hold bytes or decimals (``bytea``, ``numeric``, ``money``)."""
    convert = col.convert
    if col.type_name in ("bytea", "numeric", "money"):
        return Column(col.name, col.type_name, col.cast, convert, lambda v: to_json(convert(v)))
    return col if convert is same else Column(col.name, col.type_name, col.cast, convert, convert)


def _fixed_decimal_json(scale: int) -> Callable[[Any], Any]:
    """A ``Decimal`` at ``scale`` straight to the JSON converter's form (base64 unscaled)."""
    exponent = decimal.Decimal(1).scaleb(-scale)

    def encode(value: Any) -> Any:
        if value is None:
            return None
        if not value.is_finite():
            raise UnsupportedTypeError(
                f"numeric {value} has no encoding under decimal.handling.mode=precise"
            )
        unscaled = int(
            value.quantize(exponent, decimal.ROUND_HALF_UP, _EXACT).scaleb(scale, context=_EXACT)
        )
        return base64_text(twos_complement(unscaled))

    return encode


def _array(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda v: None if v is None else [convert(x) for x in v]


def _as_is(_typmod: int, _settings: ValueSettings) -> Callable[[Any], Any]:
    return same


def _float_text(_typmod: int, _settings: ValueSettings) -> Callable[[Any], Any]:
    """``real`` is read as PostgreSQL's shortest text, as Java prints a ``float``."""
    return lambda v: None if v is None else float(v)


#: ``decimal.handling.mode=string``: the names Java gives numeric's special values.
_SPECIAL_DECIMALS = {
    "NaN": "NAN",
    "Infinity": "POSITIVE_INFINITY",
    "-Infinity": "NEGATIVE_INFINITY",
}


def _numeric(typmod: int, settings: ValueSettings) -> Callable[[Any], Any]:
    """``decimal.handling.mode``: ``precise`` a ``Decimal`` at the column's scale (a
    ``VariableScaleDecimal`` without one), ``double`` Java's ``doubleValue()``, ``string``
    ``toPlainString()`` (at the column's scale; PostgreSQL's own digits without one)."""
    mode = settings.decimal_handling_mode
    exponent = decimal.Decimal(1).scaleb(-((typmod - 4) & 0xFFFF)) if typmod >= 4 else None

    def at_scale(value: decimal.Decimal) -> decimal.Decimal:
        if not value.is_finite():
            if mode == "string":
                return value
            # precise: Debezium's connector stops on it; double: no JSON number holds it
            raise UnsupportedTypeError(
                f"numeric {value} has no encoding under decimal.handling.mode={mode}"
            )
        if exponent is None:
            return value
        return value.quantize(exponent, decimal.ROUND_HALF_UP, _EXACT)

    if mode == "double":
        return lambda v: None if v is None else float(at_scale(v))
    if mode == "string":
        return lambda v: None if v is None else _plain(at_scale(v))
    if exponent is not None:
        return lambda v: None if v is None else at_scale(v)
    return lambda v: None if v is None else _variable_scale(at_scale(v))


def _plain(value: decimal.Decimal) -> str:
    """Java's ``BigDecimal.toPlainString()``, and the special values' names."""
    return _SPECIAL_DECIMALS.get(str(value)) or format(value, "f")


def _money(_typmod: int, settings: ValueSettings) -> Callable[[Any], Any]:
    """``money`` is read as ``numeric`` (its text follows lc_monetary). ``precise``: a Decimal
    at ``money.fraction.digits`` (half up); ``double`` and ``string`` ignore those digits."""
    mode = settings.decimal_handling_mode
    if mode == "double":
        return lambda v: None if v is None else float(v)
    if mode == "string":
        return lambda v: None if v is None else format(v, "f")
    exponent = decimal.Decimal(1).scaleb(-settings.money_fraction_digits)
    return lambda v: None if v is None else v.quantize(exponent, decimal.ROUND_HALF_UP, _EXACT)


def _variable_scale(value: Any) -> Any:
    """Debezium's ``VariableScaleDecimal``: the value without trailing zeros, and its scale."""
    if value is None:
        return None
    normalized = value.normalize(context=_EXACT)
    if normalized.as_tuple().exponent > 0:  # Java keeps a non-negative scale: 100, not 1E+2
        normalized = normalized.quantize(decimal.Decimal(1), context=_EXACT)
    sign, digits, exponent = normalized.as_tuple()
    unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
    return VariableScale(-int(exponent), unscaled)


def _date(_typmod: int, settings: ValueSettings) -> Callable[[Any], Any]:
    """Days since the epoch (``io.debezium.time.Date`` or Kafka's ``Date``), or ``IsoDate``."""
    if settings.time_precision_mode == "isostring":
        return lambda v: None if v is None else v.isoformat() + "Z"
    return lambda v: None if v is None else (v - EPOCH_DATE).days


def _timestamp(typmod: int, settings: ValueSettings) -> Callable[[Any], Any]:
    """Epoch milliseconds (``Timestamp``, Kafka's ``Timestamp``: floored), microseconds
    (``MicroTimestamp``) or ``IsoTimestamp`` text; the wall clock taken as UTC."""
    mode = settings.time_precision_mode
    if mode == "isostring":
        return lambda v: None if v is None else _iso_time_of(v.isoformat()) + "Z"
    if mode == "connect" or 0 <= typmod <= 3:
        return lambda v: None if v is None else _micros(v) // 1000
    return lambda v: None if v is None else _micros(v)


def _iso_time_of(text: str) -> str:
    """Python's ISO text (fraction of 0 or 6 digits) as Java's ``ISO_LOCAL_*``: a fraction
    without trailing zeros, none at all when it is zero."""
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _micros(value: dt.datetime) -> int:
    delta = value.replace(tzinfo=None) - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _timestamptz(typmod: int, _settings: ValueSettings) -> Callable[[Any], Any]:
    """``io.debezium.time.ZonedTimestamp`` under every ``time.precision.mode``: UTC, ISO,
    the column's digits of fraction.

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


def _time(typmod: int, settings: ValueSettings) -> Callable[[Any], Any]:
    """Milliseconds (``Time``, Kafka's ``Time``: truncated) or microseconds (``MicroTime``)
    past midnight, or ``IsoTime`` text."""

    def micros(value: Any) -> Any:
        if value is None:
            return None
        total = ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000
        return total + value.microsecond

    mode = settings.time_precision_mode
    if mode == "isostring":
        return lambda v: None if v is None else _iso_time_of(v.isoformat()) + "Z"
    if mode == "connect" or (mode == "adaptive" and 0 <= typmod <= 3):
        return lambda v: None if v is None else micros(v) // 1000
    return micros


def _timetz(_typmod: int, _settings: ValueSettings) -> Callable[[Any], Any]:
    """``io.debezium.time.ZonedTime`` under every ``time.precision.mode``: the time in UTC,
    ISO, no trailing zeros in the fraction."""

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


def _interval(_typmod: int, settings: ValueSettings) -> Callable[[Any], Any]:
    """From PostgreSQL's ISO 8601 text, as pgjdbc's ``PGInterval`` gives it to Debezium:
    ``io.debezium.time.MicroDuration`` (months of 365.25/12 days) or, under
    ``interval.handling.mode=string``, ``io.debezium.time.Interval`` (``PnYnMnDTnHnMnS``,
    each part with its own sign)."""
    string = settings.interval_handling_mode == "string"

    def convert(value: Any) -> Any:
        if value is None:
            return None
        match = _INTERVAL.match(value)
        if match is None:
            raise UnsupportedTypeError(f"interval {value!r} is not in ISO 8601 form")
        years, months, days, hours, minutes = (int(g or 0) for g in match.groups()[:5])
        seconds = _pg_interval_seconds(match.group(6) or "0")
        if string:
            return f"P{years}Y{months}M{days}DT{hours}H{minutes}M{_java_seconds(seconds)}S"
        number_of_days = (years * 12 + months) * DAYS_PER_MONTH + days
        total = (((number_of_days * 24 + hours) * 60) + minutes) * 60 + seconds
        return int(total * 1e6)

    return convert


def _pg_interval_seconds(text: str) -> float:
    """``PGInterval.getSeconds()``: whole seconds plus microseconds / 1e6, in a double."""
    whole, _, fraction = text.partition(".")
    micros = int((fraction + "000000")[:6])
    sign = -1 if whole.startswith("-") else 1
    return int(whole) + sign * micros / 1_000_000


def _java_seconds(seconds: float) -> str:
    """``BigDecimal.valueOf(seconds)`` at most 9 decimals (rounded down), without trailing
    zeros, as plain text (``Interval.toIsoString``)."""
    exact = decimal.Decimal(repr(seconds))
    if -exact.as_tuple().exponent > 9:  # type: ignore[operator]
        exact = exact.quantize(decimal.Decimal("1e-9"), decimal.ROUND_DOWN)
    return format(exact.normalize(), "f")


def _bytea(_typmod: int, settings: ValueSettings) -> Callable[[Any], Any]:
    """``binary.handling.mode``: the bytes, or text in base64 (padded), URL-safe base64
    (padded) or lowercase hex."""
    mode = settings.binary_handling_mode
    if mode == "base64":
        return lambda v: None if v is None else base64_text(bytes(v))
    if mode == "base64-url-safe":
        return lambda v: None if v is None else base64.urlsafe_b64encode(bytes(v)).decode()
    if mode == "hex":
        return lambda v: None if v is None else bytes(v).hex()
    return same


_CONVERTERS: dict[str, Callable[[int, ValueSettings], Callable[[Any], Any]]] = {
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
    "bytea": _bytea,
    "hstore": lambda _typmod, settings: hstore.converter(settings.hstore_handling_mode),
    # char(n) as it is: cast to text, PostgreSQL would drop the padding Debezium keeps
    "bpchar": _as_is,
}
