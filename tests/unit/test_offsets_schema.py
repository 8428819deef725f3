"""The offsets document's schema: a PostgreSQL and a MySQL example, and what it refuses."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from processor.errors import InvalidOffsetsError
from processor.pipeline.offsets_schema import validate

POSTGRESQL: dict[str, Any] = {
    "version": 1,
    "pipeline": "shop",
    "group": "shop-dataplane",
    "lifecycle": "STOPPED",
    "members": False,
    "partitions": [
        {
            "topic": "shop.public.orders",
            "partition": 0,
            "kind": "input",
            "envelope": "debezium-upsert",
            "offset": 1042,
            "source_position": {
                "at_offset": 1042,
                "postgresql": {
                    "lsn": 26437600,
                    "txId": 812,
                    "lsn_commit": 26437240,
                    "ts_usec": 1700000000123456,
                },
            },
        },
        {
            "topic": "shop.backfill.shop.public.orders",
            "partition": 0,
            "kind": "backfill",
            "offset": None,
        },
    ],
    "incremental_snapshot": {
        "incremental_snapshot_collections": [
            {
                "incremental_snapshot_collections_id": "public.orders",
                "incremental_snapshot_collections_additional_condition": "id > 100",
                "incremental_snapshot_collection_surrogate_key": None,
            }
        ],
        "incremental_snapshot_primary_key": [5000],
        "incremental_snapshot_maximum_key": [90000],
    },
}

MYSQL: dict[str, Any] = {
    "version": 1,
    "partitions": [
        {
            "topic": "shop.inventory.items",
            "partition": 2,
            "offset": 77,
            "source_position": {
                "at_offset": 77,
                "mysql": {
                    "server_id": 223344,
                    "gtids": "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5",
                    "file": "mysql-bin.000003",
                    "pos": 154,
                    "row": 1,
                },
            },
        }
    ],
}


def test_a_postgresql_and_a_mysql_document_are_valid() -> None:
    assert validate(POSTGRESQL) is POSTGRESQL
    assert validate(MYSQL) is MYSQL


def changed(document: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(document)
    target = out
    for part in path[:-1]:
        target = target[part]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return out


@pytest.mark.parametrize(
    ("document", "pointer"),
    [
        (changed(POSTGRESQL, ["version"], 2), "/version"),
        (changed(POSTGRESQL, ["partitions", 0, "offset"], -1), "/partitions/0/offset"),
        (changed(POSTGRESQL, ["partitions", 0, "partition"], "0"), "/partitions/0/partition"),
        (changed(POSTGRESQL, ["partitions", 1, "topic"], KeyError), "/partitions/1"),
        (changed(POSTGRESQL, ["partitions", 0, "offfset"], 3), "/partitions/0"),
        (
            changed(POSTGRESQL, ["partitions", 0, "source_position", "postgresql", "lsn"], "0/1A"),
            "/partitions/0/source_position/postgresql/lsn",
        ),
        (
            changed(
                POSTGRESQL, ["partitions", 0, "source_position", "mysql"], {"file": "b", "pos": 1}
            ),
            "/partitions/0/source_position",
        ),
        (
            changed(MYSQL, ["partitions", 0, "source_position", "mysql", "file"], KeyError),
            "/partitions/0/source_position/mysql",
        ),
        (
            changed(MYSQL, ["partitions", 0, "source_position", "mysql", "row"], 0),
            "/partitions/0/source_position/mysql/row",
        ),
        (
            changed(
                POSTGRESQL,
                [
                    "incremental_snapshot",
                    "incremental_snapshot_collections",
                    0,
                    "incremental_snapshot_collections_additional_condication",
                ],
                "id > 100",
            ),
            "/incremental_snapshot/incremental_snapshot_collections/0",
        ),
        ([], "/"),
    ],
)
def test_a_wrong_field_is_named_by_its_json_pointer(document: Any, pointer: str) -> None:
    with pytest.raises(InvalidOffsetsError) as caught:
        validate(document)
    assert str(caught.value).split(":", 1)[0] == pointer, caught.value
