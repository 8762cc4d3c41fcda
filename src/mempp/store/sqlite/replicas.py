"""The SQLite engine's in-RAM copies of its file, which the legs search instead of SQL where
they are faster: the vector index (int8 scan copy, saved beside the file as
``<db>-vectors.arrays``), the BM25 replica (``<db>-bm25.arrays``) and the tag postings
(``<db>-tags.arrays``). Each is loaded (the saved files mapped, not read) or built once,
caught up from the newest id it holds, and dropped when an erasure makes it stale; ``warm()``
readies all three. A saved file that is damaged, truncated or another database's is refused
with one logged warning naming it (``mempp.store``) and built again from the database."""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from mempp.errors import StoreError
from mempp.index.bm25 import Bm25Index, flat_postings, postings_from_groups
from mempp.index.tags import TagPostings
from mempp.index.vectors import ExactVectorIndex
from mempp.store.sqlite.exact_file import EXACT_FILE_SUFFIX, ExactFile
from mempp.store.sqlite.records import _RecordsMixin
from mempp.store.sqlite.schema import (
    BM25_FILE_SUFFIX,
    BM25_LEGACY_SUFFIX,
    BUSY_TIMEOUT_S,
    FTS_TOKENIZE,
    TAGS_FILE_SUFFIX,
    _ClosedConnection,
)
from mempp.store.sqlite.stale_copy import discard_unless, label_matches
from mempp.store.sqlite.vector_file import (
    STALE_SHARE,
    VECTOR_FILE_MIN_ROWS,
    VECTOR_FILE_SUFFIX,
    fingerprint,
)
from mempp.store.sqlite.vector_file import discard_stale as discard_stale_vectors
from mempp.store.sqlite.vector_file import load as load_vector_index
from mempp.store.sqlite.vector_file import save as save_vector_index

# The BM25 replica is saved beside the database as <file>-bm25.arrays and loaded next time if it
# still describes the file; it is rebuilt once the rows added since outnumber an eighth of it
# (they are tokenised one by one at catch-up, the build reads FTS5's postings in bulk).
_BM25_STALE_SHARE = 8

log = logging.getLogger("mempp.store")


def _refused(reason: str, what: str) -> None:
    log.warning("%s; building %s again from the database", reason, what)


def _fingerprint(conn: sqlite3.Connection, max_id: int) -> str | None:
    """What a saved replica covers: its newest id and that row's text hash (ids are never
    reused in one file, so another database at the same path will not match)."""
    row = conn.execute(
        """SELECT hex(text_hash), (SELECT count(*) FROM redactions)
           FROM records WHERE id = ?""",
        (max_id,),
    ).fetchone()
    # An erasure takes a row out of the full-text index: a replica saved before it is stale.
    return None if row is None else f"{max_id}:{row[0]}:{row[1]}"


def _bm25_from_fts5(conn: sqlite3.Connection) -> Bm25Index:
    conn.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.mempp_postings "
        "USING fts5vocab(main, records_fts, instance)"
    )
    conn.execute("BEGIN")  # one snapshot for postings and row counts
    try:
        # Every row has its full-text entry (a redacted one an empty entry, schema 10), and
        # FTS5 counts each of them.
        max_id, rows = conn.execute("SELECT coalesce(max(id), 0), count(*) FROM records").fetchone()
        grouped = conn.execute(
            "SELECT term, group_concat(doc) FROM temp.mempp_postings GROUP BY term"
        )
        bm25 = Bm25Index.from_flat(flat_postings(grouped), rows, max_id)
        bm25.label = _fingerprint(conn, max_id) or ""
    finally:
        conn.execute("COMMIT")
    return bm25


