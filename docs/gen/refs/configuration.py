"""``reference/configuration.md``: every field of :class:`tidemark.core.config.Config`.

A field's description is the ``#:`` comment block directly above it in the source
(continuation lines joined); a section's is its class's docstring. The environment
variable follows ``_apply_env``: ``TIDEMARK_<SECTION>__<FIELD>``, the part after the
first ``__`` naming the field, so only fields of a top-level section have one.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import json
import tokenize
import types
import typing
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from refs.markdown import (
    MissingDescriptionError,
    code,
    first_paragraph,
    need,
    page,
    paragraphs,
    rst,
    table,
)

SOURCE = "tidemark/core/config.py"


@dataclass(frozen=True)
class Field:
    """One configuration field, as the page shows it."""

    path: str  #: its YAML path, ``processor.batch_size``
    type: str  #: readable: ``int``, ``list[str]``, ``"a" | "b"``
    default: str  #: as YAML writes it
    env: str | None  #: the environment variable that overrides it, if any
    secret: bool
    description: str  #: Markdown
    rule: str = ""  #: a range it must lie in, when the loader checks one


@dataclass(frozen=True)
class Section:
    """A section dataclass (``kafka``, ``source``, ...) and its fields."""

    path: str
    description: str
    fields: tuple[Field, ...]


def comments_by_line(source: str) -> dict[int, str]:
    """The ``#:`` comments of ``source`` that stand alone on their line, by line number."""
    found: dict[int, str] = {}
    lines = source.splitlines()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT or not token.string.startswith("#:"):
            continue
        row = token.start[0]
        if lines[row - 1].lstrip().startswith("#:"):
            found[row] = token.string[2:].strip()
    return found


def field_comments(source: str) -> dict[str, dict[str, str]]:
    """Per class of ``source`` (by name), per annotated field, its ``#:`` comment block
    (lines joined with spaces; absent when the line above the field is no such comment)."""
    comments = comments_by_line(source)
    found: dict[str, dict[str, str]] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        fields = found.setdefault(node.name, {})
        for statement in node.body:
            if not isinstance(statement, ast.AnnAssign):
                continue
            if not isinstance(statement.target, ast.Name):
                continue
            block: list[str] = []
            row = statement.lineno - 1
            while row in comments:
                block.insert(0, comments[row])
                row -= 1
            if block:
                fields[statement.target.id] = " ".join(line for line in block if line)
    return found


def class_docstrings(source: str) -> dict[str, str]:
    """The docstring of each class of ``source`` that has one, by name."""
    return {
        node.name: doc
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef) and (doc := ast.get_docstring(node))
    }


def module_comments(source: str) -> dict[str, str]:
    """The ``#:`` comment block above each module-level assignment of ``source``."""
    comments = comments_by_line(source)
    found = {}
    for statement in ast.parse(source).body:
        if isinstance(statement, ast.Assign | ast.AnnAssign):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            block: list[str] = []
            row = statement.lineno - 1
            while row in comments:
                block.insert(0, comments[row])
                row -= 1
            for target in targets:
                if isinstance(target, ast.Name) and block:
                    found[target.id] = " ".join(block)
    return found


