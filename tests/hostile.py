"""Hostile input for every public entry point: hypothesis strategies and the cases they feed.

Shared by the property tests (tests/test_hostile.py, a bounded CI profile) and by the on-demand
fuzz run (benchmarks/fuzz.py, 10^5 cases). A case calls one entry point with generated
arguments and checks the contract of mempp's validation boundary:

* the call succeeds, or raises a documented error: ``InvalidInput`` for bad input (CLI: exit 2,
  one line on stderr), ``RecordNotFound`` for an id the scope lacks; never anything else;
* an error message is one line, of bounded length;
* a failed call changes nothing stored (the scope's row count and last id are unchanged).

A breach raises :class:`Crash`, whose ``kind`` (exception type and the mempp line it came
from) lets the fuzz run count distinct failures.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, timedelta, timezone
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from mempp import InvalidInput, Memory, RecordNotFound
from mempp.validate import MAX_QUERY_CHARS

MAX_MESSAGE = 600  # characters of an error message: enough to name a field and a value

# Fragments that have broken search engines, parsers and terminals.
FRAGMENTS = (
    "\x00",
    "\ud800",
    "\udfff",
    "\udc80\udcff",
    "\u202e",
    "\u200f",
    "\ufeff",
    "\u0301",
    "\x1b[31m",
    "\r\n",
    "\t",
    "\x7f",
    '"',
    "'",
    "*",
    "^",
    ":",
    "NEAR(a b)",
    "a OR b AND NOT c",
    "col:word",
    "{a b}",
    "'); DROP TABLE records; --",
    "%_\\",
    "(a+)+$",
    "[[:alpha:]]",
    "$1 \\1",
    "<script>",
    "as of 2024-02-30",
    "as of March 31, 2023",
    "9999-12-31",
    "0000-01-01",
    "İ",
    "ß",
    "ﷺ",
    "👩‍👩‍👧",
    "𝔘𝔫𝔦",
    "ا" * 3,
)
ISO_FORMS = (
    "%Y-%m-%d",
    "%Y-%m-%dT%H:%M",
    "%Y-%m-%dT%H:%M:%S",
    "%Y-%m-%d %H:%M:%S.%f",
    "%Y-%m-%dT%H:%M:%SZ",
    "%Y-%m-%dT%H:%M:%S+14:00",
    "%Y-%m-%dT%H:%M:%S-1200",
    "%Y%m%d",
    "%Y-W%W-1",
    "%Y/%m/%d",
    "%d.%m.%Y",
)
ZONES = st.sampled_from(
    [None, UTC, timezone(timedelta(hours=14)), timezone(-timedelta(hours=23, minutes=59))]
)

any_char = st.characters(codec=None, exclude_categories=())
raw_text = st.text(any_char, max_size=60)
hostile_text = st.lists(st.one_of(raw_text, st.sampled_from(FRAGMENTS)), max_size=8).map("".join)
long_text = st.builds(
    lambda piece, n: piece * n, st.sampled_from((*FRAGMENTS, "word ")), st.integers(1, 20_000)
)
text = st.one_of(hostile_text, hostile_text, hostile_text, long_text, st.just(""))

huge_int = st.integers(min_value=2**63 - 2, max_value=2**64 + 2) | st.builds(
    lambda digits: 10**digits, st.integers(19, 6_000)
)
integers = st.one_of(st.integers(-(2**70), 2**70), huge_int, st.integers(-3, 3))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    integers,
    st.floats(allow_nan=True, allow_infinity=True),
    st.binary(max_size=20),
    text,
    st.dates(),
    st.datetimes(timezones=ZONES),
)
nested = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(raw_text, inner, max_size=4),
    max_leaves=12,
)
anything = st.one_of(scalars, nested)


@st.composite
def date_strings(draw: st.DrawFn) -> str:
    moment = draw(st.datetimes(timezones=ZONES))
    try:
        return moment.strftime(draw(st.sampled_from(ISO_FORMS)))
    except ValueError:
        return moment.isoformat()


dates = st.one_of(
    st.none(), date_strings(), st.dates(), st.datetimes(timezones=ZONES), text, anything
)
labels = st.one_of(st.none(), text, text, integers, anything)
tags = st.one_of(st.none(), text, st.lists(st.one_of(text, text, anything), max_size=5), anything)
counts = st.one_of(st.none(), st.integers(-2, 60), integers, anything)
queries = st.one_of(text, text, text, st.just("x " * (MAX_QUERY_CHARS // 2 + 1)), anything)


class Crash(AssertionError):
    """The boundary's contract was broken. ``kind`` names the failure for counting."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}\n{detail}")
        self.kind = kind


