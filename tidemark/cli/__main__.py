"""``python -m tidemark.cli``: the ``tidemark`` command."""

import sys

from tidemark.cli.main import main

sys.exit(main())
