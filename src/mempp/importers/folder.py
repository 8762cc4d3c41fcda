"""The folder importer: Markdown and text files with YAML front matter, JSON Lines files,
documents (PDF, Office, OpenDocument, EPUB, HTML, RTF), ``.eml`` messages, and folders of
them (what ``mempp ingest`` reads), over :mod:`mempp.importers.files`.

In a folder, a file that is not read is skipped with why; a Slack export or a mailbox inside
it is skipped whole, with the ``mempp import`` command that reads it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from mempp.importers.base import Importer, Item, ItemError, Skipped
from mempp.importers.documents.read import SUFFIXES as DOCUMENT_SUFFIXES
from mempp.importers.documents.read import is_version
from mempp.importers.files import JSONL_SUFFIXES, TEXT_SUFFIXES, Delegate, read_sources
from mempp.importers.files import Item as FileItem

MAIL_FILE = ".eml"


class FolderImporter:
    """Reads ``.md``/``.markdown``/``.txt`` files (YAML front matter: ``author``, ``date``,
    ``tags``, ``source``, ``thread``; else a ``YYYY-MM-DD`` file name dates them), ``.jsonl``
    files (one JSON object a line, ``source`` defaulting to ``FILE:LINE``), the document
    formats of :mod:`mempp.importers.documents`, ``.eml`` files (by the mail importer) and
    folders of them."""

    name = "folder"
    description = (
        "Markdown/text files with YAML front matter, JSON Lines, documents (PDF, Office, "
        "OpenDocument, EPUB, HTML, RTF), .eml messages, folders of them"
    )
    # A document version's source names its content (PATH#sha256=...): one a store already
    # has is skipped. Other sources (a text file's path) stay, so a text file's new version
    # is a new record by the write path's exact-repeat rule.
    stable_sources = staticmethod(is_version)

    def __init__(self, others: Callable[[], Sequence[Importer]] = tuple) -> None:
        # The importers whose inputs a folder may hold, asked for when a read starts: the
        # registry passes its own, so this module needs no import of it.
        self._others = others

    def recognizes(self, path: str | os.PathLike[str]) -> bool:
        where = Path(path)
        suffixes = TEXT_SUFFIXES + JSONL_SUFFIXES + DOCUMENT_SUFFIXES
        return where.is_dir() or where.suffix.lower() in suffixes

    def read(self, path: str | os.PathLike[str]) -> Iterator[Item]:
        others = self._others()
        delegates: dict[str, Delegate] = {}
        for other in others:
            if other.name == "mail":  # a folder's .eml files are read, not skipped
                delegates[MAIL_FILE] = other.read

        def recognize(where: Path) -> str | None:
            if where.is_file() and where.suffix.lower() in delegates:
                return None
            for other in others:
                if other.recognizes(where):
                    return f"{other.description}: import it with `mempp import {other.name}`"
            return None

        for item in read_sources([os.fspath(path)], recognize, delegates):
            if not isinstance(item, FileItem):
                yield item
            elif item.document is not None:
                yield item.document
            elif item.skipped is not None:
                yield Skipped(item.location, item.skipped, item.detail)
            else:
                yield ItemError(item.location, item.error or "unreadable")
