"""The partitioners a change topic may have been written with, held to librdkafka's own."""

from __future__ import annotations

import ctypes
from pathlib import Path

import confluent_kafka
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemark.core.partitioners import (
    PARTITIONERS,
    contradiction,
    fitting,
    partition_of,
    partitions_of,
)

#: librdkafka as confluent-kafka ships it; its partitioner functions are exported.
_LIBRARY = ctypes.CDLL(
    str(
        next(
            (Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs").glob(
                "librdkafka*"
            )
        )
    )
)
_SIGNATURE = [
    ctypes.c_void_p,
    ctypes.c_char_p,
    ctypes.c_size_t,
    ctypes.c_int32,
    ctypes.c_void_p,
    ctypes.c_void_p,
]


def librdkafka(name: str, key: bytes, count: int) -> int:
    function = getattr(_LIBRARY, f"rd_kafka_msg_partitioner_{name}")
    function.restype, function.argtypes = ctypes.c_int32, _SIGNATURE
    return int(function(None, key, len(key), count, None, None))


_NATIVE = {"murmur2": "murmur2", "crc32": "consistent", "fnv1a": "fnv1a"}


@given(st.binary(max_size=64), st.integers(1, 512))
def test_each_partitioner_is_librdkafkas(key: bytes, count: int) -> None:
    for name in PARTITIONERS:
        assert partition_of(name, key, count) == librdkafka(_NATIVE[name], key, count), name


def test_kafkas_murmur2_of_known_keys() -> None:
    # Kafka's own test vectors (Utils.murmur2 of these strings, as signed integers)
    assert partition_of("murmur2", b"21", 1 << 31) == -973932308 & 0x7FFFFFFF
    assert partition_of("murmur2", b"abc", 1 << 31) == 479470107 & 0x7FFFFFFF


def test_samples_name_the_partitioners_that_fit() -> None:
    keys = [f'{{"id":{i}}}'.encode() for i in range(20)]
    crc = [(k, partition_of("crc32", k, 6)) for k in keys]
    assert fitting(crc, 6) == ["crc32"]
    assert fitting([], 6) == list(PARTITIONERS)


def test_a_contradiction_names_the_partitioner_that_fits_but_strays_pass() -> None:
    keys = [f'{{"id":{i}}}'.encode() for i in range(100)]
    placed = [(k, partition_of("murmur2", k, 6)) for k in keys]
    assert contradiction("murmur2", placed, 6) is None
    stray = [*placed, (b'{"id": 1}', (partition_of("murmur2", b'{"id": 1}', 6) + 1) % 6)]
    assert contradiction("murmur2", stray, 6) is None  # one record put there by hand
    found = contradiction("murmur2", [(k, partition_of("crc32", k, 6)) for k in keys], 6)
    assert found is not None and found.fits == ["crc32"] and found.misplaced > 50
    assert str(found).endswith("; crc32 fits")
    assert found.key.decode() not in str(found)  # a key value is personal data: not in errors
    custom = [(k, i % 6) for i, k in enumerate(keys)]  # round robin: no hash fits
    found = contradiction("murmur2", custom, 6)
    assert found is not None and found.fits == []
    assert str(found).endswith("no known partitioner fits")


@given(st.lists(st.binary(max_size=64), max_size=40), st.integers(1, 512))
def test_the_compiled_partitions_are_the_partitioners(keys: list[bytes], count: int) -> None:
    """:func:`partitions_of` (C, a chunk's keys at once) is :func:`partition_of`."""
    for name in PARTITIONERS:
        assert partitions_of(name, keys, count) == [partition_of(name, k, count) for k in keys]


def test_the_compiled_partitions_refuse_what_is_not_keys() -> None:
    with pytest.raises(TypeError):
        partitions_of("murmur2", ["text"], 3)  # type: ignore[list-item]
    with pytest.raises(ValueError):
        partitions_of("murmur2", [b"k"], 0)
