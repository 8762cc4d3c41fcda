"""Mem^g++: an entity-relation graph beside the rows, built and queried with an LLM (optional).

* **Extraction** (:func:`extract`) is an explicit call, never part of ``Memory.add``: the write
  path stays LLM-free. Each active row not yet extracted gets one LLM call that returns
  ``(subject, relation, object)`` triples; they are stored keyed to the row, with normalised
  entity keys (:func:`entity_key`), and the row is marked done even when it yields none. A row
  whose call fails, or whose reply is unusable (a placeholder, an echo of the prompt, triples
  naming nothing the document names), is not marked, so the next ``extract`` tries it again.
  A triple whose subject or object has a word the document lacks is dropped.
* **Query** (:func:`related_facts`, or ``Memory.evidence(..., graph=GraphOptions(llm))``): one
  LLM call lists the entities the question names; triples that have one of them as subject or
  object (one hop) are ranked by how many of the question's entities they touch, then by how
  recent their source row is; at most 5 distinct triples are shown after the fused rows.

Unlike the paper, a triple carries its source row's date and obeys the as-of scope: triples
whose row is dated after ``as_of`` (or undated, when ``as_of`` is given) are left out, as the
rows are. ``dated=False`` reproduces the paper: no date, no as-of filter. Triples of archived
rows are left out in both modes, since archiving means "out of retrieval".
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from mempp.dates import parse_as_of
from mempp.errors import InvalidInput
from mempp.records import Record
from mempp.search.evidence import RelatedFact
from mempp.store.base import GraphStore, Triple, TripleHit, supports

if TYPE_CHECKING:  # the LLM client loads only when the graph is used
    from mempp.dates import DateLike
    from mempp.llm import LLMClient
    from mempp.search.reader import ScopedStore

__all__ = [
    "MAX_FACTS",
    "ExtractReport",
    "GraphOptions",
    "entity_key",
    "extract",
    "parse_entities",
    "parse_triples",
    "question_entities",
    "related_facts",
]

log = logging.getLogger(__name__)

MAX_FACTS = 5  # triples shown per question, as in the paper
MAX_TRIPLES_PER_RECORD = 30
MAX_QUESTION_ENTITIES = 10
PROMPT_TEXT_CHARS = 8_000  # a row's text is cut to this in the extraction prompt
# Ranked triples read per shown fact, so repeats of one fact from many rows can be skipped.
CANDIDATES_PER_FACT = 8

TRIPLES_SYSTEM = f"""\
You turn one document from an organization's memory into entity-relation triples.
- subject and object are entities: people, teams, organizations, projects, products, systems, \
places, documents, events. Use each one's shortest unambiguous name as written (a full name \
over a pronoun: resolve "I", "we", "she" to the person or team meant; the author is "I").
- relation is a short lowercase verb phrase, e.g. "leads", "reports to", "launches on", \
"replaced", "owns".
- Only facts the document states; at most {MAX_TRIPLES_PER_RECORD} triples; none is fine.
Reply with one JSON object and nothing else. Its only key is "triples": a list (empty when \
the document states no such fact) of objects, each with three string keys, subject, relation \
and object, filled from the document."""
TRIPLES_REPLY = {"triples": [{"subject": str, "relation": str, "object": str}]}

ENTITIES_SYSTEM = f"""\
List the entities a question names: people, teams, organizations, projects, products, systems, \
places, documents, events. Use the names as written; leave out generic words ("the team", \
"the project") and dates. At most {MAX_QUESTION_ENTITIES}; none is fine.
Reply with one JSON object and nothing else. Its only key is "entities": a list of the names \
(strings), empty when the question names none."""
ENTITIES_REPLY = {"entities": [str]}


# -- entity keys -------------------------------------------------------------------------------
_POSSESSIVE = re.compile(r"['’]s\b")
_NON_WORD = re.compile(r"[\W_]+")
_ARTICLE = re.compile(r"^(?:the|a|an) ")


def entity_key(name: str) -> str:
    """The key entities are matched on: NFKC, case-folded, possessive ``'s`` and punctuation
    dropped, spaces collapsed, a leading article removed. ``"The Helix-Project's"`` and
    ``"helix project"`` share the key ``"helix project"``."""
    text = unicodedata.normalize("NFKC", name).casefold()
    text = _NON_WORD.sub(" ", _POSSESSIVE.sub("", text)).strip()
    return _ARTICLE.sub("", text)


# -- options and reports -----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class GraphOptions:
    """Ask ``Memory.evidence`` for graph facts after the rows.

    ``dated=False`` is the paper's behaviour (no date, no as-of filter). ``on_error="skip"``
    returns the rows alone when the entity call fails, instead of raising.
    """

    llm: LLMClient
    dated: bool = True
    limit: int = MAX_FACTS
    on_error: Literal["raise", "skip"] = "raise"


@dataclass(slots=True)
class ExtractReport:
    """What one :func:`extract` call did."""

    model: str
    pending: int = 0
    extracted: int = 0
    triples: int = 0
    failures: int = 0
    failed: dict[int, str] = field(default_factory=dict)

    def summary(self) -> str:
        """One line for people (the CLI prints it)."""
        return (
            f"extracted {self.extracted} of {self.pending} pending rows ({self.triples} triples)"
            f", {self.failures} failed (left pending, tried again next time)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "pending": self.pending,
            "extracted": self.extracted,
            "triples": self.triples,
            "failures": self.failures,
            "failed": {str(k): v for k, v in self.failed.items()},
        }


# -- replies -----------------------------------------------------------------------------------
def _check_grounded(reply: dict[str, Any], messages: list[dict[str, str]]) -> None:
    _check_triples(reply)
    grounded_triples(reply, messages)


def _check_triples(reply: dict[str, Any]) -> None:
    for item in reply["triples"]:
        if not isinstance(item, dict):
            raise ValueError(f"each triple must be an object, got {item!r:.60}")
        for key in ("subject", "relation", "object"):
            value = item.get(key)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"triple {item!r:.80} needs a non-empty string {key!r}")


def parse_triples(reply: dict[str, Any], source: str | None = None) -> list[Triple]:
    """Triples of a checked reply: stripped, deduplicated, at most the per-row cap. A triple
    whose subject or object has no letters or digits at all (empty key) is dropped, and so,
    when ``source`` (the text the model read) is given, is one whose subject or object has a
    word the source lacks: the model made it up or copied it from the instructions."""
    words = set(entity_key(source).split()) if source is not None else None
    triples: dict[tuple[str, str, str], Triple] = {}
    for item in reply["triples"]:
        subject, relation, obj = (
            " ".join(item[k].split()) for k in ("subject", "relation", "object")
        )
        s_key, o_key = entity_key(subject), entity_key(obj)
        if not s_key or not o_key:
            continue
        if words is not None and not set(f"{s_key} {o_key}".split()) <= words:
            continue
        triples.setdefault(
            (s_key, entity_key(relation), o_key), Triple(subject, relation, obj, s_key, o_key)
        )
    return list(triples.values())[:MAX_TRIPLES_PER_RECORD]


def _check_entities(reply: dict[str, Any]) -> None:
    if not all(isinstance(e, str) for e in reply["entities"]):
        raise ValueError("entities must be strings")


def parse_entities(reply: dict[str, Any]) -> list[str]:
    """Distinct non-empty entity keys of a checked reply, in order, at most the cap."""
    keys = (entity_key(name) for name in reply["entities"])
    return list(dict.fromkeys(k for k in keys if k))[:MAX_QUESTION_ENTITIES]


# -- extraction --------------------------------------------------------------------------------
def triples_max_tokens(text: str) -> int:
    """The reply budget for one row's triples. Grounded triples restate the row's own words,
    so a reply far longer than the text is a model repeating itself (a small local model can
    loop for thousands of tokens): about half a token per character of text, plus room for
    the JSON wrapper, capped at 2,048."""
    return min(2048, 128 + len(text[:PROMPT_TEXT_CHARS]) // 2)


def document_messages(system: str, record: Record) -> list[dict[str, str]]:
    """``system`` and one document as the user message: a header with its date and author,
    then its text cut to :data:`PROMPT_TEXT_CHARS` (also the fact-index bench ablation's)."""
    text = record.text
    if len(text) > PROMPT_TEXT_CHARS:
        text = text[:PROMPT_TEXT_CHARS].rstrip() + " [...]"
    head = f"Document dated {record.date or 'unknown'}, author {record.author or 'unknown'}:"
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": f"{head}\n\n{text}"},
    ]


