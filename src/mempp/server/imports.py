"""``POST /v1/import/{source}``: one export of a tool (a Slack or Notion zip, a GitHub API
page, a Jira XML, a transcript...) sent as the request body, read by that importer as
``mempp import SOURCE FILE`` reads it, and stored a batch at a time.

The body is saved under the given file name (its suffix tells several importers what they
hold) in a private temporary folder, bounded by the upload limit, then read whole by the
importer: a file that cannot be read at all is refused before anything is stored; within a
readable one, every item is accounted for (added, skipped by reason, failed) in the answer,
with locations named by the upload's name, never the temporary path.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from mempp.importers import get
from mempp.importers.base import ImportReport, run_import

_UNSAFE = re.compile(r"[^A-Za-z0-9._ -]+")
WRITE_CHUNK = 1 << 20


def safe_name(name: str) -> str:
    """A file name without folders or odd characters (the client's name is untrusted)."""
    base = os.path.basename(name.replace("\\", "/")) or "upload"
    cleaned = _UNSAFE.sub("_", base)[:120].strip(". ")
    return cleaned or "upload"


async def import_body(
    chunks: AsyncIterator[bytes],
    memory: Any,
    source: str,
    name: str,
    *,
    dry_run: bool,
    in_thread: Callable[..., Awaitable[Any]],
) -> ImportReport:
    """Save ``chunks`` as ``name``, then read it with importer ``source`` and store it (or,
    with ``dry_run``, only count what would be stored)."""
    importer = get(source)  # an unknown name is InvalidInput before the body is read
    shown = safe_name(name)
    with tempfile.TemporaryDirectory(prefix="mempp-import-") as folder:
        os.chmod(folder, 0o700)
        path = Path(folder) / shown
        with path.open("wb") as out:
            async for chunk in chunks:
                out.write(chunk)
        return await in_thread(  # type: ignore[no-any-return]
            run_import, memory, importer, path, dry_run=dry_run, shown_as=shown
        )
