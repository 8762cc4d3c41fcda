"""The mail importer on mailboxes built here in the published formats (mbox, Maildir, .eml):
multipart, HTML-only, non-UTF-8, a reply chain, missing dates and broken messages."""

from __future__ import annotations

import json
import mailbox
from email.message import EmailMessage
from pathlib import Path

import pytest

from mempp import Document, InvalidInput, Memory
from mempp.importers import ItemError, Notice, Skipped, get, run_import
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


def headed(sender: str, subject: str, date: str, msgid: str) -> EmailMessage:
    message = EmailMessage()
    for name, value in (
        ("From", sender),
        ("Subject", subject),
        ("Date", date),
        ("Message-ID", msgid),
    ):
        message[name] = value
    return message


def alternative() -> bytes:
    message = headed(
        '"Bo Chen" <bo@acme.example>',
        "Pricing, both ways",
        "Wed, 13 Mar 2024 17:00:00 -0500",
        "<alt@acme.example>",
    )
    message.set_content("Plain: the Team plan is $15.\n")
    message.add_alternative("<p>HTML: the <b>Team plan</b> is $15.</p>", subtype="html")
    message.add_attachment(
        b"%PDF-1.4", maintype="application", subtype="pdf", filename="pricing.pdf"
    )
    return message.as_bytes()


def html_only() -> bytes:
    message = headed(
        "news@acme.example", "Newsletter", "Thu, 14 Mar 2024 08:00:00 +0000", "<html@acme.example>"
    )
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
        assert again.added == 0 and again.skipped["already imported"] == 4 and len(memory) == 4


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


def raw_mail(headers: str, body: str) -> bytes:
    """A message as written: CRLF lines, headers and body as given (8-bit bytes as Latin-1)."""
    text = headers.strip("\n") + "\n\n" + body
    return text.replace("\n", "\r\n").encode("latin-1")


ENRICHED = raw_mail(
    """From: Kim <kim@acme.example>
Subject: Virtual hosts
Date: Mon, 14 May 2001 15:23:21 -0400
Message-ID: <enriched@acme.example>
Content-Type: text/enriched; charset="us-ascii"
""",
    "Hi,\n\nI can start <bold>two</bold> JVMs\nunder web-apps, <<ContextManager> and\n"
    "<param>Times</param><fontfamily>all</fontfamily>.\n\n\nBye\n",
)


def multipart(boundary_header: str, delimiter: str, msgid: str) -> bytes:
    return raw_mail(
        f"""From: Lee <lee@acme.example>
Subject: Tomcat question
Date: Thu, 09 Jan 2003 14:28:01 -0500
Message-ID: <{msgid}>
MIME-Version: 1.0
Content-Type: multipart/mixed; boundary={boundary_header}
""",
        f"--{delimiter}\nContent-Type: text/plain\n\nThe guides helped, thanks.\n"
        f"--{delimiter}\nContent-Type: text/plain; name=notes.txt\n"
        f"Content-Disposition: attachment; filename=notes.txt\n\nattached\n--{delimiter}--\n",
    )


def test_bodies_the_parser_alone_would_drop_are_read(tmp_path) -> None:
    box = build_mbox(
        tmp_path / "odd.mbox",
        [
            ENRICHED,
            multipart('"<<001-3e1dcd5a-119e>>"', "<<001-3e1dcd5a-119e>>", "angle@x"),
            multipart(
                "----=_NextPart_000_0093_01C8.EB75", "----=_NextPart_000_0093_01C8.EB75", "eq@x"
            ),
        ],
    )
    found = items(box)
    by_source = docs(found)
    assert by_source["mid:enriched@acme.example"].text == (
        "Virtual hosts\n\nHi,\nI can start two JVMs under web-apps, <ContextManager> and all."
        "\n\nBye"
    )
    for msgid in ("angle@x", "eq@x"):
        doc = by_source[f"mid:{msgid}"]
        assert doc.text == (
            "Tomcat question\n\nThe guides helped, thanks.\n\n[attachment: notes.txt]"
        )
    told = [n.message for n in found if isinstance(n, Notice)]
    # compat32 reads the unquoted boundary with "=" whole; the doubled angle brackets need
    # the body's own delimiter, and say so.
    assert told == [
        "multipart boundary '<001-3e1dcd5a-119e>' (as the parser reads it) is not the one "
        "its body uses: parts read by '<<001-3e1dcd5a-119e>>'"
    ]


