"""The fixed development / test split of the tuning protocol."""

from __future__ import annotations

from pathlib import Path

import pytest

from mempp.bench.datasets import Benchmark, Question
from mempp.bench.halves import half_of, restrict
from mempp.errors import InvalidInput


def q(qid: str, scope: str = "default") -> Question:
    return Question(qid, scope, "C1", "text", None, ("g",))


def test_orgmembench_odd_questions_are_dev() -> None:
    assert half_of("orgmembench", q("Q-0001")) == "dev"
    assert half_of("orgmembench", q("Q-0002")) == "test"
    assert half_of("orgmembench", q("Q-0073")) == "dev"


def test_locomo_conversations() -> None:
    assert [half_of("locomo", q("x", f"conv-{n}")) for n in (26, 43, 44, 50)] == [
        "dev",
        "dev",
        "test",
        "test",
    ]
    assert half_of("locomo", q("x", "conv-99")) is None
    assert half_of("longmemeval", q("x")) is None


def test_restrict_keeps_items_and_one_half() -> None:
    bench = Benchmark(
        "orgmembench", "t", Path("."), [], [q("Q-0001"), q("Q-0002"), q("Q-0003")], {}, {}, {}
    )
    dev = restrict(bench, "dev")
    assert [x.id for x in dev.questions] == ["Q-0001", "Q-0003"]
    assert dev.notes["half"] == "dev" and bench.questions[1].id == "Q-0002"
    with pytest.raises(InvalidInput):
        restrict(Benchmark("longmemeval", "t", Path("."), [], [q("a")], {}, {}, {}), "dev")
