"""How much longer the tests marked ``fuzz`` run: ``TIDEMARK_FUZZ_SCALE`` times (``make fuzz``
sets 50, ``make sanitize`` 10). A test that reads :data:`SCALE` is marked ``fuzz``
(tests/unit/test_suite.py checks it)."""

from __future__ import annotations

import os

SCALE = int(os.environ.get("TIDEMARK_FUZZ_SCALE", "1"))