def triple_messages(record: Record) -> list[dict[str, str]]:
    return document_messages(TRIPLES_SYSTEM, record)


def grounded_triples(reply: dict[str, Any], messages: list[dict[str, str]]) -> list[Triple]:
    """The reply's triples whose entities the document (header included) names. Raises
    ``ValueError`` when the reply listed triples and not one of them is grounded: such a
    reply is a failed call (the row stays pending), not "this row has no facts"."""
    triples = parse_triples(reply, source=messages[-1]["content"])
    if reply["triples"] and not triples:
        raise ValueError(
            f"none of the {len(reply['triples'])} triple(s) names entities of the document"
        )
    return triples


def extract(
    memory: ScopedStore,
    llm: LLMClient,
    ids: Collection[int] | None = None,
    *,
    limit: int | None = None,
    max_workers: int = 1,
    progress: Callable[[int, str | None], None] | None = None,
) -> ExtractReport:
    """Extract triples for the scope's active rows not yet extracted (``ids`` narrows them;
    ``limit`` caps how many rows this call processes). One LLM call per row.

    A failed call or unusable reply is counted in the report and leaves the row pending.
    ``progress(record_id, failure)`` is called after each row (``failure`` is ``None`` when
    the row was stored).
    """
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise InvalidInput("limit must be an integer >= 0")
    if not isinstance(max_workers, int) or max_workers < 1:
        raise InvalidInput("max_workers must be an integer >= 1")
    store = _graph_store(memory)
    pending = store.pending_extraction(memory.scope, None if ids is None else list(ids))
    if limit is not None:
        pending = pending[:limit]
    report = ExtractReport(llm.model, pending=len(pending))
    for record_id, outcome in _extract_each(memory, llm, pending, max_workers):
        if isinstance(outcome, str):
            report.failures += 1
            report.failed[record_id] = outcome
        elif store.add_triples(memory.scope, record_id, outcome, llm.model):
            report.extracted += 1
            report.triples += len(outcome)
        if progress is not None:
            progress(record_id, outcome if isinstance(outcome, str) else None)
    return report


