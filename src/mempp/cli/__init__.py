"""The ``mempp`` command, mirroring the library one to one: ``main`` assembles the parser and
dispatches, ``add`` stores a document, ``records`` reads the store out (get, info, export),
``search`` the ranked hits, evidence and ask, ``consolidate`` the LLM's relating of rows,
``time`` the time-and-truth commands (history, changes, supersede, archive, redact, undo,
runs), ``graph`` the entity graph's, ``verify`` the integrity check, ``reembed`` the encoder
switch, ``transfer`` dump, restore and backup, ``output`` what they share when they report.
Each command parses and validates its arguments, calls the library (``Memory``, the
importers, the server) and prints; no logic of its own lives here.
"""

from mempp.cli.main import main

__all__ = ["main"]
