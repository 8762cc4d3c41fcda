"""The Trello importer on the real board export (nextcloud/deck's test board, by path, never
copied) and on boards built here in Trello's JSON export format: comments, moves, edits,
re-imports, as-of answers, bad input."""

from __future__ import annotations

import copy
import json
import zipfile
from pathlib import Path

import pytest

from mempp import Document, InvalidInput, Memory
from mempp.importers import ItemError, Notice, Skipped, get, run_import
from mempp.importers.trello import TrelloImporter
from realdata import sample

import engines
from conftest import KeywordEmbedder

# The fixtures this module uses (pytest finds fixtures among module attributes).
pg_server = engines.pg_server
pg_url = engines.pg_url
engine_location = engines.engine_location

ANA = {"id": "m1", "fullName": "Ana López", "username": "ana"}
BO = {"id": "m2", "fullName": "Bo", "username": "bo"}


def action(aid: str, kind: str, when: str, who: dict | None, **data) -> dict:
    out = {"id": aid, "type": kind, "date": when, "data": data}
    if who is not None:
        out["idMemberCreator"] = who["id"]
        out["memberCreator"] = who
    return out


CARD_REF = {"id": "c1", "name": "Launch", "shortLink": "abc123", "idShort": 1}


def board() -> dict:
    return {
        "id": "b1",
        "name": "Roadmap",
        "url": "https://trello.com/b/xyz/roadmap",
        "members": [ANA, BO],
        "lists": [{"id": "l1", "name": "Doing"}, {"id": "l2", "name": "Done"}],
        "labels": [{"id": "lab1", "name": "release", "color": "green"}],
        "checklists": [
            {
                "id": "k1",
                "idCard": "c1",
                "name": "Steps",
                "checkItems": [
                    {"name": "Write notes", "state": "complete"},
                    {"name": "Tag build", "state": "incomplete"},
                ],
            }
        ],
        "cards": [
            {
                "id": "c1",
                "name": "Launch",
                "desc": "Ship v2 to everyone",
                "idList": "l2",
                "idLabels": ["lab1"],
                "shortLink": "abc123",
                "closed": False,
            },
            # No createCard action: dated by its id (0x5f5e1000 s = 2020-09-13T12:26:40Z).
            {
                "id": "5f5e1000aaaaaaaaaaaaaaaa",
                "name": "Old card",
                "idList": "l1",
                "shortLink": "old1",
            },
        ],
        "actions": [
            action(
                "a5", "commentCard", "2024-03-14T10:00:00.000Z", BO, text="Shipped!", card=CARD_REF
            ),
            action(
                "a4",
                "updateCard",
                "2024-03-13T09:00:00.000Z",
                ANA,
                card=CARD_REF,
                listBefore={"id": "l1", "name": "Doing"},
                listAfter={"id": "l2", "name": "Done"},
                old={"idList": "l1"},
            ),
            action(
                "a3",
                "commentCard",
                "2024-03-12T11:00:00.000Z",
                ANA,
                text="Blocked on review",
                card=CARD_REF,
            ),
            action(
                "a2",
                "addMemberToCard",
                "2024-03-12T10:30:00.000Z",
                ANA,
                card=CARD_REF,
                member={"id": "m2", "name": "Bo"},
            ),
            action(
                "a1",
                "createCard",
                "2024-03-12T10:00:00.000Z",
                ANA,
                card=CARD_REF,
                list={"id": "l1", "name": "Doing"},
            ),
            action("a0", "createList", "2024-03-01T10:00:00.000Z", ANA, list={"id": "l1"}),
        ],
    }


def write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def items(path: Path) -> list[object]:
    return list(TrelloImporter().read(path))


def docs(found: list[object]) -> list[Document]:
    return [i for i in found if isinstance(i, Document)]