def type_name(hint: Any) -> str:
    """A type as a reader writes it: ``int``, ``list[str]``, ``"a" | "b"``."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(type_name(a) for a in args)}]" if args else name
    if hint is type(None):
        return "null"
    if isinstance(hint, type):
        return hint.__name__
    return str(hint)


def yaml_value(value: Any) -> str:
    """``value`` as YAML writes it, on one line."""
    if value == "":
        return '""'
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000, allow_unicode=True)
    return text.removesuffix("\n...\n").strip()


def default_of(item: dataclasses.Field[Any]) -> Any:
    """The default of a dataclass field (its factory called)."""
    if item.default is not dataclasses.MISSING:
        return item.default
    if item.default_factory is not dataclasses.MISSING:
        return item.default_factory()
    return dataclasses.MISSING


def env_name(prefix: str, path: str) -> str | None:
    """The variable ``_apply_env`` reads for ``path`` (``section.field``); ``None`` for a
    deeper field (``TIDEMARK_A__B__C`` names field ``b__c`` of section ``a``)."""
    parts = path.split(".")
    if len(parts) != 2:
        return None
    return f"{prefix}{parts[0].upper()}__{parts[1].upper()}"


def sections(
    root: type[Any],
    source: str,
    *,
    env_prefix: str = "TIDEMARK_",
    secrets: Collection[str] = (),
    positive: Collection[tuple[str, str]] = (),
    ports: Collection[tuple[str, str]] = (),
) -> list[Section]:
    """Every section of ``root`` (a dataclass whose fields are section dataclasses), nested
    ones after their parent, with their fields described from ``source``.

    ``secrets``: field names kept as text and out of logs (``_SECRETS``); ``positive`` and
    ``ports``: the ``(section, field)`` pairs the loader checks. Raises
    :class:`MissingDescriptionError` naming the first field or section with no description.
    """
    comments = field_comments(source)
    docs = class_docstrings(source)
    found: list[Section] = []

    def walk(cls: type[Any], path: str) -> None:
        hints = typing.get_type_hints(cls)
        fields: list[Field] = []
        nested: list[tuple[type[Any], str]] = []
        for item in dataclasses.fields(cls):
            where = f"{path}.{item.name}"
            hint = hints[item.name]
            if dataclasses.is_dataclass(hint):
                nested.append((typing.cast(type, hint), where))
                continue
            described = comments.get(cls.__name__, {}).get(item.name)
            description = need(described, f"configuration field {where}")
            secret = item.name in secrets
            default = default_of(item)
            key = (path.split(".")[0], item.name) if path.count(".") == 0 else None
            rule = ""
            if key in positive:
                rule = "greater than 0"
            elif key in ports:
                rule = "a port number, 0 to 65535"
            fields.append(
                Field(
                    path=where,
                    type=type_name(hint),
                    default="(required)" if default is dataclasses.MISSING else yaml_value(default),
                    env=env_name(env_prefix, where),
                    secret=secret,
                    description=rst(description),
                    rule=rule,
                )
            )
        doc = docs.get(cls.__name__)
        if doc is None:
            raise MissingDescriptionError(f"configuration section {path} has no docstring")
        found.append(Section(path, first_paragraph(doc), tuple(fields)))
        for child, where in nested:
            walk(child, where)

    hints = typing.get_type_hints(root)
    for item in dataclasses.fields(root):
        hint = hints[item.name]
        if not dataclasses.is_dataclass(hint):
            raise MissingDescriptionError(
                f"{root.__name__}.{item.name}: a top-level field must be a section dataclass"
            )
        walk(typing.cast(type, hint), item.name)
    return found


def _anchor(path: str) -> str:
    """A field's or section's id: its YAML path (``#processor.batch_size``, ``#kafka``)."""
    return path


def _field_block(item: Field) -> str:
    facts = [f"**Type:** {code(item.type)}"]
    if item.rule:
        facts.append(f"**Must be:** {item.rule}")
    if item.secret:
        facts.append("**Default:** none (a secret)")
    else:
        facts.append(f"**Default:** {code(item.default)}")
    if item.env:
        facts.append(f"**Environment:** {code(item.env)}")
    else:
        facts.append("**Environment:** none (set its section's mapping)")
    lines = [
        f"### {code(item.path)} {{#{_anchor(item.path)}}}",
        item.description,
        " · ".join(facts),
    ]
    if item.secret:
        lines.append(
            f"A secret: kept out of `repr` and logs, read from {code(item.env)} as text "
            "(never parsed as YAML); a file that holds it must have mode 0600."
            if item.env
            else "A secret: kept out of `repr` and logs."
        )
    return "\n\n".join(lines)


def _section_block(section: Section) -> str:
    level = "##" if "." not in section.path else "###"
    rows = [
        (
            f"[{code(f.path.rsplit('.', 1)[1])}](#{_anchor(f.path)})",
            code(f.type),
            "none (a secret)" if f.secret else code(f.default),
        )
        for f in section.fields
    ]
    parts = [
        f"{level} {code(section.path)} {{#{_anchor(section.path)}}}",
        section.description,
        table(["Field", "Type", "Default"], rows),
        *(_field_block(f) for f in section.fields),
    ]
    return "\n\n".join(parts)


def overview(
    module_doc: str | None,
    load_doc: str | None,
    scalar_doc: str | None,
    private_doc: str | None,
    *,
    default_path: str,
    env_prefix: str,
    secrets: Collection[str],
    env_only: Mapping[str, tuple[str, str]],
) -> str:
    """The page's explanation of the file and its overrides, from the module's docstrings.

    ``env_only``: variables read from the environment alone, by name: (constant, its
    ``#:`` comment)."""
    parts = ["## The file and the environment", *paragraphs(module_doc)]
    load = " ".join(paragraphs(need(load_doc, "load_config's docstring")))
    parts.append(
        f"The file is {code(default_path)} in the working directory unless a command's "
        f"`--config` names another. How `load_config` reads it:\n\n> {load}"
    )
    scalar = " ".join(paragraphs(need(scalar_doc, "_parse_scalar's docstring")))
    secret_names = ", ".join(code(s) for s in sorted(secrets))
    parts.append(
        f"An environment variable {code(env_prefix + '<SECTION>__<FIELD>')} overrides "
        f"{code('<section>.<field>')} of the file: the name is read in lower case, and what "
        f"follows the first `__` names the field, so only the fields of a top-level section "
        f"have one. {scalar} A secret ({secret_names}) is kept as text. Each field below names "
        "its variable."
    )
    private = " ".join(paragraphs(private_doc))
    if private:
        parts.append(private)
    if env_only:
        rows = [(code(name), rst(text)) for name, (_const, text) in sorted(env_only.items())]
        parts += [
            "Read from the environment only, never from the file:",
            table(["Variable", "Description"], rows),
        ]
    return "\n\n".join(parts)


def configuration_page(found: list[Section], explanation: str) -> str:
    """The whole page."""
    opening = (
        "Every field of Tidemark's configuration file, section by section, with its YAML "
        "path, type, default, the environment variable that overrides it and what it does. "
        f"This page is generated from the code: the dataclasses of {code(SOURCE)} and the "
        "`#:` comment above each field (see `docs/gen/refs/configuration.py`)."
    )
    return page("Configuration", opening, explanation, *(_section_block(s) for s in found))


def generate() -> str:
    """The page for Tidemark's own configuration."""
    from tidemark.core import config

    source = Path(config.__file__).read_text()
    constants = module_comments(source)
    env_only = {
        getattr(config, name): (name, text)
        for name, text in constants.items()
        if name.endswith("_ENV") and isinstance(getattr(config, name, None), str)
    }
    private_names = {"_SECRETS", "_POSITIVE", "_PORTS"}
    missing = private_names - set(vars(config))
    if missing:  # pragma: no cover - config.py renamed them
        raise MissingDescriptionError(f"config.py has no {', '.join(sorted(missing))}")
    found = sections(
        config.Config,
        source,
        env_prefix=config.ENV_PREFIX,
        secrets=config._SECRETS,
        positive=config._POSITIVE,
        ports=config._PORTS,
    )
    explanation = overview(
        config.__doc__,
        config.load_config.__doc__,
        config._parse_scalar.__doc__,
        config._check_private.__doc__,
        default_path=config.DEFAULT_CONFIG_PATH,
        env_prefix=config.ENV_PREFIX,
        secrets=config._SECRETS,
        env_only=env_only,
    )
    return configuration_page(found, explanation)
