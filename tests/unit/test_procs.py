"""Exit codes of the stack's detached children."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tidemark.devstack.procs import exit_code, pid_alive, start_detached


def test_a_killed_child_is_seen_killed_after_other_children_started(tmp_path: Path) -> None:
    """A child that SIGKILLs itself reads as killed (-9) even after more children start:
    ``subprocess`` reaps the orphans of dropped ``Popen`` objects whenever it starts one,
    and the chaos run once read such a child's end as a clean exit of its own."""
    suicide = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    pid = start_detached([sys.executable, "-c", suicide], tmp_path / "child.log")
    deadline = time.monotonic() + 30
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    subprocess.run([sys.executable, "-c", "pass"], check=True)  # another child
    assert exit_code(pid) == -9
    sleeper = start_detached([sys.executable, "-c", "import time; time.sleep(30)"], tmp_path / "s")
    assert exit_code(sleeper) is None
    subprocess.run(["kill", "-TERM", str(sleeper)], check=True)
    while exit_code(sleeper) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert exit_code(sleeper) == -15