def test_cards_comments_and_state_changes(tmp_path) -> None:
    found = items(write(tmp_path / "board.json", board()))
    by_source = {d.source: d for d in docs(found)}
    card = by_source["https://trello.com/c/abc123"]
    assert card.text == "Launch\n\nShip v2 to everyone\n\nSteps\n[x] Write notes\n[ ] Tag build"
    assert (card.author, card.date.text) == ("Ana López", "2024-03-12T10:00:00+00:00")
    assert card.tags == ("Roadmap", "Done", "release")
    assert card.meta["member_id"] == "m1" and card.meta["list"] == "Done"
    moved = by_source["trello://action/a4"]
    assert moved.text == "Ana López moved “Launch” from Doing to Done"
    assert moved.date.text == "2024-03-13T09:00:00+00:00" and moved.meta["state_change"] is True
    assert moved.tags == ("Roadmap", "Done")
    comment = by_source["https://trello.com/c/abc123#comment-a5"]
    assert (comment.author, comment.text) == ("Bo", "Shipped!")
    assert by_source["trello://action/a2"].text == "Ana López added Bo to “Launch”"
    assert {d.thread for d in docs(found) if "abc123" in d.source or "action" in d.source} == {
        "https://trello.com/c/abc123"
    }
    old = by_source["https://trello.com/c/old1"]
    assert old.date.text == "2020-09-13T12:26:40+00:00" and old.author is None
    assert sorted(s.reason for s in found if isinstance(s, Skipped)) == [
        "createCard (the card's own record)",
        "createList",
    ]


def test_archive_reopen_due_and_checklist_are_dated_sentences(tmp_path) -> None:
    data = board()
    data["actions"] = [
        action(
            "s1",
            "updateCard",
            "2024-04-01T00:00:00Z",
            BO,
            card={**CARD_REF, "closed": True},
            old={"closed": False},
        ),
        action(
            "s2",
            "updateCard",
            "2024-04-05T00:00:00Z",
            ANA,
            card={**CARD_REF, "closed": False},
            old={"closed": True},
        ),
        action(
            "s3",
            "updateCard",
            "2024-04-06T00:00:00Z",
            ANA,
            card={**CARD_REF, "due": "2024-05-01T12:00:00.000Z"},
            old={"due": None},
        ),
        action(
            "s4",
            "updateCheckItemStateOnCard",
            "2024-04-07T00:00:00Z",
            BO,
            card=CARD_REF,
            checkItem={"name": "Tag build", "state": "complete"},
        ),
        action("s5", "updateCard", "2024-04-08T00:00:00Z", BO, card=CARD_REF, old={"pos": 3}),
        *data["actions"],
    ]
    found = items(write(tmp_path / "board.json", data))
    by_source = {d.source: d for d in docs(found)}
    assert by_source["trello://action/s1"].text == "Bo archived “Launch”"
    assert by_source["trello://action/s2"].text == "Ana López reopened “Launch”"
    assert by_source["trello://action/s3"].text == (
        "Ana López set the due date of “Launch” to 2024-05-01T12:00:00.000Z"
    )
    assert by_source["trello://action/s4"].text == "Bo completed “Tag build” on “Launch”"
    assert by_source["trello://action/s1"].date.text == "2024-04-01T00:00:00+00:00"
    assert "updateCard (a reorder)" in {s.reason for s in found if isinstance(s, Skipped)}


def test_the_real_board() -> None:
    path = sample("sources/trello/nextcloud-deck/data-trelloJson.json")
    found = items(path)
    documents = docs(found)
    assert not [i for i in found if isinstance(i, ItemError | Notice)]
    assert [d.text for d in documents] == [
        "Name Card 7",
        "John Doe removed John Doe from “Name Card 7”",
        "John Doe added John Doe to “Name Card 7”",
    ]
    assert all(d.author == "John Doe" and d.date for d in documents)
    assert documents[0].date.text.startswith("2017-09-15T16:14:03")
    assert documents[0].source == "https://trello.com/c/fakeshortlinkcard7"
    assert sorted(s.reason for s in found if isinstance(s, Skipped)) == [
        "createBoard",
        "createCard (the card's own record)",
        "createList",
    ]


