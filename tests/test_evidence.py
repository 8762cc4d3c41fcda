"""Evidence rendering: rank order, date/author/id headers, budgets, offsets."""

from __future__ import annotations

import dataclasses

import pytest

from mempp import InvalidInput, Settings, render_evidence
from mempp.bench.metrics import as_budgeted, window_chars, window_recall
from mempp.records import Hit, Record
from mempp.search.evidence import correction_note, note_allowance
from mempp.search.packing import PackingOptions


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


def test_header_names_the_thread_when_there_is_one(keyword_memory) -> None:
    keyword_memory.add("launch on friday?", author="Ana", date="2024-03-01", thread="#launch")
    keyword_memory.add("launch budget", date="2024-03-02")
    evidence = render_evidence(keyword_memory.search("launch", settings=Settings(reserve=0)))
    heads = [line for line in evidence.text.split("\n") if line.startswith("[")]
    assert any(h.endswith("| Ana | thread #launch | record 1") for h in heads)
    assert any(h.endswith("2024-03-02 | record 2") for h in heads)  # no thread, no mention


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


# -- packing (mempp.search.packing) --------------------------------------------------------------
LONG = "\n\n".join(
    [
        "Opening: minutes of the launch review, written up by the programme office.",
        *(f"Item {i}: routine status, nothing changed since the last review." for i in range(20)),
        "Decision: the launch moves to 2024-09-01 because the gamma vendor slipped.",
        *(
            f"Note {i}: follow-ups are tracked in the usual place, owners unchanged."
            for i in range(20)
        ),
    ]
)


def _hit(record_id: int, text: str, date: str | None = "2024-05-01") -> Hit:
    record = Record(record_id, text, "Ana", date, (), None, "s", "", "active", None)
    return Hit(record, record_id, 0.0)


PACKED = PackingOptions(threshold=500, cap=300, passage=120, whole_first=0)


def test_packing_off_is_unchanged(hits) -> None:
    plain = render_evidence(hits)
    expected = "\n\n".join(
        f"[{i}] {h.record.date or 'undated'}"
        + (f" | {h.record.author}" if h.record.author else "")
        + f" | record {h.id}\n{h.record.text}"
        for i, h in enumerate(hits, start=1)
    )
    assert plain.text == expected
    assert render_evidence(hits, packing=None, query="budget") == plain
    for row, hit in zip(plain.rows, hits, strict=True):
        assert not row.excerpt and row.shown == len(hit.record.text)
        assert row.to_dict() == {
            "id": row.id,
            "offset": row.offset,
            "length": row.length,
            "truncated": False,
            "excerpt": False,
            "shown": len(hit.record.text),
        }


def test_packed_entries_carry_marker_id_and_spans() -> None:
    hits = [_hit(11, "Short gamma note."), _hit(12, LONG), _hit(13, LONG, None)]
    for style in ("headers", "paper"):
        evidence = render_evidence(
            hits, packing=PACKED, query="When does the launch move?", style=style
        )
        short, long, undated = evidence.rows
        assert not short.excerpt and short.shown == len("Short gamma note.")
        assert long.excerpt and undated.excerpt
        assert 0 < long.shown <= PACKED.cap
        entry = evidence.text[long.offset : long.offset + long.length]
        assert "[excerpt: " in entry and "full text: record 12]" in entry
        assert "Decision: the launch moves to 2024-09-01" in entry
        for row in evidence.rows:
            text = next(h.record.text for h in hits if h.id == row.id)
            assert row.shown == sum(length for _, _, length in row.spans)
            for inside, source, length in row.spans:
                start = row.offset + inside
                assert evidence.text[start : start + length] == text[source : source + length]
    assert len(render_evidence(hits, packing=PACKED, query="launch").text) < 2 * len(LONG)


def test_packed_budget_is_never_exceeded() -> None:
    hits = [_hit(21, LONG), _hit(22, LONG), _hit(23, "Tail note.")]
    full = render_evidence(hits, packing=PACKED, query="launch decision")
    for budget in (1, 30, 80, 200, 400, len(full.text) - 1, len(full.text)):
        evidence = render_evidence(hits, budget=budget, packing=PACKED, query="launch decision")
        assert len(evidence.text) <= budget
        for row in evidence.rows[:-1]:
            assert not row.truncated
        if evidence.rows and evidence.rows[-1].truncated:
            last = evidence.rows[-1]
            assert evidence.text.endswith("[...]")
            assert last.shown <= full.rows[len(evidence.rows) - 1].shown
            for inside, _, length in last.spans:
                assert last.offset + inside + length <= len(evidence.text)
    same = render_evidence(hits, budget=len(full.text), packing=PACKED, query="launch decision")
    assert same == full


