"""The mail importer on mailboxes built here in the published formats (mbox, Maildir, .eml):
multipart, HTML-only, non-UTF-8, a reply chain, missing dates and broken messages."""

from __future__ import annotations

import mailbox
from email.message import EmailMessage
from pathlib import Path

import pytest

from mempp import Document, InvalidInput, Memory
from mempp.importers import ItemError, Notice, get, run_import
from mempp.importers.mail import MailImporter

import engines
from conftest import KeywordEmbedder

pg_server = engines.pg_server
pg_url = engines.pg_url
engine_location = engines.engine_location


def plain(
    subject: str,
    body: str,
    *,
    sender: str = "Ana López <ana@acme.example>",
    date: str | None = "Tue, 12 Mar 2024 09:15:00 +0100",
    msgid: str | None = None,
    **headers: str,
) -> bytes:
    message = EmailMessage()
    message["From"] = sender
    message["To"] = "team@acme.example"
    message["Subject"] = subject
    if date is not None:
        message["Date"] = date
    if msgid is not None:
        message["Message-ID"] = msgid
    for name, value in headers.items():
        message[name.replace("_", "-")] = value
    message.set_content(body)
    return message.as_bytes()


def alternative() -> bytes:
    message = EmailMessage()
    message["From"] = '"Bo Chen" <bo@acme.example>'
    message["Subject"] = "Pricing, both ways"
    message["Date"] = "Wed, 13 Mar 2024 17:00:00 -0500"
    message["Message-ID"] = "<alt@acme.example>"
    message.set_content("Plain: the Team plan is $15.\n")
    message.add_alternative("<p>HTML: the <b>Team plan</b> is $15.</p>", subtype="html")
    message.add_attachment(
        b"%PDF-1.4", maintype="application", subtype="pdf", filename="pricing.pdf"
    )
    return message.as_bytes()


def html_only() -> bytes:
    message = EmailMessage()
    message["From"] = "news@acme.example"
    message["Subject"] = "Newsletter"
    message["Date"] = "Thu, 14 Mar 2024 08:00:00 +0000"
    message["Message-ID"] = "<html@acme.example>"
    message.set_content(
        "<html><body><h1>Launch</h1><p>We launch on <i>Friday</i>.</p>"
        "<script>track()</script></body></html>",
        subtype="html",
    )
    return message.as_bytes()


def latin1_declared() -> bytes:
    return (
        b"From: =?utf-8?q?Jos=C3=A9_Ruiz?= <jose@acme.example>\r\n"
        b"Subject: =?iso-8859-1?q?R=E9union?=\r\n"
        b"Date: Fri, 15 Mar 2024 10:00:00 +0200\r\n"
        b"Message-ID: <latin1@acme.example>\r\n"
        b"MIME-Version: 1.0\r\n"
        b"Content-Type: text/plain; charset=iso-8859-1\r\n"
        b"Content-Transfer-Encoding: 8bit\r\n\r\n"
        b"Caf\xe9 \xe0 10h.\r\n"
    )


def mislabelled() -> bytes:
    """Declared UTF-8, written in Latin-1: decoded anyway, with a warning."""
    return (
        b"From: Eve <eve@acme.example>\r\n"
        b"Subject: Budget\r\n"
        b"Date: Fri, 15 Mar 2024 11:00:00 +0000\r\n"
        b"Message-ID: <mislabelled@acme.example>\r\n"
        b"Content-Type: text/plain; charset=utf-8\r\n"
        b"Content-Transfer-Encoding: 8bit\r\n\r\n"
        b"Total: 5\xa0000 \x80\r\n"
    )


CHAIN = [
    plain("Launch date", "Shall we launch on the 20th?", msgid="<root@acme.example>"),
    plain(
        "Re: Launch date",
        "The 20th works.",
        sender="Bo Chen <bo@acme.example>",
        date="Tue, 12 Mar 2024 10:00:00 +0100",
        msgid="<r1@acme.example>",
        In_Reply_To="<root@acme.example>",
    ),
    plain(
        "Re: Re: Launch date",
        "Moved to the 22nd.",
        sender="cy@acme.example",
        date="Tue, 12 Mar 2024 11:00:00 +0100",
        msgid="<r2@acme.example>",
        In_Reply_To="<r1@acme.example>",
        References="<root@acme.example> <r1@acme.example>",
    ),
]


