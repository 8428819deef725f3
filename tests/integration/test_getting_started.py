"""The getting-started pages' commands, run as written.

Every ``sh`` block of the pages under "Getting started" in ``mkdocs.yml``, in the order
of the navigation, becomes one bash script (``set -euo pipefail``), run in a folder of
its own with the virtual environment on ``PATH``: a command that stops working, or a
table that ends different from its source (``tidemark dev compare`` exits 1), fails the
test. Blocks meant to be read, not run, are ``text``.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import yaml

from tidemark.devstack.procs import pid_alive

ROOT = Path(__file__).resolve().parents[2]
SECTION = "Getting started"
SH_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.MULTILINE | re.DOTALL)
#: Stops what the pages started if a command fails half way (the pages stop it at the end).
PROLOGUE = """set -euo pipefail
cleanup() {
  if [ -f .tidemark/tour/process.pid ]; then kill "$(cat .tidemark/tour/process.pid)" || true; fi
  tidemark dev down --run-dir .tidemark/tour > /dev/null 2>&1 || true
}
trap cleanup EXIT
"""


def getting_started_pages() -> list[Path]:
    """The pages of the site's "Getting started" section, in the navigation's order."""
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    section = next(entry[SECTION] for entry in nav if isinstance(entry, dict) and SECTION in entry)
    pages = [item if isinstance(item, str) else next(iter(item.values())) for item in section]
    return [ROOT / "docs" / page for page in pages]


def test_every_getting_started_page_is_in_the_navigation() -> None:
    listed = set(getting_started_pages())
    assert listed == set((ROOT / "docs" / "getting-started").glob("*.md"))


def test_the_getting_started_commands_run_as_written(tmp_path: Path) -> None:
    blocks = [b for page in getting_started_pages() for b in SH_BLOCK.findall(page.read_text())]
    script = "\n".join([PROLOGUE, *blocks])
    assert "tidemark dev up" in script and "tidemark dev down" in script
    with socket.socket() as probe:  # the pages' processor takes the default web port
        assert probe.connect_ex(("127.0.0.1", 6066)) != 0, "port 6066 is taken"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    env.pop("TIDEMARK_API_TOKEN", None)
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-5000:]
    assert output.count("public.accounts: equal (") == 2, output[-5000:]
    assert "development stack is up" in output and "stopped: " in output
    pid = int((tmp_path / ".tidemark/tour/process.pid").read_text())
    assert not pid_alive(pid), "the processor the pages started is still running"
