"""Scale benchmark: the embedded engine at 100k, 300k and 1M records on one machine.

Not a test: run it, read the figures. It builds (once, cached in ``--cache``) one SQLite store
per size with synthetic dated records (random unit vectors, Zipf-worded texts of 20-150 words,
Zipf-frequent authors, 0-2 tags, dates uniform over three years and written in random order,
2% undated), then measures each store in fresh processes, once with the library's default
BLAS threading and once with ``OPENBLAS_NUM_THREADS=1`` set in the environment:

* ``warm()`` in a new process with nothing saved beside the file (it builds and saves the
  BM25 replica, the tag postings and the vector file), then with those saved but the vectors read
  from SQLite (the vector file removed), each in a new process;
* cold: a new process opens the store and runs one search, timed in parts (imports, the
  encoder's weights, the search; OS page cache warm: no root here to drop it); then
  ``warm()`` in another new process with both files saved, and the resident memory after it;
* p50 / p95 / p99 (ms) of each leg alone (query encoding, lexical, tag, vector) and of the
  whole ``Memory.search``, with the as-of bound at ~50% and ~5% of the records and without;
* inside ``Memory.search``, p50 / p95 of every part of it: each store call it makes (the
  legs, the date leg, thread followers, recency keys, the reserve's latest unmatched rows,
  fetching the hits), the query encoding, and the rest (fusion and glue), with the slowest
  part named;
* filtered searches (the most frequent author, ``known_at`` halfway through the ingest, one
  tag): the first search with each filter, then p50 / p95 / p99 of ``--filtered-queries``
  more;
* the numpy floor in the same process: mask-and-matvec over a float32 copy of the vectors
  with ``argpartition`` (the least an exact scan can cost), and the vector leg's recall@50
  against it.

Each checkout measures its own copy of the cached store (opening a store runs its
migrations, which an older checkout could not read back), deleted afterwards.

Documents are stored with a stand-in encoder (random vectors, named like all-MiniLM-L6-v2),
so ingest figures are store overhead; questions are encoded by the real all-MiniLM-L6-v2.

    nice -n 10 python benchmarks/bench_scale.py --sizes 100000 300000 1000000
    python benchmarks/bench_scale.py --sizes 100000 --queries 100 --cache /tmp/scale
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import date, timedelta
from pathlib import Path

START = time.perf_counter()  # before mempp is imported: a cold start includes the imports

import numpy as np  # noqa: E402

# The encoders a store can be built for: the stored name and width of its vectors. Documents
# get random vectors of that width under that name; questions are encoded by the real model.
ENCODERS = {"minilm": ("all-MiniLM-L6-v2/256", 384), "mpnet": ("all-mpnet-base-v2/384", 768)}
SPAN_DAYS = 3 * 365
FIRST_DAY = date(2022, 1, 1)
CHUNK = 10_000
QUESTION_WORDS = ("what", "when", "who", "why", "how", "which", "did", "where")
FUNCTION_WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at "
    "which but have an they you were her she there been one all we their has would when if "
    "will more no so can said what out about up into them than some could only time new"
).split()


# -- the corpus -----------------------------------------------------------------------------
def vocabulary(size: int, rng: np.random.Generator) -> list[str]:
    """Function words, then pronounceable synthetic words, in Zipf rank order."""
    consonants, vowels = "bcdfghjklmnprstvwz", "aeiou"
    words = list(FUNCTION_WORDS)
    seen = set(words)
    while len(words) < size:
        word = "".join(
            consonants[rng.integers(len(consonants))] + vowels[rng.integers(len(vowels))]
            for _ in range(int(rng.integers(2, 5)))
        )
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def zipf(n: int, exponent: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1) ** exponent
    return weights / weights.sum()


class Corpus:
    """The deterministic word lists, authors and tags shared by documents and questions."""

    def __init__(self, seed: int, dim: int = 384) -> None:
        rng = np.random.default_rng(seed)
        self.seed = seed
        self.dim = dim
        self.words = vocabulary(30_000, rng)
        self.word_p = zipf(len(self.words), 1.07)
        names = vocabulary(len(self.words) + 250, rng)[len(self.words) :]
        self.authors = [name.capitalize() for name in names[:200]]
        self.author_p = zipf(len(self.authors), 1.0)  # a few authors write most documents
        self.tags = names[200:250]

    def documents(
        self, size: int, first: int = 0
    ) -> Iterator[tuple[list[dict[str, object]], np.ndarray]]:
        """Chunks of (documents, their unit vectors), the same for the same seed and size;
        ``first`` numbers them from there (documents a store of ``first`` rows lacks)."""
        for start in range(first, first + size, CHUNK):
            rng = np.random.default_rng([self.seed, start])
            count = min(CHUNK, first + size - start)
            lengths = rng.integers(20, 151, count)
            words = rng.choice(len(self.words), size=int(lengths.sum()), p=self.word_p)
            authors = rng.choice(len(self.authors), size=count, p=self.author_p)
            days = rng.integers(0, SPAN_DAYS, count)
            undated = rng.random(count) < 0.02
            vectors = rng.standard_normal((count, self.dim), dtype=np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            docs: list[dict[str, object]] = []
            offset = 0
            for i in range(count):
                ids = words[offset : offset + lengths[i]]
                offset += lengths[i]
                docs.append(
                    {
                        # The number keeps every text unique: no dedupe skips.
                        "text": f"{start + i} " + " ".join(self.words[j] for j in ids),
                        "author": self.authors[authors[i]],
                        "tags": [self.tags[int(t)] for t in rng.choice(50, rng.integers(0, 3))],
                        "date": None
                        if undated[i]
                        else (FIRST_DAY + timedelta(days=int(days[i]))).isoformat(),
                    }
                )
            yield docs, vectors

    def questions(self, count: int) -> list[str]:
        """Natural-looking 6-12 word questions: a question word, Zipf words, sometimes a name."""
        rng = np.random.default_rng([self.seed, 2**31])  # apart from every chunk
        out = []
        for number in range(count):
            length = int(rng.integers(6, 13))
            words = [QUESTION_WORDS[int(rng.integers(len(QUESTION_WORDS)))]]
            if rng.random() < 0.3:
                words.append(self.authors[int(rng.choice(len(self.authors), p=self.author_p))])
            if rng.random() < 0.2:
                words.append(self.tags[int(rng.integers(len(self.tags)))])
            picks = rng.choice(len(self.words), size=max(0, length - len(words)), p=self.word_p)
            words += [self.words[j] for j in picks]
            out.append(" ".join(words) + f" {number}?")
        return out


# -- building a store -----------------------------------------------------------------------
class StandInEncoder:
    """Documents get the corpus's vectors (handed in per chunk); named like the real model so
    that questions can be encoded by the real model against the same store."""

    def __init__(self, encoder: str) -> None:
        self.name, self.dim = ENCODERS[encoder]
        self.pending: dict[str, np.ndarray] = {}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.pending.pop(t) for t in texts]) if texts else np.empty((0, self.dim))


class DrawingEncoder:
    """A stand-in for re-encoding a store (``Memory.reembed``): each text's vector is a random
    unit vector of the encoder's width, drawn from a generator seeded by the text's number
    (every corpus text starts with it), so a run stopped and resumed draws the same ones."""

    def __init__(self, encoder: str, seed: int) -> None:
        self.name, self.dim = ENCODERS[encoder]
        self.seed = seed

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            number = int(text.split(" ", 1)[0])
            out[row] = np.random.default_rng([self.seed, number, self.dim]).standard_normal(
                self.dim, dtype=np.float32
            )
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out


def store_path(cache: Path, size: int, seed: int, encoder: str = "minilm") -> Path:
    return cache / f"scale-{size}-s{seed}{'' if encoder == 'minilm' else '-' + encoder}.db"


def real_encoder(encoder: str) -> object:
    """The real model whose vectors the stand-in's are named after (its weights loaded)."""
    from mempp.encoders import embedder_named

    # --encoders names, per child, another engine of the same model (minilm-numpy for minilm).
    model = embedder_named(os.environ.get("MEMPP_ENCODER") or encoder)
    if (model.name, model.dim) != ENCODERS[encoder]:
        sys.exit(f"{encoder} is {model.name} ({model.dim}-d) now: update ENCODERS")
    return model


