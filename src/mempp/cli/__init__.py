"""The ``mempp`` command, mirroring the library one to one: ``main`` holds the parser and the
core commands (add, ingest/import, search, evidence, get, export, info, serve, ask,
consolidate), ``time`` the time-and-truth commands (history, changes, supersede, archive,
redact), ``graph`` the entity graph's, ``verify`` the integrity check. Each command parses
and validates its arguments, calls the library (``Memory``, the importers, the server) and
prints; no logic of its own lives here.
"""

from mempp.cli.main import main

__all__ = ["main"]
