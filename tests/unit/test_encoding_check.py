"""The check of a table's events against the value settings a backfill would write them with."""

from __future__ import annotations

from typing import Any

import fastavro
import orjson
from hypothesis import given
from hypothesis import strategies as st

from processor.snapshot.chunk_events import TableShape
from processor.snapshot.connect_values import Column
from processor.snapshot.encoding_check import (
    avro_decimal_scales,
    avro_fields,
    declared_disagreements,
    json_decimal_scales,
    json_fields,
    value_disagreements,
)
from processor.snapshot.postgres.values import column
from tidemark.core.debezium_settings import CHOICES, ValueSettings

NUMERIC_12_3 = (12 << 16 | 3) + 4
TYPES = [
    ("n", "numeric", NUMERIC_12_3),
    ("nv", "numeric", -1),
    ("m", "money", -1),
    ("d", "date", -1),
    ("tm", "time", -1),
    ("ts3", "timestamp", 3),
    ("ba", "bytea", -1),
    ("iv", "interval", -1),
]


def columns(settings: ValueSettings) -> list[Column]:
    return [column(name, kind, typmod, "", None, settings) for name, kind, typmod in TYPES]


def test_a_json_schema_that_declares_other_modes_is_named_by_its_setting() -> None:
    schema = {
        "type": "struct",
        "fields": [
            {"type": "struct", "field": "before", "fields": []},
            {
                "type": "struct",
                "field": "after",
                "fields": [
                    {"type": "string", "optional": True, "field": "n"},
                    {"type": "bytes", "optional": True, "field": "ba"},
                    {"type": "int32", "name": "io.debezium.time.Date", "field": "d"},
                ],
            },
        ],
    }
    found = declared_disagreements(json_fields(schema), columns(ValueSettings()), ValueSettings())
    assert [(d.column, d.setting) for d in found] == [("n (numeric)", "decimal.handling.mode")]
    assert "set source.debezium.decimal.handling.mode" in str(found[0])
    assert "carry string, but decimal.handling.mode=precise writes bytes" in str(found[0])
    string = ValueSettings.read({"decimal.handling.mode": "string"})
    assert declared_disagreements(json_fields(schema), columns(string), string) == []


def test_avro_field_schemas_are_read_as_connects() -> None:
    value = {
        "type": "record",
        "name": "Envelope",
        "namespace": "t",
        "fields": [
            {
                "name": "before",
                "type": [
                    "null",
                    {
                        "type": "record",
                        "name": "Value",
                        "fields": [
                            {"name": "ba", "type": ["null", "string"]},
                            {
                                "name": "iv",
                                "type": [
                                    "null",
                                    {
                                        "type": "long",
                                        "connect.name": "io.debezium.time.MicroDuration",
                                    },
                                ],
                            },
                        ],
                    },
                ],
            },
            {"name": "after", "type": ["null", "t.Value"]},
        ],
    }
    fields = avro_fields(fastavro.parse_schema(value, {}))
    assert fields == {"ba": ("string", None), "iv": ("int64", "io.debezium.time.MicroDuration")}
    hex_mode = ValueSettings.read({"binary.handling.mode": "hex"})
    assert declared_disagreements(fields, columns(hex_mode), hex_mode) == []
    found = declared_disagreements(fields, columns(ValueSettings()), ValueSettings())
    assert [d.setting for d in found] == ["binary.handling.mode"]


def test_schemaless_values_of_another_shape_disagree() -> None:
    settings = ValueSettings()
    row = {"n": "12.500", "ba": "0aff", "iv": "P0Y0M0DT1H0M0S", "d": 19782}
    found = {d.setting for d in value_disagreements(row, columns(settings), settings)}
    assert found == {"decimal.handling.mode", "interval.handling.mode"}  # 0aff is base64 too
    odd = value_disagreements({"ba": "00ff10"}, columns(settings), settings)
    assert [d.setting for d in odd] == ["binary.handling.mode"]  # base64 comes in fours
    hex_mode = ValueSettings.read({"binary.handling.mode": "hex"})
    assert value_disagreements({"ba": "AP8="}, columns(hex_mode), hex_mode)[0].column == (
        "ba (bytea)"
    )


