"""The folder importer: Markdown and text files with YAML front matter, JSON Lines files, and
folders of them (what ``mempp ingest`` reads), over :mod:`mempp.importers.files`.

In a folder, a file that is not read is skipped with why; a Slack export or a mailbox inside
it is skipped whole, with the ``mempp import`` command that reads it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from mempp.importers.base import Importer, Item, ItemError, Skipped
from mempp.importers.files import JSONL_SUFFIXES, TEXT_SUFFIXES, read_sources


class FolderImporter:
    """Reads ``.md``/``.markdown``/``.txt`` files (YAML front matter: ``author``, ``date``,
    ``tags``, ``source``, ``thread``; else a ``YYYY-MM-DD`` file name dates them), ``.jsonl``
    files (one JSON object a line, ``source`` defaulting to ``FILE:LINE``) and folders."""

    name = "folder"
    description = "Markdown and text files with YAML front matter, JSON Lines, folders of them"

    def __init__(self, others: Callable[[], Sequence[Importer]] = tuple) -> None:
        # The importers whose inputs a folder may hold, asked for when a read starts: the
        # registry passes its own, so this module needs no import of it.
        self._others = others

    def recognizes(self, path: str | os.PathLike[str]) -> bool:
        where = Path(path)
        return where.is_dir() or where.suffix.lower() in TEXT_SUFFIXES + JSONL_SUFFIXES

    def read(self, path: str | os.PathLike[str]) -> Iterator[Item]:
        others = self._others()

        def recognize(where: Path) -> str | None:
            for other in others:
                if other.recognizes(where):
                    return f"{other.description}: import it with `mempp import {other.name}`"
            return None

        for item in read_sources([os.fspath(path)], recognize):
            if item.document is not None:
                yield item.document
            elif item.skipped is not None:
                yield Skipped(item.location, item.skipped, item.detail)
            else:
                yield ItemError(item.location, item.error or "unreadable")
