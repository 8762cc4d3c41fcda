"""``mempp reembed --encoder NAME``: re-encode the whole store with another encoder.

A progress bar on stderr (when it is a terminal), one summary line at the end. Interrupted
(Ctrl-C, kill -9, a lost connection), the same command resumes from the rows not yet done;
``--restart`` drops a run to another encoder, ``--abandon`` drops the run under way. Until a
run completes, the store and every search keep the old vectors (see mempp.reembed).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from tqdm import tqdm

from mempp.encoders import ENCODERS, ENV_ENCODER, embedder_named, registry_name
from mempp.errors import InvalidInput
from mempp.reembed import DEFAULT_BATCH, abandon, reembed


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "reembed",
        help="re-encode the whole store with another encoder (resumable; searches use the "
        "old vectors until it completes)",
    )
    parser.add_argument(
        "--encoder",
        dest="target",
        default=None,
        help=f"the encoder to switch to: {', '.join(ENCODERS)}",
    )
    parser.add_argument(
        "--batch",
        type=int,
        default=DEFAULT_BATCH,
        help=f"rows encoded and stored per transaction (default {DEFAULT_BATCH})",
    )
    parser.add_argument(
        "--restart", action="store_true", help="drop a run to another encoder left unfinished"
    )
    parser.add_argument(
        "--abandon", action="store_true", help="drop the run under way; change nothing else"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(memory: Any, args: argparse.Namespace) -> int:
    if args.abandon:
        if args.target or args.restart:
            raise InvalidInput("--abandon takes no --encoder or --restart")
        dropped = abandon(memory.store)
        print("dropped the re-encoding under way" if dropped else "no re-encoding under way")
        return 0
    target = args.target or args.encoder or os.environ.get(ENV_ENCODER)
    if not target:
        raise InvalidInput(f"--encoder: name the encoder to switch to ({', '.join(ENCODERS)})")
    embedder = embedder_named(target)
    bar = tqdm(unit=" rows", file=sys.stderr, disable=None, dynamic_ncols=True)

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    try:
        report = reembed(
            memory.store, embedder, batch=args.batch, restart=args.restart, progress=progress
        )
    finally:
        bar.close()
    if args.json:
        json.dump(report.to_dict(), sys.stdout)
        sys.stdout.write("\n")
        return 0
    name = registry_name(report.new_encoder) or target
    print(
        f"re-encoded {report.total} rows with {report.new_encoder} ({report.dim}-d; "
        f"{report.resumed} by an earlier run); the store now uses it: open it with "
        f"--encoder {name} (or {ENV_ENCODER}={name})"
    )
    return 0