def build(
    cache: Path, size: int, seed: int, batch: int, encoder: str, reembed: bool = False
) -> dict[str, float]:
    """The cached store of ``size`` records (built now if missing), and its build figures.
    With ``reembed``, a store of another width is the cached MiniLM one of the same size and
    seed (built first if missing) re-encoded by ``Memory.reembed`` with random vectors of
    this width: the same records, a fraction of the time of adding them again."""
    from mempp import Memory

    path = store_path(cache, size, seed, encoder)
    meta = path.with_suffix(".json")
    if path.exists() and meta.exists():
        return json.loads(meta.read_text())
    cache.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    for leftover in cache.glob(partial.name + "*"):
        leftover.unlink()
    if reembed and encoder != "minilm":
        figures = dict(build(cache, size, seed, batch, "minilm"))
        shutil.copyfile(store_path(cache, size, seed), partial)
        started = time.perf_counter()
        with Memory(partial, embedder=DrawingEncoder("minilm", seed)) as memory:
            memory.reembed(
                DrawingEncoder(encoder, seed),
                batch=2000,
                progress=lambda done, total: print(
                    f"  re-encoded {done:,} / {total:,}", file=sys.stderr, flush=True
                ),
            )
        figures["reembed s"] = time.perf_counter() - started
        return finished(partial, path, meta, figures)
    stand_in = StandInEncoder(encoder)
    corpus = Corpus(seed, stand_in.dim)
    store_seconds = 0.0
    started = time.perf_counter()
    with Memory(partial, embedder=stand_in) as memory:
        for docs, vectors in corpus.documents(size):
            stand_in.pending = {str(d["text"]): v for d, v in zip(docs, vectors, strict=True)}
            begun = time.perf_counter()
            memory.add_many(docs, batch_size=batch)
            store_seconds += time.perf_counter() - begun
            print(f"  built {len(memory):,} / {size:,}", file=sys.stderr, flush=True)
    figures = {
        "records": size,
        "ingest docs/s (store only)": size / store_seconds,
        "build s": time.perf_counter() - started,
    }
    return finished(partial, path, meta, figures)


