"""Types of the compiled Avro reader (``tidemark/_avroread.c``); see :mod:`tidemark.avro_read`."""

from collections.abc import Sequence
from typing import Any

class AvroReadError(ValueError): ...

class Program:
    def __init__(self, ops: Sequence[Any]) -> None: ...

def read(program: Program, buf: bytes, start: int, stop: int = ...) -> tuple[Any, int] | None: ...
