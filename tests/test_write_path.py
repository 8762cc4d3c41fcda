"""The write path: skips, dedupe scope, batching, transactions, nothing ever rewritten."""

from __future__ import annotations

import pytest

from mempp import Document, InvalidDate, InvalidInput, Memory, RecordNotFound, StoreError

from conftest import KeywordEmbedder


def test_add_returns_id_or_skip_reason(keyword_memory) -> None:
    first = keyword_memory.add("alpha", author="Ana", date="2024-01-01", tags=["x"], source="s")
    assert first.added and first.skipped is None
    assert keyword_memory.add("alpha", author="Ana", date="2024-01-01").skipped == "duplicate"
    assert keyword_memory.add("").skipped == "empty"
    assert keyword_memory.add(" \n\t ").skipped == "empty"
    assert len(keyword_memory) == 1
    assert keyword_memory.add("alpha", author="Ana", date="2024-01-02").added  # another day


def test_record_keeps_everything_it_was_given(keyword_memory) -> None:
    text = "  Line one\n\nline two with trailing space  "
    rid = keyword_memory.add(
        text,
        author=" Ana ",
        date="2024-02-03T04:05:06+02:00",
        tags=["Plan", "plan", " "],
        source="slack://c/1",
        thread=" #launch ",
    ).id
    record = keyword_memory.get(rid)
    assert record.text == text  # stored byte for byte, never trimmed
    assert record.author == "Ana"
    assert record.date == "2024-02-03T04:05:06+02:00" and record.day == "2024-02-03"
    assert record.tags == ("Plan", "plan")
    assert record.source == "slack://c/1"
    assert record.thread == "#launch"
    assert record.state == "active" and record.superseded_by is None
    assert keyword_memory.get(keyword_memory.add("no thread").id).thread is None
    assert keyword_memory.get(keyword_memory.add("blank thread", thread="  ").id).thread is None


def test_dedupe_is_per_author_and_scope_and_exact(db_path) -> None:
    embedder = KeywordEmbedder(["alpha"])
    with Memory(db_path, embedder=embedder) as memory:
        assert memory.add("alpha", author="Ana").added
        assert memory.add("alpha", author="Bo").added  # same text, other author
        assert memory.add("alpha").added  # no author is its own author scope
        assert memory.add("alpha").skipped == "duplicate"
        assert memory.add("alpha ", author="Ana").added  # not an exact repeat
        assert memory.add("Alpha", author="Ana").added
    with Memory(db_path, scope="other", embedder=embedder) as other:
        assert other.add("alpha", author="Ana").added


def test_archived_row_does_not_block_a_new_copy(keyword_memory) -> None:
    rid = keyword_memory.add("alpha plan").id
    keyword_memory.store.set_state(keyword_memory.scope, [rid], "archived", None)
    again = keyword_memory.add("alpha plan")
    assert again.added and again.id != rid


def test_duplicates_inside_one_batch_and_no_embedding_for_skips(db_path) -> None:
    embedder = KeywordEmbedder(["alpha"])
    with Memory(db_path, embedder=embedder) as memory:
        memory.add("known")
        embedded: list[str] = []
        real_embed = embedder.embed

        def spy(texts):
            embedded.extend(texts)
            return real_embed(texts)

        embedder.embed = spy  # type: ignore[method-assign]
        results = memory.add_many(["new one", "known", "", "new one", {"text": "x", "author": "A"}])
        assert [r.skipped for r in results] == [None, "duplicate", "empty", "duplicate", None]
        assert embedded == ["new one", "new one", "x"]  # known and empty are never embedded
        assert len(memory) == 3


def test_add_many_validates_everything_before_writing(keyword_memory) -> None:
    with pytest.raises(InvalidDate):
        keyword_memory.add_many([{"text": "ok"}, {"text": "bad", "date": "yesterday"}])
    with pytest.raises(InvalidInput):
        keyword_memory.add_many([{"text": "ok"}, {"no_text": 1}])
    with pytest.raises(InvalidInput):
        keyword_memory.add_many(["ok", 42])  # type: ignore[list-item]
    assert len(keyword_memory) == 0


