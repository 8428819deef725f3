"""Who applies an offsets write, and while it is alive (review A11).

A plan in the control topic names its writer (``writer``, an id of its own) and when
the writer last renewed it (``at_ms``). The writer renews it every
:func:`renew_every_s` while it works, and before each renewal reads the control topic:
if the plan there names another writer, its write was taken over, and it stops
(:class:`LeaseLost`) before writing anything more. A plan not renewed for
``processor.offsets_write_abandoned_s`` lost its writer: a data plane claims it by
writing it under its own id, waits :data:`SETTLE_S` for any other claim, and completes
it only if the plan read back is still its own. Two data planes that claim at once
both read the later claim, so one completes; a writer that was only slow finds the
claim at its next renewal and stops, instead of tombstoning state beside the new one.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from processor.pipeline.control_topic import OFFSETS_WRITE, read_control, write_control
from tidemark.core.config import Config
from tidemark.core.errors import TidemarkError

log = logging.getLogger(__name__)

#: How long a claimer waits for other claims before it reads the plan back (seconds).
SETTLE_S = 2.0


class LeaseLost(TidemarkError):
    """Another writer took the offsets write over: this one writes nothing more."""


def new_writer(role: str) -> str:
    """An id for one writer (``role``: who it is, for the log)."""
    return f"{role}-{uuid.uuid4().hex[:12]}"


def renew_every_s(config: Config) -> float:
    """How often a writer renews its plan."""
    return config.processor.offsets_write_abandoned_s / 6


def abandoned(config: Config, plan: dict[str, Any], now_ms: int) -> bool:
    """Whether ``plan`` has not been renewed for ``processor.offsets_write_abandoned_s``."""
    return now_ms - plan["at_ms"] > config.processor.offsets_write_abandoned_s * 1000


class Lease:
    """The right of one writer to apply one plan, renewed while it works."""

    def __init__(self, config: Config, plan: dict[str, Any], writer: str) -> None:
        self._config = config
        #: The plan as this writer found it: a claim is made only if it is still there.
        self._found = (plan.get("writer"), plan.get("at_ms"))
        self.plan = {**plan, "writer": writer}
        self.writer = writer
        self._next = time.monotonic() + renew_every_s(config)

    def write(self) -> None:
        """Write the plan under this writer's id (its first record, or a claim)."""
        write_control(self._config, OFFSETS_WRITE, self.plan)
        self._next = time.monotonic() + renew_every_s(self._config)

    def held(self) -> bool:
        """Whether the control topic's plan is this writer's."""
        current = read_control(self._config).offsets_write
        return current is not None and current.get("writer") == self.writer

    def claim(self) -> bool:
        """Claim an abandoned plan: whether this writer holds it once claims settled. A
        plan renewed, claimed or completed since it was found is left alone (a view of
        the control topic can lag behind it)."""
        current = read_control(self._config).offsets_write
        if current is None or (current.get("writer"), current.get("at_ms")) != self._found:
            return False
        self.write()
        time.sleep(SETTLE_S)
        if not self.held():
            return False
        # Renewed at once: the wait and the reads must not make the claim look abandoned
        # to the others (under load they outlasted a short abandonment time, and two
        # instances took the plan from each other in turn).
        self.write()
        return True

    def renew(self) -> None:
        """Renew the plan if it is time; :class:`LeaseLost` if another writer holds it.
        Cheap between renewals: call it as often as work allows."""
        if time.monotonic() < self._next:
            return
        if not self.held():
            raise LeaseLost(f"the offsets write of {self.writer} was taken over by another")
        self.write()
