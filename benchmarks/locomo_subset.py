"""Write a bounded LoCoMo subset for runs that cost LLM calls per stored turn.

Keeps, for each conversation named, its first ``--sessions`` sessions and the questions
whose gold evidence lies entirely within them (category 5, adversarial, is left to the
loader, which drops it by default). The subset is written as ``OUT/locomo/<id>.json``, the
layout ``mempp bench locomo --data OUT`` reads. Nothing is tuned: which sessions and
conversations is a size bound, chosen before any run.

    python benchmarks/locomo_subset.py --data ../shared/datasets --conversations 26 \\
        --sessions 4 --out /tmp/locomo-subset

Keep the output out of the repository: it is benchmark data.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

_SESSION = re.compile(r"^session_(\d+)$")
_EVIDENCE = re.compile(r"^D(\d+):\d+$")


def subset(conversation: dict[str, Any], sessions: int) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for key, value in conversation.items():
        match = re.match(r"^(?:events_)?session_(\d+)(?:_date_time)?$", key)
        if match is None:
            if key != "qa":
                kept[key] = value
        elif int(match.group(1)) <= sessions:
            kept[key] = value

    def inside(question: dict[str, Any]) -> bool:
        evidence = question.get("evidence") or []
        numbers = [_EVIDENCE.match(str(e).strip()) for e in evidence]
        return bool(numbers) and all(m is not None and int(m.group(1)) <= sessions for m in numbers)

    kept["qa"] = [q for q in conversation.get("qa", []) if inside(q)]
    return kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="the datasets folder")
    parser.add_argument("--conversations", nargs="+", required=True, metavar="ID")
    parser.add_argument("--sessions", type=int, required=True, help="first N sessions kept")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.sessions < 1:
        parser.error("--sessions must be >= 1")
    folder = args.out / "locomo"
    folder.mkdir(parents=True, exist_ok=True)
    for name in args.conversations:
        source = args.data / "locomo" / f"{name}.json"
        try:
            conversation = json.loads(source.read_text("utf-8"))
        except (OSError, ValueError) as exc:
            print(f"{source}: {exc}", file=sys.stderr)
            return 1
        kept = subset(conversation, args.sessions)
        turns = sum(len(v) for k, v in kept.items() if _SESSION.match(k))
        (folder / f"{name}.json").write_text(json.dumps(kept), "utf-8")
        print(f"{name}: {turns} turns, {len(kept['qa'])} questions (before dropping category 5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