def _kind(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/mempp/" in f.filename]
    where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"
    return f"{type(exc).__name__} at {where}"


# The last id _state found per scope: where its next walk starts. Any id is a sound start:
# if that row is still in the scope, the rows after it are all the rows with a larger id, so
# the walk ends on the scope's largest id exactly as a walk from the first row would; if it
# is not, the walk starts from the first row. (Walking every row each time read the whole
# store twice per case, and a long run's store holds thousands of generated documents.)
_WALK_FROM: dict[str, int] = {}


def _state(memory: Memory) -> tuple[int, int]:
    """The scope's row count (every state) and its largest id."""
    store = memory.store
    total = store.count(memory.scope, active_only=False)
    last = _WALK_FROM.get(memory.scope, 0)
    if last:
        try:
            memory.get(last)
        except RecordNotFound:
            last = 0
    while batch := store.records_after(memory.scope, last, 1000):
        last = batch[-1].id
    _WALK_FROM[memory.scope] = last
    return total, last if total else 0


def check_message(message: str, what: str) -> None:
    if "\n" in message.strip() or len(message) > MAX_MESSAGE or not message.strip():
        raise Crash(f"bad error message from {what}", repr(message[:1000]))


def run_api(memory: Memory, what: str, call: Callable[[], Any], *, writes: bool) -> None:
    """Call ``call``; documented errors must leave the store as it was."""
    before = _state(memory) if writes else None
    try:
        result = call()
        if isinstance(result, Iterator):
            list(result)
    except (InvalidInput, RecordNotFound) as exc:
        check_message(str(exc), what)
        if writes and _state(memory) != before:
            raise Crash(f"{what} failed but changed the store", str(exc)) from exc
    except Exception as exc:
        raise Crash(_kind(exc), f"{what}: {''.join(traceback.format_exception(exc))}") from exc


# -- the API ----------------------------------------------------------------------------

document_fields = st.fixed_dictionaries(
    {},
    optional={
        "author": labels,
        "date": dates,
        "tags": tags,
        "source": labels,
        "thread": labels,
    },
)
items = st.one_of(
    st.builds(lambda body, rest: {"text": body, **rest}, text, document_fields),
    document_fields,
    text,
    anything,
)


def add_case(memory: Memory, body: Any, fields: dict[str, Any]) -> None:
    run_api(memory, "Memory.add", lambda: memory.add(body, **fields), writes=True)


def add_many_case(memory: Memory, documents: Any, batch_size: Any) -> None:
    kwargs = {} if batch_size is None else {"batch_size": batch_size}
    run_api(memory, "Memory.add_many", lambda: memory.add_many(documents, **kwargs), writes=True)


def search_case(memory: Memory, query: Any, as_of: Any, k: Any) -> None:
    run_api(memory, "Memory.search", lambda: memory.search(query, as_of=as_of, k=k), writes=True)


def evidence_case(memory: Memory, query: Any, as_of: Any, k: Any, budget: Any, style: Any) -> None:
    def call() -> Any:
        return memory.evidence(query, as_of=as_of, k=k, budget=budget, style=style)

    run_api(memory, "Memory.evidence", call, writes=True)


def ask_case(memory: Memory, llm: Any, question: Any, as_of: Any, k: Any, budget: Any) -> None:
    def call() -> Any:
        return memory.ask(question, as_of=as_of, k=k, budget=budget, llm=llm)

    run_api(memory, "Memory.ask", call, writes=True)


def get_case(memory: Memory, record_id: Any) -> None:
    run_api(memory, "Memory.get", lambda: memory.get(record_id), writes=False)


def records_case(memory: Memory, page: Any, active_only: Any) -> None:
    run_api(
        memory,
        "Memory.records",
        lambda: memory.records(page=page, active_only=active_only),
        writes=False,
    )


def open_case(location: str, scope: Any, embedder: Any) -> None:
    def call() -> None:
        Memory(location, scope=scope, embedder=embedder).close()

    try:
        call()
    except InvalidInput as exc:
        check_message(str(exc), "Memory()")
    except Exception as exc:
        raise Crash(_kind(exc), "".join(traceback.format_exception(exc))) from exc


# -- the command line -------------------------------------------------------------------

cli_text = st.one_of(hostile_text, st.sampled_from(FRAGMENTS), st.just("-"), st.just("--"))


@st.composite
def cli_args(draw: st.DrawFn) -> list[str]:
    """A command line: a command, its positional values and some of its options."""
    command = draw(st.sampled_from(["add", "search", "evidence", "get", "info", "export"]))
    args = [command]
    if command == "add":
        args.append(draw(cli_text))
        for option in ("--author", "--date", "--tag", "--source", "--thread"):
            if draw(st.booleans()):
                args += [option, draw(st.one_of(cli_text, date_strings()))]
    elif command in ("search", "evidence"):
        args.append(draw(cli_text))
        if draw(st.booleans()):
            args += ["--as-of", draw(st.one_of(cli_text, date_strings()))]
        if draw(st.booleans()):
            args += ["-k", draw(st.one_of(cli_text, st.integers().map(str)))]
        if command == "evidence" and draw(st.booleans()):
            args += ["--budget", draw(st.one_of(cli_text, st.integers().map(str)))]
    elif command == "get":
        args += draw(st.lists(st.one_of(cli_text, st.integers().map(str)), min_size=1, max_size=3))
    if draw(st.booleans()):
        args.append("--json")
    if draw(st.integers(0, 3)) == 0:
        args = ["--scope", draw(cli_text), *args]
    return args


def run_cli(argv: list[str], *, stdin: bytes = b"", allowed: tuple[int, ...] = (0, 2)) -> int:
    """``mempp ARGV`` in this process: an allowed exit code, and one stderr line when it is
    an input error (ingest's exit 3 reports one line per failed item)."""
    from mempp.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    fake_stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    saved = sys.stdin
    sys.stdin = fake_stdin
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse
                code = exc.code if isinstance(exc.code, int) else 1
    except Exception as exc:
        detail = "".join(traceback.format_exception(exc))
        raise Crash(_kind(exc), f"mempp {argv!r}: {detail}") from exc
    finally:
        sys.stdin = saved
    what = f"mempp {argv[:4]!r}"
    if code == 1 and "get" in argv and err.getvalue().startswith("mempp: error: no record "):
        code = 2  # an id the scope does not hold: RecordNotFound, exit 1, one line
    if code not in allowed:
        raise Crash(f"exit {code}", f"{what}: {err.getvalue()[:2000]}")
    if code == 2:
        check_message(err.getvalue(), what)
    return code


def cli_case(memory: Memory, location: str, argv: list[str], stdin: bytes) -> None:
    """``mempp --db LOCATION ARGV``; a failed command must leave the store as it was. The
    rows are counted through the context's open ``memory``: each count is a new read of what
    is committed (SQLite in WAL mode, PostgreSQL a transaction per statement), so it sees
    the command's writes exactly as a second connection opened for it would."""
    before = _state(memory)
    code = run_cli(["--db", location, *argv], stdin=stdin)
    if code != 0 and _state(memory) != before:
        raise Crash("failed command changed the store", repr(argv))


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), raw_text, huge_int),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(raw_text, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def jsonl_lines(draw: st.DrawFn) -> bytes:
    """A line of JSONL: a document of hostile fields, deep nesting, or random bytes."""
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return draw(st.binary(max_size=200))
    if kind == 1:
        depth = draw(st.integers(100, 100_000))
        return b"[" * depth + b"]" * depth
    fields = {
        name: draw(json_values)
        for name in ("text", "author", "date", "tags", "source", "thread")
        if draw(st.booleans())
    }
    if draw(st.booleans()):
        fields["text"] = draw(raw_text)
    try:
        line = json.dumps(fields, ensure_ascii=draw(st.booleans()))
    except ValueError:  # an integer past Python's 4,300 digits: write one by hand
        line = '{"text": "x", "author": ' + "9" * draw(st.integers(4_301, 20_000)) + "}"
    return line.encode("utf-8", "surrogatepass")


def _json_or_digits(value: object) -> str:
    try:
        return json.dumps(value)
    except ValueError:  # an integer past Python's 4,300 digits: YAML reads it as one
        return "9" * 5_000


@st.composite
def markdown_files(draw: st.DrawFn) -> bytes:
    """A Markdown file: random bytes, or YAML front matter (maybe malformed) and a body."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=300))
    values = st.one_of(
        cli_text,
        json_values.map(_json_or_digits),
        st.sampled_from(
            [
                "[a, b",
                "{x: ",
                "&a [*a]",
                "!!binary aGk=",
                "!!python/object:os.system x",
                "1e999",
                "- - - -",
                "'unclosed",
                ": :",
                "9" * 5000,
                "2024-01-01",
                "[[[[[[[[[[[[[[[[[[[[]]]]]",
            ]
        ),
    )
    front = "".join(
        f"{name}: {draw(values)}\n"
        for name in ("author", "date", "tags", "source", "thread")
        if draw(st.booleans())
    )
    body = draw(hostile_text)
    closing = draw(st.sampled_from(["---\n", "...\n", ""]))
    return f"---\n{front}{closing}{body}".encode("utf-8", "surrogatepass")


def ingest_case(location: str, folder: Path, lines: list[bytes], pages: list[bytes]) -> None:
    """Ingest one JSONL file and some Markdown files: exit 0 or 3, every bad item reported,
    the good ones stored."""
    folder.mkdir(parents=True, exist_ok=True)
    jsonl = folder / "batch.jsonl"
    jsonl.write_bytes(b"\n".join(lines))
    notes = folder / "notes"
    notes.mkdir(exist_ok=True)
    for old in notes.iterdir():
        old.unlink()
    for number, page in enumerate(pages):
        (notes / f"{number}.md").write_bytes(page)
    run_cli(["--db", location, "ingest", str(jsonl), str(notes)], allowed=(0, 3))


# -- every entry point, and a runner for the tests and the fuzz benchmark ------------------

SEED_DOCS = (
    {"text": "We ship the launch on Friday.", "author": "Ana", "date": "2024-03-01"},
    {"text": "The budget for Q2 is 40k.", "author": "Bo", "date": "2024-04-01", "tags": ["plan"]},
    {"text": "Launch moved to Monday.", "author": "Ana", "date": "2024-03-05", "thread": "t1"},
)


@dataclass
class Context:
    """What a case runs against: a seeded store (``memory``; the CLI opens ``location``
    itself), an LLM client for ``ask``, and a folder for ingest's files."""

    memory: Memory
    location: str
    llm: Any
    folder: Path


@dataclass(frozen=True)
class Entry:
    """One entry point: the arguments to generate, how to call it, and its share of cases
    (the ci profile runs ``examples`` per engine; the long one its share of the count)."""

    arguments: dict[str, st.SearchStrategy[Any]]
    run: Callable[..., None]
    examples: int


def _surrogate_bytes(value: str) -> bytes:
    return value.encode("utf-8", "surrogatepass")


ENTRIES: dict[str, Entry] = {
    "add": Entry(
        {"body": text | anything, "fields": document_fields},
        lambda c, body, fields: add_case(c.memory, body, fields),
        250,
    ),
    "add_many": Entry(
        {"documents": st.lists(items, max_size=6) | anything, "batch_size": counts},
        lambda c, documents, batch_size: add_many_case(c.memory, documents, batch_size),
        200,
    ),
    "search": Entry(
        {"query": queries, "as_of": dates, "k": counts},
        lambda c, **kw: search_case(c.memory, **kw),
        250,
    ),
    "evidence": Entry(
        {
            "query": queries,
            "as_of": dates,
            "k": counts,
            "budget": counts,
            "style": st.sampled_from(["headers", "paper"]) | anything,
        },
        lambda c, **kw: evidence_case(c.memory, **kw),
        150,
    ),
    "ask": Entry(
        {"question": queries, "as_of": dates, "k": counts, "budget": counts},
        lambda c, **kw: ask_case(c.memory, c.llm, **kw),
        60,
    ),
    "get": Entry({"record_id": counts}, lambda c, record_id: get_case(c.memory, record_id), 120),
    "records": Entry(
        {"page": counts, "active_only": st.booleans()},
        lambda c, **kw: records_case(c.memory, **kw),
        80,
    ),
    "open": Entry(
        {"scope": labels, "embedder": st.none() | anything},
        lambda c, **kw: open_case(c.location, **kw),
        100,
    ),
    "cli": Entry(
        {
            "argv": cli_args(),
            "stdin": st.binary(max_size=200)
            | text.map(lambda t: t.encode("utf-8", "surrogatepass")),
        },
        lambda c, **kw: cli_case(c.memory, c.location, **kw),
        200,
    ),
    "cli_ingest": Entry(
        {
            "lines": st.lists(jsonl_lines(), max_size=5),
            "pages": st.lists(markdown_files(), max_size=3),
        },
        lambda c, **kw: ingest_case(c.location, c.folder / "in", **kw),
        100,
    ),
}


@contextlib.contextmanager
def context(location: str, folder: Path, llm: Any) -> Iterator[Context]:
    """A store seeded with three documents; the command line, run in this process, encodes
    with the same small test encoder. On leaving, the seeded rows must be unchanged."""
    from unittest import mock

    sys.path.insert(0, str(Path(__file__).parent))
    from cheap import once_per_process
    from conftest import KeywordEmbedder

    embedder = KeywordEmbedder(["launch", "budget", "friday"])
    with (
        once_per_process(),
        mock.patch("mempp.memory.default_embedder", lambda: embedder),
        Memory(location, embedder=embedder) as memory,
    ):
        memory.add_many(list(SEED_DOCS))
        yield Context(memory, location, llm, folder)
        kept = {r.id: r.text for r in memory.records()}
        if [kept.get(i) for i in (1, 2, 3)] != [d["text"] for d in SEED_DOCS]:
            raise Crash("seeded rows changed", repr([kept.get(i) for i in (1, 2, 3)]))


def explore(
    entry: Entry,
    ctx: Context,
    *,
    examples: int,
    seed: int | None = None,
    on_crash: Callable[[Crash, dict[str, Any]], None] | None = None,
) -> int:
    """Run ``examples`` generated cases of ``entry``; return how many ran. Without
    ``on_crash``, the first crash fails (hypothesis shrinks it and prints the case); with it,
    each crash is handed over and the run goes on. ``seed=None`` follows the hypothesis
    profile (tests/conftest.py: the ci profile's fixed sequence, the long one's random cases);
    a seed draws random cases from it."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as with_seed

    ran = 0
    seeded = {} if seed is None else {"derandomize": False}

    @settings(
        max_examples=examples,
        **seeded,
        database=None,
        deadline=None,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate] if on_crash else [Phase.generate, Phase.shrink],
    )
    @given(st.fixed_dictionaries(entry.arguments))
    def case(arguments: dict[str, Any]) -> None:
        nonlocal ran
        ran += 1
        try:
            entry.run(ctx, **arguments)
        except Crash as crash:
            if on_crash is None:
                raise
            on_crash(crash, arguments)

    (case if seed is None else with_seed(seed)(case))()
    return ran
