"""The site's generated reference pages (``docs/gen/``): complete, described, hand-free.

The generators are called as plain functions, without mkdocs. What the code offers is
listed here independently of them (dataclass fields, collectors' ``describe()``, the
parser's actions, the OpenAPI paths, the results files) and looked for in the pages;
anything without a description makes a generator raise with its name.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import Counter, Gauge
from prometheus_client.metrics import MetricWrapperBase

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "gen"))

from refs import api, benchmarks, changelog, cli, configuration, inserts, metrics  # noqa: E402
from refs.markdown import MissingDescriptionError  # noqa: E402

import processor.metrics  # noqa: E402
import spark_sink.metrics  # noqa: E402
from processor.openapi import OPENAPI  # noqa: E402
from tidemark.cli.main import _parser  # noqa: E402
from tidemark.core import config  # noqa: E402

RESULTS = ROOT / "bench" / "results"


def opening(page: str) -> str:
    """The paragraph after a page's title."""
    title, paragraph = page.split("\n\n")[:2]
    assert title.startswith("# ")
    return paragraph


def section(page: str, heading: str) -> str:
    """The text of ``page`` from the heading that starts with ``heading`` to the next
    heading of the same or a higher level."""
    assert heading in page, f"{heading!r} is not on the page"
    start = page.index(heading)
    level = len(heading) - len(heading.lstrip("#"))
    after = page.find("\n", start) % (len(page) + 1)
    nearer = re.compile(rf"^#{{1,{level}}} ", flags=re.MULTILINE).search(page, after)
    return page[start : nearer.start()] if nearer else page[start:]


# Configuration ---------------------------------------------------------------------------


def config_fields(cls: type[Any], path: str = "") -> Iterator[str]:
    """Every leaf field of ``cls`` by YAML path, nested sections walked."""
    hints = typing.get_type_hints(cls)
    for item in dataclasses.fields(cls):
        where = f"{path}.{item.name}" if path else item.name
        if dataclasses.is_dataclass(hints[item.name]):
            yield from config_fields(hints[item.name], where)
        else:
            yield where


def test_every_configuration_field_is_on_its_page_with_its_description_and_variable() -> None:
    page = configuration.generate()
    assert "tidemark/core/config.py" in opening(page)
    assert "## The file and the environment" in page
    assert config.load_config.__doc__
    assert "A missing file at the default path gives the built-in defaults" in page
    source = Path(config.__file__).read_text()
    found = {
        f.path: f
        for s in configuration.sections(config.Config, source, secrets=config._SECRETS)
        for f in s.fields
    }
    paths = list(config_fields(config.Config))
    assert sorted(found) == sorted(paths)
    assert len(paths) > 80
    for path in paths:
        block = section(page, f"### `{path}`")
        field = found[path]
        assert field.description.strip() and field.description in block, path
        assert f"`{field.type}`" in block
        if path.count(".") > 1:  # a nested section's field: set through its section's mapping
            assert field.env is None and "none (set its section's mapping)" in block
            continue
        section_name, key = path.split(".")
        # the variable named is one that _apply_env reads into this very field
        assert field.env is not None and f"`{field.env}`" in block
        assert config._apply_env({}, {field.env: "1"}) == {
            section_name: {key: 1 if not field.secret else "1"}
        }
        if key in config._SECRETS:
            assert "A secret" in block and "none (a secret)" in block
    batch = section(page, "### `processor.batch_size`")
    assert "`5000`" in batch and "`TIDEMARK_PROCESSOR__BATCH_SIZE`" in batch
    assert "greater than 0" in batch
    watermarks = section(page, "### `snapshot.watermarks`")
    assert '`"read-only" | "signal-table"`' in watermarks
    assert "`[public]`" in section(page, "### `source.schemas`")
    assert '`""`' in section(page, "### `processor.input_pattern`")
    assert "`TIDEMARK_API_TOKEN`" in page  # the environment-only variables


SYNTHETIC_CONFIG = '''
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Inner:
    """A nested section."""

    #: Deep down.
    depth: int = 2


@dataclass(frozen=True)
class Part:
    """A section."""

    #: The first line
    #: and its continuation.
    size: int = 1
    # an ordinary comment describes nothing
    plain: str = ""
    #: Separated from its field by a blank line, so not its description.

    bare: list[str] = field(default_factory=list)
    inner: Inner = field(default_factory=Inner)


@dataclass(frozen=True)
class Root:
    """Root."""

    part: Part = field(default_factory=Part)
'''