def test_every_file_of_maildirs_and_folders_is_accounted_for(tmp_path) -> None:
    root = tmp_path / "mail"
    only_cur = root / "Archive" / "cur"  # git keeps no empty folder: new/ and tmp/ gone
    only_cur.mkdir(parents=True)
    for number in range(3):
        (only_cur / f"17000000{number}.host!2,S").write_bytes(
            plain(f"Old {number}", "kept", msgid=f"<old{number}@x>")
        )
    inbox = mailbox.Maildir(root / "Inbox", create=True)
    for number in range(14):
        inbox.add(plain(f"Note {number}", "body", msgid=f"<n{number}@x>"))
    (root / "Inbox" / "new" / ".noindex").write_bytes(b"")  # mu's marker: no mail
    (root / "Inbox" / "tmp" / "1700000000.partial").write_bytes(plain("Half", "delivering"))
    bare = root / "bare"
    bare.mkdir()
    for number in range(4):
        (bare / f"mail{number}").write_bytes(plain(f"Bare {number}", "b", msgid=f"<b{number}@x>"))
    (bare / "README").write_text("these are mails\n")
    found = items(root)
    assert len(docs(found)) == 3 + 14 + 4
    skipped = sorted(
        (i.location.removeprefix(f"{root}/"), i.reason) for i in found if isinstance(i, Skipped)
    )
    assert skipped == [
        ("Inbox/new/.noindex", "Maildir dot file"),
        ("Inbox/tmp/1700000000.partial", "in a Maildir's tmp/"),
        ("bare/README", "not a mail file"),
    ]
    assert not [i for i in found if isinstance(i, ItemError)]
    importer = MailImporter()
    assert importer.recognizes(root / "Archive") and importer.recognizes(bare / "mail0")
    assert len(docs(items(bare))) == 4  # a folder of bare message files is no "no Maildir"
    report = run_import(None, get("mail"), root, dry_run=True)
    assert report.added == 21 and dict(report.skipped) == {
        "Maildir dot file": 1,
        "in a Maildir's tmp/": 1,
        "not a mail file": 1,
    }


def test_headers_real_mail_writes_wrongly_are_read_right(tmp_path) -> None:
    cp1252 = raw_mail(
        """From: =?UTF-8?B?TXlTdXJ2ZXk=?=
 =?UTF-8?B?LmNvbSAmIEM=?=
 =?UTF-8?B?YXJvbCBBZGE=?=
 =?UTF-8?B?bXM=?= <carol@mysurvey.example>
Subject: Forma\xe7\xe3o: Campanha Final Ver\xe3o
Date: Wed, 15 Dec 2010 12:21:20 -0500
Message-ID: <survey@x>
""",
        "Take the survey.\n",
    )
    comment = raw_mail(
        """From: jimbo@slp53.example (Jimbo Foobarcuux)
Subject: Re: atomic writes
Date: Tue, 8 Mar 2011 17:04:20 +0000
Message-ID: <jimbo@x>
""",
        "They are.\n",
    )
    utf8 = raw_mail(
        "From: J\xc3\xb6hn <john@x>\nSubject: S\xc3\xa4ying Hello\n"
        "Date: Tue, 8 Mar 2011 17:04:20 +0000\nMessage-ID: <utf8@x>\n",
        "Hi\n",
    )
    box = build_mbox(tmp_path / "headers.mbox", [cp1252, comment, utf8])
    found = items(box)
    by_source = docs(found)
    survey = by_source["mid:survey@x"]
    assert survey.author == "MySurvey.com & Carol Adams"  # no spaces between encoded words
    assert survey.text.startswith("Formação: Campanha Final Verão\n\n")
    assert by_source["mid:jimbo@x"].author == "Jimbo Foobarcuux"
    assert (by_source["mid:utf8@x"].author, by_source["mid:utf8@x"].text) == (
        "Jöhn",
        "Säying Hello\n\nHi",
    )
    assert [(n.location, n.message) for n in found if isinstance(n, Notice)] == [
        (f"{box}:1", "Subject header has raw 8-bit bytes that are not UTF-8; read as Windows-1252")
    ]


