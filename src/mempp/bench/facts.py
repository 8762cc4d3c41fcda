"""The fact-index ablation of ``mempp bench`` ("w/ fact index", the paper's Table 4).

An LLM lists the facts each stored document states (one structured call per document, at
"write time" of this index, i.e. after the benchmark's LLM-free ingest); the facts are
indexed lexically (SQLite FTS5, BM25, the store's tokenizer) and by vector (the benchmark's
encoder); at read time the lexical and vector legs search the **facts** instead of the
documents, each fact hit standing for the document it came from (a document ranks at its best
fact), and the rest of the paper preset's read path is unchanged: the tag leg, weighted RRF
with the preset's weights, the as-of bound, the recency slots. The answerer reads the original
documents the facts point to, never the facts. This is the paper's reading ("indexing each
original document whole" against "indexing extracted facts", the answerer reading "the same
original documents in both variants"), and the authors' code agrees: there, each extracted
fact becomes its own row whose embedding is the fact's and whose content is the document.

Why here and not in the store: the paper evaluates the fact index only as an ablation, finds
it costs one LLM call per document for no gain (-1.7 on OrgMemBench, -2.6 on LoCoMo), and the
library's method keeps documents whole as the unit of retrieval. So the index lives in its own
SQLite file beside the cached benchmark store (``facts-<key>/facts.sqlite``, keyed by that
store's cache key, the model and this module's prompt version), which is never written; no
store schema, no migration.

Extraction rules (as for the graph, :mod:`mempp.llm.graph`): the reply's JSON schema is sent with
the prompt (:meth:`mempp.llm.LLMClient.chat_json`); a reply that is empty, malformed, echoes
the instructions, lists no fact, or lists only facts whose words the document lacks is a
**failed** call: counted, nothing stored, the document stays pending and is asked again on the
next run. A fact carries its source record id, and that document's date and author. A call
that failed for a transport reason stops the preparation (nothing wrong is cached).
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mempp.bench.retrieve import clean_question, date_key
from mempp.encoders import Embedder
from mempp.errors import MemppError
from mempp.llm.graph import document_messages, triples_max_tokens
from mempp.records import Record
from mempp.search.query import lexical_query, storable_query
from mempp.settings import Settings
from mempp.store import Store
from mempp.store.sqlite.legs import fts_match_expression
from mempp.store.sqlite.schema import FTS_TOKENIZE

if TYPE_CHECKING:
    from mempp.bench.cache import IngestedStore
    from mempp.llm import LLMClient

__all__ = [
    "FACTS_REPLY",
    "FACTS_SYSTEM",
    "FactIndex",
    "FactIndexCopy",
    "FactIndexError",
    "extract_facts",
    "fact_index",
    "fact_legs",
    "fact_messages",
    "grounded_facts",
]

PROMPT_VERSION = 1  # part of the index key: a changed prompt builds a new index
INDEX_FILE = "facts.sqlite"
MAX_FACTS_PER_RECORD = 20
FACT_MAX_CHARS = 300  # a fact longer than this is cut at a word: facts are short statements
REPLY_MAX_TOKENS = 1024  # at most; the budget follows the document's length (see below)
BATCH = 32  # documents read from the store at a time; the transport check runs per batch

FACTS_SYSTEM = f"""\
You list the facts that one document from an organization's memory states, for a search index.
- Each fact is one short sentence that stands on its own: name the person, team or thing it \
is about (resolve "I", "we", "she" to whom they mean; the author is "I") and keep names, \
numbers and dates as the document writes them.
- Only what the document states; at most {MAX_FACTS_PER_RECORD} facts.
Reply with one JSON object and nothing else. Its only key is "facts": a list of strings, one \
fact each, taken from the document."""
FACTS_REPLY = {"facts": [str]}

_WORD = re.compile(r"[^\W_]+")


def _words(text: str) -> set[str]:
    # Words of three letters or more, and numbers: "is", "a", "to" say nothing about grounding.
    return {w for w in _WORD.findall(text.casefold()) if len(w) >= 3 or w.isdigit()}


class FactIndexError(MemppError):
    """The fact index could not be prepared (the endpoint failed); nothing wrong was stored."""


# -- extraction --------------------------------------------------------------------------------
def fact_messages(record: Record) -> list[dict[str, str]]:
    return document_messages(FACTS_SYSTEM, record)


def _cut(text: str) -> str:
    flat = " ".join(text.split())
    if len(flat) <= FACT_MAX_CHARS:
        return flat
    return flat[:FACT_MAX_CHARS].rsplit(" ", 1)[0]


def grounded_facts(reply: dict[str, Any], source: str) -> list[str]:
    """The reply's facts, whitespace-collapsed, cut to :data:`FACT_MAX_CHARS`, deduplicated
    (case-insensitively), at most :data:`MAX_FACTS_PER_RECORD`, keeping only facts of two
    words or more at least half of whose content words the ``source`` (the prompt's document,
    header included) contains: a fact the model made up or copied from elsewhere is dropped.

    Raises ``ValueError`` when nothing is left: the reply listed no fact, or none grounded.
    """
    items = reply["facts"]
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise ValueError("facts must be a list of strings")
    known = _words(source)
    kept: dict[str, str] = {}
    for item in items:
        fact = _cut(item)
        words = _words(fact)
        if len(fact.split()) < 2 or not words:
            continue
        if 2 * len(words & known) < len(words):
            continue
        kept.setdefault(fact.casefold(), fact)
    if not kept:
        if not [item for item in items if item.strip()]:
            raise ValueError("the reply lists no fact")
        raise ValueError(f"none of the {len(items)} fact(s) is grounded in the document")
    return list(kept.values())[:MAX_FACTS_PER_RECORD]


def _check(reply: dict[str, Any], source: str) -> None:
    grounded_facts(reply, source)  # raises ValueError: the reply is unusable


def extract_facts(llm: LLMClient, record: Record) -> list[str]:
    """One structured LLM call: the facts ``record`` states. Raises ``LLMError`` when the call
    fails or the reply is unusable (empty, malformed, an echo, no grounded fact)."""
    messages = fact_messages(record)
    source = messages[-1]["content"]
    reply = llm.chat_json(
        messages,
        schema=FACTS_REPLY,
        name="fact_index_facts",
        check=lambda value: _check(value, source),
        # Facts restate the document's words, as triples do: a reply far longer than the text
        # is a small model looping, cut off early by the graph's length-based budget.
        max_tokens=min(REPLY_MAX_TOKENS, triples_max_tokens(record.text)),
    )
    return grounded_facts(reply, source)


# -- the index ---------------------------------------------------------------------------------
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS facts (
        id INTEGER PRIMARY KEY,
        scope TEXT NOT NULL,
        record_id INTEGER NOT NULL,
        text TEXT NOT NULL,
        date TEXT,
        date_key INTEGER NOT NULL,
        author TEXT,
        vector BLOB NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS facts_scope ON facts (scope, record_id)",
    f"""CREATE VIRTUAL TABLE IF NOT EXISTS facts_fts USING fts5(
        text, content='facts', content_rowid='id', tokenize='{FTS_TOKENIZE}')""",
    # A document is here once its facts are stored; a failed one is not, and stays pending.
    """CREATE TABLE IF NOT EXISTS extracted (
        scope TEXT NOT NULL,
        record_id INTEGER NOT NULL,
        facts INTEGER NOT NULL,
        model TEXT NOT NULL,
        PRIMARY KEY (scope, record_id))""",
)


@dataclass(frozen=True, slots=True)
class StoredFact:
    id: int
    scope: str
    record_id: int
    text: str
    date: str | None
    author: str | None


class FactIndex:
    """Facts of the documents of a benchmark store, searched lexically and by vector.

    One SQLite file; a document's facts are written in one transaction together with the
    mark that it was extracted, so an interrupted run leaves no half-indexed document.
    """

    def __init__(self, path: Path, embedder: Embedder) -> None:
        self.path = path
        self.embedder = embedder
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        self._vectors: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            for statement in _SCHEMA:
                self._db.execute(statement)
            self._db.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('encoder', ?)",
                (json.dumps([embedder.name, embedder.dim]),),
            )
            (stored,) = self._db.execute("SELECT value FROM meta WHERE key = 'encoder'").fetchone()
        if json.loads(stored) != [embedder.name, embedder.dim]:
            self.close()
            raise FactIndexError(f"{path} holds vectors of another encoder ({stored})")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> FactIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writes ----------------------------------------------------------------------------
    def pending(self, scope: str, record_ids: Sequence[int]) -> list[int]:
        """The ids among ``record_ids`` whose facts are not stored yet, in id order."""
        with self._lock:
            done = {
                row[0]
                for row in self._db.execute(
                    "SELECT record_id FROM extracted WHERE scope = ?", (scope,)
                )
            }
        return sorted(set(record_ids) - done)

    def add(self, record: Record, facts: Sequence[str], model: str) -> None:
        """Store ``record``'s facts (with its id, date and author) and mark it extracted."""
        if not facts:
            raise ValueError("a document is stored with at least one fact")
        vectors = np.asarray(self.embedder.embed(list(facts)), dtype=np.float32)
        key = date_key(record.date)
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for fact, vector in zip(facts, vectors, strict=True):
                    cursor = self._db.execute(
                        "INSERT INTO facts (scope, record_id, text, date, date_key, author, vector)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (
                            record.scope,
                            record.id,
                            fact,
                            record.date,
                            key,
                            record.author,
                            vector.tobytes(),
                        ),
                    )
                    self._db.execute(
                        "INSERT INTO facts_fts (rowid, text) VALUES (?, ?)",
                        (cursor.lastrowid, fact),
                    )
                self._db.execute(
                    "INSERT INTO extracted (scope, record_id, facts, model) VALUES (?, ?, ?, ?)",
                    (record.scope, record.id, len(facts), model),
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._vectors.pop(record.scope, None)

    # -- reads -----------------------------------------------------------------------------
    def facts(self, scope: str, record_id: int | None = None) -> list[StoredFact]:
        sql = "SELECT id, scope, record_id, text, date, author FROM facts WHERE scope = ?"
        args: tuple[Any, ...] = (scope,)
        if record_id is not None:
            sql, args = sql + " AND record_id = ?", (scope, record_id)
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY id", args).fetchall()
        return [StoredFact(*row) for row in rows]

    def counts(self, scope: str | None = None) -> dict[str, int]:
        where, args = ("WHERE scope = ?", (scope,)) if scope is not None else ("", ())
        with self._lock:
            (documents,) = self._db.execute(
                f"SELECT COUNT(*) FROM extracted {where}", args
            ).fetchone()
            (facts,) = self._db.execute(f"SELECT COUNT(*) FROM facts {where}", args).fetchone()
        return {"documents": int(documents), "facts": int(facts)}

    def lexical(
        self, scope: str, question: str, as_of: int | None, settings: Settings
    ) -> list[int]:
        """Documents ranked by their best fact's BM25 score for the question's lexical query
        (the preset's terms and mode), at most ``settings.candidates``."""
        match = fts_match_expression(storable_query(lexical_query(question, settings)))
        if match is None:
            return []
        bound = as_of if as_of is not None else np.iinfo(np.int64).max
        with self._lock:
            rows = self._db.execute(
                "SELECT f.record_id FROM facts_fts JOIN facts f ON f.id = facts_fts.rowid"
                " WHERE facts_fts MATCH ? AND f.scope = ? AND f.date_key <= ?"
                " ORDER BY bm25(facts_fts), f.id DESC",
                (match, scope, int(bound)),
            ).fetchall()
        return _documents((row[0] for row in rows), settings.candidates)

    def nearest(
        self, scope: str, vector: np.ndarray, as_of: int | None, settings: Settings
    ) -> list[int]:
        """Documents ranked by their best fact's cosine with the question vector."""
        ids, records, keys, matrix = self._scope_vectors(scope)
        if not len(ids):
            return []
        scores = matrix @ np.asarray(vector, dtype=np.float32)
        eligible = np.ones(len(ids), dtype=bool) if as_of is None else keys <= as_of
        chosen = np.flatnonzero(eligible)
        # Best cosine first; equal scores go to the newer fact, as ties go to newer rows.
        order = chosen[np.lexsort((-ids[chosen], -scores[chosen]))]
        return _documents((int(records[i]) for i in order), settings.candidates)

    def _scope_vectors(self, scope: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        cached = self._vectors.get(scope)
        if cached is None:
            with self._lock:
                rows = self._db.execute(
                    "SELECT id, record_id, date_key, vector FROM facts WHERE scope = ? ORDER BY id",
                    (scope,),
                ).fetchall()
            dim = self.embedder.dim
            matrix = np.zeros((len(rows), dim), dtype=np.float32)
            for i, row in enumerate(rows):
                matrix[i] = np.frombuffer(row[3], dtype=np.float32)
            cached = (
                np.array([r[0] for r in rows], dtype=np.int64),
                np.array([r[1] for r in rows], dtype=np.int64),
                np.array([r[2] for r in rows], dtype=np.int64),
                matrix,
            )
            self._vectors[scope] = cached
        return cached


def _documents(records: Iterable[int], limit: int) -> list[int]:
    """Record ids in order of their first fact, each once, at most ``limit``."""
    seen: dict[int, None] = {}
    for record in records:
        if record not in seen:
            seen[record] = None
            if len(seen) >= limit:
                break
    return list(seen)


# -- preparing it for a benchmark run -------------------------------------------------------------
@dataclass(slots=True)
class FactIndexCopy:
    """Where the fact index is, and what this run's extraction did."""

    path: Path
    key: str
    model: str
    pending: int = 0
    extracted: int = 0
    facts: int = 0
    failures: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    left: int = 0  # pending documents not asked this run (the limit), still unindexed
    documents: int = 0  # documents with facts, over the scopes of the run
    stored_facts: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "key": self.key,
            "model": self.model,
            "prompt_version": PROMPT_VERSION,
            "pending": self.pending,
            "extracted_now": self.extracted,
            "facts_now": self.facts,
            "failures": self.failures,
            "failed": dict(list(self.failed.items())[:20]),  # a sample; the count is above
            "left_pending": self.left,
            "documents": self.documents,
            "facts": self.stored_facts,
            "reused": self.pending == 0,
            "seconds": round(self.seconds, 3),
        }


def fact_index(
    ingested: IngestedStore,
    store: Store,
    scopes: Sequence[str],
    llm: LLMClient,
    embedder: Embedder,
    *,
    max_workers: int = 1,
    limit: int | None = None,
    progress: bool = True,
) -> tuple[FactIndex, FactIndexCopy]:
    """The fact index of the benchmark store (``store``, read only), with facts extracted for
    every stored document of ``scopes`` not yet extracted (one call per document; at most
    ``limit`` documents, in scope and id order, when given: the rest stays pending, unindexed,
    and counted). Returns the open index (the caller closes it) and what this run did."""
    from mempp.bench.ablations import _transport_failure

    started = time.perf_counter()
    material = {"store": ingested.key, "model": llm.model, "prompt": PROMPT_VERSION}
    key = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()
    path = ingested.path.parent / f"facts-{key[:16]}" / INDEX_FILE
    index = FactIndex(path, embedder)
    copy = FactIndexCopy(path, key, llm.model)
    try:
        wanted = set(scopes)
        by_scope: dict[str, list[int]] = {}
        for (scope, _), record_id in ingested.item_record.items():
            if record_id is not None and scope in wanted:
                by_scope.setdefault(scope, []).append(record_id)
        pending = {scope: index.pending(scope, by_scope.get(scope, [])) for scope in scopes}
        if limit is not None:
            budget = limit
            for scope, ids in pending.items():
                copy.left += max(0, len(ids) - budget)
                pending[scope], budget = ids[:budget], max(0, budget - len(ids))
        copy.pending = sum(len(ids) for ids in pending.values())
        with _bar(copy.pending, progress) as bar:
            for scope, ids in pending.items():
                for start in range(0, len(ids), BATCH):
                    batch = ids[start : start + BATCH]
                    records = store.get(scope, batch)
                    reasons: list[str] = []
                    for record_id, outcome in _extract_each(llm, records, batch, max_workers):
                        if isinstance(outcome, str):
                            copy.failures += 1
                            copy.failed[f"{scope}:{record_id}"] = outcome
                            reasons.append(outcome)
                        else:
                            index.add(records[record_id], outcome, llm.model)
                            copy.extracted += 1
                            copy.facts += len(outcome)
                        bar.update(1)
                    failed = _transport_failure(reasons)
                    if failed is not None:
                        # Documents indexed so far are kept; the failed ones stay pending.
                        raise FactIndexError(f"fact extraction in scope {scope} failed: {failed}")
        for scope in scopes:
            counts = index.counts(scope)
            copy.documents += counts["documents"]
            copy.stored_facts += counts["facts"]
    except BaseException:
        index.close()
        raise
    copy.seconds = time.perf_counter() - started
    return index, copy


def _extract_each(
    llm: LLMClient, records: dict[int, Record], ids: Sequence[int], max_workers: int
) -> Iterator[tuple[int, list[str] | str]]:
    """(id, facts) per document, or (id, reason) where the call failed; in id order."""
    from mempp.llm import LLMError, ordered_map

    def one(record_id: int) -> tuple[int, list[str] | str]:
        record = records.get(record_id)
        if record is None:
            return record_id, "record not found"
        try:
            return record_id, extract_facts(llm, record)
        except LLMError as exc:
            return record_id, f"{type(exc).__name__}: {exc}"

    yield from ordered_map(one, ids, max_workers=max_workers)


def _bar(total: int, progress: bool) -> Any:
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc="fact extraction",
        unit="doc",
        file=sys.stderr,
        disable=not (progress and total > 0),
    )


def fact_legs(
    index: FactIndex,
    scope: str,
    question: str,
    vector: np.ndarray | None,
    as_of: int | None,
    settings: Settings,
) -> tuple[list[int], list[int]]:
    """The lexical and vector legs over the facts, as document ids (empty when the preset
    switches that leg off)."""
    text = clean_question(question)
    lex = index.lexical(scope, text, as_of, settings) if settings.w_lex > 0 else []
    vec = (
        index.nearest(scope, vector, as_of, settings)
        if settings.w_vec > 0 and vector is not None
        else []
    )
    return lex, vec
