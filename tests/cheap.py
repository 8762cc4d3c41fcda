"""What the property suites do once instead of once per generated case, each without changing
what a case checks (docs/security.md, "Hostile input at scale", says why for each).

* :func:`once_per_process`: the CLI's argument parser and the installed importers' entry
  points, built once. A real ``mempp`` process builds both once; a suite that runs the CLI
  in-process 10^5 times rebuilt them every case (a third of the hostile suite's time on
  SQLite, 25 ms for the parser and 17-34 ms for the entry-point scan each time). Both are
  pure functions of the installed code: the parser's ``parse_args`` does not change the
  parser (argparse copies an ``append`` option's default before appending), and no package
  is installed during a run.

The PostgreSQL schema template (a migrated empty database copied with ``CREATE DATABASE ...
TEMPLATE`` rather than migrated again) is in tests/engines.py, beside the databases it makes.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Iterator
from unittest import mock


@contextlib.contextmanager
def once_per_process() -> Iterator[None]:
    """Inside: ``mempp.cli.main.build_parser`` and ``mempp.importers._entry_points`` answer
    from their first call."""
    import mempp.importers

    main = importlib.import_module("mempp.cli.main")  # the module: mempp.cli exports main()
    with (
        mock.patch.object(main, "build_parser", functools.cache(main.build_parser)),
        mock.patch.object(
            mempp.importers, "_entry_points", functools.cache(mempp.importers._entry_points)
        ),
    ):
        yield
