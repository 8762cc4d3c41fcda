"""``mempp index enable|disable|list``: the store's optional indexes (mempp.store.indexes).

``enable NAME`` builds the index over every stored row in one transaction (a progress bar on
stderr when it is a terminal) and keeps it on every write from then on; ``disable NAME``
drops it; ``list`` shows each known index and whether this store has it. The context index
takes its rule (``mempp.store.context.ContextRule``): ``--rule text|sum``, ``--depth``,
``--chars`` (text), ``--decay`` (sum); unnamed parts keep what the store had.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import Any

from tqdm import tqdm

from mempp.errors import InvalidInput
from mempp.store.context import RULE_KINDS, ContextRule, ContextStore
from mempp.store.indexes import OPTIONAL_INDEXES


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "index",
        help="enable, disable or list the store's optional indexes (e.g. the keyword leg's)",
    )
    actions = parser.add_subparsers(dest="index_action", metavar="ACTION", required=True)
    names = ", ".join(OPTIONAL_INDEXES)
    enable = actions.add_parser("enable", help="build an index and keep it on every write")
    enable.add_argument("name", help=f"the index: {names}")
    enable.add_argument(
        "--rule",
        choices=RULE_KINDS,
        default=None,
        help="context: how each context is made: text (encodes the predecessors' texts) or "
        "sum (adds the stored vectors; no encoding)",
    )
    enable.add_argument("--depth", type=int, default=None, help="context: predecessors read")
    enable.add_argument(
        "--chars", type=int, default=None, help="context, text rule: characters a predecessor"
    )
    enable.add_argument(
        "--decay",
        type=float,
        default=None,
        help="context, sum rule: weight of the k-th predecessor back is DECAY**k",
    )
    disable = actions.add_parser("disable", help="drop an index")
    disable.add_argument("name", help=f"the index: {names}")
    listing = actions.add_parser("list", help="the known indexes and which are enabled")
    listing.add_argument("--json", action="store_true", help="print a JSON list")


def run(memory: Any, args: argparse.Namespace) -> int:
    if args.index_action == "list":
        enabled = set(memory.indexes())
        rows = [
            {"index": name, "enabled": name in enabled, "summary": index.summary}
            for name, index in OPTIONAL_INDEXES.items()
        ]
        if args.json:
            json.dump(rows, sys.stdout)
            sys.stdout.write("\n")
        else:
            for row in rows:
                shown = "enabled " if row["enabled"] else "disabled"
                print(f"{row['index']}  {shown}  {row['summary']}")
        return 0
    if args.index_action == "disable":
        done = memory.disable_index(args.name)
        print(f"dropped the {args.name} index" if done else f"the {args.name} index is not enabled")
        return 0
    shaping = {
        field: value
        for field in ("rule", "depth", "chars", "decay")
        if (value := getattr(args, field, None)) is not None
    }
    if shaping:
        return _enable_context(memory, args.name, shaping)
    bar = tqdm(unit=" rows", file=sys.stderr, disable=None, dynamic_ncols=True)

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    try:
        built = memory.enable_index(args.name, progress=progress)
    finally:
        bar.close()
    print(
        f"built the {args.name} index; every write keeps it from now on"
        if built
        else f"the {args.name} index is already enabled"
    )
    return 0


def _enable_context(memory: Any, name: str, shaping: dict[str, Any]) -> int:
    """``enable context`` with a rule: the store's rule (else the default) with the parts
    named changed; the contexts are made again when it differs."""
    if name != "context":
        raise InvalidInput(
            f"--{', --'.join(shaping)}: only the context index takes a rule", field="name"
        )
    store = memory.store
    current = (store.context_rule() if isinstance(store, ContextStore) else None) or ContextRule()
    fields = {"kind" if key == "rule" else key: value for key, value in shaping.items()}
    rule = replace(current, **fields)
    unread = "decay" if rule.kind == "text" else "chars"
    if unread in fields:
        raise InvalidInput(f"the {rule.kind} rule does not read --{unread}", field=unread)
    was_enabled = "context" in memory.indexes()
    made = memory.enable_context(rule=rule)
    state = "is enabled" if was_enabled else "is built; every write keeps it from now on"
    print(f"the context index {state} ({rule.describe()}); {made} contexts made")
    return 0
