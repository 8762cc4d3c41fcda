"""Evidence rendering: rank order, date/author/id headers, budgets, offsets."""

from __future__ import annotations

import pytest

from mempp import InvalidInput, Settings, render_evidence


@pytest.fixture
def hits(keyword_memory):
    keyword_memory.add("Budget is 10k.", author="Ana", date="2024-01-05")
    keyword_memory.add("Budget raised to 20k. " * 5, date="2024-06-01")
    keyword_memory.add("budget note without a date", author="Bo")
    return keyword_memory.search("budget", settings=Settings(reserve=0))


def test_entries_in_rank_order_with_headers_and_offsets(hits) -> None:
    evidence = render_evidence(hits)
    assert [row.id for row in evidence.rows] == [h.id for h in hits]
    for position, (row, hit) in enumerate(zip(evidence.rows, hits, strict=True), start=1):
        entry = evidence.text[row.offset : row.offset + row.length]
        head, body = entry.split("\n", 1)
        assert head.startswith(f"[{position}] ")
        assert f"record {hit.id}" in head
        assert (hit.record.date or "undated") in head
        if hit.record.author:
            assert hit.record.author in head
        assert body == hit.record.text
        assert not row.truncated


def test_budget_is_never_exceeded_and_cut_entry_is_marked(hits) -> None:
    full = render_evidence(hits)
    for budget in (1, 10, 40, 60, 120, len(full.text) - 1, len(full.text), 10_000):
        evidence = render_evidence(hits, budget=budget)
        assert len(evidence.text) <= budget
        assert (
            full.text.startswith(evidence.text.removesuffix(" [...]").rstrip()) or not evidence.rows
        )
        for row in evidence.rows[:-1]:
            assert not row.truncated
        if evidence.rows and evidence.rows[-1].truncated:
            assert evidence.text.endswith("[...]")
    assert render_evidence(hits, budget=len(full.text)).text == full.text


def test_paper_style_numbers_stored_text_only(hits) -> None:
    evidence = render_evidence(hits, style="paper")
    assert evidence.text.startswith("1. ")
    assert "record" not in evidence.text.split("\n")[0]


def test_bad_budget_and_style(hits) -> None:
    with pytest.raises(InvalidInput):
        render_evidence(hits, budget=0)
    with pytest.raises(InvalidInput):
        render_evidence(hits, style="fancy")  # type: ignore[arg-type]


def test_memory_evidence_matches_search(keyword_memory) -> None:
    keyword_memory.add("alpha one", date="2024-01-01")
    keyword_memory.add("alpha two", date="2024-03-01")
    evidence = keyword_memory.evidence("alpha", as_of="2024-02-01")
    assert [row.id for row in evidence.rows] == [1]
    assert "2024-01-01" in evidence.text and "alpha two" not in evidence.text