def finished(partial: Path, path: Path, meta: Path, figures: dict[str, float]) -> dict[str, float]:
    """The store built at ``partial`` moved to ``path``, its figures written to ``meta``."""
    for suffix in ("-wal", "-shm"):
        Path(str(partial) + suffix).unlink(missing_ok=True)
    partial.rename(path)
    meta.write_text(json.dumps(figures))
    return figures


def probe_ingest(path: Path, seed: int, count: int, batch: int, encoder: str) -> dict[str, float]:
    """The store's share of ingest at this size: ``count`` new documents added to a copy of
    the store (stand-in encoder: store time only), beside the time the real encoder takes to
    encode the same texts. The copy is deleted afterwards."""
    from mempp import Memory

    copy = path.with_name(f"{path.stem}-probe.db")
    shutil.copyfile(path, copy)
    try:
        stand_in = StandInEncoder(encoder)
        texts: list[str] = []
        store_seconds = 0.0
        with Memory(copy, embedder=stand_in) as memory:
            for docs, vectors in Corpus(seed, stand_in.dim).documents(count, first=10**9):
                stand_in.pending = {str(d["text"]): v for d, v in zip(docs, vectors, strict=True)}
                seconds, _ = timed(lambda docs=docs: memory.add_many(docs, batch_size=batch))
                store_seconds += seconds
                texts += [str(d["text"]) for d in docs]
        real = real_encoder(encoder)
        real.embed(texts[:8])  # weights loaded, not timed
        encoder_seconds, _ = timed(lambda: real.embed(texts))
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{copy}{suffix}").unlink(missing_ok=True)
    return {
        "probe documents": count,
        "store ms/doc": 1000 * store_seconds / count,
        "encoder ms/doc": 1000 * encoder_seconds / count,
        "store share of encoder %": 100 * store_seconds / encoder_seconds,
    }


