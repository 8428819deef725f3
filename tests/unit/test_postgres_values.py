"""Debezium's encodings of PostgreSQL values (pure parts; the integration tests compare with
Debezium's own events for every type)."""

from __future__ import annotations

import base64
import datetime as dt
import decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.errors import UnsupportedTypeError
from processor.snapshot.connect_values import VariableScale, to_avro, to_json
from processor.snapshot.postgres.values import column
from tidemark.core.debezium_settings import ValueSettings
from tidemark.core.errors import ConfigError


def convert(type_name: str, value: object, typmod: int = -1) -> object:
    return column("c", type_name, typmod, "", None).convert(value)


@given(st.integers(-(2**200), 2**200))
def test_decimals_are_javas_big_integer_bytes(unscaled: int) -> None:
    value = decimal.Decimal(f"{unscaled}E-3")  # exact, whatever the digits
    raw = base64.b64decode(to_json(convert("numeric", value, (12 << 16 | 3) + 4)))
    assert int.from_bytes(raw, "big", signed=True) == unscaled
    # the fewest bytes that keep the sign, as BigInteger.toByteArray()
    assert len(raw) == 1 or raw[:2] not in (b"\x00\x00", b"\xff\xff")
    assert len(raw) == 1 or not (raw[0] == 0 and raw[1] < 0x80)
    assert len(raw) == 1 or not (raw[0] == 0xFF and raw[1] >= 0x80)


@given(st.integers(-(2**200), 2**200), st.integers(0, 12), st.integers(-3, 3))
def test_a_fixed_scale_decimal_goes_to_json_in_one_step_as_in_two(
    unscaled: int, scale: int, shift: int
) -> None:
    value = decimal.Decimal(f"{unscaled}E{-scale - shift}")  # at, above or below the scale
    col = column("c", "numeric", (40 << 16 | scale) + 4, "", None)
    assert col.json is not None
    assert col.json(value) == to_json(col.convert(value))
    money = column("m", "money", -1, "", None)
    assert money.json is not None
    assert money.json(value) == to_json(money.convert(value))


def test_columns_whose_values_are_their_own_json_have_no_converter() -> None:
    assert column("i", "int8", -1, "", None).json is None
    assert column("t", "text", -1, "S", None).json is None
    ba = column("b", "bytea", -1, "", None).json
    assert ba is not None and ba(b"\x00\xff") == "AP8="
    arr = column("a", "_bytea", -1, "A", "bytea").json
    assert arr is not None and arr([b"\x01", None]) == ["AQ==", None]


def test_variable_scale_decimals_drop_trailing_zeros_but_keep_a_scale_of_zero() -> None:
    assert convert("numeric", decimal.Decimal("1.10")) == VariableScale(1, 11)
    assert convert("numeric", decimal.Decimal("100")) == VariableScale(0, 100)
    assert convert("numeric", decimal.Decimal("0.000")) == VariableScale(0, 0)
    assert to_json(VariableScale(1, 11)) == {"scale": 1, "value": "Cw=="}
    assert to_avro(VariableScale(1, 11)) == {"scale": 1, "value": b"\x0b"}


