"""``python -m mempp``: the ``mempp`` command."""

from mempp.cli import main

raise SystemExit(main())