def build_mbox(path: Path, messages: list[bytes]) -> Path:
    box = mailbox.mbox(path)
    for raw in messages:
        box.add(raw)
    box.flush()
    box.close()
    return path


def items(path: Path) -> list[object]:
    return list(MailImporter().read(path))


def docs(found: list[object]) -> dict[str, Document]:
    return {d.source: d for d in found if isinstance(d, Document)}


def test_mbox_messages_become_documents(tmp_path) -> None:
    box = build_mbox(
        tmp_path / "team.mbox",
        [*CHAIN, alternative(), html_only(), latin1_declared(), mislabelled()],
    )
    found = items(box)
    by_source = docs(found)
    root = by_source["mid:root@acme.example"]
    assert root.author == "Ana López" and root.text == "Launch date\n\nShall we launch on the 20th?"
    assert root.date is not None and root.date.text == "2024-03-12T09:15:00+01:00"
    # The reply chain shares the root's thread, by In-Reply-To and by References.
    assert {by_source[f"mid:{m}@acme.example"].thread for m in ("root", "r1", "r2")} == {
        "mid:root@acme.example"
    }
    assert by_source["mid:r2@acme.example"].author == "cy@acme.example"  # no display name
    both = by_source["mid:alt@acme.example"]
    assert both.author == "Bo Chen" and both.date.text == "2024-03-13T17:00:00-05:00"
    assert both.text == (
        "Pricing, both ways\n\nPlain: the Team plan is $15.\n\n[attachment: pricing.pdf]"
    )
    html = by_source["mid:html@acme.example"].text
    assert html.startswith("Newsletter\n\nLaunch\n") and "We launch on Friday." in html
    assert "track()" not in html and "<" not in html
    latin = by_source["mid:latin1@acme.example"]
    assert (latin.author, latin.text) == ("José Ruiz", "Réunion\n\nCafé à 10h.")
    repaired = by_source["mid:mislabelled@acme.example"]
    assert (
        repaired.text == "Budget\n\nTotal: 5\N{REPLACEMENT CHARACTER}000 \N{REPLACEMENT CHARACTER}"
    )
    notices = [(n.location, n.message) for n in found if isinstance(n, Notice)]
    assert notices == [
        (f"{box}:7", "body is not valid utf-8; undecodable bytes replaced with U+FFFD")
    ]
    assert len(by_source) == 7


def test_missing_date_and_broken_messages_are_told_and_the_rest_read(tmp_path) -> None:
    received = plain("No date", "Sent without a Date header.", date=None, msgid="<nd@x>")
    received = (
        b"Received: from mx.example by mx2.example; Mon, 11 Mar 2024 08:00:00 +0000\r\n" + received
    )
    box = build_mbox(
        tmp_path / "mixed.mbox",
        [
            plain("Undated", "No Date, no Received.", date=None, msgid="<u@x>"),
            received,
            b"\r\n\r\n",
            b"just some words, not a mail\r\n",
            b"Date: someday soon\r\n"
            + plain("Bad date", "Garbled Date.", date=None, msgid="<bd@x>"),
            plain("Last", "Still read after the broken ones.", msgid="<last@x>"),
            b"From: z@x\r\nSubject: Cut\r\nDate: Mon, 11 Mar 2024 08:00:00 +0000\r\n"
            b"Message-ID: <cut@x>\r\nContent-Type: multipart/mixed; boundary=XX\r\n\r\n"
            b"--XX\r\nContent-Type: text/plain; charset=x-unknown\r\n"
            b"Content-Transfer-Encoding: base64\r\n\r\nSGVsbG8gd29y!!bGQ\r\n",
        ],
    )
    found = items(box)
    by_source = docs(found)
    assert by_source["mid:u@x"].date is None
    assert by_source["mid:nd@x"].date.text == "2024-03-11T08:00:00+00:00"
    assert by_source["mid:bd@x"].date is None and "mid:last@x" in by_source
    errors = [(e.location, e.reason) for e in found if isinstance(e, ItemError)]
    assert errors == [
        (f"{box}:3", "empty message"),
        (f"{box}:4", "no mail headers (From, Date, Subject...) in this message"),
    ]
    told = [(n.location, n.message) for n in found if isinstance(n, Notice)]
    assert told == [
        (f"{box}:1", "no Date header: stored undated, so searches with --as-of will not see it"),
        (f"{box}:2", "no Date header: dated by its first Received header"),
        (
            f"{box}:5",
            "unreadable Date header 'someday soon': stored undated, so searches "
            "with --as-of will not see it",
        ),
        (f"{box}:7", "unknown charset 'x-unknown'; read as UTF-8"),
    ]
    # A multipart cut short, its base64 garbled: read as far as it goes.
    assert by_source["mid:cut@x"].text.startswith("Cut\n\nHello wor")