def synthetic(source: str) -> type[Any]:
    """The ``Root`` dataclass ``source`` defines (its module registered while it runs)."""
    module = types.ModuleType("synthetic_config")
    sys.modules[module.__name__] = module
    try:
        exec(compile(source, "synthetic_config.py", "exec", dont_inherit=True), module.__dict__)
    finally:
        del sys.modules[module.__name__]
    return typing.cast(type, module.Root)


def test_a_field_without_a_description_stops_the_generation_with_its_name() -> None:
    with pytest.raises(MissingDescriptionError, match=r"part\.plain"):
        configuration.sections(synthetic(SYNTHETIC_CONFIG), SYNTHETIC_CONFIG)
    described = SYNTHETIC_CONFIG.replace("    plain: str", "    #: Plain.\n    plain: str").replace(
        "\n    bare:", "\n    #: Bare.\n    bare:"
    )
    found = configuration.sections(synthetic(described), described)
    fields = {f.path: f for s in found for f in s.fields}
    assert [s.path for s in found] == ["part", "part.inner"]
    assert fields["part.size"].description == "The first line and its continuation."
    assert fields["part.bare"].description == "Bare."
    assert fields["part.size"].env == "TIDEMARK_PART__SIZE"
    assert fields["part.inner.depth"].env is None  # _apply_env cannot reach it
    assert fields["part.bare"].default == "[]" and fields["part.plain"].default == '""'
    undocumented = described.replace('    """A nested section."""\n', "")
    with pytest.raises(MissingDescriptionError, match=r"part\.inner"):
        configuration.sections(synthetic(undocumented), undocumented)


# Metrics ---------------------------------------------------------------------------------


def test_every_metric_of_the_processor_and_the_sink_is_on_its_page() -> None:
    page = metrics.generate()
    assert "processor/metrics.py" in opening(page) and "spark_sink/metrics.py" in opening(page)
    count = 0
    for heading, module in (("## Processor", processor.metrics), ("## Sink", spark_sink.metrics)):
        part = section(page, heading)
        for collector in vars(module).values():
            if not isinstance(collector, MetricWrapperBase):
                continue
            (described,) = collector.describe()
            name = described.name + ("_total" if described.type == "counter" else "")
            assert described.documentation.strip()
            row = next(line for line in part.splitlines() if line.startswith(f"| `{name}` |"))
            assert f"| {described.type} |" in row
            assert described.documentation in row
            for label in collector._labelnames:
                assert f"`{label}`" in row
            count += 1
    assert count >= 30


def test_a_metric_without_help_stops_the_generation_with_its_name() -> None:
    module = types.ModuleType("synthetic_metrics")
    module.LIVE = Gauge("synthetic_live", "Described", registry=None)  # type: ignore[attr-defined]
    module.MUTE = Counter("synthetic_mute_total", "", registry=None)  # type: ignore[attr-defined]
    with pytest.raises(MissingDescriptionError, match="synthetic_mute_total"):
        metrics.metrics_page([("synthetic", module)])
    module.MUTE = Counter("synthetic_mute_total", "Counted", registry=None)  # type: ignore[attr-defined]
    page = metrics.metrics_page([("synthetic", module)])
    assert "| `synthetic_mute_total` | counter | none | Counted. |" in page


# Command line ----------------------------------------------------------------------------


