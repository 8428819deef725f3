"""The documentation's own rules: plain words, no run history, examples that load.

The site itself is built strictly by ``make lint`` (``mkdocs build --strict``: a broken
link or a page left out of the navigation fails); the reference pages are checked by
tests/unit/test_reference_docs.py and the getting-started commands run in
tests/integration/test_getting_started.py.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tidemark.core.config import Config, load_config

ROOT = Path(__file__).resolve().parents[2]
#: What users read: the README, the changelog and the site's hand-written pages.
PROSE = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: Where the site's generated pages come from, and what other readers of the code read.
SOURCES = [
    p
    for folder in ("tidemark", "processor", "state", "spark_sink", "docs", "tests", "bench")
    for pattern in ("*.py", "*.c", "*.h", "*.pyi")
    for p in (ROOT / folder).rglob(pattern)
]
#: Private words for the layers, and the plain words to use instead.
JARGON = {
    r"\bthe face\b": "the command line",
    r"\bthe ground\b": "the bottom layer",
    r"\bground layer\b": "the bottom layer",
}
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
HEX = re.compile(r"\b[0-9a-f]{7,40}\b")


@pytest.mark.parametrize("path", PROSE + SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_jargon(path: Path) -> None:
    text = path.read_text(errors="replace")
    for pattern, plain in JARGON.items():
        found = re.search(pattern, text, re.IGNORECASE)
        assert found is None, f"{path.name}: '{found.group(0)}': say '{plain}'"


def test_the_readme_is_short() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_no_commit_of_this_repository_is_named_in_prose() -> None:
    """Run history lives in bench/results/ and CHANGELOG.md's entries, not in commit ids
    quoted in pages (those drift and mean nothing to a user)."""
    candidates = {
        (path.name, token)
        for path in PROSE
        for token in HEX.findall(path.read_text())
        if re.search(r"[a-f]", token) and re.search(r"\d", token)
    }
    assert candidates, "the check found no hexadecimal token at all: is it reading the pages?"
    tokens = sorted({token for _, token in candidates})
    answer = subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "--batch-check"],
        input="\n".join(f"{t}^{{commit}}" for t in tokens) + "\n",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    commits = {t for t, line in zip(tokens, answer, strict=True) if " commit " in line}
    named = sorted((name, token) for name, token in candidates if token in commits)
    assert not named, f"commit ids in prose: {named}"


def _config_examples() -> list[tuple[str, dict[str, object]]]:
    sections = {"kafka", "source", "processor", "snapshot", "sink", "dev"}
    examples = []
    for path in PROSE:
        for language, body in FENCE.findall(path.read_text()):
            if language != "yaml":
                continue
            data = yaml.safe_load(body)
            if isinstance(data, dict) and set(data) <= sections:
                examples.append((f"{path.relative_to(ROOT)}: {sorted(data)}", data))
    return examples


def test_the_configuration_examples_load(tmp_path: Path) -> None:
    """Every YAML block of the pages that is configuration is valid configuration."""
    examples = _config_examples()
    assert len(examples) >= 8
    for where, data in examples:
        path = tmp_path / "example.yaml"
        path.write_text(yaml.safe_dump(data))
        path.chmod(0o600)
        assert isinstance(load_config(path, {}), Config), where
