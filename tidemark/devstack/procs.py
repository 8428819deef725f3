"""Process and port helpers for the development stack.

Everything here acts on process ids that the stack itself recorded; nothing
searches for processes by name, so a stack never stops what it did not start.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tidemark.devstack.errors import DevStackError


def wait_for(
    check: Callable[[], bool],
    timeout: float,
    what: str,
    log: Path | None = None,
    alive: Callable[[], bool] | None = None,
) -> None:
    """Poll ``check`` until it is true; fail with the log's tail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if alive is not None and not alive():
            raise DevStackError(f"{what} exited during start{_tail(log)}")
        time.sleep(0.2)
    raise DevStackError(f"{what} did not become ready within {timeout:.0f} s{_tail(log)}")


#: The children started here, kept: a ``Popen`` dropped while its child runs joins
#: ``subprocess``'s list of orphans, which the next ``Popen`` reaps, exit status and all.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def start_detached(
    cmd: Sequence[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> int:
    """Start ``cmd`` in its own session, output to ``log``; return its pid."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            list(cmd),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    _CHILDREN[proc.pid] = proc
    return proc.pid


def exit_code(pid: int) -> int | None:
    """How a child of :func:`start_detached` ended (negative: the signal that ended it), or
    ``None`` while it runs. A child something else reaped ended with an unknown code: 0."""
    child = _CHILDREN.get(pid)
    if child is None:
        return None if pid_alive(pid) else 0
    return child.poll()


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return process_state(pid) not in ("Z", "")


def process_state(pid: int) -> str:
    """The state letter of ``/proc/<pid>/stat`` (``Z``: a zombie, ``T``: stopped), or
    ``""`` when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0]
    except OSError:
        return ""


def pid_cmdline(pid: int) -> str:
    """The command line of ``pid``, or '' when it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def stop_pid(pid: int, marker: str, timeout: float = 15.0) -> None:
    """Stop process group ``pid`` (SIGTERM, then SIGKILL) if its command line holds ``marker``.

    The marker guards against a recycled pid: a process that is not ours is left alone.
    """
    if not pid_alive(pid) or marker not in pid_cmdline(pid):
        return
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(pid)
        if not pid_alive(pid):
            return
        time.sleep(0.1)
    _signal_group(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while pid_alive(pid) and time.monotonic() < deadline:
        _reap(pid)
        time.sleep(0.05)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _tail(log: Path | None, lines: int = 15) -> str:
    if log is None or not log.exists():
        return ""
    text = log.read_text(errors="replace").splitlines()[-lines:]
    return f"; last lines of {log}:\n" + "\n".join(text)
