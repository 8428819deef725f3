"""The compiled part of the distribution; setuptools reads everything else from pyproject.toml.

The C extensions (listed in ``tidemark/core/compiled.py``) are built by every ``pip
install``, editable ones included: a C compiler and the Python headers are needed (``make
setup`` installs them on Debian). Each is built from, and depends on, every C source and
header of the project, and keeps their digest as ``SOURCES_DIGEST``. ``TIDEMARK_CFLAGS``
adds compiler flags (``make sanitize`` builds with the sanitizers).
"""

import importlib.util
import os
import shlex
from pathlib import Path

from setuptools import Extension, setup

ROOT = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("compiled", ROOT / "tidemark/core/compiled.py")
assert _spec is not None and _spec.loader is not None
compiled = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compiled)

DIGEST = compiled.sources_digest(ROOT)
DEPENDS = [path.relative_to(ROOT).as_posix() for path in compiled.c_sources(ROOT)]
WARNINGS = ["-Wall", "-Wextra", "-Werror"]
EXTRA = shlex.split(os.environ.get("TIDEMARK_CFLAGS", ""))

setup(
    ext_modules=[
        Extension(
            name,
            [source],
            include_dirs=[compiled.INCLUDE_FOLDER],
            depends=DEPENDS,
            define_macros=[("TIDEMARK_SOURCES_DIGEST", f'"{DIGEST}"')],
            extra_compile_args=WARNINGS + EXTRA,
            extra_link_args=EXTRA,
        )
        for name, source in compiled.EXTENSIONS.items()
    ]
)