def _saved_bm25(conn: sqlite3.Connection, path: Path) -> Bm25Index | None:
    """The replica saved at ``path`` if it describes this file and is fresh enough."""
    if not path.exists():
        return None
    try:
        bm25 = Bm25Index.load(path)
    except ValueError as error:  # damaged, truncated, another layout: rebuilt, saved again
        _refused(str(error), "the BM25 replica")
        return None
    covered, total = conn.execute(
        "SELECT count(*) FILTER (WHERE id <= ?), count(*) FROM records", (bm25.max_id,)
    ).fetchone()
    if bm25.label != _fingerprint(conn, bm25.max_id) or covered != bm25.rows:
        _refused(f"{path}: saved for other rows than the database holds", "the BM25 replica")
        return None
    if (total - covered) * _BM25_STALE_SHARE > max(bm25.rows, 1):
        return None
    return bm25


# Rows per fetch when loading vectors into the in-RAM index.
_LOAD_CHUNK = 20_000

# The tag leg's postings (mempp.index.tags) are read on the searching connection below this
# many rows (0.1 s at 100k), else in a thread of their own while SQL serves (1 s at 1M). Rows
# added since are looked up per search for the asked labels only (one index seek each); the
# postings are read afresh once those outnumber an eighth of them (or this many rows).
_TAGS_SYNC_ROWS = 100_000
_TAGS_TAIL_ROWS = 20_000
# Postings read in a thread are saved beside the file from this many rows on (a store that
# reads them on the searching connection does not need the file).
TAGS_FILE_MIN_ROWS = _TAGS_SYNC_ROWS


def _open_read_only(location: str) -> sqlite3.Connection:
    # Read-only: if the store is closed and its file moved meanwhile, this must not create an
    # empty database in its place.
    return sqlite3.connect(
        f"file:{urllib.parse.quote(location)}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S
    )


def _tag_postings_from_sql(conn: sqlite3.Connection) -> TagPostings:
    """Every label's ids from ``record_tags`` in one snapshot, labelled with the rows they
    cover (``vector_file.fingerprint``, or ``"::<erasures>"`` for an empty store), whose last
    field is the number of erasures then (an erasure deletes tag rows: postings read before
    it are stale)."""
    conn.execute("BEGIN")
    try:
        max_id, redactions = conn.execute(
            "SELECT coalesce(max(id), 0), (SELECT count(*) FROM redactions) FROM records"
        ).fetchone()
        groups = conn.execute(
            """SELECT label, group_concat(record_id) FROM record_tags WHERE record_id <= ?
               GROUP BY label""",
            (max_id,),
        )
        postings = TagPostings.from_groups(groups, max_id)
        postings.label = fingerprint(conn, max_id) or f"::{redactions}:"
    finally:
        conn.execute("COMMIT")
    return postings


def _erasures_seen(replica: TagPostings | Bm25Index) -> str:
    """The number of erasures when ``replica`` was read: the third field of its label
    (``fingerprint``, ``_fingerprint``, or ``"::<erasures>:"`` for an empty store)."""
    parts = replica.label.split(":")
    return parts[2] if len(parts) >= 3 else ""


def _saved_tags(conn: sqlite3.Connection, path: Path) -> TagPostings | None:
    """The postings saved at ``path`` if they describe this file and are fresh enough (as
    ``_tags_ready`` judges them), else None (read from SQL)."""
    if not path.exists():
        return None
    try:
        postings = TagPostings.load(path)
    except ValueError as error:  # damaged, truncated, another layout
        _refused(str(error), "the tag postings")
        return None
    conn.execute("BEGIN")
    try:
        newest = conn.execute("SELECT coalesce(max(id), 0) FROM records").fetchone()[0]
        current = fingerprint(conn, postings.max_id)
    finally:
        conn.execute("COMMIT")
    if postings.label != current:
        _refused(f"{path}: saved for other rows than the database holds", "the tag postings")
        return None
    if (newest - postings.max_id) * 8 > max(len(postings), _TAGS_TAIL_ROWS):
        return None  # too far behind: read afresh (and saved again)
    return postings


# Above this share of the rows, candidates are checked against a mask of every id (one pass
# over the rows) instead of looked up one by one (a binary search each): a disjunctive query
# with a common word has most of a large store as candidates (measured at 1M: 27 -> 8 ms).
_DENSE_ELIGIBLE_SHARE = 16


