"""One error hierarchy for the whole product, and the errors of the bottom layer.

Every error Tidemark raises on purpose derives from :class:`TidemarkError`
and is named ``...Error``; each package keeps its own in one module
(``processor/errors.py``, ``state/errors.py``, ``spark_sink/errors.py``,
``tidemark/cli/errors.py``, ``tidemark/devstack/errors.py``). The command line turns a
:class:`TidemarkError` into a one-line message and exit code 2; anything else is a bug
and keeps its traceback.
"""

from __future__ import annotations

from tidemark.core.messages import RawMessage


class TidemarkError(Exception):
    """Root of every error Tidemark raises on purpose."""


class ConfigError(TidemarkError):
    """The configuration file or an environment override is invalid."""


class PortInUseError(TidemarkError):
    """A configured port is already taken by another process."""


class MissingBinaryError(TidemarkError):
    """An external program Tidemark needs (Java, PostgreSQL's server) was not found."""


class MissingJavaError(MissingBinaryError):
    """No usable Java runtime (17 or newer) was found."""


class TopicError(TidemarkError):
    """A topic could not be created, found or read to its end."""


class DeliveryError(TidemarkError):
    """Kafka did not acknowledge records that had to be durable."""


class RecordTooLargeError(DeliveryError):
    """A record larger than its topic takes (``kafka.max_record_bytes``): the record's
    fault, which no retry mends."""


class RegistryError(TidemarkError):
    """The schema registry failed or cannot be reached (not the message's fault): an
    outage, ridden out."""


class RegistryRefusedError(RegistryError):
    """The schema registry refused the processor (401, 403), or a registration of its
    (an incompatible or invalid output schema): no retry mends it, and the source it
    was for stops with the reason while the others go on."""


class UnknownSchemaError(TidemarkError):
    """The registry has no (valid) schema with this id: the message's fault."""


class InputError(TidemarkError):
    """One input message cannot be processed; it goes to the dead-letter topic.

    It carries the raw message, as confluent-kafka's ``ValueDeserializationError``
    does, so the dead letter has everything it needs.
    """

    def __init__(self, reason: str, message: RawMessage, kind: str = "invalid") -> None:
        super().__init__(f"{message.topic}[{message.partition}]@{message.offset}: {reason}")
        self.reason = reason
        self.message = message
        #: A short, stable name of the failure (the metric's ``reason`` label).
        self.kind = kind
