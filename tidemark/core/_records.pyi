"""Types of the compiled record helpers (``_records.c``); see :mod:`tidemark.core.frames`
and :func:`tidemark.core.partitioners.partitions_of`."""

from typing import Any, TypeVar

T = TypeVar("T", bound=tuple[Any, ...])

#: The digest of the C sources this module was built from (:mod:`tidemark.core.compiled`).
SOURCES_DIGEST: str

def frame(pairs: list[tuple[bytes, bytes]], start: int, stop: int) -> bytes: ...
def unframe(buf: bytes) -> list[bytes] | None: ...
def unframe_messages(
    cls: type[T], topic: str, partition: int, offset: int, chunk: Any, buf: bytes, count: int
) -> list[T] | None: ...
def partitions(keys: list[bytes], count: int, kind: int) -> list[int]: ...
