"""``reference/cli.md``: every ``tidemark`` command and subcommand, from its argparse parser.

The parser is built by ``tidemark.cli.main._parser`` (without running anything) and
walked through its subparsers recursively: each command gets its usage line, its
description (its own, or the help its parent lists it with), its subcommands and its
arguments and options with their help.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from refs.markdown import MissingDescriptionError, code, need, page, rst, table

SOURCE = "tidemark/cli/main.py"
#: Usage lines are wrapped at this width, whatever the terminal.
WIDTH = 100


@dataclass(frozen=True)
class Option:
    """One argument or option of a command."""

    invocation: str  #: ``--filter TABLE SQL``, ``-v, --verbose``, ``TABLE``
    help: str
    positional: bool


@dataclass(frozen=True)
class Command:
    """One command: ``tidemark``, ``tidemark snapshot start``, ..."""

    prog: str
    depth: int
    description: str
    usage: str
    options: tuple[Option, ...]
    subcommands: tuple[tuple[str, str], ...]  #: (full name, help)


def _formatter(parser: argparse.ArgumentParser) -> argparse.HelpFormatter:
    make: Any = parser.formatter_class  # a HelpFormatter class: it takes a width
    formatter: argparse.HelpFormatter = make(prog=parser.prog, width=WIDTH)
    return formatter


def usage(parser: argparse.ArgumentParser) -> str:
    """``parser``'s usage line(s), without ``usage:``, wrapped at :data:`WIDTH`."""
    formatter = _formatter(parser)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip().removeprefix("usage:").strip()


def _details(action: argparse.Action) -> list[str]:
    """What an option's help may leave out: its choices, default, being required or
    repeatable."""
    notes = []
    text = action.help or ""
    counts = {"+": "one or more", "*": "any number, or none", "?": "optional"}
    if not action.option_strings and action.nargs in counts:
        notes.append(counts[str(action.nargs)])
    if action.choices is not None and action.metavar is not None:  # else the usage lists them
        notes.append("one of " + ", ".join(code(c) for c in action.choices))
    if action.required and action.option_strings:
        notes.append("required")
    if isinstance(action, argparse._AppendAction) and "repeatable" not in text:
        notes.append("repeatable")
    default = action.default
    shown = default not in (None, False, [], "", argparse.SUPPRESS)
    if shown and not isinstance(action, argparse._StoreConstAction) and "default" not in text:
        notes.append(f"default: {code(default)}")
    return notes


def _option(action: argparse.Action, prog: str) -> Option:
    name = "/".join(action.option_strings) or str(action.metavar or action.dest)
    text = need(action.help, f"option {name} of {prog!r}")
    notes = _details(action)
    invocation = _formatter(argparse.ArgumentParser(prog=prog))._format_action_invocation(action)
    full = rst(text) + (f" ({'; '.join(notes)})" if notes else "")
    return Option(invocation, full, positional=not action.option_strings)


def commands(
    parser: argparse.ArgumentParser, description: str | None = None, depth: int = 0
) -> Iterator[Command]:
    """``parser`` and every subcommand under it, depth first, in the order they were
    added. :class:`MissingDescriptionError` names the first command or option without help.
    """
    text = need(parser.description or description, f"command {parser.prog!r}")
    options: list[Option] = []
    children: list[tuple[argparse.ArgumentParser, str | None]] = []
    listed: list[tuple[str, str]] = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            seen: set[int] = set()
            for name, child in action.choices.items():
                if id(child) in seen:  # an alias: listed with its command
                    continue
                seen.add(id(child))
                help_text = helps.get(name) or child.description
                if not help_text:
                    raise MissingDescriptionError(f"command {child.prog!r} has no description")
                children.append((child, help_text))
                listed.append((child.prog, help_text))
            continue
        options.append(_option(action, parser.prog))
    yield Command(
        prog=parser.prog,
        depth=depth,
        description=text,
        usage=usage(parser),
        options=tuple(options),
        subcommands=tuple(listed),
    )
    for child, help_text in children:
        yield from commands(child, help_text, depth + 1)


def sentence(text: str) -> str:
    """``text`` as a sentence: a capital first, a full stop last."""
    text = rst(text.strip())
    return text[:1].upper() + text[1:] + ("" if text.endswith((".", "!", "?")) else ".")


def anchor(prog: str) -> str:
    """The heading id of a command: ``tidemark snapshot start`` -> ``tidemark-snapshot-start``."""
    return "-".join(prog.split())


def _command_block(command: Command) -> str:
    level = "#" * min(2 + max(command.depth - 1, 0), 4)
    parts = [
        f"{level} {command.prog} {{#{anchor(command.prog)}}}",
        sentence(command.description),
        f"```text\n{command.usage}\n```",
    ]
    if command.subcommands:
        rows = [
            (f"[{code(prog.split()[-1])}](#{anchor(prog)})", text)
            for prog, text in command.subcommands
        ]
        parts += ["Subcommands:", table(["Command", "Description"], rows)]
    arguments = [o for o in command.options if o.positional]
    if arguments:
        rows = [(code(o.invocation), o.help) for o in arguments]
        parts += ["Arguments:", table(["Argument", "Description"], rows)]
    flags = [o for o in command.options if not o.positional]
    if flags:
        rows = [(code(o.invocation), o.help) for o in flags]
        parts += ["Options:", table(["Option", "Description"], rows)]
    return "\n\n".join(parts)


def cli_page(parser: argparse.ArgumentParser) -> str:
    """The page for ``parser`` and its subcommands."""
    found = list(commands(parser))
    opening = (
        f"Every {code(parser.prog)} command and subcommand, with its usage, what it does and "
        "its arguments and options. This page is generated from the code: the argparse "
        f"parser of {code(SOURCE)}, walked through its subcommands (see "
        "`docs/gen/refs/cli.py`). Every command also takes `-h`/`--help`."
    )
    return page("Command line", opening, *(_command_block(c) for c in found))


def generate() -> str:
    """The page for the ``tidemark`` script."""
    from tidemark.cli import main

    return cli_page(main._parser())
