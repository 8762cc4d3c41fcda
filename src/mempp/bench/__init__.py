"""Benchmarks for mempp: OrgMemBench, LoCoMo and LongMemEval_S; retrieval needs no LLM.

Loaders turn each benchmark into items, questions and gold evidence (``datasets`` and one
module per benchmark); ``cache`` ingests them once per encoder; ``systems`` lists what is
compared (mempp presets and ablations, BM25-only, vector-only, RAG-N, full context);
``runner`` scores every system on every question with the pure functions of ``metrics`` and
``aggregate``; ``report`` writes JSON, Markdown and plots; ``cli`` is ``mempp bench``. With an
LLM endpoint (``LLMOptions``), ``llm_eval`` answers and judges the questions and ``ablations``
prepares the consolidated and graph copies of the store. See ``docs/benchmarks.md``.
"""

from mempp.bench.datasets import Benchmark, DataMissing, Item, Question
from mempp.bench.llm_eval import LLMOptions
from mempp.bench.runner import AnswerHook, RunOptions, load_benchmark, run

__all__ = [
    "AnswerHook",
    "Benchmark",
    "DataMissing",
    "Item",
    "LLMOptions",
    "Question",
    "RunOptions",
    "load_benchmark",
    "run",
]
