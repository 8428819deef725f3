"""The compiled part of the distribution; setuptools reads everything else from pyproject.toml.

The C extensions (``tidemark/_jsonscan.c``, ``tidemark/_avroread.c``, ``tidemark/_records.c``
and ``processor/reconcile/_fused.c``) are built by every ``pip install``, editable ones
included: a C compiler and the Python headers are needed (``make setup`` installs them on
Debian).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tidemark._jsonscan",
            ["tidemark/_jsonscan.c"],
            extra_compile_args=["-Wall", "-Wextra", "-Werror"],
        ),
        Extension(
            "tidemark._avroread",
            ["tidemark/_avroread.c"],
            extra_compile_args=["-Wall", "-Wextra", "-Werror"],
        ),
        Extension(
            "tidemark._records",
            ["tidemark/_records.c"],
            extra_compile_args=["-Wall", "-Wextra", "-Werror"],
        ),
        Extension(
            "processor.reconcile._fused",
            ["processor/reconcile/_fused.c"],
            include_dirs=["tidemark"],  # jsonscan_api.h: the scanner's C interface
            depends=["tidemark/jsonscan_api.h"],
            extra_compile_args=["-Wall", "-Wextra", "-Werror"],
        ),
    ]
)