RECEIVED = (
    "Received: from relay.example by mx.example; Mon, 9 Jun 2008 12:30:00 -0700\n"
    "Received: from pc.example by relay.example; Mon, 9 Jun 2008 12:24:02 -0700\n"
)


def test_a_date_that_cannot_be_true_gives_way_to_the_received_date(tmp_path) -> None:
    box = build_mbox(
        tmp_path / "dates.mbox",
        [
            raw_mail(
                RECEIVED + "From: a@x\nSubject: Far\nDate: Mon, 30 Jun 3609 15:33:50 +0600\n"
                "Message-ID: <far@x>\n",
                "x\n",
            ),
            raw_mail(
                RECEIVED + "From: a@x\nSubject: Late\nDate: Thu, 12 Jun 2008 09:00:00 -0700\n"
                "Message-ID: <late@x>\n",
                "x\n",
            ),
            raw_mail(
                RECEIVED + "From: a@x\nSubject: Fine\nDate: Mon, 9 Jun 2008 21:23:00 +0200\n"
                "Message-ID: <fine@x>\n",
                "x\n",
            ),
            raw_mail(
                "From: a@x\nSubject: Epoch\nDate: Thu, 1 Jan 1970 00:00:00 +0000\n"
                "Message-ID: <epoch@x>\n",
                "x\n",
            ),
        ],
    )
    found = items(box)
    by_source = docs(found)
    for msgid in ("far", "late"):
        assert by_source[f"mid:{msgid}@x"].date.text == "2008-06-09T12:24:02-07:00"
        assert json.loads(by_source[f"mid:{msgid}@x"].metadata)["dated_by"] == "Received"
    assert by_source["mid:fine@x"].date.text == "2008-06-09T21:23:00+02:00"
    assert by_source["mid:epoch@x"].date is None
    told = [(n.location, n.message) for n in found if isinstance(n, Notice)]
    assert told == [
        (
            f"{box}:1",
            "Date header 'Mon, 30 Jun 3609 15:33:50 +0600' is in the future: "
            "dated by its first Received header",
        ),
        (
            f"{box}:2",
            "Date header 'Thu, 12 Jun 2008 09:00:00 -0700' is more than a day after its last "
            "Received header (2008-06-09T12:30:00-07:00): dated by its first Received header",
        ),
        (
            f"{box}:4",
            "Date header 'Thu, 1 Jan 1970 00:00:00 +0000' is before 1970 (a clock at zero): "
            "stored undated, so searches with --as-of will not see it",
        ),
    ]


def test_one_message_id_for_two_mails_keeps_both_and_copies_once(tmp_path) -> None:
    first = plain("Plan", "Launch on the 20th.", msgid="<same@x>")
    other = plain("Plan (edited)", "Launch on the 22nd.", msgid="<same@x>")
    (tmp_path / "a").mkdir()
    mboxo = build_mbox(tmp_path / "a" / "list.mbox", [first, other])
    (tmp_path / "b").mkdir()
    copy = build_mbox(tmp_path / "b" / "list.mbox", [first])  # the same mail, another archive
    found = items(tmp_path)
    by_source = docs(found)
    assert by_source["mid:same@x"].text == "Plan\n\nLaunch on the 20th."
    variant = [s for s in by_source if s.startswith("mid:same@x#")]
    assert len(variant) == 1 and by_source[variant[0]].text.endswith("the 22nd.")
    assert [(n.location, n.message) for n in found if isinstance(n, Notice)] == [
        (
            f"{mboxo}:2",
            f"Message-ID <same@x> is also that of {mboxo}:1, a different message: "
            f"stored as {variant[0]}",
        )
    ]
    assert [(s.location, s.reason) for s in found if isinstance(s, Skipped)] == [
        (f"{copy}:1", "duplicate (same Message-ID and content)")
    ]
    with Memory(tmp_path / "m.db", embedder=KeywordEmbedder()) as memory:
        assert run_import(memory, get("mail"), tmp_path).added == 2
        again = run_import(memory, get("mail"), tmp_path)  # the variant's source is stable
        assert again.added == 0 and again.skipped["already imported"] == 2


