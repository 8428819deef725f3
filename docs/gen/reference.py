"""Generate the site's reference pages from the code (run by mkdocs' ``gen-files`` plugin).

``mkdocs.yml`` runs this script with the repository's root as working directory; the
pages are rendered by the modules of ``docs/gen/refs/`` (pure functions, which
``tests/unit/test_reference_docs.py`` calls without mkdocs):

- ``reference/configuration.md``: ``tidemark/core/config.py``;
- ``reference/metrics.md``: ``processor/metrics.py`` and ``spark_sink/metrics.py``;
- ``reference/cli.md``: the parser of ``tidemark/cli/main.py``;
- ``reference/api.md`` and ``reference/openapi.json``: ``processor/openapi.py``;
- ``benchmarks.md``: ``bench/results/*.json``;
- ``changelog.md``: ``CHANGELOG.md``;
- hand-written pages with a ``<!-- generated: module.py -->`` line: that module's
  docstring in its place (``refs/inserts.py``).

Anything published without a description (a field, a metric, a command or option, an
operation) stops the build with its name.
"""

from __future__ import annotations

import sys
from pathlib import Path

import mkdocs_gen_files

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for path in (str(HERE), str(ROOT)):
    if path not in sys.path:
        sys.path.insert(0, path)
# ``mkdocs serve`` runs this again in the same process: the generators are read afresh.
for name in [m for m in sys.modules if m == "refs" or m.startswith("refs.")]:
    del sys.modules[name]

from refs import api, benchmarks, changelog, cli, configuration, inserts, metrics  # noqa: E402

PAGES = {
    "reference/configuration.md": (configuration.generate, "tidemark/core/config.py"),
    "reference/metrics.md": (metrics.generate, "processor/metrics.py"),
    "reference/cli.md": (cli.generate, "tidemark/cli/main.py"),
    "reference/api.md": (api.generate, "processor/openapi.py"),
    "benchmarks.md": (lambda: benchmarks.generate(ROOT), "bench/results"),
    "changelog.md": (lambda: changelog.generate(ROOT), "CHANGELOG.md"),
}


def main() -> None:
    """Write every page, and the API's document beside its page."""
    for name, (render, source) in PAGES.items():
        with mkdocs_gen_files.open(name, "w") as page:
            page.write(render())
        mkdocs_gen_files.set_edit_path(name, source)
    with mkdocs_gen_files.open(f"reference/{api.DOCUMENT_FILE}", "w") as document:
        document.write(api.document_text(api.load()))
    docs = ROOT / "docs"
    for path in inserts.pages(docs):
        name = path.relative_to(docs).as_posix()
        with mkdocs_gen_files.open(name, "w") as page:
            page.write(inserts.fill(path.read_text(), ROOT))


main()
