"""Every error the processor raises on purpose, under :class:`tidemark.core.errors.TidemarkError`.

Errors of one message (:class:`tidemark.core.errors.InputError`) are the bottom layer's:
the sink decodes with the same wire helpers and raises them too.
"""

from __future__ import annotations

from tidemark.core.errors import TidemarkError


class ProcessorError(TidemarkError):
    """The processor cannot go on."""


class WriterFailedError(ProcessorError):
    """A partition's producer failed for good, most often fenced by the partition's next
    owner: the instance lost the partition and joins its group again."""


# -- the reconciliation rules -------------------------------------------------


class SourceRefusedError(ProcessorError):
    """The source breaks a constraint of its envelope; its topic stops, the others go on."""


class RegistryRefusedSourceError(ProcessorError):
    """The schema registry refused what input ``topic`` needed
    (:class:`tidemark.core.errors.RegistryRefusedError`): the batch is dropped before
    anything of it is durable, and the topic stops with ``reason`` while the others go
    on."""

    def __init__(self, topic: str, reason: str) -> None:
        super().__init__(f"input topic {topic}: {reason}")
        self.topic = topic
        self.reason = reason


class StateFormatError(SourceRefusedError):
    """A state entry in a format this release does not know (a newer release wrote it, or
    it is damaged): its input partition stops at the message that met it, the others go
    on. Nothing is guessed from its bytes."""


class UnfillableError(ProcessorError):
    """An unchanged-TOAST placeholder with no earlier value to fill it from."""


# -- events ---------------------------------------------------------------------


class PositionError(ProcessorError):
    """A change's source block has no readable position."""


class SnapshotFormatError(ProcessorError):
    """Text that is not a ``pg_snapshot`` or a signal-table window."""


# -- incremental snapshots --------------------------------------------------------


class SignalError(ProcessorError):
    """A signal that cannot be acted on; the message says why."""


class ChunkError(ProcessorError):
    """A table cannot be snapshotted (no key, unknown table) or a chunk read failed."""


class FilterError(ChunkError):
    """A snapshot filter that is not one boolean expression of its table, or that the
    source cannot plan; the message says why."""


class TableChangedError(ChunkError):
    """The table's columns changed (``ALTER TABLE``) since its backfill learned them: the
    part is read again with the new ones."""


class SourceUnavailableError(ChunkError):
    """The source cannot be reached or the connection broke: worth trying again."""


class SnapshotRefusedError(ProcessorError):
    """A table that this pipeline cannot backfill; the message says why, and ``reason``
    (the setting that disagrees, or ``other``) labels the refusal's metric."""

    def __init__(self, message: str, reason: str = "other") -> None:
        super().__init__(message)
        self.reason = reason


class ShapeError(ProcessorError):
    """A table's Debezium events cannot be learned or reproduced."""


class UnsupportedTypeError(ProcessorError):
    """A column type whose Debezium encoding Tidemark does not reproduce."""


# -- offsets and the API ------------------------------------------------------------


class InvalidOffsetsError(ProcessorError):
    """An offsets document or request that the schema or the pipeline refuses (HTTP 400)."""


class PipelineActiveError(ProcessorError):
    """A write while instances of the pipeline run (HTTP 409)."""


class BadRequestError(ProcessorError):
    """A request body the API refuses (HTTP 400)."""


class OperatorOnlyError(ProcessorError):
    """A read the viewer's token may not make (HTTP 403)."""


class RequestTooLargeError(ProcessorError):
    """A request body larger than the API reads (HTTP 413)."""
