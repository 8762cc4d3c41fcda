"""``python -m mempp.cli``: the ``mempp`` command (as ``python -m mempp``)."""

from mempp.cli.main import main

raise SystemExit(main())
