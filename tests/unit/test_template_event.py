"""A quiet table's event from another table's: named after its own topic and table."""

from __future__ import annotations

import orjson
import pytest

from processor.errors import ShapeError
from processor.snapshot.template_event import template_event

SOURCE = {"version": "3.6", "connector": "postgresql", "name": "p", "schema": "s", "table": "a"}
KEY = [{"type": "int32", "optional": False, "field": "id"}]
ROW = [*KEY, {"type": "string", "optional": True, "field": "v"}]


def test_a_schemaless_event_takes_the_other_tables_envelope_and_its_own_names() -> None:
    sibling = (
        b'{"k":1}',
        orjson.dumps({"before": None, "after": {"k": 1}, "source": SOURCE, "op": "c"}),
    )
    key, value = template_event(sibling, "p.s.b", ("s", "b"), KEY, ROW)
    assert orjson.loads(key) == {"id": None}
    event = orjson.loads(value)
    assert list(event) == ["before", "after", "source", "op"]
    assert event["after"] == {"id": None, "v": None}
    assert event["source"] == dict(SOURCE, table="b")


def test_schemas_are_named_after_the_topic() -> None:
    row_schema = {"type": "struct", "fields": [], "optional": True, "name": "p.s.a.Value"}
    schema = {
        "type": "struct",
        "fields": [dict(row_schema, field="before"), dict(row_schema, field="after")],
        "optional": False,
        "name": "p.s.a.Envelope",
        "version": 2,
    }
    payload = {"before": None, "after": {}, "source": SOURCE, "op": "c"}
    sibling = (
        orjson.dumps({"schema": {"type": "struct"}, "payload": {"k": 1}}),
        orjson.dumps({"schema": schema, "payload": payload}),
    )
    key, value = template_event(sibling, "p.s.b", ("s", "b"), KEY, ROW)
    assert orjson.loads(key)["schema"] == {
        "type": "struct", "fields": KEY, "optional": False, "name": "p.s.b.Key"
    }  # fmt: skip
    built = orjson.loads(value)["schema"]
    assert built["name"] == "p.s.b.Envelope" and built["version"] == 2
    assert [f["name"] for f in built["fields"]] == ["p.s.b.Value"] * 2
    assert all(f["fields"] == ROW for f in built["fields"])


def test_avro_is_refused() -> None:
    with pytest.raises(ShapeError, match="Avro"):
        template_event((b"\x00\x00\x00\x00\x01", b"\x00"), "p.s.b", ("s", "b"), KEY, ROW)
