"""Import benchmark for the chat, board, meeting and note importers (``discord``,
``transcript``, ``trello``, ``teams``, ``keep``): items/s on the real samples and on a large
export generated here in each tool's format, and what each import found.

Not a test: run on demand; ratios within one run are what compare (the machine is shared).
Per source and export it reports the items the importer met (documents, skipped and failed),
the records a store would take (a dry run against an empty store; ``--store N`` also stores
a generated export of N items with random vectors in place of the encoder), the
documents whose author is a resolved name (not missing, not a raw id), the documents with a
date, and the read rate (items/s, parsing only).

    nice -n 10 python benchmarks/bench_import_sources.py --items 100000 --store 5000

The real samples are read from ``../shared/realdata`` beside the repository (else
``/work/shared/realdata``) and left out when absent.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
import zipfile
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from mempp import Document, Memory
from mempp.importers import ItemError, Skipped, get, run_import


class RandomEmbedder:
    """Random unit vectors: a stand-in encoder whose cost is next to nothing."""

    name = "random/384"
    dim = 384

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        vectors = self.rng.standard_normal((len(texts), self.dim)).astype(np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


REPO = Path(__file__).resolve().parents[1]
REALDATA = next(
    (p for p in (REPO.parent / "shared" / "realdata", Path("/work/shared/realdata")) if p.exists()),
    None,
)
SAMPLES = {
    "discord": ["sources/discord/dcef-example-guild"],
    "transcript": [
        "sources/transcripts/w3c-ccg/2025-03-25/irc.log",
        "sources/transcripts/docling/webvtt_example_03.vtt",
    ],
    "trello": ["sources/trello/nextcloud-deck/data-trelloJson.json"],
    "teams": ["sources/teams/zulip-TeamsDataExport"],
    "keep": [
        "sources/google-takeout/keep-obsidian-importer",
        "sources/google-takeout/jimmy-test-data/keep-takeout-20240920T140112Z-001.zip",
    ],
}
RAW_IDS = ("author_id", "user_id", "member_id")
START = datetime(2024, 1, 1, 9, tzinfo=UTC)
WORDS = (
    "deploy release budget review plan ship friday customer bug fix meeting notes api "
    "latency migration schema quarter roadmap hire onboarding incident postmortem"
).split()


def _words(rng: random.Random, low: int = 5, high: int = 30) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def gen_discord(root: Path, n: int, rng: random.Random) -> Path:
    people = [
        {"id": str(10**17 + k), "name": f"user{k}", "nickname": f"Person {k}"} for k in range(200)
    ]
    messages = []
    for k in range(n):
        when = START + timedelta(seconds=37 * k)
        message = {
            "id": str(10**18 + k),
            "type": "GuildMemberJoin" if k % 100 == 0 else "Default",
            "timestamp": when.isoformat(),
            "timestampEdited": (when + timedelta(minutes=3)).isoformat() if k % 50 == 1 else None,
            "content": _words(rng),
            "author": rng.choice(people),
            "attachments": [],
            "embeds": [],
            "stickers": [],
            "mentions": [],
        }
        if k % 10 == 3 and k > 10:
            message["type"] = "Reply"
            message["reference"] = {"messageId": str(10**18 + k - rng.randint(1, 10))}
        messages.append(message)
    path = root / "Guild - general [1].json"
    data = {
        "guild": {"id": "9", "name": "Guild"},
        "channel": {"id": "1", "type": "GuildTextChat", "name": "general"},
        "messages": messages,
        "messageCount": n,
    }
    path.write_text(json.dumps(data))
    return path


def gen_transcript(root: Path, n: int, rng: random.Random) -> Path:
    people = [f"Speaker_{k}" for k in range(40)]
    lines = ["[2024-01-01T09:00:00.000Z]\t<Transcriber>\tscribe+"]
    for k in range(n - 1):
        when = (START + timedelta(seconds=3 * k)).isoformat(timespec="milliseconds")
        stamp = when.replace("+00:00", "Z")
        speaker = people[(k // 4) % len(people)]
        if k % 20 == 0:
            lines.append(f"[{stamp}]\t<{rng.choice(people)}>\tpresent+")
        elif k % 7 == 0:
            lines.append(f"[{stamp}]\t<{rng.choice(people)}>\t{_words(rng, 3, 10)}")
        else:
            lines.append(f"[{stamp}]\t<Transcriber>\t{speaker}: {_words(rng)}")
    path = root / "2024-01-01" / "irc.log"
    path.parent.mkdir()
    path.write_text("\n".join(lines) + "\n")
    return path


def gen_trello(root: Path, n: int, rng: random.Random) -> Path:
    members = [{"id": f"{k:024x}", "fullName": f"Member {k}"} for k in range(50)]
    lists = [{"id": f"l{k}", "name": name} for k, name in enumerate(["Todo", "Doing", "Done"])]
    cards, actions = [], []
    card_count = max(1, n // 10)
    for k in range(card_count):
        cid = f"{0x65920000 + k:08x}{k:016x}"
        cards.append(
            {
                "id": cid,
                "name": _words(rng, 2, 6),
                "desc": _words(rng),
                "idList": "l0",
                "shortLink": f"s{k}",
                "idLabels": [],
            }
        )
        who = rng.choice(members)
        actions.append(
            {
                "id": f"c{k}",
                "type": "createCard",
                "date": (START + timedelta(hours=k)).isoformat(),
                "idMemberCreator": who["id"],
                "data": {"card": {"id": cid, "shortLink": f"s{k}"}},
            }
        )
    for k in range(n - 2 * card_count):
        card = rng.choice(cards)
        who = rng.choice(members)
        when = (START + timedelta(minutes=11 * k)).isoformat()
        ref = {"id": card["id"], "name": card["name"], "shortLink": card["shortLink"]}
        if k % 3 == 0:
            data = {
                "card": ref,
                "listBefore": lists[0],
                "listAfter": lists[1],
                "old": {"idList": "l0"},
            }
            kind = "updateCard"
        else:
            data, kind = {"card": ref, "text": _words(rng)}, "commentCard"
        actions.append(
            {"id": f"a{k}", "type": kind, "date": when, "idMemberCreator": who["id"], "data": data}
        )
    board = {
        "id": "b1",
        "name": "Board",
        "members": members,
        "lists": lists,
        "labels": [],
        "cards": cards,
        "actions": actions,
        "checklists": [],
    }
    path = root / "board.json"
    path.write_text(json.dumps(board))
    return path


def gen_teams(root: Path, n: int, rng: random.Random) -> Path:
    team = "t1"
    folder = root / "teams" / team
    folder.mkdir(parents=True)
    members = [{"Name": f"Member {k}", "UserId": f"u{k}"} for k in range(100)]
    (root / "teams" / "teamsList.json").write_text(json.dumps([{"Name": "Org", "GroupsId": team}]))
    (folder / f"channels_{team}.json").write_text(
        json.dumps([{"Id": "c1", "DisplayName": "general"}])
    )
    (folder / f"teamMembers_{team}.json").write_text(json.dumps(members))
    messages = []
    for k in range(n):
        who = rng.choice(members)
        messages.append(
            {
                "Id": str(k),
                "Body": {"ContentType": "html", "Content": f"<p>{_words(rng)}</p>"},
                "CreatedDateTime": (START + timedelta(seconds=41 * k)).isoformat(),
                "ReplyToId": str(k - k % 5) if k % 5 else None,
                "MessageType": "message",
                "From": {"User": {"Id": who["UserId"], "DisplayName": who["Name"]}},
                "ChannelIdentity": {"ChannelId": "c1", "TeamId": team},
            }
        )
    (folder / f"messages_{team}.json").write_text(json.dumps(messages))
    return root


def gen_keep(root: Path, n: int, rng: random.Random) -> Path:
    path = root / "takeout.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as packed:
        for k in range(n):
            created = int((START + timedelta(minutes=k)).timestamp() * 1_000_000)
            note = {
                "title": f"note {k}",
                "textContent": _words(rng),
                "isTrashed": k % 50 == 0,
                "createdTimestampUsec": created,
                "userEditedTimestampUsec": created + 60_000_000,
                "labels": [{"name": rng.choice(WORDS)}],
            }
            packed.writestr(f"Takeout/Keep/note {k}.json", json.dumps(note))
    return path


GENERATORS: dict[str, Callable[[Path, int, random.Random], Path]] = {
    "discord": gen_discord,
    "transcript": gen_transcript,
    "trello": gen_trello,
    "teams": gen_teams,
    "keep": gen_keep,
}


def measure(source: str, paths: list[Path]) -> dict[str, float]:
    found = documents = skipped = failed = authors = dated = 0
    began = time.perf_counter()
    importer = get(source)
    for path in paths:
        for item in importer.read(path):
            if isinstance(item, Document):
                meta = item.meta or {}
                found += int(meta.get("turns", 1))  # a transcript's record is a run of lines
                documents += 1
                raw = {meta.get(key) for key in RAW_IDS}
                authors += item.author is not None and item.author not in raw
                dated += item.date is not None
            elif isinstance(item, Skipped):
                found += 1
                skipped += 1
            elif isinstance(item, ItemError):
                found += 1
                failed += 1
    seconds = time.perf_counter() - began
    stored = run_import(None, get(source), paths, dry_run=True).added
    return {
        "items": found,
        "documents": documents,
        "skipped": skipped,
        "failed": failed,
        "records": stored,
        "authors": authors,
        "dated": dated,
        "seconds": seconds,
        "rate": found / seconds if seconds else 0.0,
    }


def stored_rate(source: str, path: Path, db: Path) -> tuple[int, float]:
    with Memory(db, embedder=RandomEmbedder()) as memory:
        began = time.perf_counter()
        report = run_import(memory, get(source), path, batch_size=500)
        return report.added, time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=100_000, help="items per generated export")
    parser.add_argument("--store", type=int, default=0, help="also store a generated export of N")
    parser.add_argument("--only", nargs="*", default=list(GENERATORS), choices=list(GENERATORS))
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="mempp-bench-sources-") as scratch:
        for source in args.only:
            if REALDATA is not None:
                paths = [REALDATA / p for p in SAMPLES[source] if (REALDATA / p).exists()]
                if paths:
                    rows.append((source, "real samples", measure(source, paths), None))
            folder = Path(scratch) / source
            folder.mkdir()
            rng = random.Random(7)
            built = time.perf_counter()
            path = GENERATORS[source](folder, args.items, rng)
            print(f"{source}: generated {args.items} items in {time.perf_counter() - built:.1f} s")
            stored = None
            if args.store:
                small = Path(scratch) / f"{source}-small"
                small.mkdir()
                stored = stored_rate(
                    source,
                    GENERATORS[source](small, args.store, random.Random(7)),
                    Path(scratch) / f"{source}.db",
                )
            rows.append((source, f"generated {args.items:,}", measure(source, [path]), stored))
    print()
    print(
        "| source | export | items found | records stored | authors resolved | dates found "
        "| failed | read s | items/s | stored (random vectors) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for source, export, m, stored in rows:
        store_cell = (
            "–"
            if stored is None
            else f"{stored[0]:,} in {stored[1]:.1f} s ({stored[0] / stored[1]:,.0f}/s)"
        )
        print(
            f"| {source} | {export} | {m['items']:,} | {m['records']:,} | {m['authors']:,} "
            f"| {m['dated']:,} | {m['failed']:,} | {m['seconds']:.2f} | {m['rate']:,.0f} "
            f"| {store_cell} |"
        )


if __name__ == "__main__":
    main()
