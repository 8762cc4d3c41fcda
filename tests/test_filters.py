"""Filters: validation at the boundary, and their SQL on each engine (run for real on SQLite;
the PostgreSQL form is exercised by the conformance suite)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from mempp.dates import parse_as_of, parse_event_date
from mempp.errors import InvalidInput
from mempp.filters import NO_FILTERS, Filters
from mempp.store.filter_sql import _above_prefix, filter_condition
from mempp.store.sqlite import SQLiteStore
from mempp.store.sqlite.legs import filtered_ids_query


def test_create_normalises_and_parses_bounds() -> None:
    built = Filters.create(
        known_at="2024-03-01",
        since="2024-01-01",
        author=" Ana ",
        tags=["Q3 Budget", "q3_budget", "Ops"],
        tags_mode="all",
        thread=" t1 ",
        source=" slack:",
    )
    assert built.known_at == parse_as_of("2024-03-01")  # the whole day
    since = parse_event_date("2024-01-01")
    assert since is not None and built.since == since.key  # from its first moment
    assert built.author == "Ana" and built.thread == "t1"
    assert built.source == " slack:"  # sources are stored as given; so is the prefix
    assert built.tags == ("q3-budget", "ops") and built.tags_mode == "all"
    assert Filters.create() == NO_FILTERS and NO_FILTERS.is_empty
    assert not built.is_empty


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"known_at": "2024-02-30"}, "known_at"),
        ({"known_at": " "}, "known_at"),
        ({"since": 20240101}, "since"),
        ({"tags": "ops"}, "tags"),
        ({"tags": [3]}, "tags"),
        ({"tags": ["--"]}, "tags"),
        ({"tags_mode": "none"}, "tags_mode"),
        ({"author": "  "}, "author"),
        ({"author": "a\x00b"}, "author"),
        ({"thread": "\ud800"}, "thread"),
        ({"source": ""}, "source"),
    ],
)
def test_bad_values_name_their_field(given: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput, match=field):
        Filters.create(**given)  # type: ignore[arg-type]


def test_since_after_as_of_is_refused() -> None:
    window = Filters.create(since="2024-02-01")
    window.check_with_as_of(parse_as_of("2024-02-01"))  # the same day is a valid window
    with pytest.raises(InvalidInput, match="since"):
        window.check_with_as_of(parse_as_of("2024-01-31"))


def _rows(filters: Filters) -> list[int]:
    conn = sqlite3.connect(":memory:")
    conn.execute(
        "CREATE TABLE records (id INTEGER PRIMARY KEY, author TEXT, thread TEXT, source TEXT,"
        " event_key INTEGER, ingested_key INTEGER)"
    )
    conn.execute("CREATE TABLE record_tags (label TEXT, record_id INTEGER)")
    rows = [
        (1, "Ana", "t1", "slack:#a", 10, 100, ["x", "y"]),
        (2, "Bob", "t2", "slack%_", 20, 200, ["x"]),
        (3, None, None, None, None, 300, []),
    ]
    for rid, author, thread, source, event, ingested, tags in rows:
        conn.execute(
            "INSERT INTO records VALUES (?, ?, ?, ?, ?, ?)",
            (rid, author, thread, source, event, ingested),
        )
        conn.executemany("INSERT INTO record_tags VALUES (?, ?)", [(t, rid) for t in tags])
    condition, params = filter_condition(filters, "r", "sqlite")
    found = conn.execute(f"SELECT r.id FROM records r WHERE 1 = 1{condition} ORDER BY r.id", params)
    return [row[0] for row in found]


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        (NO_FILTERS, [1, 2, 3]),
        (Filters(known_at=200), [1, 2]),
        (Filters(since=11), [2]),  # undated rows drop out
        (Filters(author="Ana"), [1]),
        (Filters(thread="t2"), [2]),
        (Filters(source="slack:"), [1]),
        (Filters(source="slack%"), [2]),  # a prefix, not a LIKE pattern
        (Filters(tags=("y", "x")), [1, 2]),
        (Filters(tags=("y", "x"), tags_mode="all"), [1]),
        (Filters(tags=("x",), author="Bob", known_at=250), [2]),
    ],
)
def test_sqlite_condition_selects_the_eligible_rows(filters: Filters, expected: list[int]) -> None:
    assert _rows(filters) == expected


def test_condition_binds_every_value() -> None:
    filters = Filters(author="x'; DROP TABLE records; --", tags=("a",), source="s")
    for dialect in ("sqlite", "postgres"):
        sql, params = filter_condition(filters, "r", dialect)  # type: ignore[arg-type]
        assert "DROP" not in sql and all(key.startswith("f_") for key in params)
    assert filter_condition(NO_FILTERS, "r", "postgres") == ("", {})
    sql, params = filter_condition(Filters(tags=("a", "b"), tags_mode="all"), "r", "postgres")
    assert "%(f_tags)s" in sql and params == {"f_tags": ["a", "b"], "f_tag_count": 2}
    assert json.loads(filter_condition(Filters(tags=("a",)), "r", "sqlite")[1]["f_tags"]) == ["a"]


@pytest.mark.parametrize(
    ("filters", "index"),
    [
        (Filters(author="Ana"), "records_dedupe"),
        (Filters(known_at=5), "records_ingested"),
        (Filters(since=5), "records_scope_state_date"),
        (Filters(thread="t1"), "records_thread"),
        (Filters(source="slack:"), "records_source"),
        (Filters(tags=("a", "b")), "INTEGER PRIMARY KEY"),
        (Filters(tags=("a", "b"), tags_mode="all"), "INTEGER PRIMARY KEY"),
        (Filters(tags=("a",), author="Ana"), "INTEGER PRIMARY KEY"),
        (Filters(author="Ana", since=3, known_at=5), "records_dedupe"),
        (Filters(thread="t1", since=3), "records_thread"),
        (Filters(since=3, known_at=5), "records_"),
    ],
)
def test_each_filter_is_answered_from_an_index(tmp_path, filters: Filters, index: str) -> None:
    # Reading every row for a filter took 5-6 s at 1M rows (docs/scaling.md).
    store = SQLiteStore(str(tmp_path / "m.db"))
    try:
        sql, params = filtered_ids_query("default", filters)
        plan = [row[3] for row in store._conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
    finally:
        store.close()
    assert any(index in step for step in plan), plan
    assert not any(step.startswith("SCAN r") for step in plan), plan


@pytest.mark.parametrize(
    ("prefix", "above"),
    [
        ("slack:", "slack;"),
        ("a\U0010ffff", "b"),  # the last character has no successor: cut it
        ("\U0010ffff\U0010ffff", None),
        ("x\ud7ff", "x\ue000"),  # surrogates are skipped, they are not characters
    ],
)
def test_source_prefix_range_bounds_every_string_with_the_prefix(prefix: str, above) -> None:
    assert _above_prefix(prefix) == above
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE records (id INTEGER PRIMARY KEY, source TEXT)")
    sources = [prefix, prefix + "z", prefix + "\U0010ffff", prefix[:-1], prefix[:-1] + "~", "zz"]
    conn.executemany("INSERT INTO records (source) VALUES (?)", [(s,) for s in sources])
    condition, params = filter_condition(Filters(source=prefix), "r", "sqlite")
    found = conn.execute(f"SELECT r.source FROM records r WHERE 1 = 1{condition}", params)
    assert sorted(row[0] for row in found) == sorted(s for s in sources if s.startswith(prefix))