def test_a_reply_without_references_joins_its_subjects_thread(tmp_path) -> None:
    box = build_mbox(
        tmp_path / "list.mbox",
        [
            plain("[dev] Reactor safe points", "Proposal.", msgid="<p@x>"),
            plain("Re: [dev] Reactor safe points", "Agreed.", sender="Bo <bo@x>"),
            plain("RE: [dev] reactor safe  points", "Me too.", msgid="<m@x>"),
            plain("Re: Something else", "Other.", msgid="<o@x>"),
        ],
    )
    found = docs(items(box))
    threads = {d.text.split("\n\n")[1]: d.thread for d in found.values()}
    assert threads == {
        "Proposal.": "mid:p@x",
        "Agreed.": "mid:p@x",
        "Me too.": "mid:p@x",
        "Other.": "mid:o@x",
    }
    assert json.loads(found["mid:m@x"].metadata)["thread_by"] == "subject"


def test_attachments_are_listed_in_the_text_and_metadata(tmp_path) -> None:
    inner = EmailMessage()
    inner["From"] = "Test Tester <t@x>"
    inner["Subject"] = "Another PDF"
    inner.set_content("inner body")
    outer = headed("a@x", "Forward", "Mon, 6 Jun 2005 22:21:22 +0200", "<fwd@x>")
    outer.set_content("See the attached mail.")
    outer.add_attachment(inner, filename="Forwarded.eml")
    signed = raw_mail(
        """From: Jamis <j@x>
Subject: Signed with a picture
Date: Mon, 6 Jun 2005 22:21:22 +0200
Message-ID: <signed@x>
Content-Type: multipart/signed; protocol="application/pgp-signature"; boundary="S"
""",
        "--S\nContent-Type: multipart/mixed; boundary=M\n\n--M\nContent-Type: text/plain\n\n"
        "Here is a picture.\n--M\nContent-Type: image/png\nContent-Disposition: inline; "
        "filename=truncated.png\nContent-Transfer-Encoding: base64\n\niVBORw0K\n--M--\n"
        "--S\nContent-Type: application/pgp-signature; name=signature.asc\n\n"
        "-----BEGIN PGP SIGNATURE-----\n--S--\n",
    )
    names = raw_mail(
        """From: a@x
Subject: Names
Date: Mon, 6 Jun 2005 22:21:22 +0200
Message-ID: <names@x>
Content-Type: multipart/mixed; boundary=B
""",
        "--B\nContent-Type: text/plain\n\nTwo files.\n"
        "--B\nContent-Type: application/pdf; name==?utf-8?B?VGhpcyBpcyBhIHRlc3QucGRm?=\n"
        "Content-Disposition: attachment; filename==?utf-8?B?VGhpcyBpcyBhIHRlc3QucGRm?=\n\n%PDF\n"
        "--B\nContent-Type: text/plain; name=This is a test.txt\nContent-Disposition: attachment;"
        "\n\tfilename=This is a test.txt\n\nHi there.\n--B--\n",
    )
    box = build_mbox(tmp_path / "att.mbox", [outer.as_bytes(), signed, names])
    by_source = docs(items(box))
    forward = by_source["mid:fwd@x"]
    assert forward.text == (
        "Forward\n\nSee the attached mail.\n\n"
        "[attachment: Forwarded.eml (message 'Another PDF' from Test Tester)]"
    )
    picture = json.loads(by_source["mid:signed@x"].metadata)
    assert picture["attachments"] == ["truncated.png"] and picture["signed"] is True
    assert by_source["mid:signed@x"].text.startswith("Signed with a picture\n\nHere is a picture.")
    assert json.loads(by_source["mid:names@x"].metadata)["attachments"] == [
        "This is a test.pdf",
        "This is a test.txt",
    ]


def test_an_mbox_without_a_from_line_and_an_empty_file_are_accounted_for(tmp_path) -> None:
    (tmp_path / "one.mbox").write_bytes(plain("Alone", "No From line.", msgid="<alone@x>"))
    (tmp_path / "blank.eml").write_bytes(b"")
    found = items(tmp_path)
    assert list(docs(found)) == ["mid:alone@x"]  # mailbox would have read no message
    assert [(s.location, s.reason) for s in found if isinstance(s, Skipped)] == [
        (str(tmp_path / "blank.eml"), "empty file")
    ]
