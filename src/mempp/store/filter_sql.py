"""Search filters (mempp.filters.Filters) as a SQL condition on a ``records`` row, for both
engines: the same conditions, each engine's placeholders and array idiom.

Every value is a bound parameter (names start with ``f_``, so they never clash with a leg's
own); the SQL text depends only on which filters are set.
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
    if filters.known_at is not None:
        parts.append(f"{alias}.ingested_key <= {slot('known_at')}")
        params["f_known_at"] = filters.known_at
    if filters.since is not None:
        parts.append(f"{alias}.event_key >= {slot('since')}")
        params["f_since"] = filters.since
    if filters.author is not None:
        parts.append(f"{alias}.author = {slot('author')}")
        params["f_author"] = filters.author
    if filters.thread is not None:
        parts.append(f"{alias}.thread = {slot('thread')}")
        params["f_thread"] = filters.thread
    if filters.source is not None:
        if dialect == "sqlite":
            parts.append(f"substr({alias}.source, 1, length(:f_source)) = :f_source")
        else:
            parts.append(f"starts_with({alias}.source, %(f_source)s)")
        params["f_source"] = filters.source
    if filters.tags:
        if dialect == "sqlite":
            labels = "ft.label IN (SELECT value FROM json_each(:f_tags))"
            params["f_tags"] = json.dumps(list(filters.tags))
            owner = f"ft.record_id = {alias}.id"
        else:
            labels = "ft.label = ANY(%(f_tags)s::text[])"
            params["f_tags"] = list(filters.tags)
            owner = f"ft.scope = {alias}.scope AND ft.record_id = {alias}.id"
        if filters.tags_mode == "any":
            parts.append(f"EXISTS (SELECT 1 FROM record_tags ft WHERE {owner} AND {labels})")
        else:
            parts.append(
                f"(SELECT count(*) FROM record_tags ft WHERE {owner} AND {labels}) = "
                f"{slot('tag_count')}"
            )
            params["f_tag_count"] = len(filters.tags)
    return "".join(f" AND {part}" for part in parts), params
