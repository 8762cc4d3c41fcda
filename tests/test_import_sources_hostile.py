"""Type confusion in the JSON exports: every value of a small export of each tool, one at a
time, replaced by each of a few values of other kinds. Each import must end in items
(documents, skips, one-line failures) or an ``InvalidInput`` for the path; never another
exception."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import test_import_discord as discord_case
import test_import_keep as keep_case
import test_import_teams as teams_case
import test_import_trello as trello_case
from mempp import InvalidInput
from mempp.importers import ItemError, Notice, Skipped, get
from mempp.records import Document

HOSTILE: tuple[Any, ...] = (None, 7, -1.5, True, "x", "", [], [1, "a"], {}, {"k": None})


def paths(value: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every key path of a JSON value (the root itself left out)."""
    if at:
        yield at
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from paths(inner, (*at, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value[:3]):
            yield from paths(inner, (*at, index))


def replaced(value: Any, at: tuple[Any, ...], new: Any) -> Any:
    out = copy.deepcopy(value)
    holder = out
    for key in at[:-1]:
        holder = holder[key]
    holder[at[-1]] = new
    return out


def check(source: str, path: Path, case: str) -> None:
    try:
        for item in get(source).read(path):
            assert isinstance(item, Document | ItemError | Skipped | Notice), case
            if isinstance(item, ItemError | Notice):
                text = item.reason if isinstance(item, ItemError) else item.message
                assert "\n" not in text and len(text) < 600, case
    except InvalidInput as exc:
        assert "\n" not in str(exc), case


def exports() -> list[tuple[str, Any, str]]:
    return [
        ("discord", discord_case.export("500", discord_case.base_messages()), "ops.json"),
        ("trello", trello_case.board(), "board.json"),
        ("teams", teams_case.base(), "messages_t-1.json"),
        ("keep", keep_case.NOTES["Groceries"], "Groceries.json"),
    ]


@pytest.mark.parametrize("source,data,name", exports(), ids=[e[0] for e in exports()])
def test_every_value_of_another_kind_is_an_item_or_one_line(tmp_path, source, data, name) -> None:
    cases = 0
    for at in paths(data):
        for new in HOSTILE:
            path = tmp_path / f"case{cases}" / name
            path.parent.mkdir()
            path.write_text(json.dumps(replaced(data, at, new)))
            check(source, path, f"{source} {at!r} = {new!r}")
            cases += 1
    assert cases > 100


PIECES = ("-->", "<v ", "</v>", "[", "]", "<", ">", ":", "\n", "\n\n", "\x00", "\ud7ff", "é", "99:")


@pytest.mark.parametrize("name", ["standup.vtt", "call.srt", "meeting.log"])
def test_mangled_transcripts_are_items_or_one_line(tmp_path, name) -> None:
    import random

    import test_import_transcript as transcript_case

    text = {
        "standup.vtt": transcript_case.VTT,
        "call.srt": transcript_case.SRT,
        "meeting.log": transcript_case.IRC,
    }[name]
    rng = random.Random(name)
    for number in range(150):
        mangled = text
        for _ in range(rng.randint(1, 6)):
            at = rng.randrange(len(mangled) + 1)
            cut = rng.randint(0, 4)
            mangled = mangled[:at] + rng.choice(PIECES) + mangled[at + cut :]
        path = tmp_path / f"case{number}" / name
        path.parent.mkdir()
        path.write_text(mangled, encoding="utf-8")
        try:
            for item in get("transcript", date="2024-03-12").read(path):
                assert isinstance(item, Document | ItemError | Skipped | Notice)
        except InvalidInput as exc:
            assert "\n" not in str(exc)
