"""The benchmark data model shared by every loader, and where the data lives on disk.

Every benchmark is reduced to the same three things: the items to ingest (in ingest order,
each in a ``scope``), the questions (each with its scope, category, as-of date and gold item
ids) and a record of which files were read. Loaders never copy data anywhere: they read it by
path, and this module says clearly what is missing and where it comes from.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mempp.errors import MemppError

ENV_VAR = "MEMPP_DATASETS"
DEFAULT_RELATIVE = Path("..") / "shared" / "datasets"


class DataMissing(MemppError):
    """A benchmark's data is not where it was looked for (the message says where to get it)."""


class DataInvalid(MemppError):
    """The data exists but cannot be used (for example no question survives loading)."""


@dataclass(frozen=True, slots=True)
class Item:
    """One thing to ingest: a document (OrgMemBench) or a dialogue turn (LoCoMo, LongMemEval).

    ``id`` is unique within its ``scope`` and is what gold evidence refers to; it is stored in
    the record's ``source`` (which retrieval never reads) rather than in a tag, because tags
    feed the tag leg and would leak the answer key into retrieval. ``group`` is the
    event / session the item belongs to (for session-level recall). ``history`` is the text the
    history-based baselines (RAG-N, full context) concatenate. ``thread`` is what mempp stores
    as the record's thread: a dialogue session, as a chat export would name it; None for
    standalone documents (an OrgMemBench event id is generator metadata, not a thread a writer
    would know, and it would group the gold evidence).
    """

    scope: str
    id: str
    text: str
    date: str | None
    author: str | None
    group: str | None
    history: str
    thread: str | None = None


@dataclass(frozen=True, slots=True)
class Question:
    """One question with everything retrieval metrics and a later answer/judge step need.

    ``gold`` are item ids of its scope; ``gold_groups`` are group ids (LongMemEval's
    ``answer_session_ids``), empty where the benchmark has none. ``reference`` is the ground
    truth answer as published and ``raw`` the question row (rubric etc.) for a judge.
    """

    id: str
    scope: str
    category: str
    text: str
    as_of: str | None
    gold: tuple[str, ...]
    gold_groups: tuple[str, ...] = ()
    reference: Any = None
    raw: Mapping[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Benchmark:
    """A loaded benchmark: items in ingest order, questions, and how they were obtained."""

    name: str
    title: str
    root: Path
    items: list[Item]
    questions: list[Question]
    categories: dict[str, str]  # category code -> display name, in display order
    files: dict[str, str]  # path relative to root -> sha256 of every file read
    notes: dict[str, Any]  # loader options and counts (malformed lines, dropped ids, ...)

    @property
    def scopes(self) -> list[str]:
        return list(dict.fromkeys(item.scope for item in self.items))

    def dataset_info(self) -> dict[str, Any]:
        """What the report says about the copy of the data that was used."""
        return {
            "name": self.name,
            "title": self.title,
            "root": str(self.root.resolve()),
            "digest": files_digest(self.files),
            "n_files": len(self.files),
            "files": self.files,
            "items": len(self.items),
            "scopes": len(self.scopes),
            "questions": len(self.questions),
            "notes": self.notes,
        }


def default_data_root() -> Path:
    """``$MEMPP_DATASETS`` if set, else ``../shared/datasets`` relative to the cwd."""
    env = os.environ.get(ENV_VAR)
    return Path(env) if env else Path.cwd() / DEFAULT_RELATIVE


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def files_digest(files: Mapping[str, str]) -> str:
    """One hash over every (relative path, file hash) pair, independent of reading order."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(f"{name}\0{files[name]}\n".encode())
    return digest.hexdigest()


@dataclass(slots=True)
class JsonlReport:
    """Lines of a JSONL file that could not be used, as ``file:line: reason``."""

    problems: list[str] = field(default_factory=list)


def read_jsonl(path: Path, report: JsonlReport) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, object)``; blank lines are ignored, bad lines are reported."""
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                report.problems.append(f"{path.name}:{number}: not JSON ({exc.msg})")
                continue
            if not isinstance(value, dict):
                report.problems.append(f"{path.name}:{number}: not a JSON object")
                continue
            yield number, value


def require(path: Path, what: str, origin: str) -> Path:
    """Raise :class:`DataMissing` with a one-line message when ``path`` does not exist."""
    if not path.exists():
        raise DataMissing(
            f"{what} not found at {path} ({origin}); pass --data DIR or set ${ENV_VAR}"
        )
    return path
