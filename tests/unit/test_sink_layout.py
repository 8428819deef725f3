"""Table layouts: parsed from the configuration, checked against columns, and the change
that brings a table's layout to the configured one."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_sink.errors import SchemaError
from spark_sink.layout import (
    BUILT_IN,
    LAYOUT_PROPERTY,
    Layout,
    PartitionField,
    SortField,
    check_all,
    check_columns,
    layout_change,
    parse_partition,
    parse_sort,
    recorded,
    resolve,
)
from tidemark.core.config import SinkConfig, TableLayout, load_config
from tidemark.core.errors import ConfigError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("id", PartitionField("identity", "id")),
        ("bucket(16, id)", PartitionField("bucket", "id", 16)),
        ("truncate(4,name)", PartitionField("truncate", "name", 4)),
        ("day(created_at)", PartitionField("day", "created_at")),
        ("days(created_at)", PartitionField("day", "created_at")),
        ("hours(ts)", PartitionField("hour", "ts")),
        ("month(ts)", PartitionField("month", "ts")),
        ("years(ts)", PartitionField("year", "ts")),
    ],
)
def test_partition_fields_are_read_in_iceberg_s_names(text: str, field: PartitionField) -> None:
    assert parse_partition(text) == field
    assert parse_partition(field.text()) == field


@pytest.mark.parametrize(
    "text",
    ["bucket(id)", "bucket(0, id)", "day(3, ts)", "zorder(id)", "id; DROP TABLE x", "a.b", ""],
)
def test_a_malformed_partition_field_is_refused_with_the_forms_it_may_take(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_partition(text)


def test_sort_fields_take_iceberg_s_null_order_unless_told() -> None:
    assert parse_sort("id") == SortField("id", False, True)
    assert parse_sort("ts DESC") == SortField("ts", True, False)
    assert parse_sort("ts desc nulls first") == SortField("ts", True, True)
    assert parse_sort("id asc nulls last") == SortField("id", False, False)
    with pytest.raises(ConfigError):
        parse_sort("id sideways")


def test_a_table_s_entry_overrides_the_global_layout_part_by_part() -> None:
    sink = SinkConfig(
        layout=TableLayout(
            partition_by=["bucket(8, id)"],
            sort_by=["id"],
            properties={"write.parquet.compression-codec": "zstd", "a": "1"},
        ),
        tables={
            "public.events": TableLayout(
                partition_by=["day(ts)"], properties={"a": "2"}, format_version=3
            )
        },
    )
    events = resolve(sink, "public.events")
    assert events.partition_by == (PartitionField("day", "ts"),)
    assert events.sort_by == (SortField("id"),)  # from sink.layout
    assert events.properties == {"write.parquet.compression-codec": "zstd", "a": "2"}
    assert events.format_version == 3
    other = resolve(sink, "public.other")
    assert other.partition_by == (PartitionField("bucket", "id", 8),)
    assert other.format_version == 2
    assert resolve(SinkConfig(), "public.t") == BUILT_IN


def test_an_empty_list_of_a_table_unpartitions_it_under_a_partitioned_default() -> None:
    sink = SinkConfig(
        layout=TableLayout(partition_by=["bucket(8, id)"]),
        tables={"public.small": TableLayout(partition_by=[])},
    )
    assert resolve(sink, "public.small").partition_by == ()


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        (TableLayout(format_version=1), "format_version: 2 or 3"),
        (TableLayout(properties={"format-version": "3"}), "use format_version"),
        (TableLayout(properties={"tidemark.offsets": "{}"}), "Tidemark's to set"),
        (TableLayout(partition_by=["id", "id"]), "each transform once"),
        (TableLayout(partition_by=["day(ts)", "hour(ts)"]), "one time transform"),
        (TableLayout(partition_by=["bucket(4, id)", "bucket(8, id)"]), "each transform once"),
        (TableLayout(properties={"location": "/elsewhere"}), "Tidemark's to set"),
        (TableLayout(properties={"write.merge.mode": "merge_on_read"}), "not 'merge_on_read'"),
        (TableLayout(properties={"write.distribution-mode": "any"}), "none, hash, range"),
        (TableLayout(sort_by=["id", "id desc"]), "named twice"),
        (TableLayout(partition_by=["bucket(x)"]), "sink.tables.public.t.partition_by"),
    ],
)
def test_a_layout_the_sink_cannot_apply_is_refused_before_it_starts(
    layout: TableLayout, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        check_all(SinkConfig(tables={"public.t": layout}))


def test_the_global_layout_is_checked_too_and_table_names_must_be_schema_dot_table() -> None:
    with pytest.raises(ConfigError, match="sink.layout.format_version: 2 or 3, not 0"):
        check_all(SinkConfig(layout=TableLayout(format_version=0)))
    with pytest.raises(ConfigError, match="'orders' is not a table name"):
        check_all(SinkConfig(tables={"orders": TableLayout()}))
    check_all(
        SinkConfig(tables={"public.orders": TableLayout(partition_by=["bucket(4, id)", "id"])})
    )


def test_layouts_load_from_the_configuration_file(tmp_path: object) -> None:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    file = tmp_path / "tidemark.yaml"
    file.write_text(
        "sink:\n"
        "  layout: {sort_by: [id], format_version: 3}\n"
        "  tables:\n"
        "    public.orders: {partition_by: ['day(created_at)', 'bucket(16, id)']}\n"
    )
    sink = load_config(file, environ={}).sink
    assert sink.layout == TableLayout(sort_by=["id"], format_version=3)
    assert sink.tables["public.orders"].partition_by == ["day(created_at)", "bucket(16, id)"]
    assert sink.tables["public.orders"].format_version is None
    file.write_text("sink:\n  tables:\n    public.orders: {partition: [id]}\n")
    with pytest.raises(ConfigError, match="sink.tables.public.orders: unknown key 'partition'"):
        load_config(file, environ={})


def test_fields_must_name_columns_of_a_type_their_transform_takes() -> None:
    columns = {"id": "bigint", "ts": "timestamp", "d": "date", "x": "double", "n": "decimal(10,2)"}
    fine = Layout(
        (parse_partition("bucket(4, n)"), parse_partition("day(d)"), parse_partition("x")),
        (parse_sort("ts desc"),),
    )
    check_columns(fine, columns, "lake.s.t")
    for field, problem in (("hour(d)", "does not take a date"), ("bucket(4, x)", "double")):
        with pytest.raises(SchemaError, match=problem):
            check_columns(Layout((parse_partition(field),)), columns, "lake.s.t")
    with pytest.raises(SchemaError, match="no such column"):
        check_columns(Layout((parse_partition("missing"),)), columns, "lake.s.t")
    with pytest.raises(SchemaError, match="sort field 'gone asc nulls first': no such column"):
        check_columns(Layout(sort_by=(parse_sort("gone"),)), columns, "lake.s.t")


def test_the_record_reads_back_as_the_layout_it_records() -> None:
    layout = Layout(
        (parse_partition("bucket(16, id)"), parse_partition("day(ts)")),
        (parse_sort("ts desc"),),
        {"b": "2", "a": "1"},
        3,
    )
    assert recorded({LAYOUT_PROPERTY: layout.record()}, "t") == layout
    assert recorded({}, "t") == BUILT_IN
    for text in ("{", '{"partition_by": ["zorder(id)"]}', "[]", '{"partition_by": 1}'):
        with pytest.raises(SchemaError, match="is not a layout this sink wrote"):
            recorded({LAYOUT_PROPERTY: text}, "t")


def test_a_changed_configuration_changes_only_what_it_changed() -> None:
    day, bucket = parse_partition("day(ts)"), parse_partition("bucket(16, id)")
    by_hand = {"write.metadata.metrics.default": "full"}
    actual = Layout((day,), (), by_hand, 2)  # the partition and property added by hand
    last = BUILT_IN  # a table of an earlier release: it records nothing
    wanted = Layout((), (parse_sort("id"),), {}, 2)
    change = layout_change(actual, last, wanted, "t")
    assert change.sort_by == (SortField("id"),)
    assert not (change.add_partitions or change.drop_partitions or change.remove_properties)
    # The partition spec's configuration changes: the table gets exactly the new one.
    wanted = Layout((bucket,), (), {}, 2)
    change = layout_change(actual, last, wanted, "t")
    assert (change.add_partitions, change.drop_partitions) == ((bucket,), (day,))
    assert change.sort_by is None  # configured as before: the table's own stays


def test_properties_the_configuration_set_and_then_dropped_are_removed() -> None:
    last = Layout(properties={"a": "1", "b": "1"})
    actual = Layout(properties={"a": "1", "b": "1", "hand": "x"})
    change = layout_change(actual, last, Layout(properties={"a": "2"}), "t")
    assert change.set_properties == {"a": "2"}
    assert change.remove_properties == ("b",)


def test_a_format_version_is_upgraded_and_never_downgraded() -> None:
    v3 = dataclasses.replace(BUILT_IN, format_version=3)
    assert layout_change(BUILT_IN, BUILT_IN, v3, "t").format_version == 3
    assert not layout_change(v3, v3, v3, "t")
    with pytest.raises(SchemaError, match="cannot go back to 2"):
        layout_change(v3, v3, BUILT_IN, "t")
    assert not layout_change(v3, BUILT_IN, BUILT_IN, "t")  # upgraded by hand: kept


_FIELDS = st.sampled_from(
    [parse_partition(t) for t in ("id", "bucket(4, id)", "day(ts)", "truncate(2, s)")]
)
_LAYOUTS = st.builds(
    Layout,
    st.lists(_FIELDS, unique=True, max_size=3).map(tuple),
    st.lists(st.sampled_from([parse_sort("id"), parse_sort("ts desc")]), max_size=1).map(tuple),
    st.dictionaries(st.sampled_from(["a", "b"]), st.sampled_from(["1", "2"])),
    st.just(2),
)


@given(_LAYOUTS, _LAYOUTS, _LAYOUTS)
def test_after_a_change_the_table_has_what_the_configuration_changed_and_is_stable(
    actual: Layout, last: Layout, wanted: Layout
) -> None:
    change = layout_change(actual, last, wanted, "t")
    parts = [p for p in actual.partition_by if p not in change.drop_partitions]
    after = Layout(
        tuple(parts + list(change.add_partitions)),
        actual.sort_by if change.sort_by is None else change.sort_by,
        {
            **{k: v for k, v in actual.properties.items() if k not in change.remove_properties},
            **change.set_properties,
        },
        change.format_version or actual.format_version,
    )
    if wanted.partition_by != last.partition_by:
        assert set(after.partition_by) == set(wanted.partition_by)
    if wanted.sort_by != last.sort_by:
        assert after.sort_by == wanted.sort_by
    for key, value in wanted.properties.items():
        if last.properties.get(key) != value:
            assert after.properties[key] == value
    assert not layout_change(after, last, wanted, "t")  # applied once: nothing more


def test_a_write_mode_a_layout_stops_naming_goes_back_to_the_sink_s() -> None:
    modes = {"write.merge.mode": "copy-on-write"}
    last = Layout(properties={"write.merge.mode": "merge-on-read", "x": "1"})
    change = layout_change(last, last, BUILT_IN, "t", modes)
    assert change.set_properties == {"write.merge.mode": "copy-on-write"}
    assert change.remove_properties == ("x",)


class _JavaClass:
    def __init__(self, name: str) -> None:
        self.name = name

    def getName(self) -> str:  # noqa: N802 - Java's name
        return self.name


class _JavaException:
    def __init__(self, name: str, message: str) -> None:
        self.name, self.message = name, message

    def getClass(self) -> _JavaClass:  # noqa: N802
        return _JavaClass(self.name)

    def getMessage(self) -> str:  # noqa: N802
        return self.message


def test_only_spark_s_and_iceberg_s_own_refusals_stop_a_table() -> None:
    from py4j.protocol import Py4JJavaError

    from spark_sink.writer import _refusal

    def java(name: str, message: str) -> Py4JJavaError:
        error = Py4JJavaError.__new__(Py4JJavaError)
        error.java_exception = _JavaException(name, message)
        return error

    refused = java("org.apache.iceberg.exceptions.ValidationException", "no column nope\nat")
    assert _refusal(refused) == "no column nope"
    assert _refusal(java("java.lang.IllegalArgumentException", "redundant")) == "redundant"
    # a catalog that does not answer is no refusal, whatever it wraps
    for name in ("java.io.UncheckedIOException", "org.apache.iceberg.jdbc.UncheckedSQLException"):
        assert _refusal(java(name, "java.lang.IllegalArgumentException: host")) is None
    assert _refusal(RuntimeError("java.lang.IllegalArgumentException")) is None
