"""Files dropped on the upload page, read the way ``mempp ingest`` reads them.

Each upload is saved under its own name in a private temporary folder and read by
:mod:`mempp.ingest` (Markdown / text with front matter, JSON Lines), so a bad line or file is
reported as ``name:line: reason`` and the good ones are kept, exactly as the CLI does. An
upload holding a file of a kind mempp cannot read is refused whole before anything is stored.
The server's upload limit (``BodyLimit``, as for ``/v1/ingest``) bounds the request.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from mempp.ingest import JSONL_SUFFIXES, TEXT_SUFFIXES, read_sources
from mempp.records import Document
from mempp.server.web.access import WebError

KINDS = TEXT_SUFFIXES + JSONL_SUFFIXES
BATCH = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9._ -]+")


@dataclass
class FileReport:
    """What became of one uploaded file: the CLI's ingest summary, per file."""

    name: str
    added: int = 0
    skipped_by_reason: Counter[str] = field(default_factory=Counter)
    failures: list[dict[str, str]] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "added": self.added,
            "skipped": sum(self.skipped_by_reason.values()),
            "skipped_by_reason": dict(self.skipped_by_reason),
            "failed": len(self.failures),
            "failures": self.failures,
            "ids": self.ids,
        }


def check_kinds(names: Sequence[str]) -> None:
    """Refuse the upload (nothing stored) unless every file is of a kind mempp reads."""
    if not names:
        raise WebError(400, "Nothing to upload", "Choose or drop at least one file.")
    wrong = [name for name in names if Path(name).suffix.lower() not in KINDS]
    if wrong:
        raise WebError(
            400,
            "Cannot read that kind of file",
            f"{', '.join(wrong)}: mempp reads {', '.join(KINDS)} files. Nothing was stored.",
        )


def safe_name(name: str) -> str:
    """A file name without folders or odd characters (the browser's name is untrusted)."""
    base = os.path.basename(name.replace("\\", "/")) or "upload"
    return _UNSAFE.sub("_", base)[:120] or "upload"


def ingest_files(memory: Any, files: Sequence[tuple[str, BinaryIO]]) -> list[FileReport]:
    """Read and store ``(name, open file)`` pairs; one report per file, in upload order."""
    check_kinds([name for name, _ in files])
    reports: list[FileReport] = []
    with tempfile.TemporaryDirectory(prefix="mempp-upload-") as folder:
        for number, (name, content) in enumerate(files):
            # One subfolder per file: two uploads of one name do not overwrite each other.
            path = Path(folder) / str(number) / safe_name(name)
            path.parent.mkdir()
            with path.open("wb") as out:
                shutil.copyfileobj(content, out)
            reports.append(_ingest_one(memory, name, path))
    return reports


def _ingest_one(memory: Any, name: str, path: Path) -> FileReport:
    report = FileReport(name)
    prefix = str(path)
    batch: list[Document] = []

    def flush() -> None:
        for result in memory.add_many(batch, batch_size=len(batch)):
            if result.added:
                report.added += 1
                report.ids.append(result.id)
            else:
                report.skipped_by_reason[result.skipped] += 1
        batch.clear()

    for item in read_sources([prefix]):
        if item.document is None:
            location = name + item.location[len(prefix) :]
            report.failures.append({"location": location, "reason": item.error or "unreadable"})
            continue
        batch.append(_named(item.document, prefix, name))
        if len(batch) >= BATCH:
            flush()
    if batch:
        flush()
    return report


def _named(doc: Document, temp_path: str, name: str) -> Document:
    """Text files get their path as ``source``: the uploaded name, not the temporary path."""
    if doc.source == temp_path:
        return Document(doc.text, doc.author, doc.date, doc.tags, name, doc.thread)
    return doc


def totals(reports: Sequence[FileReport]) -> dict[str, Any]:
    skipped: Counter[str] = Counter()
    for report in reports:
        skipped.update(report.skipped_by_reason)
    return {
        "added": sum(r.added for r in reports),
        "skipped": sum(skipped.values()),
        "skipped_by_reason": dict(skipped),
        "failed": sum(len(r.failures) for r in reports),
        "files": [r.to_dict() for r in reports],
    }
