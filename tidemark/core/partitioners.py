"""Where a producer puts a key: the partitioners a change topic may have been written with.

A backfilled row must land in the partition that holds its key's changes, so the
backfill produces with the partitioner that wrote the change topic
(``source.partitioner``): ``murmur2`` (Kafka's default, Kafka Connect's),
``crc32`` (librdkafka's default ``consistent_random``, so a Debezium embedded in
a librdkafka program) or ``fnv1a`` (librdkafka's ``fnv1a_random``, Sarama's).
The functions here are those producers' own arithmetic, held to librdkafka's
exported partitioners by a property test; they check a topic's events.
:func:`partitions_of` is the same arithmetic in C (``tidemark/core/_records.c``), held to
them by another: it routes a chunk's rows to their partitions, one call per chunk.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from tidemark.core._records import partitions

Partitioner = Literal["murmur2", "crc32", "fnv1a"]
PARTITIONERS: tuple[Partitioner, ...] = ("murmur2", "crc32", "fnv1a")
#: librdkafka's ``partitioner`` setting of each (a key is never null here).
LIBRDKAFKA: dict[Partitioner, str] = {
    "murmur2": "murmur2_random",
    "crc32": "consistent_random",
    "fnv1a": "fnv1a_random",
}


def murmur2(key: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (seed 0x9747b28c), as an unsigned 32-bit number."""
    m, r = 0x5BD1E995, 24
    length = len(key)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = (int.from_bytes(key[i : i + 4], "little") * m) & 0xFFFFFFFF
        k = ((k ^ (k >> r)) * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = key[length - length % 4 :]
    if tail:
        for shift, byte in reversed(list(enumerate(tail))):
            h ^= byte << (8 * shift)
        h = (h * m) & 0xFFFFFFFF
    h = ((h ^ (h >> 13)) * m) & 0xFFFFFFFF
    return h ^ (h >> 15)


def fnv1a(key: bytes) -> int:
    """32-bit FNV-1a, as an unsigned number."""
    h = 0x811C9DC5
    for byte in key:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def _murmur2_partition(key: bytes, count: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % count


def _crc32_partition(key: bytes, count: int) -> int:
    return zlib.crc32(key) % count


def _fnv1a_partition(key: bytes, count: int) -> int:
    """The hash as a signed 32-bit number, C's remainder, its absolute value."""
    h = fnv1a(key)
    signed = h - (1 << 32) if h & 0x80000000 else h
    return abs(signed) % count


_PARTITION: dict[Partitioner, Callable[[bytes, int], int]] = {
    "murmur2": _murmur2_partition,
    "crc32": _crc32_partition,
    "fnv1a": _fnv1a_partition,
}


def partition_of(partitioner: Partitioner, key: bytes, count: int) -> int:
    """The partition ``partitioner`` gives ``key`` in a topic of ``count`` partitions."""
    return _PARTITION[partitioner](key, count)


def partitions_of(partitioner: Partitioner, keys: list[bytes], count: int) -> list[int]:
    """:func:`partition_of` of each of ``keys``, computed in C."""
    return partitions(keys, count, PARTITIONERS.index(partitioner))


def fitting(samples: Iterable[tuple[bytes, int]], count: int) -> list[Partitioner]:
    """The partitioners that put every ``(key, partition)`` sample where it is."""
    seen = list(samples)
    return [
        name
        for name in PARTITIONERS
        if all(partition_of(name, key, count) == partition for key, partition in seen)
    ]


#: The share of a topic's sampled events that may sit out of place as strays (records
#: written to a partition by hand), without calling the partitioner wrong.
STRAY_SHARE = 0.05


@dataclass(frozen=True)
class Contradiction:
    """Samples that ``configured`` would not have put where they are."""

    configured: Partitioner
    misplaced: int
    seen: int
    #: The first misplaced key, its partition and where ``configured`` puts it.
    key: bytes
    partition: int
    expected: int
    #: The partitioners that put every sample where it is.
    fits: list[Partitioner]

    def __str__(self) -> str:
        fits = f"{', '.join(self.fits)} fits" if self.fits else "no known partitioner fits"
        return (
            f"{self.misplaced} of {self.seen} events are not where {self.configured} puts "
            f"their keys, such as a key of {len(self.key)} bytes in partition "
            f"{self.partition} (not {self.expected}); {fits}"
        )


def contradiction(
    configured: Partitioner, samples: Sequence[tuple[bytes, int]], count: int
) -> Contradiction | None:
    """Whether ``samples`` (``(key, partition)``) contradict ``configured``: ``None`` when
    every one is in place, or the few out of place fit no partitioner (strays)."""
    misplaced = [
        (key, partition, expected)
        for key, partition in samples
        if (expected := partition_of(configured, key, count)) != partition
    ]
    if not misplaced:
        return None
    fits = fitting(samples, count)
    if not fits and len(misplaced) <= STRAY_SHARE * len(samples):
        return None
    key, partition, expected = misplaced[0]
    return Contradiction(configured, len(misplaced), len(samples), key, partition, expected, fits)
