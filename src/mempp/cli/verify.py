"""``mempp verify``: check a store's integrity and say what is wrong, one line per check.

Exit 0 when every check passes, 1 when one fails (the store is still readable: mempp never
repairs anything by itself; see docs/architecture.md, "What the database enforces").
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_parser(commands: Any) -> None:
    verify = commands.add_parser(
        "verify",
        help="check the store: integrity, full-text index, vectors, append-only triggers",
    )
    verify.add_argument("--json", action="store_true", help="print a JSON list of checks")


def run(memory: Any, args: argparse.Namespace) -> int:
    checks = memory.verify()
    if args.json:
        json.dump([check.to_dict() for check in checks], sys.stdout)
        sys.stdout.write("\n")
    else:
        for check in checks:
            print(f"{'ok  ' if check.ok else 'FAIL'}  {check.name}: {check.detail}")
    return 0 if all(check.ok for check in checks) else 1
