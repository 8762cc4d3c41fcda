"""The systems a benchmark run compares, all with the same encoder and the same store.

* ``mempp-paper``: the paper preset of the benchmark (``paper-orgmembench``, ``paper-locomo``,
  ``paper-longmemeval``: the configurations of the paper's Table 6).
* ``mempp-default``: the library's ``default`` preset.
* ``mempp-default-packed``: the same rows, with evidence packing (``mempp.search.packing``, default
  ``PackingOptions``): long records are shown as query-focused excerpts so more records fit
  the answer window. An option reported beside the headline, which stays whole documents.
* Ablations of ``mempp-paper``: ``no-lex``, ``no-tag``, ``no-vec`` (that leg's weight set to
  0 with ``Settings.with_``) and ``no-recency`` (``reserve=0``).
* ``bm25``: the lexical leg alone, disjunctive over every content word of the question
  (BM25 ranking of SQLite FTS5), no recency slots. ``vector``: the vector leg alone, no slots.
  Both are fixed for every benchmark (C = 200, k = 50); nothing is tuned per benchmark.
* ``rag-N``: the history in date order cut into N-token chunks, chunks ranked by cosine of
  the same encoder.
* ``full-context``: the history in date order, read up to the answer window.
* ``mempp:<preset>``: any other library preset, by name; ``mempp:<preset>+<setting>=<value>...``
  the preset with some settings changed (a settings sweep), e.g. ``mempp:default+gamma=10``.

Three LLM ablations exist only when an LLM endpoint is configured, and run only when named
(they cost calls per stored row; see ``mempp.bench.ablations`` and ``mempp.bench.facts``):

* ``mempp-consolidated``: the paper preset searched over a copy of the store consolidated once
  (``mempp.llm.consolidate``, threshold 0.85).
* ``mempp-graph``: Mem^g++, the paper preset plus at most 5 entity-graph facts per question
  (``mempp.llm.graph``); dated triples by default, the paper's undated ones with
  ``graph_dated=False``.
* ``mempp-fact-index``: "w/ fact index", the paper preset whose lexical and vector legs search
  LLM-extracted facts instead of the documents, each fact standing for its document
  (``mempp.bench.facts``); the answerer reads the original documents.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from mempp.errors import InvalidInput
from mempp.search.packing import PackingOptions
from mempp.settings import Settings, preset

Kind = Literal["mempp", "rag", "full"]
Ablation = Literal["consolidated", "graph", "facts", "supersession"]
DEFAULT_RAG_SIZES = (512, 2048, 4096)
CONSOLIDATED = "mempp-consolidated"
GRAPH = "mempp-graph"
FACT_INDEX = "mempp-fact-index"
LLM_SYSTEMS = (CONSOLIDATED, GRAPH, FACT_INDEX)
PACKED = "mempp-default-packed"
CONSOLIDATION_THRESHOLD = 0.85  # the paper's tau (and mempp.llm.consolidate's default)
NEEDS_ENDPOINT = (
    "needs an LLM endpoint (pass --llm-base-url or set MEMPP_LLM_BASE_URL); "
    "without one the harness is retrieval-only"
)

BM25_ONLY = Settings(
    w_lex=1.0,
    w_tag=0.0,
    w_vec=0.0,
    candidates=200,
    lexical_mode="disjunctive",
    max_terms=None,
    reserve=0,
    lexical_rank="bm25",  # what SQLite always does; PostgreSQL would otherwise use ts_rank_cd
)
VECTOR_ONLY = Settings(w_lex=0.0, w_tag=0.0, w_vec=1.0, candidates=200, reserve=0)


@dataclass(frozen=True, slots=True)
class System:
    name: str
    kind: Kind
    description: str
    settings: Settings | None = None
    chunk_tokens: int | None = None
    # LLM ablations of the paper preset: searched over a consolidated copy of the store, or
    # with entity-graph facts appended to the evidence (dated triples unless graph_dated=False).
    ablation: Ablation | None = None
    graph_dated: bool = True
    # Evidence packing (mempp systems): long records rendered as query-focused excerpts.
    packing: PackingOptions | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "kind": self.kind,
            "description": self.description,
            "settings": self.settings.to_dict() if self.settings else None,
            "chunk_tokens": self.chunk_tokens,
        }
        if self.packing is not None:
            out["packing"] = self.packing.to_dict()
        if self.ablation is not None:
            out["ablation"] = self.ablation
            if self.ablation == "consolidated":
                out["consolidation_threshold"] = CONSOLIDATION_THRESHOLD
            elif self.ablation == "graph":
                out["graph_dated"] = self.graph_dated
            elif self.ablation == "facts":
                out["fact_legs"] = ["lex", "vec"]
        return out


def paper_preset_name(benchmark: str) -> str:
    return f"paper-{benchmark}"


def catalogue(benchmark: str, rag_sizes: tuple[int, ...] = DEFAULT_RAG_SIZES) -> list[System]:
    """Every standard system for ``benchmark``, in report order."""
    paper_name = paper_preset_name(benchmark)
    paper = preset(paper_name)
    systems = [
        System("mempp-paper", "mempp", f"mempp, preset {paper_name}", paper),
        System("mempp-default", "mempp", "mempp, preset default", preset("default")),
        System(
            PACKED,
            "mempp",
            "mempp, preset default; long records as query-focused excerpts (packing)",
            preset("default"),
            packing=PackingOptions(),
        ),
        System("no-lex", "mempp", f"{paper_name} without the lexical leg", paper.with_(w_lex=0)),
        System("no-tag", "mempp", f"{paper_name} without the tag leg", paper.with_(w_tag=0)),
        System("no-vec", "mempp", f"{paper_name} without the vector leg", paper.with_(w_vec=0)),
        System(
            "no-recency", "mempp", f"{paper_name} without recency slots", paper.with_(reserve=0)
        ),
        System("bm25", "mempp", "lexical leg alone (disjunctive BM25, all terms)", BM25_ONLY),
        System("vector", "mempp", "vector leg alone (cosine)", VECTOR_ONLY),
    ]
    systems += [
        System(f"rag-{n}", "rag", f"{n}-token chunks of the dated history, cosine", None, n)
        for n in rag_sizes
    ]
    systems.append(System("full-context", "full", "the dated history, oldest first"))
    return systems


def llm_systems(benchmark: str, *, graph_dated: bool = True) -> list[System]:
    """The LLM ablations of ``benchmark``'s paper preset (available only with an endpoint)."""
    paper_name = paper_preset_name(benchmark)
    paper = preset(paper_name)
    mode = "dated triples" if graph_dated else "undated triples, as in the paper"
    return [
        System(
            CONSOLIDATED,
            "mempp",
            f"{paper_name} over a copy of the store consolidated once "
            f"(threshold {CONSOLIDATION_THRESHOLD})",
            paper,
            ablation="consolidated",
        ),
        System(
            GRAPH,
            "mempp",
            f"{paper_name} + Mem^g++ entity-graph facts ({mode})",
            paper,
            ablation="graph",
            graph_dated=graph_dated,
        ),
        System(
            FACT_INDEX,
            "mempp",
            f"{paper_name} with its lexical and vector legs over LLM-extracted facts, "
            "each fact standing for its document",
            paper,
            ablation="facts",
        ),
    ]


