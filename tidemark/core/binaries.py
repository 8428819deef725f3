"""Locate the external runtimes Tidemark needs: Java 17+ and PostgreSQL's server binaries."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from tidemark.core.errors import MissingBinaryError, MissingJavaError

_INSTALL_HINT = "run 'make setup' (it installs Debian's openjdk-17-jre-headless) or set JAVA_HOME"


def find_java() -> Path:
    """The ``java`` executable (``$JAVA_HOME/bin/java`` first, then ``PATH``), version 17+."""
    home = os.environ.get("JAVA_HOME")
    candidate = Path(home) / "bin" / "java" if home else None
    if candidate is None or not candidate.exists():
        found = shutil.which("java")
        candidate = Path(found) if found else None
    if candidate is None:
        raise MissingJavaError(f"Java 17 or newer is needed and none was found; {_INSTALL_HINT}")
    try:
        out = subprocess.run(
            [str(candidate), "-version"], capture_output=True, text=True, timeout=30, check=False
        ).stderr
    except OSError as exc:
        raise MissingJavaError(f"{candidate} cannot run ({exc}); {_INSTALL_HINT}") from None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        raise MissingJavaError(f"{candidate} did not report a version; {_INSTALL_HINT}")
    major = int(match.group(1))
    if major == 1 and match.group(2):
        major = int(match.group(2))
    if major < 17:
        raise MissingJavaError(f"{candidate} is Java {major}; Java 17 or newer is needed")
    return candidate


def java_home() -> Path:
    """JAVA_HOME for child processes (Spark, the Debezium engine)."""
    return find_java().resolve().parent.parent


def find_pg_bin(name: str) -> Path:
    """A PostgreSQL server binary (``initdb``, ``pg_ctl``): PATH, then Debian's layout."""
    found = shutil.which(name)
    if found:
        return Path(found)
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/" + name),
        key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0,
    )
    if versions:
        return versions[-1]
    raise MissingBinaryError(
        f"PostgreSQL's '{name}' was not found; run 'make setup' (it installs Debian's "
        f"postgresql package) or put the server binaries on PATH"
    )
