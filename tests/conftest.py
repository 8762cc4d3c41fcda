"""Shared fixtures: a real SQLite file per test and a small, fully predictable encoder; the
hypothesis profiles every property suite follows.

Profiles (``docs/security.md``, "Hostile input at scale"): ``ci``, the default, is bounded and
derandomized (each suite's own count per engine, the same cases every run); ``long`` runs
random cases, at least ``MEMPP_LONG_EXAMPLES`` (default 10^5) per suite and engine. Select
one with ``--hypothesis-profile=long`` or ``MEMPP_HYPOTHESIS_PROFILE=long``.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, is_hypothesis_test, settings
from hypothesis.statistics import collector

from mempp import Memory

# Stores, servers and fake models are real, so a case may take seconds on a loaded machine:
# no deadline, no health check on slow generation; no example database (a failure prints its
# reproduction blob instead, and no state is left in the worktree).
_COMMON = {
    "database": None,
    "deadline": None,
    "suppress_health_check": list(HealthCheck),
    "print_blob": True,
}
LONG_EXAMPLES = int(os.environ.get("MEMPP_LONG_EXAMPLES", "100000"))
settings.register_profile("ci", derandomize=True, **_COMMON)
settings.register_profile("long", max_examples=LONG_EXAMPLES, derandomize=False, **_COMMON)
settings.load_profile(os.environ.get("MEMPP_HYPOTHESIS_PROFILE", "ci"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """With ``--hypothesis-show-statistics``: the statistics of a test that runs its cases
    through ``@given`` functions of its own (the property suites do, a store or a round of
    cases at a time; hypothesis's plugin reports only tests that are themselves ``@given``),
    summed over all of them and printed with the plugin's: how many runs, and per phase the
    passing, failing and invalid cases and the seconds."""
    if not item.config.getoption("--hypothesis-show-statistics") or is_hypothesis_test(
        getattr(item, "obj", None)
    ):
        yield
        return
    runs: list[dict[str, Any]] = []
    with collector.with_value(runs.append):
        yield
    if runs:
        item.hypothesis_statistics = summed_statistics(item.nodeid, runs)  # type: ignore[attr-defined]


def summed_statistics(nodeid: str, runs: list[dict[str, Any]]) -> str:
    lines = [f"{nodeid}: {len(runs)} runs of @given, summed:"]
    for phase in ("explicit", "reuse", "generate", "target", "shrink", "explain"):
        stats = [run.get(f"{phase}-phase", {}) for run in runs]
        cases = [case for each in stats for case in each.get("test-cases", ())]
        if not cases:
            continue
        status = Counter(case["status"] for case in cases)
        seconds = sum(each.get("duration-seconds", 0.0) for each in stats)
        lines.append(
            f"  - {phase} phase ({seconds:.1f} seconds): {status['valid']} passing, "
            f"{status['interesting']} failing, "
            f"{status['invalid'] + status['overrun']} invalid test cases"
        )
    stopped = Counter(str(run.get("stopped-because", "?")) for run in runs)
    lines.append("  - stopped because: " + "; ".join(f"{n} x {why}" for why, n in stopped.items()))
    return "\n".join(lines)


def examples(ci: int, share: float = 1.0) -> int:
    """How many cases a property test asks for: ``ci`` under the ``ci`` profile; under
    ``long``, its ``share`` of the profile's count (a suite whose cases are spread over
    several tests gives each its share, so that the suite runs the whole count per engine)."""
    if settings.get_current_profile_name() == "long":
        return max(ci, math.ceil(settings.default.max_examples * share))
    return ci


_WORD = re.compile(r"[^\W_]+")


class KeywordEmbedder:
    """A real ``Embedder`` whose geometry a test can reason about.

    Each listed keyword owns one axis; every other word shares a last "other" axis. A text's
    vector is its normalised keyword count, so cosine similarity is plain keyword overlap.
    """

    def __init__(self, keywords: Sequence[str] = ()) -> None:
        self.keywords = {word: i for i, word in enumerate(keywords)}
        self._dim = len(self.keywords) + 1
        self.calls = 0

    @property
    def name(self) -> str:
        return "keywords/" + ",".join(self.keywords)

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                out[row, self.keywords.get(word, self._dim - 1)] += 1.0
            norm = np.linalg.norm(out[row])
            if norm == 0:
                out[row, self._dim - 1] = 1.0
            else:
                out[row] /= norm
        return out


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "memory.db"


@pytest.fixture
def keyword_memory(db_path: Path):
    embedder = KeywordEmbedder(["alpha", "beta", "gamma", "delta", "budget", "launch"])
    with Memory(db_path, embedder=embedder) as memory:
        yield memory
