"""What the ``mempp`` commands share when they report: the exit codes, an error line, a JSON
line on stdout, and the hint that a scope holds nothing.

Exit codes: 0 success, 1 operational error (store cannot be opened, ...), 2 bad input
(bad date, bad option; nothing is stored), 3 ingest finished but some items failed.
"""

from __future__ import annotations

import json
import sys

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_PARTIAL = 0, 1, 2, 3
INFO_SCOPES_SHOWN = 10  # `info` names this many scopes; --json lists them all


def fail(message: str) -> None:
    first_line = message.strip().splitlines()[0] if message.strip() else "failed"
    print(f"mempp: error: {first_line}", file=sys.stderr)


def empty_scope_hint(memory) -> str:  # type: ignore[no-untyped-def]
    """A hint when the scope itself holds nothing: a mistyped --scope finds no records."""
    if memory.store.count(memory.scope, active_only=False):
        return ""
    scopes = memory.store.scopes()
    shown = ", ".join(scopes[:INFO_SCOPES_SHOWN]) + (
        ", ..." if len(scopes) > INFO_SCOPES_SHOWN else ""
    )
    return f" (scope {memory.scope!r} holds no records; scopes here: {shown or 'none'})"


def print_json(value: object) -> None:
    json.dump(value, sys.stdout, ensure_ascii=False, indent=None)
    sys.stdout.write("\n")
