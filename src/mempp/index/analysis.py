"""The one analysis of text into terms that both engines use: SQLite FTS5's own tokenizer.

SQLite indexes records with FTS5 (``porter unicode61 remove_diacritics 2``): Unicode letters,
digits and private-use characters form tokens, everything else separates them; tokens are
case-folded, stripped of diacritics and Porter-stemmed. PostgreSQL's ``to_tsvector`` analyses
differently (Snowball stemming, stop words dropped, no diacritic folding, URLs and versions
kept whole), so the same record used to get other terms, and the same question other
rankings, on the two engines. Rather than write a second implementation of FTS5's tokenizer
and hope it agrees (its Unicode tables and Porter variant have their own history), this module
*runs* FTS5's tokenizer, in an in-memory SQLite database, and hands its tokens to PostgreSQL:
PostgreSQL stores them (``records.terms``) and builds its ``tsvector`` from them, never from
its own parser. Equality with SQLite is then by construction, for the SQLite library this
process loads.

``analyze`` gives each text's tokens in order (FTS5's offsets 0, 1, 2, ...): a row's term
frequencies, its length for BM25, and the positions phrases are matched on.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence

# The tokenizer of SQLite's full-text table, and so of every term either engine stores.
FTS_TOKENIZE = "porter unicode61 remove_diacritics 2"

# Whitespace-separated chunks analysed per round of the scratch table.
_ROUND_CHUNKS = 2000
# Chunks whose tokens are remembered; the cache is emptied when it is full.
_CACHE_CHUNKS = 200_000

_local = threading.local()
# One cache per process (threads share it): a server's thread pool would otherwise fill one
# each, some 40 MB apiece.
_cache: dict[str, tuple[str, ...]] = {}
_cache_lock = threading.Lock()


def _scratch() -> sqlite3.Connection:
    """This thread's in-memory database with an empty contentless FTS5 table of the shared
    tokenizer and its instance vocabulary (every token, its row and offset)."""
    conn: sqlite3.Connection | None = getattr(_local, "conn", None)
    if conn is None:
        conn = sqlite3.connect(":memory:", check_same_thread=False)
        conn.execute(
            f"CREATE VIRTUAL TABLE analysed USING fts5(text, content='', tokenize='{FTS_TOKENIZE}')"
        )
        conn.execute("CREATE VIRTUAL TABLE analysed_tokens USING fts5vocab(analysed, instance)")
        _local.conn = conn
    return conn


def analyze(texts: Sequence[str]) -> list[list[str]]:
    """Each text's tokens, in text order, exactly as FTS5 indexes them.

    Every whitespace character is a separator to unicode61, so no token spans two
    whitespace-separated chunks and a text's tokens are its chunks' tokens in turn. Chunks
    repeat (words, with their punctuation), so each distinct one goes through FTS5 once
    (reading FTS5's token list costs some 3 us a token, 30 times its tokenizing)."""
    split = [text.split() for text in texts]
    distinct = {chunk: None for chunks in split for chunk in chunks}
    with _cache_lock:
        known = {chunk: _cache[chunk] for chunk in distinct if chunk in _cache}
    missing = [chunk for chunk in distinct if chunk not in known]
    if missing:
        conn = _scratch()
        for start in range(0, len(missing), _ROUND_CHUNKS):
            _analyze_round(conn, missing[start : start + _ROUND_CHUNKS], known)
        with _cache_lock:
            if len(_cache) + len(missing) > _CACHE_CHUNKS:
                _cache.clear()
            _cache.update((chunk, known[chunk]) for chunk in missing)
    out = []
    for chunks in split:
        tokens: list[str] = []
        for chunk in chunks:
            tokens.extend(known[chunk])
        out.append(tokens)
    return out


def _analyze_round(
    conn: sqlite3.Connection, chunks: list[str], cache: dict[str, tuple[str, ...]]
) -> None:
    found: list[list[tuple[int, str]]] = [[] for _ in chunks]
    try:
        conn.executemany(
            "INSERT INTO analysed (rowid, text) VALUES (?, ?)",
            ((number, chunk) for number, chunk in enumerate(chunks, start=1)),
        )
        for term, doc, offset in conn.execute("SELECT term, doc, offset FROM analysed_tokens"):
            found[doc - 1].append((offset, term))
    finally:
        conn.execute("INSERT INTO analysed (analysed) VALUES ('delete-all')")
    for chunk, tokens in zip(chunks, found, strict=True):
        cache[chunk] = tuple(term for _, term in sorted(tokens))


def terms_of(texts: Sequence[str]) -> list[str]:
    """Each text's tokens as PostgreSQL's ``records.terms`` holds them: joined by single
    spaces (no token holds one: unicode61 splits on every space separator)."""
    return [" ".join(tokens) for tokens in analyze(texts)]


def first_per_key(items: Sequence[str], keys: Sequence[tuple[str, ...]]) -> tuple[str, ...]:
    """The first of ``items`` with each key (its analysed tokens), in order: query words that
    analyse alike are one term, as FTS5 keeps one term per stem."""
    seen: set[tuple[str, ...]] = set()
    kept = []
    for item, key in zip(items, keys, strict=True):
        if key not in seen:
            seen.add(key)
            kept.append(item)
    return tuple(kept)