def test_packing_needs_a_query_and_options() -> None:
    hits = [_hit(1, LONG)]
    with pytest.raises(InvalidInput, match="query"):
        render_evidence(hits, packing=PACKED)
    with pytest.raises(InvalidInput):
        render_evidence(hits, packing={"cap": 10}, query="x")  # type: ignore[arg-type]


def _corrected(hit: Hit, by: int = 99) -> Hit:
    """The hit as a question that can see its correction sees it."""
    record = dataclasses.replace(hit.record, superseded_by=by)
    return dataclasses.replace(hit, record=record, superseded_on="2024-07-01")


@pytest.fixture
def long_hits(keyword_memory):
    """Three hits of 1,200 characters: a window around them allows a note (a fiftieth)."""
    for day in (5, 6, 7):
        keyword_memory.add(f"budget review {day}: " + "figures " * 148, date=f"2024-01-0{day}")
    return keyword_memory.search("budget", settings=Settings(reserve=0))


def test_a_correction_note_does_not_push_evidence_out_of_the_budget(long_hits) -> None:
    # Issue 30: a "superseded by record N (DATE)" note cost answer-window recall. The budget
    # that holds the block whole without the note holds it whole with it.
    hits = long_hits
    plain = render_evidence(hits)
    corrected = [_corrected(hits[0]), *hits[1:]]
    note = correction_note(corrected[0])
    assert note == " | superseded by record 99 (2024-07-01)"
    for budget in (len(plain.text), len(plain.text) - 7):
        before = render_evidence(hits, budget=budget)
        after = render_evidence(corrected, budget=budget)
        assert [(r.id, r.truncated, r.shown) for r in after.rows] == [
            (r.id, r.truncated, r.shown) for r in before.rows
        ]
        assert len(after.text) == len(before.text) + len(note) <= budget + note_allowance(budget)
        assert after.rows[0].note == len(note) and after.text.split("\n", 1)[0].endswith(note)
        assert after.counted == len(before.text)


def test_notes_past_their_allowance_count_against_the_budget(keyword_memory) -> None:
    for day in range(1, 29):
        keyword_memory.add(f"budget entry {day}", date=f"2024-02-{day:02d}")
    hits = [_corrected(h) for h in keyword_memory.search("budget", k=28)]
    note = len(correction_note(hits[0]))
    budget = 1000  # an allowance of 20 characters: less than one note
    evidence = render_evidence(hits, budget=budget)
    assert note_allowance(budget) == 20 < note
    assert len(evidence.text) <= budget + note_allowance(budget)
    assert evidence.counted is not None and evidence.counted <= budget
    assert len(evidence.text) - evidence.counted == 20  # the allowance, all used
    plain = render_evidence(
        [dataclasses.replace(h, superseded_on=None) for h in hits], budget=budget
    )
    assert len(evidence.rows) < len(plain.rows)  # the notes past it took room


def test_the_benchmark_window_counts_what_the_budget_counts(long_hits) -> None:
    # The bench places entries in its answer window as a budget of that many characters
    # does: a note within the allowance moves nothing.
    from mempp.bench.retrieve import from_hits

    hits = long_hits
    items = {hit.id: (f"item-{hit.id}",) for hit in hits}
    plain = from_hits(hits, items, "headers")
    corrected = from_hits([_corrected(hits[0]), *hits[1:]], items, "headers")
    window = plain.window[-1].offset + 5  # the window ends just inside the last entry
    moved = as_budgeted(corrected.window, window)
    assert [(e.offset, e.length, e.spans) for e in moved] == [
        (e.offset, e.length, e.spans) for e in as_budgeted(plain.window, window)
    ]
    gold = [f"item-{hits[-1].id}"]
    assert window_recall(moved, gold, window) == window_recall(plain.window, gold, window)
    # Placed by raw characters, as before, the note pushed the last entry out.
    assert window_recall(corrected.window, gold, window) != window_recall(
        plain.window, gold, window
    )
    assert window_chars(corrected.window, window) == window + len(
        correction_note(_corrected(hits[0]))
    )