# -- measuring (in a child process) ---------------------------------------------------------
def rss_gib() -> tuple[float, float]:
    """(current, peak) resident set size of this process, GiB."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value
    return int(fields["VmRSS"].split()[0]) / 2**20, int(fields["VmHWM"].split()[0]) / 2**20


def quantiles(samples: list[float]) -> list[float]:
    """p50, p95, p99 in ms."""
    ordered = sorted(samples)
    last = len(ordered) - 1
    return [
        statistics.median(ordered) * 1000,
        ordered[round(0.95 * last)] * 1000,
        ordered[round(0.99 * last)] * 1000,
    ]


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    begun = time.perf_counter()
    result = fn()
    return time.perf_counter() - begun, result


def bounds(path: Path) -> dict[str, int | None]:
    """As-of bounds (event keys) that keep ~50% and ~5% of the dated records."""
    import sqlite3

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT event_key FROM records WHERE event_key IS NOT NULL")
        keys = np.array([r[0] for r in rows])
    finally:
        conn.close()
    return {
        "none": None,
        "50%": int(np.quantile(keys, 0.50)),
        "5%": int(np.quantile(keys, 0.05)),
    }


def filter_cases(corpus: Corpus, path: Path) -> dict[str, dict[str, object]]:
    """Search filters as a user sets them: the most frequent author (~17% of the rows), what
    the memory held halfway through the ingest (known_at), and one tag."""
    import sqlite3

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        count = conn.execute("SELECT count(*) FROM records").fetchone()[0]
        (halfway,) = conn.execute(
            "SELECT ingested_at FROM records ORDER BY id LIMIT 1 OFFSET ?", (count // 2,)
        ).fetchone()
    finally:
        conn.close()
    return {
        "author": {"author": corpus.authors[0]},
        "known_at": {"known_at": halfway},
        "tag": {"tags": [corpus.tags[0]]},
    }


def floor_matrix(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A float32 copy of every vector with its id and event key, read straight from the file."""
    import sqlite3

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        count = conn.execute("SELECT count(*) FROM records").fetchone()[0]
        (dim,) = conn.execute("SELECT length(embedding) / 4 FROM records LIMIT 1").fetchone()
        matrix = np.empty((count, dim), dtype=np.float32)
        ids = np.empty(count, dtype=np.int64)
        keys = np.empty(count, dtype=np.int64)
        cursor = conn.execute("SELECT id, coalesce(event_key, ?), embedding FROM records", (2**62,))
        row = 0
        while chunk := cursor.fetchmany(20_000):
            end = row + len(chunk)
            ids[row:end] = [c[0] for c in chunk]
            keys[row:end] = [c[1] for c in chunk]
            matrix[row:end] = np.frombuffer(b"".join(c[2] for c in chunk), "<f4").reshape(-1, dim)
            row = end
    finally:
        conn.close()
    return matrix, ids, keys


def floor_search(
    matrix: np.ndarray,
    ids: np.ndarray,
    keys: np.ndarray,
    query: np.ndarray,
    bound: int | None,
    limit: int,
) -> list[int]:
    scores = matrix @ query
    if bound is not None:
        scores[keys > bound] = -np.inf
    # The float32 sums err by ~4e-8, about the gap to the next row at the limit-th score at
    # 1M: the float32 top rows, 64 more than asked, ranked by float64 scores and ties to the
    # newer row are the exact ranking the leg gives.
    wider = len(scores) - min(len(scores), limit + 64)
    top = np.argpartition(scores, wider)[wider:]
    top = top[scores[top] > -np.inf]
    exact = matrix[top].astype(np.float64) @ query.astype(np.float64)
    order = np.lexsort((-ids[top], -exact))[:limit]
    return ids[top[order]].tolist()


def measure_cold(path: Path, question: str, encoder_name: str) -> dict[str, float]:
    """A new process's first search, in parts: imports, the encoder's weights, then the
    search (the store's in-RAM indexes load on it)."""
    from mempp import Memory

    imported = time.perf_counter() - START
    encoder, embedder = timed(lambda: real_encoder(encoder_name))
    with Memory(path, embedder=embedder) as memory:  # type: ignore[arg-type]
        first, _ = timed(lambda: memory.search(question))
        return {
            "cold import s": imported,
            "cold encoder load s": encoder,
            "cold first search s": first,
            "cold process to result s": time.perf_counter() - START,
        }


def open_warmed(path: Path, encoder_name: str, **options: object) -> tuple[object, float, float]:
    """A Memory on ``path`` with the real encoder, warmed: (it, seconds to load the encoder's
    weights, seconds ``warm()`` then took). ``warm s`` in the figures is their sum: what
    ``warm()`` takes when the weights are not loaded yet."""
    from mempp import Memory

    encoder, embedder = timed(lambda: real_encoder(encoder_name))
    memory = Memory(path, embedder=embedder, **options)  # type: ignore[arg-type]
    store, _ = timed(memory.warm)
    return memory, encoder, store


def measure_warm(path: Path, encoder_name: str) -> dict[str, float]:
    """``warm()`` in a new process with whatever is saved beside the file (it saves what
    is missing)."""
    memory, encoder, store = open_warmed(path, encoder_name)
    memory.close()  # type: ignore[attr-defined]
    return {"warm s": encoder + store, "warm store s": store, "peak rss GiB": rss_gib()[1]}


# The store calls Memory.search makes, timed one by one inside it (see SearchParts).
STORE_PARTS = (
    "lexical",
    "tagged",
    "nearest",
    "dated_within",
    "thread_followers",
    "recency_keys",
    "latest_unmatched",
    "get",
    # The keyword leg and the query-time context leg's scope check (a settings choice:
    # --presets); a checkout without them times none.
    "keyword_prefix",
    "keyword",
    "context_eligible",
)


