"""Errors of the processor. Input errors carry the raw Kafka message for the dead-letter topic."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from tidemark.errors import TidemarkError

if TYPE_CHECKING:
    from processor.backfill import ChunkTag


class ProcessorError(TidemarkError):
    """The processor cannot go on."""


class RawMessage(NamedTuple):
    """Where a message came from and its bytes, as read from Kafka (a tuple: cheap to make)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    #: For a record of a backfill topic: its chunk, from the headers (``None`` if unreadable).
    chunk: ChunkTag | None = None


class InputError(ProcessorError):
    """One input message cannot be processed; it goes to the dead-letter topic."""

    def __init__(self, reason: str, message: RawMessage, kind: str = "invalid") -> None:
        super().__init__(f"{message.topic}[{message.partition}]@{message.offset}: {reason}")
        self.reason = reason
        self.message = message
        #: A short, stable name of the failure (the metric's ``reason`` label).
        self.kind = kind
