"""The systems a benchmark run compares, all with the same encoder and the same store.

* ``mempp-paper``: the paper preset of the benchmark (``paper-orgmembench``, ``paper-locomo``,
  ``paper-longmemeval``: the configurations of the paper's Table 6).
* ``mempp-default``: the library's ``default`` preset.
* Ablations of ``mempp-paper``: ``no-lex``, ``no-tag``, ``no-vec`` (that leg's weight set to
  0 with ``Settings.with_``) and ``no-recency`` (``reserve=0``).
* ``bm25``: the lexical leg alone, disjunctive over every content word of the question
  (BM25 ranking of SQLite FTS5), no recency slots. ``vector``: the vector leg alone, no slots.
  Both are fixed for every benchmark (C = 200, k = 50); nothing is tuned per benchmark.
* ``rag-N``: the history in date order cut into N-token chunks, chunks ranked by cosine of
  the same encoder.
* ``full-context``: the history in date order, read up to the answer window.
* ``mempp:<preset>``: any other library preset, by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from mempp.errors import InvalidInput
from mempp.settings import Settings, preset

Kind = Literal["mempp", "rag", "full"]
DEFAULT_RAG_SIZES = (512, 2048, 4096)

BM25_ONLY = Settings(
    w_lex=1.0,
    w_tag=0.0,
    w_vec=0.0,
    candidates=200,
    lexical_mode="disjunctive",
    max_terms=None,
    reserve=0,
)
VECTOR_ONLY = Settings(w_lex=0.0, w_tag=0.0, w_vec=1.0, candidates=200, reserve=0)


@dataclass(frozen=True, slots=True)
class System:
    name: str
    kind: Kind
    description: str
    settings: Settings | None = None
    chunk_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "description": self.description,
            "settings": self.settings.to_dict() if self.settings else None,
            "chunk_tokens": self.chunk_tokens,
        }


def paper_preset_name(benchmark: str) -> str:
    return f"paper-{benchmark}"


def catalogue(benchmark: str, rag_sizes: tuple[int, ...] = DEFAULT_RAG_SIZES) -> list[System]:
    """Every standard system for ``benchmark``, in report order."""
    paper_name = paper_preset_name(benchmark)
    paper = preset(paper_name)
    systems = [
        System("mempp-paper", "mempp", f"mempp, preset {paper_name}", paper),
        System("mempp-default", "mempp", "mempp, preset default", preset("default")),
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


def select(
    benchmark: str, names: list[str] | None, rag_sizes: tuple[int, ...] = DEFAULT_RAG_SIZES
) -> list[System]:
    """The systems named (all standard ones when ``names`` is empty), in catalogue order."""
    known = catalogue(benchmark, rag_sizes)
    if not names:
        return known
    by_name = {s.name: s for s in known}
    chosen: list[System] = []
    for name in names:
        if name in by_name:
            system = by_name[name]
        elif name.startswith("mempp:"):
            system = System(name, "mempp", f"mempp, preset {name[6:]}", preset(name[6:]))
        elif name.startswith("rag-") and name[4:].isdigit() and int(name[4:]) > 0:
            n = int(name[4:])
            system = System(name, "rag", f"{n}-token chunks of the dated history, cosine", None, n)
        else:
            valid = ", ".join([*by_name, "mempp:<preset>", "rag-<N>"])
            raise InvalidInput(f"unknown system {name!r} (choose from: {valid})")
        if system.name not in {s.name for s in chosen}:
            chosen.append(system)
    return chosen
