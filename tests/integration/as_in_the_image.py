"""``tidemark`` as the image runs it: the packages of the ``dev`` and ``test`` extras cannot be
imported (the image installs the distribution without extras).

    python tests/integration/as_in_the_image.py process --config F

The hidden packages are every distribution the extras require, directly or not, that the
distribution itself does not: read from the installed metadata, so a new extra is hidden too.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

DISTRIBUTION = "tidemark-cdc"


def _name(requirement: str) -> str:
    return re.split(r"[\s;<>=!~\[(]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _closure(names: set[str]) -> set[str]:
    """``names`` and every distribution they require, as installed."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [_name(r) for r in requires if "extra ==" not in r]
    return seen


def hidden_modules() -> set[str]:
    """Top-level modules of the extras' distributions that the base install lacks."""
    requires = metadata.requires(DISTRIBUTION) or []
    base = {_name(r) for r in requires if "extra ==" not in r}
    extras = {_name(r) for r in requires if "extra ==" in r}
    only_extras = _closure(extras) - _closure(base)
    modules = set()
    for module, distributions in metadata.packages_distributions().items():
        if {d.lower().replace("_", "-") for d in distributions} & only_extras:
            modules.add(module)
    return modules


class _Hidden(MetaPathFinder):
    def __init__(self, modules: set[str]) -> None:
        self.modules = modules

    def find_spec(
        self, name: str, path: Any = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name.partition(".")[0] in self.modules:
            raise ModuleNotFoundError(f"No module named {name!r} (not installed in the image)")
        return None


if __name__ == "__main__":
    sys.meta_path.insert(0, _Hidden(hidden_modules()))
    from tidemark.cli.main import main

    sys.exit(main(sys.argv[1:]))
