"""The shared analysis (mempp.index.analysis) stays right when its chunk cache fills up and
is emptied between one text's cached chunks and its new ones (a KeyError did this once, after
a long test run had filled the cache), and when threads share the cache."""

from __future__ import annotations

import threading

import pytest

from mempp.index import analysis


def test_a_full_cache_emptied_mid_call_still_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(analysis, "_cache", {})
    monkeypatch.setattr(analysis, "_CACHE_CHUNKS", 3)
    assert analysis.analyze(["Running dogs"]) == [["run", "dog"]]
    # Two chunks cached, two new: the cache is over its bound and emptied in this call.
    assert analysis.analyze(["running dogs quickly ate"]) == [["run", "dog", "quickli", "at"]]
    assert len(analysis._cache) <= 3 + 2


def test_threads_share_one_cache_and_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(analysis, "_cache", {})
    texts = [f"café number{i} Résumé running" for i in range(300)]
    expected = analysis.analyze(texts)
    results: list[list[list[str]]] = []

    def work() -> None:
        results.append(analysis.analyze(texts))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [expected] * 4
    assert expected[0] == ["cafe", "number0", "resum", "run"]
