"""Search filters (mempp.filters.Filters) as a SQL condition on a ``records`` row, for both
engines: the same conditions, each engine's placeholders and array idiom.

Every value is a bound parameter (names start with ``f_``, so they never clash with a leg's
own); the SQL text depends only on which filters are set. SQLite's conditions are written so
that its planner can answer each from an index (author, ingest time, event date, thread,
source prefix, tags) instead of reading every row of a large store.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from mempp.filters import Filters

Dialect = Literal["sqlite", "postgres"]


def filter_condition(filters: Filters, alias: str, dialect: Dialect) -> tuple[str, dict[str, Any]]:
    """``(" AND ...", params)`` restricting row ``alias`` to the filters ("" when none)."""
    if filters.is_empty:
        return "", {}

    def slot(name: str) -> str:
        return f":f_{name}" if dialect == "sqlite" else f"%(f_{name})s"

    parts: list[str] = []
    params: dict[str, Any] = {}
    # Beside an author or thread (an equality, usually the narrower), SQLite's planner is kept
    # off the date indexes by a unary +: without statistics it would rather walk a range.
    ranged = "+" if dialect == "sqlite" and (filters.author or filters.thread) else ""
    if filters.known_at is not None:
        parts.append(f"{ranged}{alias}.ingested_key <= {slot('known_at')}")
        params["f_known_at"] = filters.known_at
    if filters.since is not None:
        parts.append(f"{ranged}{alias}.event_key >= {slot('since')}")
        params["f_since"] = filters.since
    if filters.author is not None:
        # SQLite: the form records_dedupe indexes; PostgreSQL: the bare column, which
        # records_author_active holds (an index only scan). The same rows, as a filter's
        # author is never empty.
        author = f"coalesce({alias}.author, '')" if dialect == "sqlite" else f"{alias}.author"
        parts.append(f"{author} = {slot('author')}")
        params["f_author"] = filters.author
    if filters.thread is not None:
        parts.append(f"{alias}.thread = {slot('thread')}")
        params["f_thread"] = filters.thread
    if filters.source is not None:
        if dialect == "sqlite":
            # A range on the indexed column narrows the rows; substr() is the exact test.
            parts.append(f"{alias}.source >= :f_source")
            above = _above_prefix(filters.source)
            if above is not None:
                parts.append(f"{alias}.source < :f_source_above")
                params["f_source_above"] = above
            parts.append(f"substr({alias}.source, 1, length(:f_source)) = :f_source")
        else:
            parts.append(f"starts_with({alias}.source, %(f_source)s)")
        params["f_source"] = filters.source
    if filters.tags:
        if dialect == "sqlite":
            # Rows found from the labels' postings (the key of record_tags), not the other
            # way round: an EXISTS per row would visit every row of the scope.
            labelled = (
                "SELECT ft.record_id FROM record_tags ft "
                "WHERE ft.label IN (SELECT value FROM json_each(:f_tags))"
            )
            params["f_tags"] = json.dumps(list(filters.tags))
            any_tag = f"{alias}.id IN ({labelled})"
            every_tag = (
                f"{alias}.id IN ({labelled} GROUP BY ft.record_id HAVING count(*) = :f_tag_count)"
            )
        else:
            labels = "ft.label = ANY(%(f_tags)s::text[])"
            params["f_tags"] = list(filters.tags)
            owner = f"ft.scope = {alias}.scope AND ft.record_id = {alias}.id"
            any_tag = f"EXISTS (SELECT 1 FROM record_tags ft WHERE {owner} AND {labels})"
            every_tag = (
                f"(SELECT count(*) FROM record_tags ft WHERE {owner} AND {labels}) = "
                "%(f_tag_count)s"
            )
        if filters.tags_mode == "any":
            parts.append(any_tag)
        else:
            parts.append(every_tag)
            params["f_tag_count"] = len(filters.tags)
    return "".join(f" AND {part}" for part in parts), params


def _above_prefix(prefix: str) -> str | None:
    """The least string above every string that starts with ``prefix`` (None if there is
    none). SQLite compares text as UTF-8 bytes, which orders it by code point."""
    for cut in range(len(prefix), 0, -1):
        point = ord(prefix[cut - 1]) + 1
        if 0xD800 <= point <= 0xDFFF:  # surrogates are not characters: skip to the next one
            point = 0xE000
        if point <= 0x10FFFF:
            return prefix[: cut - 1] + chr(point)
    return None