def _value(text: str) -> Any:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "none":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip()


def preset_with(spec: str) -> Settings:
    """``<preset>`` or ``<preset>+<field>=<value>+...``: a library preset with some settings
    changed (``default+w_vec=0.5+gamma=10``), validated like any ``Settings``. It lets a
    settings sweep run through the bench's own command line, each variant a named system."""
    name, *changes = spec.split("+")
    fields: dict[str, Any] = {}
    for change in changes:
        key, sep, value = change.partition("=")
        if not sep or not key.strip():
            raise InvalidInput(f"system mempp:{spec}: {change!r} is not <setting>=<value>")
        fields[key.strip()] = _value(value)
    base = preset(name)
    return base.with_(**fields) if fields else base


def select(
    benchmark: str,
    names: list[str] | None,
    rag_sizes: tuple[int, ...] = DEFAULT_RAG_SIZES,
    *,
    llm: bool = False,
    graph_dated: bool = True,
) -> list[System]:
    """The systems named (all standard ones when ``names`` is empty), in the order named.

    ``llm`` says whether an LLM endpoint is configured: only then are the LLM ablations
    (``mempp-consolidated``, ``mempp-graph``, ``mempp-fact-index``) available, and even then
    only when named, since they cost LLM calls per stored row.
    """
    known = catalogue(benchmark, rag_sizes)
    if not names:
        return known
    if llm:
        known += llm_systems(benchmark, graph_dated=graph_dated)
    by_name = {s.name: s for s in known}
    chosen: list[System] = []
    for name in names:
        if name in by_name:
            system = by_name[name]
        elif name.startswith("mempp:"):
            system = System(name, "mempp", f"mempp, preset {name[6:]}", preset_with(name[6:]))
        elif name.startswith("rag-") and name[4:].isdigit() and int(name[4:]) > 0:
            n = int(name[4:])
            system = System(name, "rag", f"{n}-token chunks of the dated history, cosine", None, n)
        elif name in LLM_SYSTEMS:
            raise InvalidInput(f"system {name!r} {NEEDS_ENDPOINT}")
        else:
            valid = ", ".join([*by_name, "mempp:<preset>", "rag-<N>"])
            raise InvalidInput(f"unknown system {name!r} (choose from: {valid})")
        if system.name not in {s.name for s in chosen}:
            chosen.append(system)
    return chosen
