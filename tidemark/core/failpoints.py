"""Crash points for tests: ``TIDEMARK_FAILPOINT=<name>:<N>`` SIGKILLs the processor the Nth
time the code passes the point ``<name>``; ``<name>:<N>:stop`` SIGSTOPs it there instead (a
stall: the test resumes it with SIGCONT, a zombie). Unset in production, where a point
costs one ``None`` check.

Points:

- ``batch-decided``: a batch is decided in memory, nothing of it produced;
- ``outputs-acked``: a batch's outputs are acknowledged, its changelog records not produced;
- ``after-flush``: a batch's outputs and changelog records are acknowledged, its state and
  offsets not committed;
- ``window-release``: the same, for a batch that released window-buffered rows;
- ``window-open``: the chunk reader committed a window-open row and has not closed it;
- ``offsets-write``: an offsets write deleted the state, and has not committed the offsets.
"""

from __future__ import annotations

import os
import signal


class Failpoint:
    """One named crash point; ``victim`` is the process to kill (default: this one)."""

    def __init__(self, name: str, victim: int | None = None) -> None:
        point, _, rest = os.environ.get("TIDEMARK_FAILPOINT", "").partition(":")
        count, _, action = rest.partition(":")
        self._left = int(count) if point == name and count.isdigit() else None
        self._signal = signal.SIGSTOP if action == "stop" else signal.SIGKILL
        self._victim = victim

    def passed(self) -> None:
        """Count one pass; at the Nth, kill (or stop) the victim and this process."""
        if self._left is None:
            return
        self._left -= 1
        if self._left == 0:
            if self._victim is not None:
                os.kill(self._victim, self._signal)
            os.kill(os.getpid(), self._signal)
