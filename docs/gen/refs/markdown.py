"""Markdown helpers shared by the reference pages."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable, Sequence

_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`~?([^`]+)`")
_LITERAL = re.compile(r"``(.+?)``")


class MissingDescriptionError(ValueError):
    """Something the reference would publish has no description in the code."""


def need(text: str | None, what: str) -> str:
    """``text`` stripped; :class:`MissingDescriptionError` naming ``what`` when it is empty."""
    if text is None or not text.strip():
        raise MissingDescriptionError(f"{what} has no description")
    return text.strip()


def rst(text: str) -> str:
    """A docstring's or comment's reStructuredText markup as Markdown: ````x```` and
    ``:role:`x``` become code spans."""
    return _LITERAL.sub(r"`\1`", _ROLE.sub(r"``\1``", text))


def paragraphs(docstring: str | None) -> list[str]:
    """A docstring's paragraphs, each on one line (a list item or an indented block keeps
    its lines)."""
    if not docstring:
        return []
    out = []
    for block in inspect.cleandoc(docstring).split("\n\n"):
        lines = block.splitlines()
        listed = any(line.lstrip().startswith(("- ", "* ", "1. ")) for line in lines)
        indented = all(line.startswith("    ") for line in lines)
        if listed or indented:
            out.append(rst(block))
        else:
            out.append(rst(" ".join(line.strip() for line in lines)))
    return out


def first_paragraph(docstring: str | None) -> str:
    """The first paragraph of a docstring, on one line (empty if there is none)."""
    found = paragraphs(docstring)
    return found[0] if found else ""


def code(text: object) -> str:
    """``text`` as an inline code span (backticks inside it are fenced by more)."""
    value = str(text)
    fence = "``" if "`" in value else "`"
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def cell(text: object) -> str:
    """``text`` fit for a table cell: one line, pipes escaped outside code spans."""
    value = " ".join(str(text).split())
    parts = re.split(r"(`+[^`]*`+)", value)
    return "".join(p if p.startswith("`") else p.replace("|", r"\|") for p in parts)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def capitalized(text: str) -> str:
    """``text`` with its first letter in upper case (a summary written as a clause)."""
    return text[:1].upper() + text[1:]


def page(title: str, opening: str, *blocks: str) -> str:
    """A page: its title, its opening paragraph, then ``blocks`` (empty ones left out)."""
    body = [f"# {title}", opening, *(b.strip("\n") for b in blocks if b.strip())]
    return "\n\n".join(body) + "\n"
