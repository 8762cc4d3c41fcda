"""The mail importer on the real mail in ``shared/realdata/mail`` (read where it lies, never
copied; skipped when absent): every file and message accounted for, bodies, authors and dates
that the parser alone gets wrong, duplicates across archives, attachments."""

from __future__ import annotations

import json
import mailbox
import os
from collections import Counter
from pathlib import Path

import pytest

from mempp import Document, Memory
from mempp.importers import ItemError, Notice, Skipped, get, run_import
from mempp.importers.mail import MailImporter

from conftest import KeywordEmbedder


def _mail() -> Path:
    for candidate in (
        Path(__file__).resolve().parents[1] / ".." / "shared" / "realdata",
        Path("/work/shared/realdata"),
    ):
        if (candidate / "mail").is_dir():
            return (candidate / "mail").resolve()
    pytest.skip("the real mail (shared/realdata/mail) is not here")


def _path(relative: str) -> Path:
    path = _mail() / relative
    if not path.exists():
        pytest.skip(f"{path} is not here")
    return path


def _read(relative: str) -> list[object]:
    return list(MailImporter().read(_path(relative)))


def _docs(found: list[object]) -> list[Document]:
    return [i for i in found if isinstance(i, Document)]


def _one(relative: str) -> Document:
    (doc,) = _docs(_read(relative))
    return doc


def _found_independently(root: Path) -> int:
    """Files under ``root`` counted without the importer, an mbox as its messages."""
    total = 0
    for current, _, files in os.walk(root):
        for name in files:
            path = Path(current) / name
            if path.suffix == ".mbox":
                total += len(mailbox.mbox(path, create=False))
            else:
                total += 1
    return total


@pytest.mark.parametrize(
    "relative", ["mikel-mail", "ponymail", "mu/testdir", "mu/testdir2", "mu/testdir4", "."]
)
def test_every_file_and_message_is_accounted_for(relative: str) -> None:
    found = _read(relative)
    outcomes = [i for i in found if not isinstance(i, Notice)]
    assert len(outcomes) == _found_independently(_path(relative))


def test_the_maildirs_are_read_whole() -> None:
    found = _read("mu")
    skipped = Counter(i.reason for i in found if isinstance(i, Skipped))
    assert skipped["in a Maildir's tmp/"] == 1  # testdir/tmp holds a file that must not be read
    assert skipped["Maildir dot file"] == 5  # .noindex in Foo and bar (new/, tmp/), .noupdate
    assert not [i for i in found if isinstance(i, ItemError)]
    assert len(_docs(_read("mu/testdir4"))) == 14  # a plain folder of message files
    assert len(_docs(_read("mu/testdir2/wom_bat"))) == 3  # a Maildir with only cur/
    assert len(_docs(_read("mu/testdir"))) == 19  # 15 in cur/, 4 in new/


def test_bodies_the_parser_alone_would_drop() -> None:
    enriched = _one("ponymail/text_enriched.mbox")
    assert "I am able to startup and shutdown multiple JVMs" in enriched.text
    assert "<ContextManager debug" in enriched.text and "<bold>" not in enriched.text
    ancient = _one("ponymail/tomcat-ancient-boundary.mbox")
    assert "Lajos..." in ancient.text and "--<<001" not in ancient.text
    illegal = _one("mikel-mail/mime_emails/raw_email_with_illegal_boundary.eml")
    assert "This is an outlook test" in illegal.text


def test_headers_are_read_as_written() -> None:
    assert _one("mikel-mail/error_emails/bad_subject.eml").author == "MySurvey.com & Carol Adams"
    assert _one("mu/testdir4/181736.eml").author == "Jimbo Foobarcuux"  # addr (Name)
    found = _read("mikel-mail/error_emails/invalid_subject_characters.eml")
    subject = _docs(found)[0].text.split("\n\n")[0]
    assert subject == "Formação FrenetikPolis: Mega Campanha Final Verão | Cursos de Setembro"
    assert any("read as Windows-1252" in n.message for n in found if isinstance(n, Notice))


def test_a_date_in_3609_gives_way_to_received() -> None:
    found = _read("mikel-mail/plain_emails/raw_email_bad_time.eml")
    (doc,) = _docs(found)
    assert doc.date is not None and doc.date.text.startswith("2008-06-")
    assert json.loads(doc.metadata)["dated_by"] == "Received"
    assert any("3609" in n.message and "Received" in n.message for n in found)


def test_duplicates_across_archives_stay_one_and_different_mails_stay_two() -> None:
    found = _read("ponymail")
    docs = _docs(found)
    sources = Counter(d.source for d in docs)
    assert max(sources.values()) == 1
    ids = Counter(json.loads(d.metadata).get("message_id") for d in docs)
    for archives, count in (("maven_duplicates_*.mbox", 10), ("ponymail-dev-*.mbox", 1)):
        copies = Counter(
            str(message["Message-ID"]).strip("<> ")
            for path in sorted(_path("ponymail").glob(archives))
            for message in mailbox.mbox(path, create=False)
        )
        assert len(copies) == count and min(copies.values()) >= 2  # in several archives
        assert all(ids[m] == 1 for m in copies)  # stored once each
    skipped = Counter(i.reason for i in found if isinstance(i, Skipped))
    assert skipped["duplicate (same Message-ID and content)"] >= 30 + 4
    # The same mail cross-posted to two lists, each with its list's footer: both kept, told.
    told = [n for n in found if isinstance(n, Notice) and "a different message" in n.message]
    assert [n.location.rsplit("/", 1)[-1] for n in told] == ["httpd-users-4950.mbox:1"]
    assert "httpd-dev-28428.mbox:1" in told[0].message


def test_a_reply_without_references_joins_its_thread_by_subject() -> None:
    docs = _docs(_read("ponymail/maven-dev-2017-11-listsao.mbox"))
    joined = [d for d in docs if json.loads(d.metadata).get("thread_by") == "subject"]
    assert joined and all(d.text.startswith("Re: Reactor safe/rally points") for d in joined)
    root = {d.thread for d in joined}
    assert len(root) == 1 and any(
        d.source == next(iter(root)) for d in docs
    )  # the thread is the original mail's own


def test_attachments_are_listed() -> None:
    forwarded = _one("mikel-mail/attachment_emails/attachment_message_rfc822.eml")
    assert "[attachment: ForwardedMessage.eml (message 'Another PDF' from Test Tester)]" in (
        forwarded.text
    )
    nested = json.loads(
        _one("mikel-mail/mime_emails/raw_email_with_nested_attachment.eml").metadata
    )
    assert nested["attachments"] == ["truncated.png"] and nested["signed"] is True
    encoded = _one("mikel-mail/attachment_emails/attachment_with_base64_encoded_name.eml")
    assert json.loads(encoded.metadata)["attachments"] == ["This is a test.pdf"]
    unquoted = _one("mikel-mail/attachment_emails/attachment_with_unquoted_name.eml")
    assert json.loads(unquoted.metadata)["attachments"] == ["This is a test.txt"]


def test_the_whole_corpus_imports_and_a_body_is_found(tmp_path: Path) -> None:
    with Memory(tmp_path / "m.db", embedder=KeywordEmbedder(["jvms"])) as memory:
        report = run_import(memory, get("mail"), _mail())
        assert report.failed == 1  # rfc2822/example13.eml: RFC 2822's header-less example
        assert report.added + sum(report.skipped.values()) + report.failed == (
            _found_independently(_mail())
        )
        hits = memory.search("startup and shutdown multiple JVMs")
        assert any(h.record.source.startswith("mid:3.0.5.32.20010514152321") for h in hits[:5])