def walk(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                yield from walk(child)


def test_every_command_and_option_is_on_its_page_with_its_help() -> None:
    page = cli.generate()
    assert "tidemark/cli/main.py" in opening(page)
    commands = list(walk(_parser()))
    assert len(commands) > 20
    for parser in commands:
        heading = "#" * (2 if parser.prog.count(" ") <= 1 else 3) + f" {parser.prog} {{#"
        part = section(page, heading)
        assert "```text\n" + parser.prog in part  # its usage line
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            assert action.help and action.help.strip(), (parser.prog, action.dest)
            name = action.option_strings[0] if action.option_strings else action.metavar
            name = name or action.dest
            row = next(line for line in part.splitlines() if line.startswith(f"| `{name}"))
            assert action.help in row
    start = section(page, "### tidemark snapshot start {#")
    assert "| `TABLE` | a table to backfill (schema.table) (one or more) |" in start


def test_a_command_or_option_without_help_stops_the_generation_with_its_name() -> None:
    parser = argparse.ArgumentParser(prog="tool", description="a tool")
    parser.add_argument("--fine", help="has help")
    parser.add_argument("--mute")
    with pytest.raises(MissingDescriptionError, match="--mute"):
        cli.cli_page(parser)
    parser = argparse.ArgumentParser(prog="tool", description="a tool")
    sub = parser.add_subparsers()
    sub.add_parser("quiet")
    with pytest.raises(MissingDescriptionError, match="tool quiet"):
        cli.cli_page(parser)
    with pytest.raises(MissingDescriptionError, match="'tool'"):
        cli.cli_page(argparse.ArgumentParser(prog="tool"))


# Management API --------------------------------------------------------------------------


def test_every_operation_of_the_document_is_on_its_page_with_its_summary() -> None:
    page = api.generate()
    assert "processor/openapi.py" in opening(page)
    assert "[openapi.json](openapi.json)" in opening(page)
    assert json.loads(api.document_text(api.load())) == json.loads(json.dumps(OPENAPI))
    count = 0
    for path, item in OPENAPI["paths"].items():
        for method, operation in item.items():
            if method == "parameters":
                continue
            title = f"{method.upper()} /api/v1{path}"
            part = section(page, f"### `{title}`")
            text = operation.get("summary") or operation.get("description")
            assert text and text.strip()
            assert text[1:] in part
            for status, response in operation["responses"].items():
                assert f"| `{status}` | {response['description']} |" in part
            viewer_refused = "403" in operation["responses"]
            assert ("a viewer's token" in part and "is answered 403" in part) == viewer_refused
            count += 1
    assert count >= 15
    assert "### ExecuteSnapshot {#schema-executesnapshot}" in page


def test_an_operation_without_a_summary_stops_the_generation_with_its_name() -> None:
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "servers": [{"url": "/api"}],
        "paths": {
            "/ok": {"get": {"summary": "fine", "responses": {"200": {"description": "ok"}}}},
            "/mute": {"post": {"responses": {"200": {"description": "ok"}}}},
        },
    }
    with pytest.raises(MissingDescriptionError, match="POST /api/mute"):
        api.api_page(document)
    document["paths"]["/mute"]["post"]["description"] = "described at length"
    assert "### `POST /api/mute`" in api.api_page(document)


# Benchmarks ------------------------------------------------------------------------------

NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?![\w.%])")


def numbers_in(item: Any) -> Iterator[Any]:
    """Every number of a JSON document, and every figure written inside its strings."""
    if isinstance(item, dict):
        for key, value in item.items():
            yield from NUMBER.findall(str(key))
            yield from numbers_in(value)
    elif isinstance(item, list):
        for value in item:
            yield from numbers_in(value)
    elif isinstance(item, str):
        yield from NUMBER.findall(item)
    elif isinstance(item, int | float) and not isinstance(item, bool):
        yield item


def test_every_results_file_has_its_section_and_no_figure_is_typed_by_hand() -> None:
    page = benchmarks.generate(ROOT)
    assert "bench/results/" in opening(page) and "make bench" in page
    files = sorted(RESULTS.glob("*.json"))
    assert len(files) >= 10
    for path in files:
        part = section(page, f"## {benchmarks.renderer_of(path.stem)[0]} {{#")
        assert f"- Results file: `bench/results/{path.name}`" in part
        document = json.loads(path.read_text())
        if isinstance(document, dict) and document.get("command"):
            assert f"- Command: `{document['command']}`" in part
        if isinstance(document, dict) and document.get("commit"):
            assert f"- Commit: `{document['commit']}`" in part
        allowed = {
            benchmarks.number(n) if not isinstance(n, str) else n for n in numbers_in(document)
        }
        for line in part.splitlines():
            if not line.startswith("|"):
                continue
            text = re.sub(r"`[^`]*`", "", line)  # names, paths, commands
            for figure in NUMBER.findall(text):
                assert figure in allowed, f"{path.name}: {figure!r} is in no results field"