def _eligible(
    index: ExactVectorIndex,
    ids: np.ndarray,
    scope: str,
    as_of: int | None,
    allowed: np.ndarray | None,
) -> np.ndarray:
    """The vector index's eligibility mask over ``ids`` (which are known rows' ids or not)."""
    if len(ids) * _DENSE_ELIGIBLE_SHARE <= len(index):
        return index.eligible(ids, scope, as_of, allowed)
    dense = index.eligible_by_id(scope, as_of, allowed)
    inside = ids < len(dense)
    if bool(inside.all()):
        return dense[ids]
    mask = np.zeros(len(ids), dtype=bool)
    mask[inside] = dense[ids[inside]]
    return mask


class _ReplicasMixin(_RecordsMixin):
    """Loads, catches up, saves and drops the in-RAM copies the legs search."""

    def warm(self, scope: str) -> None:
        # The vectors and the bm25 replica cover every scope of the file at once.
        with self._lock:
            if (
                self._bm25 is None
                and self._bm25_thread is None
                and self.location != ":memory:"
                and any(
                    Path(f"{self.location}{suffix}").exists()
                    for suffix in (BM25_FILE_SUFFIX, BM25_LEGACY_SUFFIX)
                )
            ):
                self._start_bm25_build()  # a saved replica loads while the vectors do
            self._start_tag_postings()  # read beside the vectors' load
            self._vector_index()
            self._bm25_ready()  # on a large store, starts the replica's build
            building = self._bm25_thread
            tags_building = self._tags_thread
        for thread in (building, tags_building):
            if thread is not None:
                thread.join()  # outside the lock: searches go on (through SQL) meanwhile
        with self._lock:
            self._bm25_ready()
            if (index := self._vector_index()) is not None:
                self._tags_ready(index)
        self._context_index()  # type: ignore[attr-defined]  # the context leg's copy (if on)

    # -- the in-RAM tag postings --------------------------------------------------------
    def _tags_ready(self, index: ExactVectorIndex) -> TagPostings | None:
        """The tag postings if they are current enough to serve (the caller holds the lock);
        reads them now on a small store, else starts reading them in a thread."""
        if self._tags_built is not None:
            self._tags, self._tags_built, self._tags_thread = self._tags_built, None, None
        postings = self._tags
        if postings is not None:
            erased = self._conn.execute("SELECT count(*) FROM redactions").fetchone()[0]
            if _erasures_seen(postings) != str(erased):
                postings = self._tags = None  # an erasure took labels away since
            elif (index.max_id - postings.max_id) * 8 > max(len(postings), _TAGS_TAIL_ROWS):
                self._start_tag_postings()  # served with the per-search tail until then
        if postings is None:
            if self.location == ":memory:" or len(index) < _TAGS_SYNC_ROWS:
                postings = self._tags = _tag_postings_from_sql(self._conn)
            else:
                self._start_tag_postings()
        return postings

    def _start_tag_postings(self) -> None:
        if self.location == ":memory:" or self._tags_thread is not None:
            return
        self._tags_thread = threading.Thread(
            target=self._read_tag_postings, name="mempp-tags", daemon=True
        )
        self._tags_thread.start()

    tags_file_min_rows = TAGS_FILE_MIN_ROWS

    def _read_tag_postings(self) -> None:
        """Load the postings saved beside the file, or read them from SQL and save them there
        once the store is large enough (runs in a thread, on a connection of its own)."""
        saved = Path(f"{self.location}{TAGS_FILE_SUFFIX}")

        def build(conn: sqlite3.Connection) -> TagPostings:
            postings = _saved_tags(conn, saved)
            if postings is None:
                postings = _tag_postings_from_sql(conn)
                if postings.max_id >= max(self.tags_file_min_rows, 1):
                    with contextlib.suppress(OSError):  # a read-only folder: read next time
                        postings.save(saved)
                        discard_unless(saved, label_matches(conn, fingerprint, key="label"))
            return postings

        self._build_aside(build, "_tags_built")

    def _build_aside(self, build: Callable[[sqlite3.Connection], object], into: str) -> None:
        """Run ``build`` on a read-only connection of its own (in a replica's thread) and
        keep its result in attribute ``into`` for the next search to adopt, unless the store
        was closed meanwhile (nobody would free it). On a database error the searches stay
        on SQL, which is always correct."""
        try:
            conn = _open_read_only(self.location)
            try:
                built = build(conn)
            finally:
                conn.close()
        except sqlite3.Error:
            return
        with self._lock:
            if not isinstance(self._conn, _ClosedConnection):
                setattr(self, into, built)

    # -- the in-RAM bm25 replica -------------------------------------------------------
    def _bm25_ready(self) -> Bm25Index | None:
        """The caught-up bm25 replica; starts building it once the store is large enough (a
        store in memory only has one once a search of several scopes read it, ``tenants``)."""
        index = self._vector_index()
        if index is None:
            return None
        if self._bm25 is None and self._bm25_built is not None:
            self._bm25, self._bm25_built = self._bm25_built, None
        if self._bm25 is not None and _erasures_seen(self._bm25) != str(self._erasures_applied):
            # Read before an erasure (here or through another store object): read again,
            # by a new thread (the one that read it is done: it set what was adopted).
            self._bm25 = self._bm25_thread = None
        if self._bm25 is None:
            if (
                self._bm25_thread is None
                and self.location != ":memory:"
                and len(index) >= self.bm25_min_rows
            ):
                self._start_bm25_build()
            return None
        if self._bm25.max_id < index.max_id:
            self._bm25_catch_up(self._bm25)
        return self._bm25

    def _start_bm25_build(self) -> None:
        self._bm25_thread = threading.Thread(
            target=self._build_bm25, name="mempp-bm25", daemon=True
        )
        self._bm25_thread.start()

    def _build_bm25(self) -> None:
        """``_bm25_of_file`` in a thread, on a connection of its own."""
        self._build_aside(self._bm25_of_file, "_bm25_built")

    def _bm25_of_file(self, conn: sqlite3.Connection) -> Bm25Index:
        """Load the replica saved beside the file, or read FTS5's postings once and save them
        there (in memory: read them)."""
        if self.location == ":memory:":
            return _bm25_from_fts5(conn)
        saved = Path(f"{self.location}{BM25_FILE_SUFFIX}")
        bm25 = _saved_bm25(conn, saved)
        if bm25 is None:
            # An earlier mempp's .npz is read once and saved in today's format.
            legacy = Path(f"{self.location}{BM25_LEGACY_SUFFIX}")
            bm25 = _saved_bm25(conn, legacy)
            if bm25 is None:
                bm25 = _bm25_from_fts5(conn)
            with contextlib.suppress(OSError):  # a read-only folder: build next time
                bm25.save(saved)
                legacy.unlink(missing_ok=True)
                # Read before an erasure elsewhere that removed the file first (stale_copy).
                discard_unless(saved, label_matches(conn, _fingerprint, key="label"))
        return bm25

    def _bm25_catch_up(self, bm25: Bm25Index) -> None:
        """Tokenise rows added since the replica was built, with FTS5's own tokenizer."""
        rows = self._conn.execute(
            "SELECT id, text FROM records WHERE id > ? ORDER BY id", (bm25.max_id,)
        ).fetchall()
        if not rows:
            return
        self._ensure_tokenizer()
        self._conn.executemany("INSERT INTO temp.mempp_tok (rowid, text) VALUES (?, ?)", rows)
        grouped = self._conn.execute(
            "SELECT term, group_concat(doc) FROM temp.mempp_tok_postings GROUP BY term"
        ).fetchall()
        self._conn.execute("INSERT INTO temp.mempp_tok (mempp_tok) VALUES ('delete-all')")
        bm25.add_postings(postings_from_groups(grouped), len(rows), rows[-1][0])

    def _ensure_tokenizer(self) -> None:
        self._conn.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.mempp_tok USING fts5("
            f"text, content='', tokenize='{FTS_TOKENIZE}')"
        )
        self._conn.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.mempp_tok_postings "
            "USING fts5vocab(temp, mempp_tok, instance)"
        )

    def _fts_tokens(self, terms: Sequence[str]) -> tuple[str, ...] | None:
        """FTS5's token for each query term, or None if some term is not exactly one token."""
        tokens = self._term_tokens(terms)
        if any(len(t) != 1 for t in tokens):
            return None
        return tuple(t[0] for t in tokens)

    def _term_tokens(self, terms: Sequence[str]) -> list[tuple[str, ...]]:
        """The FTS5 tokens of each term, through FTS5's own tokenizer (cached)."""
        if len(self._token_cache) > 50_000:  # bounded; cleared before use, never during
            self._token_cache.clear()
        missing = [t for t in dict.fromkeys(terms) if t not in self._token_cache]
        if missing:
            self._ensure_tokenizer()
            self._conn.executemany(
                "INSERT INTO temp.mempp_tok (rowid, text) VALUES (?, ?)",
                list(enumerate(missing, start=1)),
            )
            found: dict[int, list[str]] = {}
            for term, doc in self._conn.execute(
                "SELECT term, doc FROM temp.mempp_tok_postings ORDER BY doc, offset"
            ):
                found.setdefault(doc, []).append(term)
            self._conn.execute("INSERT INTO temp.mempp_tok (mempp_tok) VALUES ('delete-all')")
            for number, term in enumerate(missing, start=1):
                self._token_cache[term] = tuple(found.get(number, ()))
        return [self._token_cache[t] for t in terms]

    # -- the in-RAM vector index --------------------------------------------------------
    # The index is saved beside the file (vector_file) from this many rows on; rows held
    # when it was last saved (or loaded).
    vector_file_min_rows = VECTOR_FILE_MIN_ROWS
    _vectors_saved = 0
    _index_encoder: tuple[str, int] | None = None  # the encoder whose vectors _index holds
    _erasures_applied: int | None = None  # redactions zeroed in _index (None: not looked yet)

    def _reset_vector_index(self) -> None:
        """Forget the vector index and the float32 rows file (caller holds the lock): their
        vectors are of an encoder the store no longer has."""
        self._index = None
        self._index_encoder = None
        self._erasures_applied = None
        self._filtered.clear()
        self._dirty = True
        if self._exact_file is not None:
            self._exact_file.close()
            self._exact_file = None

    def _stored_vectors(self, ids: np.ndarray) -> np.ndarray:
        """The float32 vectors of rows ``ids``, in that order, read from the database (and
        written to the file of float32 rows beside it, for the next searches)."""
        with self._lock, self._exact_writing() as file:
            rows = self._conn.execute(
                "SELECT id, embedding FROM records WHERE id IN (SELECT value FROM json_each(?))",
                (json.dumps(ids.tolist()),),
            ).fetchall()
            found = dict(rows)
            blob = b"".join(found[i] for i in ids.tolist())
            vectors = np.frombuffer(blob, dtype="<f4").reshape(len(ids), -1)
            if file is not None:
                self._write_exact(file, ids, vectors)
        return vectors

    @contextlib.contextmanager
    def _exact_writing(self) -> Iterator[ExactFile | None]:
        """The file of float32 rows, held for writing (see ``exact_file``), or None."""
        file = self._exact_file
        if file is None:
            yield None
            return
        with file.writing():
            yield file

    def _write_exact(self, file: ExactFile, ids: np.ndarray, vectors: np.ndarray) -> None:
        try:
            file.write(ids, vectors)
        except OSError:  # a full disk or a refusing folder: search on without the file
            self._exact_file = None
            file.close()

    def _vector_index(self) -> ExactVectorIndex | None:
        """Bring the RAM index up to date with the file (cheap when nothing changed)."""
        with self._lock:
            data_version = self._conn.execute("PRAGMA data_version").fetchone()[0]
            if (
                self._index is not None
                and not self._dirty
                and data_version == self._seen_data_version
            ):
                return self._index
            encoder = self.encoder()
            if encoder is None:
                return None
            if self._index is not None and self._index_encoder != encoder:
                self._reset_vector_index()  # re-encoded (mempp reembed) since it was loaded
            if self._index is None:
                self._index = self._open_vector_index(encoder)
                self._index_encoder = encoder
            index = self._index
            held, held_max = len(index), index.max_id  # rows loaded now bring their own state
            label = erasures = None  # the erasure count the label was read at, if one is due
            self._conn.execute("BEGIN")  # one consistent snapshot for rows and epoch
            try:
                epoch = self._conn.execute(
                    "SELECT value FROM mempp_meta WHERE key = 'state_epoch'"
                ).fetchone()[0]
                cursor = self._conn.execute(
                    """SELECT id, scope, event_key, state = 'active', embedding FROM records
                       WHERE id > ? ORDER BY id""",
                    (held_max,),
                )
                with self._exact_writing() as file:
                    # In chunks: a million blobs fetched at once peaked at 3x their size.
                    while rows := cursor.fetchmany(_LOAD_CHUNK):
                        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
                        vectors = np.frombuffer(b"".join(r[4] for r in rows), dtype="<f4")
                        vectors = vectors.reshape(len(rows), index.dim)
                        index.append(
                            ids,
                            vectors,
                            (r[1] for r in rows),
                            (r[2] for r in rows),
                            (bool(r[3]) for r in rows),
                        )
                        if file is not None:
                            self._write_exact(file, ids, vectors)
                archived = None
                if epoch != self._seen_state_epoch and held:
                    # The archived ids (a walk of the state index per tenant), not every
                    # row's state: the few that are not active say it all.
                    archived = self._conn.execute(
                        """SELECT id FROM records
                           WHERE scope IN (SELECT value FROM json_each(?))
                             AND state = 'archived'""",
                        (json.dumps(index.scopes),),
                    ).fetchall()
                if self._vector_file_due(index):
                    label = fingerprint(self._conn, index.max_id)
                    erasures = self._conn.execute("SELECT count(*) FROM redactions").fetchone()[0]
            finally:
                self._conn.execute("COMMIT")
            if archived is not None:
                index.set_archived(np.fromiter((r[0] for r in archived), dtype=np.int64))
            erased = self._erase_others(index)  # after the commit, whatever is due
            if label is not None and erased != erasures:
                label = None  # read before an erasure since: saved once caught up again
            self._seen_state_epoch = epoch
            self._seen_data_version = data_version
            self._dirty = False
            if label is not None:
                self._save_vector_index(index, encoder, label)
            return index

    def _erase_others(self, index: ExactVectorIndex) -> int:
        """Zero in ``index`` the rows erased since it last looked, by this store object or
        another one on the file (in this process or another), read after the caller's
        commit: the rows it just read may predate an erasure committed meanwhile. The number
        of erasures, which ``_bm25_ready`` also compares its replica's with (caller holds the
        lock)."""
        erasures = self._conn.execute("SELECT count(*) FROM redactions").fetchone()[0]
        if erasures != self._erasures_applied:
            if erasures:
                erased = self._conn.execute("SELECT record_id FROM redactions").fetchall()
                index.erase(np.fromiter((r[0] for r in erased), dtype=np.int64))
            self._erasures_applied = erasures
        return erasures

    def _vector_file_due(self, index: ExactVectorIndex) -> bool:
        """Whether to save the index: large enough, and never saved or an eighth larger."""
        grown = len(index) - self._vectors_saved
        return (
            self._vector_file() is not None
            and len(index) >= max(self.vector_file_min_rows, 1)
            and grown * STALE_SHARE > self._vectors_saved
        )

    def _vector_file(self) -> Path | None:
        return None if self.location == ":memory:" else Path(self.location + VECTOR_FILE_SUFFIX)

    def _open_exact_file(self, dim: int) -> ExactFile | None:
        """The file of float32 rows beside the database, erased rows zeroed (caller holds
        the lock; the database is not in memory)."""
        erased = [row[0] for row in self._conn.execute("SELECT record_id FROM redactions")]
        return ExactFile.open(Path(self.location + EXACT_FILE_SUFFIX), dim, erased)

    def _open_vector_index(self, encoder: tuple[str, int]) -> ExactVectorIndex:
        """The index saved beside the file if it is this file's (its states as of the epoch
        it was saved at, which the caller compares), else an empty one (caller holds the
        lock)."""
        path = self._vector_file()
        if path is not None and self._exact_file is None:
            self._exact_file = self._open_exact_file(encoder[1])
        quick = None if self._exact_file is None else self._exact_file.read
        loaded = None
        if path is not None and path.exists():
            loaded = load_vector_index(self._conn, path, encoder, self._stored_vectors, quick)
        if loaded is None:
            self._vectors_saved = 0
            return ExactVectorIndex(encoder[1], exact_rows=self._stored_vectors, quick_rows=quick)
        index, self._seen_state_epoch = loaded
        self._vectors_saved = len(index)
        return index

    def _save_vector_index(
        self, index: ExactVectorIndex, encoder: tuple[str, int], label: str
    ) -> None:
        """Save the index beside the file (caller holds the lock; the index's states are
        those of ``_seen_state_epoch``); a folder that refuses it only costs the next process
        a load from SQLite."""
        path = self._vector_file()
        assert path is not None
        self._vectors_saved = len(index)  # a refused save is not retried on every write
        with contextlib.suppress(OSError):
            save_vector_index(path, index, encoder, label, self._seen_state_epoch)
            # An erasure elsewhere since this snapshot removed the file before this one
            # took its place, or finds it in place after: this check or the erasure's.
            discard_stale_vectors(self._conn, path)

    def _erase_vectors(self, ids: Sequence[int]) -> None:
        """After an erasure: the rows' quantised copies leave the in-RAM index and the file
        beside the database (rewritten from the index when one is held, else removed), and
        their float32 rows the file of those. ``StoreError`` naming each file that still
        holds them, once both were tried."""
        with self._lock:
            index = self._index
            if index is not None:
                index.erase(np.asarray(ids, dtype=np.int64))
            if self._vector_file() is None:
                return
            failures = []
            for erase in (self._erase_scan_copy, self._erase_exact_rows):
                try:
                    erase(ids)
                except StoreError as exc:
                    failures.append(str(exc))
            if failures:
                raise StoreError("; ".join(failures))

    def _erase_scan_copy(self, ids: Sequence[int]) -> None:
        """Remove the vector file, then save it again from the index when one is held (its
        erased rows already zeroed). Caller holds the lock."""
        path = self._vector_file()
        assert path is not None
        try:
            path.unlink(missing_ok=True)  # first: gone even if the rewrite fails
        except OSError as exc:
            raise StoreError(
                f"{path}: holds a copy of the erased vectors and could not be removed "
                f"({exc.strerror}); delete it by hand"
            ) from None
        index = self._index
        encoder = self.encoder()
        if index is None or encoder is None or len(index) < max(self.vector_file_min_rows, 1):
            return
        self._conn.execute("BEGIN")
        try:
            label = fingerprint(self._conn, index.max_id)
        finally:
            self._conn.execute("COMMIT")
        if label is not None:
            self._save_vector_index(index, encoder, label)

    def _erase_exact_rows(self, ids: Sequence[int]) -> None:
        """Zero the erased rows in the file of float32 rows (opening it zeroes every erased
        row), or remove the file (caller holds the lock)."""
        path = Path(self.location + EXACT_FILE_SUFFIX)
        file = self._exact_file
        try:
            if file is not None:
                file.zero(ids)
                return
            encoder = self.encoder()
            if not path.exists() or encoder is None:
                return
            opened = self._open_exact_file(encoder[1])
            if opened is not None:
                opened.close()
                return
        except OSError:
            pass
        self._exact_file = None
        if file is not None:
            file.close()
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise StoreError(
                f"{path}: holds a copy of the erased vectors and could not be removed "
                f"({exc.strerror}); delete it by hand"
            ) from None