class SearchParts:
    """Times every part of ``Memory.search``: wraps the store's read calls and the encoder's
    ``embed`` on their instances, adding each call's time to the current search's parts; what
    the parts do not cover is fusion and glue."""

    def __init__(self, store: object, embedder: object) -> None:
        self.current: dict[str, float] = {}
        self.samples: dict[str, list[float]] = {}
        for name in STORE_PARTS:
            if hasattr(store, name):
                setattr(store, name, self._wrapped(name, getattr(store, name)))
        embedder.embed = self._wrapped("encode", embedder.embed)  # type: ignore[attr-defined]
        later = getattr(embedder, "embed_later", None)
        if later is not None:  # a search tokenizes first, then runs the model on a thread
            tokenize = self._wrapped("encode", later)

            def embed_later(texts: Sequence[str]) -> Callable[..., object]:
                return self._wrapped("encode", tokenize(texts))  # type: ignore[arg-type]

            embedder.embed_later = embed_later  # type: ignore[attr-defined]

    def _wrapped(self, name: str, call: Callable[..., object]) -> Callable[..., object]:
        def timed_call(*args: object, **kwargs: object) -> object:
            begun = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                self.current[name] = self.current.get(name, 0.0) + time.perf_counter() - begun

        return timed_call

    def run(self, search: Callable[[], object]) -> tuple[float, object]:
        """Time one search and keep its parts."""
        self.current = {}
        seconds, result = timed(search)
        parts = {name: self.current.get(name, 0.0) for name in ("encode", *STORE_PARTS)}
        parts["fusion and glue"] = seconds - sum(parts.values())
        for name, value in parts.items():
            self.samples.setdefault(name, []).append(value)
        return seconds, result

    def quantiles(self) -> dict[str, list[float]]:
        """p50 / p95 / p99 (ms) per part, over the searches since the last call."""
        out = {name: quantiles(values) for name, values in self.samples.items()}
        self.samples = {}
        return out


