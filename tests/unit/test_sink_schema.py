"""The sink's type mapping and schema evolution rules (pure functions, no Spark)."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_sink.errors import SchemaError
from spark_sink.schema import (
    Spec,
    column_from_connect,
    columns_from_avro,
    evolve,
    specs_from_values,
    union,
    widens,
)
from tests.unit.probe import SCHEMAS


def test_debezium_avro_schema_maps_like_its_connect_schema() -> None:
    columns = {c.name: c for c in columns_from_avro(SCHEMAS["value"])}
    assert {n: c.sql_type for n, c in columns.items()} == {
        "id": "int",
        "name": "string",
        "amount": "decimal(10,2)",
        "at": "timestamp",
        "u": "string",
        "j": "string",
        "d": "date",
    }
    # Avro gives a decimal as a Decimal (logical type) and a date as days; JSON as base64 text
    assert columns["amount"].convert(decimal.Decimal("1.25")) == decimal.Decimal("1.25")
    assert columns["amount"].convert(base64.b64encode(b"\x7d").decode()) == decimal.Decimal("1.25")
    assert columns["d"].convert(20780) == dt.date(2026, 11, 23)
    assert columns["at"].convert("2026-11-23T04:58:38.190775Z") == dt.datetime(
        2026, 11, 23, 4, 58, 38, 190775, tzinfo=dt.UTC
    )


def test_variable_scale_decimals_keep_every_digit_as_text() -> None:
    column = column_from_connect(
        {"field": "n", "type": "struct", "name": "io.debezium.data.VariableScaleDecimal"}
    )
    unscaled = (-123456789012345678901234567890).to_bytes(13, "big", signed=True)
    value = {"scale": 5, "value": base64.b64encode(unscaled).decode()}
    assert column.sql_type == "string"
    assert column.convert(value) == "-1234567890123456789012345.67890"


def test_schemaless_values_infer_types_and_nulls_infer_nothing() -> None:
    assert specs_from_values({"id": 1, "r": 0.5, "ok": True, "doc": {"a": 1}, "gone": None}) == [
        Spec("id", "bigint"),
        Spec("r", "double"),
        Spec("ok", "boolean"),
        Spec("doc", "string"),
    ]


def test_a_new_column_is_added_and_a_dropped_one_kept() -> None:
    table = [Spec("id", "int"), Spec("name", "string"), Spec("old", "string")]
    change = evolve(
        table, [Spec("id", "int"), Spec("name", "string"), Spec("email", "string")], "t"
    )
    assert change.add == [Spec("email", "string")]
    assert change.widen == []
    assert change.columns == table + [Spec("email", "string")]


def test_types_widen_as_iceberg_allows_and_never_narrow() -> None:
    table = [Spec("id", "int"), Spec("r", "float"), Spec("amount", "decimal(10,2)")]
    change = evolve(
        table, [Spec("id", "bigint"), Spec("r", "double"), Spec("amount", "decimal(12,2)")], "t"
    )
    assert change.widen == [
        Spec("id", "bigint"),
        Spec("r", "double"),
        Spec("amount", "decimal(12,2)"),
    ]
    # older events of a narrower type fit the wider column as it is
    assert evolve(change.columns, [Spec("id", "int")], "t").widen == []


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("string", "int"),
        ("int", "string"),
        ("decimal(10,2)", "decimal(10,3)"),
        ("bigint", "double"),
    ],
)
def test_an_incompatible_change_stops_the_table_with_the_column_named(old: str, new: str) -> None:
    with pytest.raises(SchemaError, match=re.escape(f"column c changed from {old} to {new}")):
        evolve([Spec("id", "int"), Spec("c", old)], [Spec("c", new)], "topic")


def test_one_batch_with_two_schemas_plans_the_wider_type() -> None:
    assert union([Spec("a", "int"), Spec("b", "string"), Spec("a", "bigint")], "t") == [
        Spec("a", "bigint"),
        Spec("b", "string"),
    ]
    with pytest.raises(SchemaError, match="both string and int"):
        union([Spec("a", "string"), Spec("a", "int")], "t")


TYPES = st.sampled_from(
    ["int", "bigint", "float", "double", "string", "decimal(10,2)", "decimal(12,2)", "date"]
)
SPECS = st.lists(st.tuples(st.sampled_from("abcdef"), TYPES), max_size=6).map(
    lambda pairs: list({n: Spec(n, t) for n, t in pairs}.values())
)


@given(SPECS, SPECS)
def test_evolution_keeps_the_table_and_fits_every_event(
    table: list[Spec], batch: list[Spec]
) -> None:
    try:
        change = evolve(table, batch, "t")
    except SchemaError:
        assert any(
            not widens(t, b) and not widens(b, t) for n, b in batch for m, t in table if n == m
        )
        return
    result = dict(change.columns)
    assert [s.name for s in change.columns[: len(table)]] == [s.name for s in table]
    for name, sql_type in batch:
        assert widens(sql_type, result[name])
    for name, sql_type in table:
        assert widens(sql_type, result[name])
