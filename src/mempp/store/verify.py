"""What ``mempp verify`` checks, engine by engine: the result type, the append-only triggers
every store must still have (an owner can drop them; verify says so), and the wording of the
checks both engines make the same way (every text against its stored hash, every vector of
the bound size and not zeroed).

A redaction is the one sanctioned change of content: its tombstone (empty text, empty hash,
zeroed vector, a ``redactions`` row) passes every check; the same values on a row without a
tombstone fail them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Check:
    """One integrity check: its name, whether it passed, and what it found."""

    name: str
    ok: bool
    detail: str

    def to_dict(self) -> dict[str, object]:
        return {"check": self.name, "ok": self.ok, "detail": self.detail}


# The triggers that refuse deletes and rewrites, by engine (see each engine's MIGRATIONS).
SQLITE_TRIGGERS = frozenset(
    {
        "records_no_delete",
        "records_content_frozen",
        "records_vector_frozen",
        "records_no_replace",
        "record_tags_no_delete",
        "record_tags_frozen",
        "record_tags_no_replace",
        "consolidation_changes_frozen",
        "consolidation_changes_no_delete",
        "consolidation_groups_frozen",
        "consolidation_groups_no_delete",
        "consolidation_runs_no_delete",
    }
)
POSTGRES_TRIGGERS = frozenset(
    {
        "records_no_delete",
        "records_no_truncate",
        "records_content_frozen",
        "records_terms_frozen",
        "record_tags_no_delete",
        "record_tags_no_truncate",
        "record_tags_frozen",
        "consolidation_changes_frozen",
        "consolidation_changes_no_truncate",
        "consolidation_groups_frozen",
        "consolidation_groups_no_truncate",
        "consolidation_runs_no_delete",
        "consolidation_runs_no_truncate",
        "consolidation_runs_frozen",
        "consolidation_runs_undone_once",
    }
)


def triggers_check(present: set[str], expected: frozenset[str]) -> Check:
    missing = sorted(expected - present)
    if missing:
        return Check("append-only triggers", False, "missing: " + ", ".join(missing))
    return Check("append-only triggers", True, f"all {len(expected)} present")


def vectors_check(
    dim: str | None, total: int, count_bad: Callable[[int], int], zeroed: Sequence[int] = ()
) -> Check:
    """Every record has a vector of the bound size; ``count_bad(dim)`` counts those without.
    ``zeroed``: ids of rows that are not tombstones and whose vector is all zeros (a vector
    no encoder gives: every row's cosine to it is undefined, so it drops out of the leg)."""
    if dim is None:
        return Check("vectors", total == 0, f"no encoder bound; {total} records")
    bad = count_bad(int(dim))
    if bad:
        return Check("vectors", False, f"{bad} of {total} records lack a {dim}-d vector")
    if zeroed:
        return Check(
            "vectors",
            False,
            f"{len(zeroed)} records that are not redacted have a zeroed vector "
            f"(records {_some(zeroed)})",
        )
    return Check("vectors", True, f"every one of {total} records has a {dim}-d vector")


def reembed_check(target: tuple[str, int] | None, staged: int, total: int, bad: int) -> Check:
    """A re-encoding under way: how far it is, and every staged vector of the target size."""
    if target is None:
        return Check("re-encoding", True, "none under way")
    name, dim = target
    if bad:
        return Check("re-encoding", False, f"{bad} staged vectors for {name} are not {dim}-d")
    return Check(
        "re-encoding",
        True,
        f"to {name} ({dim}-d) under way: {staged} of {total} rows staged; searches use the "
        "current vectors until it completes",
    )


def texts_check(total: int, mismatched: Sequence[int]) -> Check:
    """Every record's text against the hash stored when it was written (a tombstone: empty
    text, empty hash). ``mismatched``: ids of the rows where they differ, ascending."""
    if mismatched:
        return Check(
            "record texts",
            False,
            f"{len(mismatched)} of {total} records' text differs from its stored hash "
            f"(records {_some(mismatched)}): rewritten behind the triggers' back",
        )
    return Check("record texts", True, f"every one of {total} texts matches its stored hash")


def _some(ids: Sequence[int], shown: int = 5) -> str:
    head = ", ".join(str(i) for i in list(ids)[:shown])
    return head + (", ..." if len(ids) > shown else "")
