"""Files dropped on the upload page, read by the importers ``mempp ingest`` and ``mempp
import`` use.

Each upload is saved under its own name in a private temporary folder. A file goes to the
first importer that recognizes it: Markdown / text with front matter and JSON Lines (the
folder importer), a Slack export zip, a mailbox (``.mbox``, ``.eml``), a saved GitHub or
GitLab API response, a Jira XML or CSV export, a Confluence page or space export, a Notion
export zip, a DiscordChatExporter, Trello board or Keep note ``.json``, a Teams export or Keep
Takeout zip, a ``.vtt``, ``.srt`` or IRC ``.log`` transcript. The upload is refused
whole, before anything is stored, when a file is of no kind mempp reads or cannot be opened at
all (a broken zip, a zip that is no Slack export); within a readable file, a bad line or
message is reported as ``name:line: reason`` and the good ones are kept, as the CLI does.
The server's upload limit (``BodyLimit``, as for ``/v1/ingest``) bounds the request.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from mempp.errors import InvalidInput
from mempp.importers import Importer, Item, get
from mempp.importers.base import read_paths, store_read
from mempp.server.imports import safe_name
from mempp.server.web.access import WebError

# Tried in this order: the folder importer goes by the file's suffix alone, so a note that
# happens to start with "From " stays a note.
IMPORTERS = (
    "folder",
    "slack",
    "mail",
    "github",
    "gitlab",
    "jira",
    "confluence",
    "notion",
    "discord",
    "trello",
    "teams",
    "keep",
    "transcript",
)
KINDS = (
    ".md, .markdown, .txt, .jsonl, .ndjson, a Slack export .zip, .mbox, .eml, GitHub or GitLab "
    "API .json, a Jira .xml or .csv export, a Confluence .html page or space .zip, a Notion "
    "export .zip, DiscordChatExporter, Trello board or Google Keep .json, a Teams export or "
    "Keep Takeout .zip, .vtt, .srt, an IRC .log"
)


def ingest_files(memory: Any, files: Sequence[tuple[str, BinaryIO]]) -> list[dict[str, Any]]:
    """Read and store ``(name, open file)`` pairs; one report (a dict) per file, in order."""
    if not files:
        raise WebError(400, "Nothing to upload", "Choose or drop at least one file.")
    importers = [get(name) for name in IMPORTERS]
    with tempfile.TemporaryDirectory(prefix="mempp-upload-") as folder:
        saved: list[tuple[str, Path]] = []
        for number, (name, content) in enumerate(files):
            # One subfolder per file: two uploads of one name do not overwrite each other.
            path = Path(folder) / str(number) / safe_name(name)
            path.parent.mkdir()
            with path.open("wb") as out:
                shutil.copyfileobj(content, out)
            saved.append((name, path))
        chosen = [(name, path, _importer_for(importers, path)) for name, path in saved]
        wrong = [name for name, _, importer in chosen if importer is None]
        if wrong:
            raise WebError(
                400,
                "Cannot read that kind of file",
                f"{', '.join(wrong)}: mempp reads {KINDS}. Nothing was stored.",
            )
        # Every file is opened before anything is stored: one that cannot be read at all
        # refuses the whole upload.
        streams: list[tuple[str, Importer, Iterator[Item]]] = []
        for name, path, importer in chosen:
            assert importer is not None
            try:
                # Told by the upload's own name, never the temporary path.
                items = read_paths(importer, path, shown_as=name)
            except InvalidInput as exc:
                raise WebError(
                    400, "Cannot read that file", f"{exc}. Nothing was stored."
                ) from None
            streams.append((name, importer, items))
        return [
            {"name": name, **store_read(memory, importer, items).to_dict()}
            for name, importer, items in streams
        ]


def _importer_for(importers: Sequence[Importer], path: Path) -> Importer | None:
    return next((importer for importer in importers if importer.recognizes(path)), None)


def totals(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The upload's summary over its files' reports (each an ``ImportReport.to_dict()``)."""
    skipped: Counter[str] = Counter()
    for report in reports:
        skipped.update(report["skipped_by_reason"])
    return {
        "added": sum(r["added"] for r in reports),
        "skipped": sum(skipped.values()),
        "skipped_by_reason": dict(skipped),
        "failed": sum(r["failed"] for r in reports),
        "warnings": sum(len(r["warnings"]) for r in reports),
        "undated": sum(r["undated"] for r in reports),
        "files": list(reports),
    }
