"""The compiled part of the distribution; setuptools reads everything else from pyproject.toml.

The C extensions (``tidemark/core/_jsonscan.c``, ``tidemark/core/_avroread.c``,
``tidemark/core/_records.c`` and ``processor/reconcile/_fused.c``) are built by every
``pip install``, editable ones included: a C compiler and the Python headers are needed
(``make setup`` installs them on Debian).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tidemark.core._jsonscan",
            ["tidemark/core/_jsonscan.c"],
            extra_compile_args=["-Wall", "-Wextra", "-Werror"],
        ),
        Extension(
            "tidemark.core._avroread",
            ["tidemark/core/_avroread.c"],
            extra_compile_args=["-Wall", "-Wextra", "-Werror"],
        ),
        Extension(
            "tidemark.core._records",
            ["tidemark/core/_records.c"],
            extra_compile_args=["-Wall", "-Wextra", "-Werror"],
        ),
        Extension(
            "processor.reconcile._fused",
            ["processor/reconcile/_fused.c"],
            include_dirs=["tidemark/core"],  # jsonscan_api.h: the scanner's C interface
            depends=["tidemark/core/jsonscan_api.h"],
            extra_compile_args=["-Wall", "-Wextra", "-Werror"],
        ),
    ]
)