def test_every_events_per_s_of_the_envelopes_is_in_its_table() -> None:
    page = benchmarks.generate(ROOT)
    part = section(page, "## Envelopes {#envelopes}")
    rows = [line for line in part.splitlines() if line.startswith("| `") and line.count("|") > 4]
    document = json.loads((RESULTS / "envelopes.json").read_text())
    assert len(rows) == len(document["results"])
    for result, row in zip(document["results"], rows, strict=True):
        assert row.startswith(f"| `{result['program']}` | `{result['input']}` |")
        assert f"| {result['events_per_s']:,} |" in row
        for run in result["events_per_s_runs"]:
            assert f"{run:,}" in row
    times = section(page, "## Test time {#test_time}")
    for run in json.loads((RESULTS / "test_time.json").read_text())["runs"]:
        assert f"| `{run['commit']}` | `{run['command']}` |" in times


def test_a_results_file_of_an_unknown_kind_is_shown_field_by_field(tmp_path: Path) -> None:
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    (results / "novel.json").write_text(
        json.dumps(
            {
                "command": "python bench/novel.py",
                "seed": 7,
                "spread": {"min": 1.5, "median": 2.25, "max": 3.125},
                "samples": [{"name": "a", "ops_per_s": 123456}, {"name": "b", "extra": True}],
            }
        )
    )
    (results / "envelopes.json").write_text(json.dumps({"results": "not a list"}))
    page = benchmarks.benchmarks_page(results, tmp_path)
    novel = section(page, "## novel {#novel}")
    assert "| `seed` | 7 |" in novel
    assert "| `spread` | 2.25 (1.5–3.125) |" in novel
    assert "| a | 123,456 | — |" in novel and "| b | — | yes |" in novel
    assert "the generator knows no layout" in novel
    assert "- Results file: `bench/results/envelopes.json`" in page  # malformed: still shown


def test_figures_are_formatted_not_changed() -> None:
    assert benchmarks.number(1234567) == "1,234,567"
    assert benchmarks.number(2.37) == "2.37"
    assert benchmarks.number(5358.4) == "5,358.4"
    assert benchmarks.number(0.4891499699988344) == "0.489"
    assert benchmarks.number(943.31640625) == "943.3"
    assert benchmarks.number(-1.5) == "-1.5"


# Changelog -------------------------------------------------------------------------------


def test_the_changelog_page_is_the_changelog_with_links_fixed() -> None:
    page = changelog.generate(ROOT)
    text = (ROOT / "CHANGELOG.md").read_text()
    assert page.startswith("# Changelog\n")
    assert "CHANGELOG.md" in opening(page)
    for line in text.splitlines()[1:]:
        if line.strip() and "](" not in line:
            assert line in page
    fixed = changelog.fix_links(
        "See [ops](docs/operating/offsets.md#reset), [make](Makefile), "
        "[web](https://example.org/x.md), [here](#top) and `[code](kept.md)`."
    )
    assert fixed == (
        "See [ops](operating/offsets.md#reset), make (`Makefile`), "
        "[web](https://example.org/x.md), [here](#top) and `[code](kept.md)`."
    )


# -- module docstrings in hand-written pages -----------------------------------------------


def test_the_commit_protocol_page_takes_its_steps_from_the_code() -> None:
    """Written once, in ``processor/dataplane/commit.py``: the page shows its docstring."""
    page = ROOT / "docs" / "concepts" / "commit-protocol.md"
    assert page in inserts.pages(ROOT / "docs")
    filled = inserts.fill(page.read_text(), ROOT)
    assert "<!-- generated:" not in filled
    assert inserts.docstring_markdown(ROOT / "processor/dataplane/commit.py") in filled
    for step in ("2. produce outputs", "3. produce the batch's changelog", "5. commit the input"):
        assert step in filled


def test_a_marker_of_a_module_without_a_docstring_stops_the_build(tmp_path: Path) -> None:
    (tmp_path / "bare.py").write_text("x = 1\n")
    with pytest.raises(MissingDescriptionError, match="bare.py"):
        inserts.fill("<!-- generated: bare.py -->\n", tmp_path)