def _extract_each(
    memory: ScopedStore, llm: LLMClient, pending: list[int], max_workers: int
) -> Iterator[tuple[int, list[Triple] | str]]:
    """(id, triples) per row, or (id, reason) where the call failed; in id order."""

    def one(record_id: int) -> tuple[int, list[Triple] | str]:
        from mempp.llm import LLMError

        record = memory.store.get(memory.scope, [record_id]).get(record_id)
        if record is None:
            return record_id, "record not found"
        messages = triple_messages(record)
        try:
            reply = llm.chat_json(
                messages,
                schema=TRIPLES_REPLY,
                name="graph_triples",
                check=lambda reply: _check_grounded(reply, messages),
                max_tokens=triples_max_tokens(record.text),
            )
        except LLMError as exc:
            return record_id, f"{type(exc).__name__}: {exc}"
        return record_id, grounded_triples(reply, messages)

    from mempp.llm import ordered_map

    yield from ordered_map(one, pending, max_workers=max_workers)


# -- query -------------------------------------------------------------------------------------
def question_entities(llm: LLMClient, question: str) -> list[str]:
    """One LLM call: the entity keys the question names. Raises ``LLMError``."""
    messages = [
        {"role": "system", "content": ENTITIES_SYSTEM},
        {"role": "user", "content": f"Question: {question.strip()}"},
    ]
    reply = llm.chat_json(
        messages,
        schema=ENTITIES_REPLY,
        name="graph_entities",
        check=_check_entities,
        max_tokens=256,
    )
    return parse_entities(reply)


def related_facts(
    memory: ScopedStore,
    question: str,
    *,
    llm: LLMClient,
    as_of: DateLike = None,
    dated: bool = True,
    limit: int = MAX_FACTS,
) -> list[RelatedFact]:
    """At most ``limit`` distinct triples reached in one hop from the question's entities.

    ``dated=True``: each fact names its source row and date, and rows dated after ``as_of``
    (or undated, when ``as_of`` is given) contribute nothing. ``dated=False``: the paper's
    behaviour, no date and no as-of filter.
    """
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise InvalidInput(f"limit must be an integer >= 1, got {limit!r}")
    bound = parse_as_of(as_of) if dated else None
    store = _graph_store(memory)
    keys = question_entities(llm, question)
    if not keys:
        return []
    hits = store.search_triples(
        memory.scope, keys, bound, dated=dated, limit=limit * CANDIDATES_PER_FACT
    )
    return [_fact(hit, dated) for hit in _distinct(hits)][:limit]


def facts_for_evidence(
    memory: ScopedStore, question: str, options: GraphOptions, as_of: DateLike
) -> list[RelatedFact]:
    """:func:`related_facts` under ``options``; with ``on_error="skip"`` a failed entity call
    is logged and yields no facts."""
    from mempp.llm import LLMError

    try:
        return related_facts(
            memory,
            question,
            llm=options.llm,
            as_of=as_of,
            dated=options.dated,
            limit=options.limit,
        )
    except LLMError as exc:
        if options.on_error != "skip":
            raise
        log.warning("graph facts skipped: %s", exc)
        return []


def _distinct(hits: Iterable[TripleHit]) -> Iterator[TripleHit]:
    """The best-ranked copy of each fact: many rows often state the same triple."""
    seen: set[tuple[str, str, str]] = set()
    for hit in hits:
        key = (hit.subject_key, entity_key(hit.relation), hit.object_key)
        if key not in seen:
            seen.add(key)
            yield hit


def _fact(hit: TripleHit, dated: bool) -> RelatedFact:
    if not dated:
        return RelatedFact(hit.subject, hit.relation, hit.object)
    return RelatedFact(hit.subject, hit.relation, hit.object, hit.record_id, hit.date)


def _graph_store(memory: ScopedStore) -> GraphStore:
    store = memory.store
    supports(store, GraphStore, "the entity graph")
    assert isinstance(store, GraphStore)
    return store
