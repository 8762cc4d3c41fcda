"""Import benchmark: ``import slack`` throughput on a synthetic workspace export, and the share
of import time spent outside the encoder (parsing, name resolution, dedupe, SQLite writes).

Not a test: run on demand and compare ratios within one run (shared machines are noisy). It
writes an export in Slack's format (``users.json``, ``channels.json``, a folder per channel of
daily JSON files; optionally zipped) of N messages: 200 users, 25 channels over a year, 5-40
words each from a Zipf vocabulary, a quarter of them thread replies, some mentions, links,
files and join messages. Then, into a fresh SQLite store each:

- ``read``: the importer alone (parse and build documents, no store);
- ``stand-in``: the whole import with random unit vectors in place of the encoder, so what is
  left is the import's own cost;
- ``minilm``: the whole import with the real all-MiniLM-L6-v2 encoder, its time inside the
  encoder measured.

    nice -n 10 python benchmarks/bench_import.py --messages 50000 --real 5000
    nice -n 10 python benchmarks/bench_import.py --messages 50000 --real 50000 --zip

The closing line estimates the share outside the encoder at ``--messages`` with the real
encoder from the two runs (the stand-in's outside time, plus the encoder's measured seconds
per message times N) when ``--real`` is smaller than ``--messages``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
import zipfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from bench_core import TimedEmbedder, vocabulary
from mempp import Memory
from mempp.importers import get, run_import


class RandomEmbedder:
    """Random unit vectors: a stand-in whose cost is next to nothing."""

    name = "random/384"
    dim = 384

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        vectors = self.rng.standard_normal((len(texts), self.dim)).astype(np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def write_export(root: Path, messages: int, seed: int = 7) -> Path:
    rng = np.random.default_rng(seed)
    words = vocabulary()
    p = 1.0 / np.arange(1, len(words) + 1) ** 1.1
    p /= p.sum()
    users = [
        {"id": f"U{i:05d}", "name": f"user{i}", "profile": {"real_name": f"Person {i}"}}
        for i in range(200)
    ]
    channels = [{"id": f"C{i:04d}", "name": f"channel-{i}"} for i in range(25)]
    root.mkdir(parents=True)
    (root / "users.json").write_text(json.dumps(users))
    (root / "channels.json").write_text(json.dumps(channels))
    start = datetime(2024, 1, 1, tzinfo=UTC).timestamp()
    seconds = np.sort(rng.uniform(0, 365 * 86_400, size=messages))
    days: dict[tuple[str, str], list[dict[str, object]]] = {}
    open_threads: dict[str, list[str]] = {c["name"]: [] for c in channels}
    for number, offset in enumerate(seconds):
        channel = channels[int(rng.integers(len(channels)))]
        moment = start + float(offset)
        ts = f"{int(moment)}.{number % 1_000_000:06d}"
        user = users[int(rng.integers(len(users)))]["id"]
        length = int(rng.integers(5, 41))
        text = " ".join(words[i] for i in rng.choice(len(words), size=length, p=p))
        message: dict[str, object] = {"type": "message", "user": user, "ts": ts, "text": text}
        roll = rng.random()
        if roll < 0.02:
            message.update(subtype="channel_join", text=f"<@{user}> has joined the channel")
        elif roll < 0.07:
            other = users[int(rng.integers(len(users)))]["id"]
            message["text"] = f"<@{other}> {text}"
        elif roll < 0.10:
            message["text"] = f"{text} <https://example.com/{number}|see the doc>"
        elif roll < 0.11:
            message["files"] = [{"name": f"f{number}.pdf", "title": f"Report {number}"}]
        threads = open_threads[str(channel["name"])]
        if threads and rng.random() < 0.25:
            message["thread_ts"] = threads[int(rng.integers(len(threads)))]
        elif rng.random() < 0.1:
            message["thread_ts"] = ts
            threads.append(ts)
            del threads[:-20]
        day = datetime.fromtimestamp(moment, UTC).date().isoformat()
        days.setdefault((str(channel["name"]), day), []).append(message)
    for (channel_name, day), content in days.items():
        folder = root / channel_name
        folder.mkdir(exist_ok=True)
        (folder / f"{day}.json").write_text(json.dumps(content))
    return root


def zip_export(folder: Path, target: Path) -> Path:
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in sorted(folder.rglob("*")):
            if file.is_file():
                archive.write(file, file.relative_to(folder).as_posix())
    return target


def timed_import(export: Path, db: Path, embedder) -> dict[str, float]:  # type: ignore[no-untyped-def]
    timed = TimedEmbedder(embedder)
    with Memory(db, embedder=timed) as memory:
        begin = time.perf_counter()
        report = run_import(memory, get("slack"), export)
        total = time.perf_counter() - begin
    return {
        "added": report.added,
        "skipped": sum(report.skipped.values()),
        "failed": report.failed,
        "total": total,
        "encoder": timed.seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--real", type=int, default=5_000, help="messages for the MiniLM run")
    parser.add_argument("--zip", action="store_true", help="import the export as a .zip")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mempp-bench-import-"))
    try:
        rows = []
        exports = {}
        for size in sorted({args.messages, args.real}):
            folder = write_export(work / f"export-{size}", size)
            exports[size] = zip_export(folder, work / f"export-{size}.zip") if args.zip else folder
        big = exports[args.messages]
        begin = time.perf_counter()
        read = sum(1 for _ in get("slack").read(big))
        parse = time.perf_counter() - begin
        print(
            f"read     {args.messages:>7} messages: {parse:7.1f} s, {read} items "
            f"({args.messages / parse:,.0f} messages/s)"
        )
        stand_in = timed_import(big, work / "stand-in.db", RandomEmbedder())
        rows.append(("stand-in", args.messages, stand_in))
        from mempp.encoders.minilm import MiniLMEmbedder

        real = timed_import(exports[args.real], work / "minilm.db", MiniLMEmbedder())
        rows.append(("minilm", args.real, real))
        for label, size, row in rows:
            outside = row["total"] - row["encoder"]
            print(
                f"{label:<8} {size:>7} messages: {row['total']:7.1f} s total, "
                f"{row['encoder']:7.1f} s in the encoder, {outside:6.1f} s outside "
                f"({outside / row['total']:.1%}); {size / row['total']:,.0f} messages/s; "
                f"added {row['added']:.0f}, skipped {row['skipped']:.0f}, "
                f"failed {row['failed']:.0f}"
            )
        if args.real != args.messages:
            per_message = real["encoder"] / real["added"]
            outside = stand_in["total"] - stand_in["encoder"]
            encoder = per_message * stand_in["added"]
            print(
                f"estimate {args.messages:>7} messages with MiniLM: {outside + encoder:7.1f} s, "
                f"{outside / (outside + encoder):.1%} outside the encoder "
                f"({per_message * 1000:.1f} ms per message in the encoder, measured at "
                f"{args.real})"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
