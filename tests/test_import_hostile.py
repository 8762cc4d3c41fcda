"""Importers on generated hostile input (a fixed seed, bounded): every message or mail ends as
a document, an error, a skip or a notice, never an exception."""

from __future__ import annotations

import json
import mailbox
import random
from pathlib import Path

from mempp import Document
from mempp.importers import ItemError, Notice, Skipped
from mempp.importers.mail import MailImporter
from mempp.importers.slack import SlackImporter
from test_import_mail import CHAIN, alternative, html_only, latin1_declared
from test_import_slack import CHANNELS, GENERAL_0312, PRICING_0313, USERS

ITEM_TYPES = (Document, ItemError, Skipped, Notice)
NASTY_TEXT = [
    "",
    " ",
    "\x00",
    "<",
    ">",
    "<@",
    "<#C1|",
    "<!date^1|x>",
    "<@U1|>",
    "<|>",
    "&amp;",
    "\ud800",
    "\u202e",
    "a" * 5000,
    "<https://x|<y>>",
    "\\",
    "\n\n",
]


def _value(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 2**70, 1.5, float("1e308")])
    if kind in (3, 4, 5):
        return "".join(rng.choice(NASTY_TEXT) for _ in range(rng.randrange(4)))
    if kind in (6, 7):
        return [_value(rng, depth + 1) for _ in range(rng.randrange(3))]
    keys = ["title", "name", "text", "id", "real_name", "type", "elements", "fields", "pretext"]
    return {rng.choice(keys): _value(rng, depth + 1)}


def _mutated(rng: random.Random, message: dict[str, object]) -> object:
    out = dict(message)
    for key in rng.sample(
        [
            "text",
            "user",
            "ts",
            "thread_ts",
            "subtype",
            "type",
            "files",
            "attachments",
            "bot_profile",
            "user_profile",
            "username",
            "bot_id",
            "blocks",
            "comment",
            "file",
        ],
        k=rng.randrange(1, 4),
    ):
        out[key] = (
            _value(rng)
            if rng.random() < 0.8
            else rng.choice(
                ["1710000000.000001", "U1", "bot_message", "message", "file_comment", "bot_add"]
            )
        )
    return out if rng.random() < 0.95 else _value(rng)


def test_slack_messages_of_every_shape(tmp_path: Path) -> None:
    rng = random.Random(1301)
    root = tmp_path / "export"
    (root / "general").mkdir(parents=True)
    users = [*USERS, *(_value(rng) for _ in range(20))]
    (root / "users.json").write_text(json.dumps(users))
    (root / "channels.json").write_text(json.dumps([*CHANNELS, 5, {"id": None}]))
    base = GENERAL_0312 + [m for m in PRICING_0313 if isinstance(m, dict)]
    total = 0
    for day in range(1, 29):
        messages = [_mutated(rng, rng.choice(base)) for _ in range(60)]
        total += len(messages)
        (root / "general" / f"2024-02-{day:02d}.json").write_text(json.dumps(messages))
    found = list(SlackImporter().read(root))
    assert all(isinstance(item, ITEM_TYPES) for item in found)
    per_message = [i for i in found if not isinstance(i, Notice)]
    assert len(per_message) == total  # one outcome per message, none lost
    assert sum(isinstance(i, Document) for i in found) > total // 4


def test_mail_with_flipped_bytes(tmp_path: Path) -> None:
    rng = random.Random(1302)
    seeds = [*CHAIN, alternative(), html_only(), latin1_declared()]
    box = mailbox.mbox(tmp_path / "fuzz.mbox")
    count = 300
    for _ in range(count):
        raw = bytearray(rng.choice(seeds))
        for _ in range(rng.randrange(1, 12)):
            at = rng.randrange(len(raw))
            raw[at] = rng.choice([0, 10, 13, 32, 58, 60, 61, 62, 0x80, 0xFF, rng.randrange(256)])
        if rng.random() < 0.1:
            raw = raw[: rng.randrange(len(raw))]
        box.add(bytes(raw).replace(b"\nFrom ", b"\n>From "))
    box.flush()
    box.close()
    found = list(MailImporter().read(tmp_path / "fuzz.mbox"))
    assert all(isinstance(item, ITEM_TYPES) for item in found)
    outcomes = [i for i in found if not isinstance(i, Notice)]
    assert len(outcomes) <= count and sum(isinstance(i, Document) for i in found) > count // 2
