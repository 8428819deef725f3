"""Schemas built from the catalog: what they refuse (the integration tests compare what
they build with Debezium's own schemas, type by type)."""

from __future__ import annotations

import pytest

from processor.errors import UnsupportedTypeError
from processor.snapshot.chunk_reader import TableInfo
from processor.snapshot.postgres.connect_schemas import key_and_row_fields
from tidemark.core.debezium_settings import ValueSettings


def table(defaults: tuple[str | None, ...] = (None, None), primary: tuple[str, ...] = ("id",),
          kind: str = "text") -> TableInfo:  # fmt: skip
    return TableInfo(
        "public",
        "t",
        ("id",),
        ("id", "v"),
        (("int4", -1, "N", None), (kind, -1, "S", None)),
        primary=primary,
        not_null=(True, False),
        defaults=defaults,
        labels=(None, None),
    )


def test_key_fields_are_the_primary_keys_and_never_optional() -> None:
    key, row = key_and_row_fields(
        table(defaults=("nextval('t_id_seq'::regclass)", None)), ValueSettings()
    )
    assert key == [{"type": "int32", "optional": False, "field": "id"}]
    assert row[1] == {"type": "string", "optional": True, "field": "v"}


@pytest.mark.parametrize(
    ("info", "refusal"),
    [
        (table(defaults=(None, "'x'::text")), "DEFAULT"),
        (table(primary=()), "no primary key"),
        (table(kind="citext"), "citext"),
    ],
)
def test_what_the_catalog_alone_cannot_give_is_refused(info: TableInfo, refusal: str) -> None:
    with pytest.raises(UnsupportedTypeError, match=refusal):
        key_and_row_fields(info, ValueSettings())