def test_maildir_eml_and_a_folder_of_them(tmp_path) -> None:
    (tmp_path / "mail").mkdir()
    maildir = mailbox.Maildir(tmp_path / "mail" / "Inbox", create=True)
    for raw in CHAIN:
        maildir.add(raw)
    eml = tmp_path / "mail" / "pricing.eml"
    eml.write_bytes(alternative())
    (tmp_path / "mail" / "archive").mkdir()
    build_mbox(tmp_path / "mail" / "archive" / "old.mbox", [html_only()])
    assert len(docs(items(tmp_path / "mail" / "Inbox"))) == 3
    single = docs(items(eml))
    assert list(single) == ["mid:alt@acme.example"]
    every = docs(items(tmp_path / "mail"))
    assert set(every) == {
        "mid:root@acme.example",
        "mid:r1@acme.example",
        "mid:r2@acme.example",
        "mid:alt@acme.example",
        "mid:html@acme.example",
    }
    importer = MailImporter()
    assert importer.recognizes(eml) and importer.recognizes(tmp_path / "mail" / "Inbox")
    assert not importer.recognizes(tmp_path / "mail")


@pytest.mark.parametrize("what", ["missing", "no mail in folder", "not a mailbox"])
def test_a_path_without_mail_is_refused(tmp_path, what) -> None:
    path = tmp_path / "x"
    if what == "no mail in folder":
        path.mkdir()
        (path / "notes.txt").write_text("hello")
    elif what == "not a mailbox":
        path.write_text("hello")
    with pytest.raises(InvalidInput, match=str(path)):
        items(path)


def test_import_stores_on_both_engines_and_reimport_adds_nothing(tmp_path, engine_location):
    box = build_mbox(tmp_path / "team.mbox", [*CHAIN, alternative()])
    with Memory(engine_location, embedder=KeywordEmbedder(["launch"])) as memory:
        report = run_import(memory, get("mail"), box)
        assert report.added == 4 and report.failed == 0 and report.undated == 0
        stored = {r.source: r for r in memory.records()}
        reply = stored["mid:r2@acme.example"]
        assert (reply.author, reply.thread, reply.date) == (
            "cy@acme.example",
            "mid:root@acme.example",
            "2024-03-12T11:00:00+01:00",
        )
        hits = memory.search("launch", as_of="2024-03-12")
        assert {h.record.source for h in hits} >= {"mid:root@acme.example"}
        again = run_import(memory, get("mail"), box)
        assert again.added == 0 and again.skipped["duplicate"] == 4 and len(memory) == 4


def test_html_only_mail_without_the_import_extra_is_reported_not_crashed(tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "inscriptis", None)  # import fails
    box = build_mbox(tmp_path / "news.mbox", [html_only(), CHAIN[0]])
    found = items(box)
    assert [(e.location, e.reason) for e in found if isinstance(e, ItemError)] == [
        (
            f"{box}:1",
            "the message is HTML only: install the import extra "
            "(pip install 'mempp[import]') to read it",
        )
    ]
    assert list(docs(found)) == ["mid:root@acme.example"]


def test_one_bad_path_among_several_stores_nothing(tmp_path) -> None:
    box = build_mbox(tmp_path / "team.mbox", CHAIN)
    with Memory(tmp_path / "m.db", embedder=KeywordEmbedder()) as memory:
        with pytest.raises(InvalidInput, match=r"missing\.mbox: no such file"):
            run_import(memory, get("mail"), [box, tmp_path / "missing.mbox"])
        assert len(memory) == 0