VALUES: dict[str, Any] = {
    "numeric": st.decimals(min_value=-(10**8), max_value=10**8, places=3),
    "money": st.decimals(min_value=-(10**8), max_value=10**8, places=2),
    "date": st.dates(),
    "time": st.times(),
    "timestamp": st.datetimes(),
    "bytea": st.binary(max_size=20),
    "interval": st.builds(
        lambda d, s, us: f"P{d}DT{s}.{us:06d}S",
        st.integers(-1000, 1000),
        st.integers(0, 86399),
        st.integers(0, 999_999),
    ),
}


@given(
    st.fixed_dictionaries({name: st.sampled_from(values) for name, values in CHOICES.items()}),
    st.integers(0, 6),
    st.data(),
)
def test_what_a_backfill_writes_never_disagrees_with_itself(
    properties: dict[str, str], digits: int, data: st.DataObject
) -> None:
    """A schemaless event encoded under the settings passes their check (no false refusal)."""
    settings = ValueSettings.read({**properties, "money.fraction.digits": str(digits)})
    cols = columns(settings)
    row = {}
    for col in cols:
        raw = data.draw(VALUES[col.type_name])
        if col.type_name == "numeric" and col.name == "nv":
            raw = raw.normalize()
        row[col.name] = col.json(raw) if col.json is not None else col.convert(raw)
    assert value_disagreements(row, cols, settings) == []


def test_nulls_prove_nothing() -> None:
    settings = ValueSettings()
    assert (
        value_disagreements(dict.fromkeys("n ba iv d".split()), columns(settings), settings) == []
    )


def test_a_schemaless_table_is_checked_on_more_events_than_the_one_learned() -> None:
    """Bytes of ``00 ff 10`` read the same in base64 and URL-safe base64; a later event's
    ``+`` shows the connector writes standard base64, not what is configured."""
    source = {"db": "d", "schema": "public", "table": "t", "snapshot": "false"}
    event = {"before": None, "after": {"ba": "AP8Q"}, "source": source, "op": "c"}
    shape = TableShape.learn(b'{"id":1}', orjson.dumps(event), None)
    url_safe = ValueSettings.read({"binary.handling.mode": "base64-url-safe"})
    cols = [column("ba", "bytea", -1, "", None, url_safe)]
    assert shape.disagreements(cols, url_safe) == []
    later = orjson.dumps(dict(event, after={"ba": "+/8Q"}))
    found = shape.disagreements(cols, url_safe, [b"not json", later])
    assert [d.setting for d in found] == ["binary.handling.mode"]


def test_a_decimals_scale_is_read_from_the_events_schema_as_debezium_declares_it() -> None:
    """A ``numeric(12,3)`` column's precision and scale, as a JSON and an Avro event
    declare them, equal the column's own; after ``ALTER ... TYPE numeric(12,4)`` they do
    not (the backfill then builds its event from the catalog)."""
    decimal = {"name": "org.apache.kafka.connect.data.Decimal", "version": 1}
    after = [
        {
            **decimal,
            "type": "bytes",
            "parameters": {"scale": "3", "connect.decimal.precision": "12"},
            "field": "n",
        },
        {**decimal, "type": "bytes", "parameters": {"scale": "2"}, "field": "m"},
        {"type": "string", "field": "s"},
    ]
    json_schema = {
        "type": "struct",
        "fields": [{"field": "after", "type": "struct", "fields": after}],
    }
    avro_decimal = {
        "type": "bytes",
        "scale": 3,
        "precision": 12,
        "connect.version": 1,
        "connect.parameters": {"scale": "3", "connect.decimal.precision": "12"},
        "connect.name": "org.apache.kafka.connect.data.Decimal",
        "logicalType": "decimal",
    }
    avro_schema = {
        "type": "record",
        "name": "Envelope",
        "namespace": "t",
        "fields": [
            {
                "name": "after",
                "type": [
                    "null",
                    {
                        "type": "record",
                        "name": "Value",
                        "fields": [
                            {"name": "n", "type": ["null", avro_decimal]},
                            {"name": "s", "type": ["null", "string"]},
                        ],
                    },
                ],
            }
        ],
    }
    numeric = column("n", "numeric", NUMERIC_12_3, "", None)
    money = column("m", "money", -1, "", None)
    assert json_decimal_scales(json_schema) == {"n": numeric.decimal, "m": money.decimal}
    assert avro_decimal_scales(fastavro.parse_schema(avro_schema, {})) == {"n": numeric.decimal}
    rescaled = column("n", "numeric", (12 << 16 | 4) + 4, "", None)
    assert rescaled.decimal == ("12", "4") != numeric.decimal
    assert column("nv", "numeric", -1, "", None).decimal is None  # variable scale: a struct