def test_a_failing_batch_stores_nothing(keyword_memory) -> None:
    keyword_memory.add("before")
    store = keyword_memory.store
    # A real failure inside the transaction: the third insert of the batch is refused.
    store._conn.execute(
        """CREATE TEMP TRIGGER fail_third BEFORE INSERT ON records
           WHEN (SELECT count(*) FROM records) >= 3
           BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"""
    )
    with pytest.raises(StoreError, match="disk on fire"):
        keyword_memory.add_many([f"doc {i}" for i in range(5)], batch_size=5)
    store._conn.execute("DROP TRIGGER fail_third")
    assert len(keyword_memory) == 1
    assert keyword_memory.add("doc 0").added  # the failed batch left no trace
    assert len(keyword_memory.search("doc")) == 2


def test_batches_commit_independently(keyword_memory) -> None:
    progress: list[int] = []
    results = keyword_memory.add_many(
        [f"row {i}" for i in range(10)], batch_size=4, progress=progress.append
    )
    assert progress == [4, 4, 2]
    assert [r.id for r in results] == sorted(r.id for r in results)


def test_bad_inputs_are_clear_errors(keyword_memory) -> None:
    for bad in ("2024-13-01", "2024/01/01", "March 3", "2024-01-01T25:00", "12345"):
        with pytest.raises(InvalidDate):
            keyword_memory.add("x", date=bad)
    with pytest.raises(InvalidInput):
        keyword_memory.add(None)  # type: ignore[arg-type]
    for bad_tags in (True, 5, 1.5, [["nested"]], {"a": 1}, ["ok", None]):
        with pytest.raises(InvalidInput, match=r"^tags"):
            keyword_memory.add("x", tags=bad_tags)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        keyword_memory.add("x\x00y")
    with pytest.raises(InvalidInput):
        Document.create("x", author=5)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=r"^thread: must be a string"):
        keyword_memory.add("x", thread=7)  # type: ignore[arg-type]
    for field in (
        {"author": "a\x00"},
        {"source": "s\x00"},
        {"tags": ["t\x00"]},
        {"thread": "t\x00"},
    ):
        with pytest.raises(InvalidInput, match="NUL"):
            keyword_memory.add("x", **field)
    for field in (
        {"text": "a \ud800 b"},
        {"author": "a\udfff"},
        {"source": "s\ud800"},
        {"tags": ["t\ud800"]},
        {"thread": "t\udc00"},
    ):
        with pytest.raises(InvalidInput, match="lone surrogate"):
            keyword_memory.add(**{"text": "x", **field})
    assert len(keyword_memory) == 0


def test_a_single_string_tag_is_one_tag(keyword_memory) -> None:
    rid = keyword_memory.add("alpha", tags="release, notes").id
    assert keyword_memory.get(rid).tags == ("release, notes",)


def test_get_unknown_and_foreign_scope(db_path) -> None:
    embedder = KeywordEmbedder([])
    with Memory(db_path, scope="a", embedder=embedder) as a:
        rid = a.add("secret").id
    with Memory(db_path, scope="b", embedder=embedder) as b:
        with pytest.raises(RecordNotFound):
            b.get(rid)
        with pytest.raises(RecordNotFound):
            b.get(999)


def test_date_forms(keyword_memory) -> None:
    from datetime import date, datetime

    forms = {
        "2024-03-01": "2024-03-01",
        "2024-03-01T10:00": "2024-03-01T10:00:00",
        "2024-03-01 10:00:30Z": "2024-03-01T10:00:30+00:00",
        date(2024, 3, 2): "2024-03-02",
        datetime(2024, 3, 3, 9, 30): "2024-03-03T09:30:00",
    }
    for i, (value, shown) in enumerate(forms.items()):
        rid = keyword_memory.add(f"row {i}", date=value).id
        assert keyword_memory.get(rid).date == shown
