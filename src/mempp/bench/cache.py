"""Ingest a benchmark once per (data, encoder) into a persistent store, and reuse it.

Encoding is the slow part of a run (LoCoMo's ~5.9k turns take tens of seconds with the numpy
encoder), while retrieval over a finished store takes seconds. So the store is written to
``<cache>/<benchmark>-<key>/store.db`` where ``key`` hashes the dataset files, the loaded items
(text, author, date, scope, id: any loader change gives a new key), the encoder's name and
size and this cache's format. It is built in a temporary folder and renamed into place when
complete, so an interrupted ingest is never reused. RAG chunk vectors and question vectors
are cached next to it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mempp.bench.datasets import Benchmark, files_digest
from mempp.encoders import Embedder
from mempp.errors import InvalidInput, StoreError
from mempp.memory import Memory
from mempp.records import Document, Record
from mempp.store import Store, open_store

CACHE_FORMAT = 3  # 2: records carry the item's thread; 3: dedupe by author, text and date
DEFAULT_CACHE = Path(".mempp-cache")
STORE_FILE = "store.db"
MANIFEST = "manifest.json"
BATCH = 64


def items_digest(benchmark: Benchmark) -> str:
    digest = hashlib.sha256()
    for item in benchmark.items:
        row = [item.scope, item.id, item.text, item.author, item.date]
        digest.update(json.dumps(row, ensure_ascii=False).encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


def cache_key(benchmark: Benchmark, embedder: Embedder) -> str:
    material = {
        "format": CACHE_FORMAT,
        "benchmark": benchmark.name,
        "files": files_digest(benchmark.files),
        "items": items_digest(benchmark),
        "encoder": [embedder.name, embedder.dim],
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


@dataclass(slots=True)
class IngestedStore:
    """Where the store is and which record stands for which benchmark item.

    ``record_items[record id]`` lists the item ids a record stands for: normally one, more when
    the write path skipped a later item as an exact duplicate of it (same scope, author, text
    and event date).
    Items that stored nothing (empty text) have no record and can never be retrieved.
    """

    path: Path
    key: str
    record_items: dict[int, tuple[str, ...]]
    item_record: dict[tuple[str, str], int | None]
    stats: dict[str, Any] = field(default_factory=dict)


def _manifest(directory: Path) -> dict[str, Any] | None:
    try:
        return json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _from_manifest(directory: Path, manifest: dict[str, Any]) -> IngestedStore:
    item_record: dict[tuple[str, str], int | None] = {}
    record_items: dict[int, list[str]] = {}
    for scope, item, record in manifest["mapping"]:
        item_record[(scope, item)] = record
        if record is not None:
            record_items.setdefault(record, []).append(item)
    return IngestedStore(
        directory / STORE_FILE,
        manifest["key"],
        {record: tuple(items) for record, items in record_items.items()},
        item_record,
        dict(manifest["stats"], reused=True),
    )


def ingest(
    benchmark: Benchmark, embedder: Embedder, cache_dir: Path, *, progress: bool = True
) -> IngestedStore:
    """The benchmark's store under ``cache_dir``: reused when complete, else built now."""
    key = cache_key(benchmark, embedder)
    final = cache_dir / f"{benchmark.name}-{key[:16]}"
    manifest = _manifest(final)
    if manifest and manifest.get("key") == key and (final / STORE_FILE).is_file():
        return _from_manifest(final, manifest)
    cache_dir.mkdir(parents=True, exist_ok=True)
    building = cache_dir / f".{final.name}.building-{os.getpid()}"
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir()
    started = time.perf_counter()
    mapping, counts = _write(benchmark, embedder, building / STORE_FILE, progress)
    stats = {
        "seconds": round(time.perf_counter() - started, 3),
        "items": len(benchmark.items),
        **counts,
        "encoder": embedder.name,
    }
    manifest = {
        "format": CACHE_FORMAT,
        "key": key,
        "benchmark": benchmark.name,
        "encoder": [embedder.name, embedder.dim],
        "stats": stats,
        "mapping": mapping,
    }
    (building / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    if final.exists():  # a stale or concurrent build: keep the newest complete one
        shutil.rmtree(final, ignore_errors=True)
    os.replace(building, final)
    result = _from_manifest(final, manifest)
    result.stats["reused"] = False
    return result


def _write(
    benchmark: Benchmark, embedder: Embedder, path: Path, progress: bool
) -> tuple[list[list[Any]], dict[str, int]]:
    from tqdm import tqdm

    mapping: list[list[Any]] = []
    counts = {"added": 0, "duplicate": 0, "empty": 0}
    by_scope: dict[str, list[int]] = {}
    for index, item in enumerate(benchmark.items):
        by_scope.setdefault(item.scope, []).append(index)
    with tqdm(
        total=len(benchmark.items),
        desc=f"ingest {benchmark.name}",
        unit="item",
        file=sys.stderr,
        disable=not progress,
    ) as bar:
        for scope, indexes in by_scope.items():
            items = [benchmark.items[i] for i in indexes]
            docs = [
                Document.create(
                    item.text,
                    author=item.author,
                    date=item.date,
                    source=item.id,
                    thread=item.thread,
                )
                for item in items
            ]
            with Memory(path, scope=scope, embedder=embedder) as memory:
                results = memory.add_many(docs, batch_size=BATCH, progress=bar.update)
            first: dict[tuple[str, str, int | None], int] = {}
            for item, doc, result in zip(items, docs, results, strict=True):
                key = (doc.author or "", doc.text, doc.date.key if doc.date else None)
                record = result.id if result.added else first.get(key)
                if result.added and result.id is not None:
                    first[key] = result.id
                counts["added" if result.added else str(result.skipped)] += 1
                mapping.append([scope, item.id, record])
    return mapping, counts


def _vector_file(directory: Path, name: str, texts: Sequence[str], embedder: Embedder) -> Path:
    digest = hashlib.sha256()
    digest.update(f"{embedder.name}/{embedder.dim}\n".encode())
    for text in texts:
        digest.update(hashlib.sha256(text.encode("utf-8")).digest())
    return directory / f"{name}-{digest.hexdigest()[:16]}.npy"


def _cached(target: Path, texts: Sequence[str], embedder: Embedder) -> np.ndarray | None:
    if target.is_file():
        vectors = np.load(target)
        if vectors.shape == (len(texts), embedder.dim):
            return vectors
    return None


def _save(target: Path, vectors: np.ndarray) -> None:
    partial = target.with_name(f".{target.stem}.{os.getpid()}.npy")
    np.save(partial, vectors)
    os.replace(partial, target)


def chunk_vectors(
    directory: Path,
    name: str,
    texts: Sequence[str],
    embedder: Embedder,
    *,
    progress: bool = True,
) -> np.ndarray:
    """Vectors of ``texts`` (RAG chunks), cached in ``directory/<name>.npy`` by content hash."""
    target = _vector_file(directory, name, texts, embedder)
    cached = _cached(target, texts, embedder)
    if cached is not None:
        return cached
    from tqdm import tqdm

    out = np.empty((len(texts), embedder.dim), dtype=np.float32)
    bar = tqdm(
        total=len(texts), desc=f"embed {name}", unit="chunk", file=sys.stderr, disable=not progress
    )
    with bar:
        for start in range(0, len(texts), BATCH):
            batch = list(texts[start : start + BATCH])
            out[start : start + len(batch)] = embedder.embed(batch)
            bar.update(len(batch))
    _save(target, out)
    return out


def question_vectors(
    directory: Path, texts: Sequence[str], embedder: Embedder, *, progress: bool = True
) -> tuple[np.ndarray, list[float]]:
    """Vectors of the questions, cached like :func:`chunk_vectors`, and the seconds each took
    to encode (empty when they came from the cache).

    Each question is encoded alone, as ``Memory.search`` encodes a query, so a vector is the
    one a user's search would get, and its time is a query's encoding time. With a slow
    encoder (MPNet: about a second a question on a loaded machine) the cache is what makes a
    settings sweep over LoCoMo's questions take seconds instead of half an hour.
    """
    target = _vector_file(directory, "questions", texts, embedder)
    cached = _cached(target, texts, embedder)
    if cached is not None:
        return cached, []
    from tqdm import tqdm

    out = np.empty((len(texts), embedder.dim), dtype=np.float32)
    seconds: list[float] = []
    for row, text in enumerate(
        tqdm(texts, desc="embed questions", unit="q", file=sys.stderr, disable=not progress)
    ):
        tick = time.perf_counter()
        out[row] = embedder.embed([text])[0]
        seconds.append(time.perf_counter() - tick)
    _save(target, out)
    return out, seconds


def copy_store(source: Store, scopes: Sequence[str], location: str) -> Store:
    """The current records of ``scopes`` (with their vectors) written, in id order, to an
    empty store at ``location``, so that every record keeps its id and the item mapping
    still holds. Ingest times are the copy's own: thread order, which falls back on them for
    undated rows, may differ from the source's there. The ids can only match in a store that
    never held a row (append-only stores cannot be emptied): use a new database each time."""
    target = open_store(location)
    try:
        if target.encoder() is not None or any(
            target.count(scope, active_only=False) for scope in scopes
        ):
            raise InvalidInput(f"{target.location} is not empty: the copy needs a fresh store")
        encoder = source.encoder()
        if encoder is not None:
            target.bind_encoder(*encoder)
        by_id: list[tuple[int, str, np.ndarray]] = []
        for scope in scopes:
            ids, vectors = source.current_vectors(scope)
            by_id.extend((int(i), scope, vector) for i, vector in zip(ids, vectors, strict=True))
        by_id.sort(key=lambda row: row[0])
        start = 0
        while start < len(by_id):
            # One batch per run of one scope, as the ingest wrote them.
            stop = start + 1
            while stop < len(by_id) and stop - start < BATCH and by_id[stop][1] == by_id[start][1]:
                stop += 1
            scope = by_id[start][1]
            wanted = [row[0] for row in by_id[start:stop]]
            records = source.get(scope, wanted)
            docs = [_document(records[i]) for i in wanted]
            vectors = np.stack([row[2] for row in by_id[start:stop]])
            got = [result.id for result in target.insert(scope, docs, vectors)]
            if got != wanted:
                raise StoreError(
                    f"{target.location}: copied records got ids {got[:3]}..., not {wanted[:3]}"
                    "...; the copy needs a fresh database"
                )
            start = stop
    except BaseException:
        target.close()
        raise
    return target


def _document(record: Record) -> Document:
    return Document.create(
        record.text,
        author=record.author,
        date=record.date,
        tags=record.tags,
        source=record.source,
        thread=record.thread,
    )
