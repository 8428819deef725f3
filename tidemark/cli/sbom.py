"""A software bill of materials: every Python distribution installed, as CycloneDX JSON.

``tidemark sbom`` lists what the running environment holds (not what a file says it
should): each distribution's name, version, package URL and declared license, and,
given the lock file it was installed from, the SHA-256 of each file the lock allows
for that version. The image's build writes it to ``/usr/share/doc/tidemark/sbom.cdx.json``;
``make sbom`` writes the development environment's to ``build/sbom.cdx.json``.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

#: A requirement line of a lock file: ``name==version \\``.
_PINNED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


@dataclass(frozen=True)
class Locked:
    """One pinned distribution of a lock file and the hashes of the files it allows."""

    version: str
    hashes: tuple[str, ...]


def canonical(name: str) -> str:
    """A distribution's name as package indexes compare it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(text: str) -> dict[str, Locked]:
    """The pins of a lock file (``pip-compile``/``uv pip compile --generate-hashes``)."""
    found: dict[str, Locked] = {}
    name, version, hashes = "", "", list[str]()
    for line in text.splitlines() + [""]:
        pinned = _PINNED.match(line)
        if pinned or not line.startswith(" "):
            if name:
                found[canonical(name)] = Locked(version, tuple(hashes))
            name, version = (pinned.group(1), pinned.group(2)) if pinned else ("", "")
            hashes = []
        hashes += _HASH.findall(line)
    return found


def bom(lock: dict[str, Locked] | None = None, project: str = "tidemark-cdc") -> dict[str, Any]:
    """The CycloneDX 1.5 document of this environment (``lock``: hashes from it)."""
    components = []
    seen: set[str] = set()
    for dist in sorted(metadata.distributions(), key=lambda d: canonical(d.metadata["Name"])):
        name = canonical(dist.metadata["Name"])
        if name in seen or name == project:
            continue
        seen.add(name)
        component: dict[str, Any] = {
            "type": "library",
            "bom-ref": f"pkg:pypi/{name}@{dist.version}",
            "name": name,
            "version": dist.version,
            "purl": f"pkg:pypi/{name}@{dist.version}",
        }
        declared = dist.metadata.json  # PEP 566: the fields given, by lower-case name
        expression, named = declared.get("license_expression"), declared.get("license")
        if isinstance(expression, str) and expression.strip():  # SPDX (PEP 639)
            component["licenses"] = [{"expression": expression.strip()}]
        elif isinstance(named, str) and 0 < len(named.strip()) < 100:  # a name, not a text
            component["licenses"] = [{"license": {"name": named.strip()}}]
        locked = (lock or {}).get(name)
        if locked is not None and locked.version == dist.version:
            component["hashes"] = [{"alg": "SHA-256", "content": h} for h in locked.hashes]
        components.append(component)
    version = metadata.version(project)
    return {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.uuid4()}",
        "version": 1,
        "metadata": {
            "component": {
                "type": "application",
                "bom-ref": f"pkg:pypi/{project}@{version}",
                "name": project,
                "version": version,
                "purl": f"pkg:pypi/{project}@{version}",
            }
        },
        "components": components,
    }


def lock_of(path: str | None) -> dict[str, Locked] | None:
    return None if path is None else read_lock(Path(path).read_text())
