"""``changelog.md``: ``CHANGELOG.md`` of the repository's root, so that the site shows it.

Links are written for the repository: one to a page of ``docs/`` is made relative to the
site's root (where ``changelog.md`` lies); one to another file of the repository, which
the site does not hold, keeps its text and shows the path as code.
"""

from __future__ import annotations

import re
from pathlib import Path

SOURCE = "CHANGELOG.md"
DOCS = "docs/"
#: An inline link or image: ``[text](target "title")``.
_LINK = re.compile(r"(!?)\[([^\]]*)\]\(\s*<?([^)\s>]+)>?((?:\s+\"[^\"]*\")?)\s*\)")
_EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|#|/)", re.IGNORECASE)


def fix_link(target: str) -> str | None:
    """``target`` as the site reaches it from its root; ``None`` for a file outside
    ``docs/`` (or an absolute or external target, which stays as it is)."""
    if _EXTERNAL.match(target):
        return target
    path, hash_, anchor = target.partition("#")
    path = path.removeprefix("./")
    if path.startswith(DOCS):
        return path.removeprefix(DOCS) + hash_ + anchor
    return None


def fix_links(text: str) -> str:
    """``text`` with its relative links fixed for the site (see :func:`fix_link`)."""

    def replace(match: re.Match[str]) -> str:
        bang, label, target, title = match.groups()
        fixed = fix_link(target)
        if fixed is None:
            return f"{label} (`{target}`)" if label and label != target else f"`{target}`"
        return f"{bang}[{label}]({fixed}{title})"

    parts = re.split(r"(```.*?```|`[^`\n]*`)", text, flags=re.DOTALL)
    return "".join(p if p.startswith("`") else _LINK.sub(replace, p) for p in parts)


def changelog_page(text: str) -> str:
    """The page: the file's title, a paragraph saying where it comes from, the rest."""
    lines = text.strip("\n").splitlines()
    title = "# Changelog"
    if lines and lines[0].startswith("# "):
        title, lines = lines[0], lines[1:]
    opening = (
        f"This page is `{SOURCE}` from the repository's root, copied into the site each time "
        "it is built (see `docs/gen/refs/changelog.py`), so the two never differ."
    )
    body = fix_links("\n".join(lines).strip("\n"))
    return f"{title}\n\n{opening}\n\n{body}\n"


def generate(root: Path = Path()) -> str:
    """The page for the repository at ``root``."""
    return changelog_page((root / SOURCE).read_text())
