"""``python -m mempp.bench <benchmark> [options]``: the ``mempp bench`` command on its own."""

import sys

from mempp.bench.cli import main

sys.exit(main())