def measure(
    path: Path,
    queries: int,
    seed: int,
    filtered: int,
    encoder_name: str,
    preset_spec: str | None = None,
) -> dict[str, object]:
    from threadpoolctl import threadpool_info

    import mempp
    from mempp import Memory
    from mempp.dates import key_to_datetime
    from mempp.search.query import lexical_query, tag_labels

    corpus = Corpus(seed)
    questions = corpus.questions(queries)
    # ``Memory.search``'s settings: the Memory's own (the default preset), or --presets'.
    chosen: dict[str, object] = {}
    if preset_spec is not None:
        from mempp.bench.systems import preset_with

        chosen["settings"] = preset_with(preset_spec)
    result: dict[str, object] = {
        "preset": preset_spec or "the Memory's default",
        "mempp": str(Path(mempp.__file__).parent),
        "blas threads": [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"],
        "load average": os.getloadavg(),
    }
    # Each question is asked under every bound: the headline figures encode it every time,
    # as a first asking does (a checkout from before the held vectors has no such switch).
    held = "recent_questions" in inspect.signature(Memory).parameters
    memory, encoder_seconds, store_seconds = open_warmed(
        path, encoder_name, **({"recent_questions": 0} if held else {})
    )
    with memory:  # type: ignore[attr-defined]
        result["warm s"] = encoder_seconds + store_seconds
        result["warm store s"] = store_seconds
        result["encoder"] = type(memory.embedder).__name__  # type: ignore[attr-defined]
        result["rss after warm GiB"], result["peak rss GiB"] = rss_gib()
        store, scope, settings = memory.store, memory.scope, memory.settings
        embedder = memory.embedder
        limit = settings.candidates
        vectors = [embedder.embed([q])[0] for q in questions]
        parts = SearchParts(store, embedder)
        legs: dict[str, Callable[[str, np.ndarray, int | None], object]] = {
            "encode": lambda q, v, b: embedder.embed([q]),
            "lexical": lambda q, v, b: store.lexical(scope, lexical_query(q, settings), b, limit),
            "tag": lambda q, v, b: store.tagged(scope, tag_labels(q, settings), b, limit),
            "vector": lambda q, v, b: store.nearest(scope, v, b, limit),
        }
        timings: dict[str, dict[str, list[float]]] = {}
        search_parts: dict[str, dict[str, list[float]]] = {}
        found: dict[str, list[list[int]]] = {}
        as_of_bounds = bounds(path)  # one read of every event key
        for label, bound in as_of_bounds.items():
            timings[label] = {}
            for leg, fn in legs.items():
                samples, cpu = [], []
                for question, vector in zip(questions, vectors, strict=True):
                    begun = time.process_time()
                    seconds, hits = timed(lambda f=fn, q=question, v=vector, b=bound: f(q, v, b))
                    cpu.append(time.process_time() - begun)
                    samples.append(seconds)
                    if leg == "vector":
                        found.setdefault(label, []).append(list(hits))  # type: ignore[arg-type]
                timings[label][leg] = quantiles(samples)
                if leg == "encode":
                    timings[label]["encode cpu"] = quantiles(cpu)
            as_of = None if bound is None else key_to_datetime(bound)
            samples, cpu = [], []
            for question in questions:
                begun = time.process_time()
                seconds, _ = parts.run(
                    lambda q=question, a=as_of: memory.search(q, as_of=a, **chosen)
                )
                cpu.append(time.process_time() - begun)
                samples.append(seconds)
            timings[label]["search"] = quantiles(samples)
            # CPU seconds of the whole process (every thread) per search: what the search
            # costs whatever share of the cores other jobs leave it, so on a loaded machine
            # the nearer figure to a quiet machine's wall time.
            timings[label]["search cpu"] = quantiles(cpu)
            search_parts[label] = parts.quantiles()
        # Filtered searches: the first one with a filter set, then the next ones.
        filters: dict[str, dict[str, float]] = {}
        for label, where in filter_cases(corpus, path).items() if filtered else ():
            first, _ = timed(lambda w=where: memory.search(questions[0], **w, **chosen))  # type: ignore[arg-type]
            samples = [
                timed(lambda q=q, w=where: memory.search(q, **w, **chosen))[0]  # type: ignore[arg-type]
                for q in questions[1 : 1 + filtered]
            ]
            filters[label] = {"first": 1000 * first, "quantiles": quantiles(samples)}
        result["filtered"] = filters
        # The same question again under another bound (a page of results, a dragged as-of
        # slider): its vector held by a Memory that holds them, as by default.
        again: list[float] = []
        if held:
            asking = Memory(store, embedder=embedder)  # shares the store: closed with memory
            later = as_of_bounds["50%"]
            as_of = None if later is None else key_to_datetime(later)
            for question in questions:
                asking.search(question, **chosen)  # type: ignore[arg-type]
                again.append(
                    timed(lambda q=question: asking.search(q, as_of=as_of, **chosen))[0]  # type: ignore[arg-type]
                )
        result["asked again"] = quantiles(again) if again else None
        result["rss after searches GiB"] = rss_gib()[0]
        matrix, ids, keys = floor_matrix(path)
        recall: dict[str, float] = {}
        for label, bound in as_of_bounds.items():
            samples = []
            exact_lists = []
            for vector in vectors:
                seconds, exact = timed(
                    lambda v=vector, b=bound: floor_search(matrix, ids, keys, v, b, limit)
                )
                samples.append(seconds)
                exact_lists.append(exact)
            timings[label]["numpy floor"] = quantiles(samples)
            hits = [
                len(set(got[:50]) & set(exact[:50])) / len(exact[:50])
                for got, exact in zip(found[label], exact_lists, strict=True)
                if exact
            ]
            recall[label] = float(np.mean(hits))
            recall[label + " identical"] = sum(
                got == exact for got, exact in zip(found[label], exact_lists, strict=True)
            ) / len(exact_lists)
        result["timings"] = timings
        result["search parts"] = search_parts
        result["recall@50"] = recall
    return result


def child(
    args: list[str], one_thread: bool, source: Path | None, encoder: str | None = None
) -> dict[str, object]:
    env = dict(os.environ)
    if encoder is not None:  # the questions' encoder (the documents' vectors are stand-ins)
        env["MEMPP_ENCODER"] = encoder
    if source is not None:  # another checkout's mempp, ahead of the installed one
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source), env.get("PYTHONPATH")]))
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.pop(name, None)
    if one_thread:
        env["OPENBLAS_NUM_THREADS"] = "1"
    done = subprocess.run(
        [sys.executable, __file__, *args], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        sys.exit(f"bench_scale.py {' '.join(args)} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- report ---------------------------------------------------------------------------------
def report(size: int, built: dict[str, float], file_gib: float, runs: dict[str, dict]) -> None:
    ingest = built["ingest docs/s (store only)"]
    print(f"\nN = {size:,}: file {file_gib:.2f} GiB, ingest {ingest:,.0f} docs/s (store only)")
    for mode, run in runs.items():
        print(
            f"  [{mode}] first warm() (nothing saved beside the file) {run['first warm s']:.2f} s,"
            f" peak RSS {run['first warm peak rss GiB']:.2f} GiB; warm() with the BM25 replica "
            f"saved, vectors from SQLite {run['sqlite vectors warm s']:.2f} s"
        )
        print(
            f"  [{mode}] {run['mempp']}, {run.get('encoder', 'encoder ?')}, load average "
            f"{'/'.join(f'{x:.1f}' for x in run.get('load average', ()))} at the start, "
            f"BLAS threads {run['blas threads']}; cold: imports "
            f"{run['cold import s']:.2f} s, encoder {run['cold encoder load s']:.2f} s, first "
            f"search {run['cold first search s']:.2f} s, process start to result "
            f"{run['cold process to result s']:.2f} s; warm() {run['warm s']:.2f} s (the "
            f"store's part {run['warm store s']:.2f} s, the rest the encoder's weights); RSS after "
            f"warm {run['rss after warm GiB']:.2f} GiB (peak {run['peak rss GiB']:.2f}), after "
            f"searches {run['rss after searches GiB']:.2f}"
        )
        timings = run["timings"]
        legs = list(next(iter(timings.values())))
        print(f"    {'as-of':6}" + "".join(f"{leg:>22}" for leg in legs) + "   recall@50 identical")
        for label, per_leg in timings.items():
            cells = "".join(f"{'{:.1f}/{:.1f}/{:.1f}'.format(*per_leg[leg]):>22}" for leg in legs)
            recall = run["recall@50"]
            print(f"    {label:6}{cells}   {recall[label]:.4f} {recall[label + ' identical']:.2f}")
        if run.get("asked again"):
            print(
                "    Memory.search, the question asked again under the 50% bound (its vector "
                "held), p50/p95/p99 ms: {:.1f}/{:.1f}/{:.1f}".format(*run["asked again"])
            )
        if run.get("filtered"):
            cells = "  ".join(
                f"{label} {'{:.1f}/{:.1f}/{:.1f}'.format(*f['quantiles'])} (first {f['first']:.0f})"
                for label, f in run["filtered"].items()
            )
            print(f"    filtered search, p50/p95/p99 ms (first search with the filter): {cells}")
        print("    inside Memory.search, p50/p95 ms per part (the slowest part by p95 named):")
        for label, per_part in run["search parts"].items():
            cells = "  ".join(
                f"{part} {values[0]:.1f}/{values[1]:.1f}" for part, values in per_part.items()
            )
            slowest = max(per_part, key=lambda part: per_part[part][1])
            print(f"    {label:6}slowest: {slowest} (p95 {per_part[slowest][1]:.1f}); {cells}")


# What a store saves beside its file (-bm25.npz: before the array file).
SAVED_ENDS = ("-bm25.arrays", "-vectors.arrays", "-vectors.f32", "-bm25.npz", "-tags.arrays")


def working_copy(path: Path, label: str) -> Path:
    """A copy of a cached store, and of what is saved beside it, for one checkout to open:
    opening a store runs that checkout's migrations, which an older checkout could not read."""
    copy = path.with_name(f"{path.stem}-{label}{path.suffix}")
    for end in ("", *SAVED_ENDS):
        if Path(f"{path}{end}").exists():
            shutil.copyfile(f"{path}{end}", f"{copy}{end}")
    return copy


def measure_source(
    path: Path, prefix: str, source: Path | None, common: list[str], args: argparse.Namespace
) -> dict[str, dict]:
    """Every measurement of one checkout's mempp on one store, in fresh processes."""
    common = ["--path", str(path), *common]
    saved = [Path(f"{path}{end}") for end in SAVED_ENDS]
    first = {"first warm s": float("nan"), "first warm peak rss GiB": float("nan")}
    if not args.keep_saved:
        for file in saved:
            file.unlink(missing_ok=True)
        warmed = child(["--child", "warm", *common], False, source)
        first = {
            "first warm s": warmed["warm s"],
            "first warm peak rss GiB": warmed["peak rss GiB"],
        }
    saved[1].unlink(missing_ok=True)  # the vectors from SQLite, the replica from its file
    sqlite_vectors = child(["--child", "warm", *common], False, source)
    first["sqlite vectors warm s"] = sqlite_vectors["warm s"]
    runs = {}
    for mode in args.modes:
        one = mode == "one thread"
        for encoder in args.encoders or [None]:
            run = dict(first)
            question = ["--question", Corpus(args.seed).questions(1)[0]]
            run.update(child(["--child", "cold", *question, *common], one, source, encoder))
            label = prefix + mode + (f", MEMPP_ENCODER={encoder}" if encoder else "")
            # Each preset in turn, in fresh processes, one after another (ratios within a run).
            for spec in args.presets or [None]:
                measured = dict(run)
                chosen = ["--preset", spec] if spec else []
                measured.update(
                    child(["--child", "measure", *common, *chosen], one, source, encoder)
                )
                runs[label + (f", preset {spec}" if spec else "")] = measured
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 300_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--cache", type=Path, default=Path(".mempp-cache/scale"), help="where the stores are kept"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--encoder",
        choices=sorted(ENCODERS),
        default="minilm",
        help="whose vectors the store holds (their width and name) and which model encodes "
        "the questions: minilm (384-d) or mpnet (768-d)",
    )
    parser.add_argument("--batch", type=int, default=500, help="documents per write batch")
    parser.add_argument(
        "--reembed",
        action="store_true",
        help="build a store of another width than MiniLM's by re-encoding the cached MiniLM "
        "store of that size (Memory.reembed, random vectors): minutes instead of an hour at 1M",
    )
    parser.add_argument("--build-only", action="store_true", help="build the stores and stop")
    parser.add_argument(
        "--modes", nargs="+", default=["default", "one thread"], choices=["default", "one thread"]
    )
    parser.add_argument(
        "--compare-src",
        type=Path,
        help="also measure the mempp package under this src/ folder (e.g. main's), same run",
    )
    parser.add_argument(
        "--encoders",
        nargs="+",
        metavar="NAME",
        help="measure each mode once per question encoder, taking turns in one run "
        "(e.g. minilm-numpy minilm; MEMPP_ENCODER in the child processes); default: the "
        "library's default encoder",
    )
    parser.add_argument(
        "--keep-saved",
        action="store_true",
        help="keep the BM25 replica saved beside the file and skip the first-warm() run "
        "(which deletes it and builds it again: minutes at 1M)",
    )
    parser.add_argument(
        "--ingest-probe",
        type=int,
        default=0,
        metavar="N",
        help="instead of searching: add N new documents to a copy of each store and compare "
        "the store's time with the real encoder's on the same texts",
    )
    parser.add_argument(
        "--filtered-queries",
        type=int,
        default=10,
        metavar="N",
        help="filtered searches per filter (author, known_at, tag); 0 skips them",
    )
    parser.add_argument(
        "--presets",
        nargs="+",
        metavar="SPEC",
        help="measure Memory.search under each of these settings in turn, a preset or "
        "preset+setting=value as the bench names them (e.g. default chat); default: the "
        "Memory's own settings",
    )
    parser.add_argument("--preset", help=argparse.SUPPRESS)  # one child's
    parser.add_argument("--child", choices=("cold", "warm", "measure"), help=argparse.SUPPRESS)
    parser.add_argument("--path", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--question", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child == "cold":  # the question comes from the parent: the corpus takes seconds
        print(json.dumps(measure_cold(args.path, args.question, args.encoder)))
        return
    if args.child == "warm":
        print(json.dumps(measure_warm(args.path, args.encoder)))
        return
    if args.child == "measure":
        print(
            json.dumps(
                measure(
                    args.path,
                    args.queries,
                    args.seed,
                    args.filtered_queries,
                    args.encoder,
                    args.preset,
                )
            )
        )
        return
    for size in args.sizes:
        built = build(args.cache, size, args.seed, args.batch, args.encoder, args.reembed)
        if args.build_only:
            print(f"N = {size:,}: {json.dumps(built)}")
            continue
        path = store_path(args.cache, size, args.seed, args.encoder)
        if args.ingest_probe:
            probe = probe_ingest(path, args.seed, args.ingest_probe, args.batch, args.encoder)
            print(
                f"N = {size:,}: ingest probe " + ", ".join(f"{k} {v:.2f}" for k, v in probe.items())
            )
            continue
        common = [
            *("--seed", str(args.seed), "--queries", str(args.queries)),
            *("--encoder", args.encoder),
            *("--filtered-queries", str(args.filtered_queries)),
        ]
        runs = {}
        sources: dict[str, Path | None] = {"": None}
        if args.compare_src is not None:
            sources = {f"{args.compare_src}, ": args.compare_src, "this checkout, ": None}
        for prefix, source in sources.items():
            where = working_copy(path, "compared" if source else "checkout")
            try:
                runs.update(measure_source(where, prefix, source, common, args))
            finally:
                for end in ("", *SAVED_ENDS, "-wal", "-shm"):
                    Path(f"{where}{end}").unlink(missing_ok=True)
        report(size, built, path.stat().st_size / 2**30, runs)


if __name__ == "__main__":
    main()