def test_times() -> None:
    moment = dt.datetime(2026, 1, 1, 10, 0, 0, 120000, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert convert("timestamptz", moment) == "2026-01-01T08:00:00.120000Z"
    assert convert("timestamptz", moment, 3) == "2026-01-01T08:00:00.120Z"
    # scalars come as PostgreSQL's text in UTC: the same form, without a datetime
    assert convert("timestamptz", "2026-01-01 08:00:00.12+00") == "2026-01-01T08:00:00.120000Z"
    assert convert("timestamptz", "2026-01-01 08:00:00+00") == "2026-01-01T08:00:00.000000Z"
    assert convert("timestamptz", "2026-01-01 08:00:00.123+00", 3) == "2026-01-01T08:00:00.123Z"
    assert convert("timestamptz", "0999-01-01 08:00:01+00", 0) == "0999-01-01T08:00:01Z"
    for outside in ("infinity", "2026-01-01 08:00:00+00 BC", "12026-01-01 08:00:00+00"):
        with pytest.raises(UnsupportedTypeError, match="outside years"):
            convert("timestamptz", outside)
    naive = dt.datetime(1969, 12, 31, 23, 59, 59, 500000)  # noqa: DTZ001
    assert convert("timestamp", naive) == -500_000
    assert convert("timestamp", naive, 3) == -500
    assert convert("date", dt.date(2024, 2, 29)) == 19782
    assert convert("time", dt.time(13, 14, 15, 500000)) == 47_655_500_000
    zoned = dt.time(1, 2, 3, 250000, tzinfo=dt.timezone(-dt.timedelta(hours=5)))
    assert convert("timetz", zoned) == "06:02:03.25Z"


def test_intervals_use_debeziums_average_month() -> None:
    assert convert("interval", "P1Y2M3DT4H5M6.7S") == 37_091_106_700_000
    assert convert("interval", "P-1DT2H") == -79_200_000_000


def test_enums_and_text_types_are_read_as_text_and_arrays_convert_elements() -> None:
    assert column("m", "mood", -1, "E", None).cast == "text"
    assert column("j", "jsonb", -1, "U", None).cast == "text"
    assert column("c", "bpchar", 7, "S", None).cast is None  # the padding stays
    dates = column("a", "_date", -1, "A", "date")
    assert dates.convert([dt.date(1970, 1, 2), None]) == [1, None]


@pytest.mark.parametrize("type_name", ["point", "polygon", "pg_lsn"])
def test_unknown_types_are_refused(type_name: str) -> None:
    with pytest.raises(Exception, match=type_name):
        column("c", type_name, -1, "G", None)


def under(setting: str, value: str, type_name: str, raw: object, typmod: int = -1) -> object:
    settings = ValueSettings.read({setting: value})
    return column("c", type_name, typmod, "", None, settings).convert(raw)


def json_under(setting: str, value: str, type_name: str, raw: object, typmod: int = -1) -> object:
    col = column("c", type_name, typmod, "", None, ValueSettings.read({setting: value}))
    return col.convert(raw) if col.json is None else col.json(raw)


NUMERIC_6_4 = (6 << 16 | 4) + 4


def test_decimal_handling_modes() -> None:
    d = decimal.Decimal
    mode = "decimal.handling.mode"
    assert under(mode, "string", "numeric", d("22.22"), NUMERIC_6_4) == "22.2200"
    assert under(mode, "string", "numeric", d("1.500")) == "1.500"  # PostgreSQL's digits
    assert under(mode, "string", "numeric", d("1E+3")) == "1000"  # never an exponent
    assert under(mode, "string", "numeric", d("NaN")) == "NAN"
    assert under(mode, "string", "numeric", d("-Infinity")) == "NEGATIVE_INFINITY"
    assert under(mode, "double", "numeric", d("22.22"), NUMERIC_6_4) == 22.22
    assert under(mode, "double", "numeric", d("12345678901234567890")) == 1.2345678901234567e19
    for mode_value in ("double", "precise"):
        with pytest.raises(UnsupportedTypeError, match=f"decimal.handling.mode={mode_value}"):
            json_under(mode, mode_value, "numeric", d("NaN"), NUMERIC_6_4)
    assert json_under(mode, "string", "money", d("1234.11")) == "1234.11"
    assert json_under(mode, "double", "money", d("1234.11")) == 1234.11


def test_money_fraction_digits_set_the_precise_scale_rounding_half_up() -> None:
    four = column("m", "money", -1, "", None, ValueSettings.read({"money.fraction.digits": "4"}))
    assert four.convert(decimal.Decimal("1234.11")) == decimal.Decimal("1234.1100")
    assert four.json is not None
    assert base64.b64decode(four.json(decimal.Decimal("1234.11"))) == (12341100).to_bytes(4, "big")
    none = column("m", "money", -1, "", None, ValueSettings.read({"money.fraction.digits": "0"}))
    assert none.convert(decimal.Decimal("2.50")) == decimal.Decimal("3")  # half up, not even


def test_time_precision_modes() -> None:
    mode = "time.precision.mode"
    naive = dt.datetime(1969, 12, 31, 23, 59, 59, 999999)  # noqa: DTZ001
    assert under(mode, "connect", "timestamp", naive) == -1  # floored to milliseconds
    assert under(mode, "adaptive_time_microseconds", "timestamp", naive, 3) == -1
    assert under(mode, "isostring", "timestamp", naive) == "1969-12-31T23:59:59.999999Z"
    whole = dt.datetime(2019, 7, 9, 2, 28, 57)  # noqa: DTZ001
    assert under(mode, "isostring", "timestamp", whole) == "2019-07-09T02:28:57Z"
    tenth = dt.datetime(2019, 7, 9, 2, 28, 57, 100000)  # noqa: DTZ001
    assert under(mode, "isostring", "timestamp", tenth) == "2019-07-09T02:28:57.1Z"
    assert under(mode, "isostring", "date", dt.date(2017, 9, 15)) == "2017-09-15Z"
    assert under(mode, "connect", "date", dt.date(2024, 2, 29)) == 19782
    clock = dt.time(13, 51, 30, 123999)
    assert under(mode, "connect", "time", clock) == 49_890_123  # truncated
    assert under(mode, "adaptive_time_microseconds", "time", clock, 3) == 49_890_123_999
    assert under(mode, "adaptive", "time", clock, 3) == 49_890_123
    assert under(mode, "isostring", "time", dt.time(12, 5, 11)) == "12:05:11Z"
    assert under(mode, "isostring", "time", dt.time(13, 51, 30, 500000)) == "13:51:30.5Z"
    zoned = "2026-01-01 08:00:00.12+00"  # timestamptz keeps ZonedTimestamp in every mode
    assert under(mode, "isostring", "timestamptz", zoned) == "2026-01-01T08:00:00.120000Z"


def test_binary_handling_modes() -> None:
    raw = b"\x01\x02\x03\xfb\xff"
    mode = "binary.handling.mode"
    assert json_under(mode, "bytes", "bytea", raw) == "AQID+/8="
    assert json_under(mode, "base64", "bytea", raw) == "AQID+/8="
    assert json_under(mode, "base64-url-safe", "bytea", raw) == "AQID-_8="
    assert json_under(mode, "hex", "bytea", raw) == "010203fbff"
    assert under(mode, "bytes", "bytea", raw) == raw  # Avro writes the bytes themselves
    assert under(mode, "hex", "bytea", memoryview(raw)) == "010203fbff"


@pytest.mark.parametrize(
    ("iso", "text", "micros"),
    [
        ("P1Y2M3DT4H5M6.78S", "P1Y2M3DT4H5M6.78S", 37_091_106_780_000),
        ("P-1Y-2M3DT-4H-5M-6.78S", "P-1Y-2M3DT-4H-5M-6.78S", -36_572_706_780_000),
        ("PT0S", "P0Y0M0DT0H0M0S", 0),
        ("PT0.000001S", "P0Y0M0DT0H0M0.000001S", 1),
        ("PT100H", "P0Y0M0DT100H0M0S", 360_000_000_000),
        ("P1DT-0.5S", "P0Y0M1DT0H0M-0.5S", 86_399_500_000),
        ("PT1.003691S", "P0Y0M0DT0H0M1.003690999S", 1_003_690),
    ],
)
def test_interval_handling_modes(iso: str, text: str, micros: int) -> None:
    assert under("interval.handling.mode", "string", "interval", iso) == text
    assert under("interval.handling.mode", "numeric", "interval", iso) == micros


def test_settings_are_checked_by_their_connector_names() -> None:
    with pytest.raises(ConfigError, match="'strings' is not one of precise, double, string"):
        ValueSettings.read({"decimal.handling.mode": "strings"})
    with pytest.raises(ConfigError, match="unknown setting 'decimal.mode'"):
        ValueSettings.read({"decimal.mode": "string"})
    with pytest.raises(ConfigError, match="expected a whole number"):
        ValueSettings.read({"money.fraction.digits": "-1"})
    placeholder = "unavailable.value.placeholder"
    with pytest.raises(ConfigError, match="only the connector's default"):
        ValueSettings.read({placeholder: "<toast>"})
    assert ValueSettings.read({placeholder: "__debezium_unavailable_value"}) == ValueSettings()
    properties = ValueSettings.read({"binary.handling.mode": "hex"}).properties()
    assert properties["binary.handling.mode"] == "hex"
    assert properties["decimal.handling.mode"] == "precise"  # the connector's default, said