def test_reimport_edits_and_as_of(tmp_path, engine_location) -> None:
    first = write(tmp_path / "a" / "board.json", board())
    later_board = board()
    later_board["cards"][0]["desc"] = "Ship v2 to everyone, EU first"
    later_board["actions"].insert(
        0,
        action(
            "a6",
            "updateCard",
            "2024-03-15T08:00:00.000Z",
            BO,
            card=CARD_REF,
            old={"desc": "Ship v2 to everyone"},
        ),
    )
    later_board["actions"][1]["data"]["text"] = "Shipped! (EU next week)"
    later_board["actions"][1]["data"]["dateLastEdited"] = "2024-03-15T09:00:00.000Z"
    later = write(tmp_path / "b" / "board.json", later_board)
    with Memory(engine_location, embedder=KeywordEmbedder(["launch", "moved"])) as memory:
        report = run_import(memory, get("trello"), first)
        assert report.added == 6 and report.failed == 0
        assert run_import(memory, get("trello"), first).added == 0
        again = run_import(memory, get("trello"), later)
        # The edited card and the edited comment are new versions; the rest is stored.
        assert again.added == 2 and again.skipped["already imported"] == 4
        assert again.skipped["updateCard (a text edit, in the card's version)"] == 1
        texts = [r.text for r in memory.records() if r.source and "abc123" in r.source]
        assert sum("Ship v2 to everyone" in t for t in texts) == 2
        assert "Shipped!" in texts and "Shipped! (EU next week)" in texts
        dates = {r.text: r.date for r in memory.records() if r.source and "abc123" in r.source}
        assert dates["Shipped! (EU next week)"] == "2024-03-15T09:00:00+00:00"
        assert dates[next(t for t in dates if "EU first" in t)] == "2024-03-15T08:00:00+00:00"
        # As of March 12 the card had not moved yet; as of March 13 it had.
        before = memory.search("moved Launch", as_of="2024-03-12")
        assert all("moved" not in h.record.text for h in before)
        after = memory.search("moved Launch", as_of="2024-03-13")
        assert any(h.record.source == "trello://action/a4" for h in after)


def test_bad_input_is_named_and_the_rest_read(tmp_path) -> None:
    broken = board()
    broken["actions"].append(action("a9", "commentCard", "", ANA, text="when?", card=CARD_REF))
    broken["actions"].append(
        action("a10", "commentCard", "2024-03-12T12:00:00Z", None, text="who?", card=CARD_REF)
    )
    broken["actions"].append({**broken["actions"][0], "data": {"text": "other", "card": CARD_REF}})
    broken["actions"][-1]["id"] = "a5"  # a duplicated id with other content
    broken["cards"].append("not a card")
    broken["actions"].append(
        action("a11", "commentCard", "2024-03-12T12:00:00Z", {"id": "zz"}, text="x", card=CARD_REF)
    )
    folder = tmp_path / "in"
    write(folder / "board.json", broken)
    text = json.dumps(board())
    (folder / "cut.json").write_text(text[: len(text) // 3])
    write(folder / "discord.json", {"guild": {}, "channel": {}, "messages": []})
    found = items(folder)
    errors = [(Path(e.location).name, e.reason) for e in found if isinstance(e, ItemError)]
    assert [name for name, _ in errors] == [
        "board.json:cards[3]",
        "board.json:actions[7]",
        "board.json:actions[9]",
        "cut.json",
    ]
    assert "without a valid date" in errors[1][1] and "came before" in errors[2][1]
    told = [n.message for n in found if isinstance(n, Notice)]
    assert "no author: stored unattributed" in told
    assert any("member zz is not in the board's members" in m for m in told)
    assert [s.location for s in found if isinstance(s, Skipped) and s.detail] == [
        str(folder / "discord.json")
    ]
    for other in ({"guild": {}, "channel": {}, "messages": []}, [1, 2]):
        with pytest.raises(InvalidInput, match="not a Trello board export"):
            items(write(tmp_path / "other.json", other))


def test_a_zip_a_bomb_and_the_action_cap(tmp_path) -> None:
    capped = board()
    filler = action("f", "updateCard", "2024-01-01T00:00:00Z", ANA, card=CARD_REF, old={"pos": 1})
    capped["actions"] += [dict(filler, id=f"f{n}") for n in range(1000)]
    archive = tmp_path / "boards.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as packed:
        packed.writestr("roadmap.json", json.dumps(capped))
        packed.writestr("bomb.json", b"{" + b" " * (8 << 20) + b"}")
    found = list(TrelloImporter(max_member=1 << 20).read(archive))
    assert [(e.location, e.reason) for e in found if isinstance(e, ItemError)] == [
        (f"{archive}:bomb.json", "unpacks to 8 MiB, over the 1 MiB limit of one file")
    ]
    assert any(
        "the most Trello's JSON export holds" in n.message for n in found if isinstance(n, Notice)
    )
    assert len(docs(found)) == 6


def test_a_large_board(tmp_path) -> None:
    big = board()
    base = copy.deepcopy(big["actions"][0])
    for n in range(20_000):
        comment = copy.deepcopy(base)
        comment["id"] = f"x{n}"
        comment["data"]["text"] = f"comment {n}"
        big["actions"].append(comment)
    found = docs(items(write(tmp_path / "big.json", big)))
    assert len(found) == 6 + 20_000
