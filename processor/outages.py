"""Riding out an outage of Kafka (or of the schema registry): a loop that cannot reach the
broker waits and tries again.

The data plane and the snapshot coordinator each keep an :class:`Outage`. When
a turn of the loop fails because Kafka did not answer in time (a timeout, a
broken connection, records not acknowledged), the loop drops what the turn held
(the data plane leaves its group, the coordinator its leadership) and tries
again after a growing pause, instead of stopping the process: the broker may
only be paused, and a restart would not bring it back sooner. Only when Kafka
stays unreachable past ``kafka.outage_deadline_s`` does the loop stop, so that
the orchestrator can restart the process, perhaps elsewhere.

A fatal Kafka error (librdkafka's own verdict: a misconfiguration) is never
ridden out, but for a fenced producer: another instance took over what it
wrote for, and the loop joins again as a new member.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import KafkaError, KafkaException

from processor import metrics
from processor.errors import WriterFailedError
from tidemark.core.errors import DeliveryError, RegistryError, RegistryRefusedError, TopicError

log = logging.getLogger(__name__)


#: A producer of this instance's was fenced by a newer one with its transactional id:
#: another instance owns the partition now (:mod:`processor.dataplane.writers`).
FENCED = frozenset(
    {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
)


def fenced(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it: confluent-kafka raises a fatal error met in a
    delivery callback as a ``SystemError`` caused by it) says this instance was fenced."""
    cause: BaseException | None = exc
    while cause is not None:
        error = cause.args[0] if isinstance(cause, KafkaException) and cause.args else None
        if isinstance(error, KafkaError) and error.code() in FENCED:
            return True
        cause = cause.__cause__
    return False


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` is worth riding out: Kafka or the schema registry did not answer,
    or this instance was fenced (it joins again as a new member). Not when Kafka refused
    (a fatal error), nor when the registry did (:class:`RegistryRefusedError`)."""
    if fenced(exc) or isinstance(exc, WriterFailedError):
        return True
    if isinstance(exc, RegistryError):  # the schema registry's, but a refusal
        return not isinstance(exc, RegistryRefusedError)
    if isinstance(exc, KafkaException):
        error = exc.args[0] if exc.args else None
        return not isinstance(error, KafkaError) or not error.fatal()
    return isinstance(exc, DeliveryError | TopicError)


class Outage:
    """One loop's current outage: since when, why, and how long it may last."""

    def __init__(self, loop: str, deadline_s: float) -> None:
        self._loop = loop
        self._deadline_s = deadline_s
        self._since: float | None = None
        self._failures = 0
        #: Why the loop waits (``None``: it does not).
        self.reason: str | None = None

    def failed(self, exc: BaseException) -> float:
        """Note a turn that failed on ``exc``; the seconds to wait before the next one.

        Re-raises ``exc`` once the outage has lasted past the deadline.
        """
        now = time.monotonic()
        if self._since is None:
            self._since = now
        lasted = now - self._since
        if lasted > self._deadline_s:
            log.error("%s: Kafka unreachable for %.0f s, past the deadline", self._loop, lasted)
            raise exc
        self._failures += 1
        if fenced(exc) or isinstance(exc, WriterFailedError):
            self.reason = f"fenced: another instance took over ({exc})"
        else:
            self.reason = f"Kafka unreachable for {lasted:.0f} s: {exc}"
        metrics.OUTAGE_SECONDS.labels(self._loop).set(lasted)
        wait = min(10.0, 0.5 * 2 ** min(self._failures, 5))
        log.warning("%s: %s; trying again in %.1f s", self._loop, self.reason, wait)
        return wait

    def passed(self) -> None:
        """A turn succeeded: the outage, if any, is over."""
        if self._since is not None:
            log.info("%s: Kafka answers again", self._loop)
            metrics.OUTAGE_SECONDS.labels(self._loop).set(0)
        self._since, self._failures, self.reason = None, 0, None
