"""``mempp restore``: a snapshot of ``mempp dump`` (mempp.transfer.dump) back into an EMPTY
store of either engine, id for id.

Two passes over the file. The first checks everything and writes nothing: the chain of
checksums line by line (an altered line breaks at that line, a cut file lacks its end line),
the header (format, a version this mempp reads, the encoder), every line's fields and
types, duplicate ids, and that every id a row names is in the snapshot. The second streams
the rows into the store's ``restore``, ONE transaction: whatever goes wrong, nothing is
written. A refusal is one line naming the line it broke at: ``rec.dump:17: ...``.

A snapshot written without vectors is encoded again on the way in, by an encoder that must
be the one named in the header (its name and dimension).
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mempp.dates import parse_event_date
from mempp.encoders import Embedder
from mempp.errors import EncoderMismatch, InvalidDate, InvalidInput, MemppError, StoreError
from mempp.store.base import SNAPSHOT_KINDS, SnapshotStore, Store
from mempp.store.context import LEGACY_RULE, ContextRule, ContextStore
from mempp.store.indexes import OPTIONAL_INDEXES
from mempp.transfer.dump import FORMAT, VERSION, chain_digest

ENCODE_BATCH = 64
_TAIL = re.compile(r',"c":"([0-9a-f]{64})"\}\n?$')

_INT, _STR, _BOOL, _LIST, _DICT = int, str, bool, list, dict
_OPT_INT, _OPT_STR, _OPT_DICT = (int, type(None)), (str, type(None)), (dict, type(None))
# The fields of each kind of line and the JSON types they may hold (see SnapshotStore).
FIELDS: dict[str, dict[str, Any]] = {
    "record": {
        "id": _INT,
        "scope": _STR,
        "text": _STR,
        "author": _OPT_STR,
        "event_date": _OPT_STR,
        "event_key": _OPT_INT,
        "tags": _LIST,
        "source": _OPT_STR,
        "ingested_at": _STR,
        "ingested_key": _INT,
        "state": _STR,
        "superseded_by": _OPT_INT,
        "thread": _OPT_STR,
        "metadata": _OPT_DICT,
        "labels": _LIST,
        "redacted": _BOOL,
    },
    "run": {
        "id": _INT,
        "scope": _STR,
        "kind": _STR,
        "dry_run": _BOOL,
        "started_at": _STR,
        "finished_at": _OPT_STR,
        "settings": _DICT,
        "counts": _OPT_DICT,
        "undoes": _OPT_INT,
        "undone_by": _OPT_INT,
    },
    "group": {
        "scope": _STR,
        "run_id": _INT,
        "group": _INT,
        "label": _STR,
        "members": _LIST,
        "detail": _OPT_STR,
    },
    "change": {
        "id": _INT,
        "scope": _STR,
        "run_id": _INT,
        "group": _OPT_INT,
        "label": _STR,
        "record_id": _INT,
        "old_state": _OPT_STR,
        "old_superseded_by": _OPT_INT,
        "new_state": _STR,
        "new_superseded_by": _OPT_INT,
        "merged_id": _OPT_INT,
    },
    "redaction": {
        "scope": _STR,
        "record_id": _INT,
        "run_id": _INT,
        "redacted_at": _STR,
        "reason": _STR,
        "actor": _OPT_STR,
    },
    "triple": {
        "id": _INT,
        "scope": _STR,
        "record_id": _INT,
        "subject": _STR,
        "relation": _STR,
        "object": _STR,
        "subject_key": _STR,
        "object_key": _STR,
    },
    "extraction": {
        "scope": _STR,
        "record_id": _INT,
        "extracted_at": _STR,
        "model": _OPT_STR,
        "triples": _INT,
    },
    "key": {
        "key_id": _STR,
        "scope": _STR,
        "role": _STR,
        "label": _OPT_STR,
        "created_at": _STR,
        "revoked_at": _OPT_STR,
        "secret_hash": _STR,
    },
}
_STATES = ("active", "archived")


@dataclass
class Header:
    version: int
    encoder: tuple[str, int] | None
    scopes: list[str] | None
    vectors: bool
    # The optional indexes the source had enabled (none in a snapshot from before them).
    indexes: tuple[str, ...] = ()
    # How the source made its contexts (None: no context index; a snapshot from before the
    # rule was carried made them by LEGACY_RULE).
    context_rule: ContextRule | None = None


@dataclass
class RestoreReport:
    """What a restore wrote, kind by kind, and the scopes it filled."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SNAPSHOT_KINDS, 0))
    scopes: list[str] = field(default_factory=list)
    encoded: int = 0  # records encoded again (a snapshot without vectors)
    indexes: list[str] = field(default_factory=list)  # optional indexes built again

    def summary(self) -> str:
        shown = ", ".join(f"{n} {kind}s" for kind, n in self.counts.items() if n)
        again = f"; {self.encoded} texts encoded again" if self.encoded else ""
        built = f"; rebuilt the {', '.join(self.indexes)} index" if self.indexes else ""
        return f"restored {shown or 'nothing'} into {len(self.scopes)} scopes{again}{built}"

    def to_dict(self) -> dict[str, object]:
        return {
            "counts": dict(self.counts),
            "scopes": self.scopes,
            "encoded": self.encoded,
            "indexes": self.indexes,
        }


class SnapshotError(InvalidInput):
    """A snapshot refused: the message names the file and line."""


def _lines(path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` of each line whose chained checksum holds."""
    shown = os.path.basename(path)
    previous = ""
    number = 0
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            where = f"{shown}:{number}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise SnapshotError(f"{where}: not UTF-8 text (the snapshot was altered)") from None
            if not line.endswith("\n"):
                raise SnapshotError(f"{where}: the line is cut off (the snapshot is truncated)")
            match = _TAIL.search(line)
            if match is None:
                raise SnapshotError(f"{where}: no checksum at the end of the line (altered)")
            body = line[: match.start()] + "}"
            if chain_digest(previous, body) != match.group(1):
                raise SnapshotError(
                    f"{where}: the checksum does not match (the snapshot was altered here, "
                    "or a line before it was removed)"
                )
            previous = match.group(1)
            try:
                value = json.loads(body)
            except ValueError as exc:
                raise SnapshotError(f"{where}: not JSON ({exc})") from None
            if not isinstance(value, dict):
                raise SnapshotError(f"{where}: not a JSON object")
            yield number, value
    if number == 0:
        raise SnapshotError(f"{shown}: empty file, not a mempp dump")


def read_header(path: str) -> Header:
    """The header of the snapshot at ``path`` (line 1), checked."""
    for _number, value in _lines(path):
        return _header(os.path.basename(path), value)
    raise AssertionError("unreachable: _lines raises on an empty file")


def _header(shown: str, value: dict[str, Any]) -> Header:
    where = f"{shown}:1"
    if value.get("format") != FORMAT:
        raise SnapshotError(f'{where}: not a mempp dump (no "format": "{FORMAT}" header)')
    version = value.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise SnapshotError(f"{where}: the header's version is not a positive integer")
    if version > VERSION:
        raise SnapshotError(
            f"{where}: snapshot format version {version} is newer than this mempp reads "
            f"({VERSION}); upgrade mempp to restore it"
        )
    encoder = value.get("encoder")
    bound: tuple[str, int] | None = None
    if encoder is not None:
        if not (
            isinstance(encoder, dict)
            and isinstance(encoder.get("name"), str)
            and isinstance(encoder.get("dim"), int)
            and encoder["dim"] > 0
        ):
            raise SnapshotError(f"{where}: the header's encoder is not {{name, dim}}")
        bound = (encoder["name"], encoder["dim"])
    scopes = value.get("scopes")
    if scopes is not None and not (
        isinstance(scopes, list) and all(isinstance(s, str) for s in scopes)
    ):
        raise SnapshotError(f"{where}: the header's scopes are not a list of names")
    if not isinstance(value.get("vectors"), bool):
        raise SnapshotError(f"{where}: the header does not say whether vectors are included")
    indexes = value.get("indexes", [])
    if not (isinstance(indexes, list) and all(isinstance(name, str) for name in indexes)):
        raise SnapshotError(f"{where}: the header's indexes are not a list of names")
    unknown = sorted(set(indexes) - set(OPTIONAL_INDEXES))
    if unknown:
        raise SnapshotError(
            f"{where}: the header names optional indexes this mempp does not know "
            f"({', '.join(unknown)}); upgrade mempp to restore it"
        )
    rule = value.get("context_rule")
    try:
        context_rule = None if rule is None else ContextRule.from_dict(rule)
        if "context_rule" not in value and "context" in indexes:
            context_rule = LEGACY_RULE  # written before the rule was carried
    except InvalidInput as exc:
        raise SnapshotError(f"{where}: the header's context_rule: {exc}") from None
    return Header(
        version, bound, scopes, value["vectors"], tuple(sorted(set(indexes))), context_rule
    )


def check(path: str) -> tuple[Header, dict[str, int], list[str]]:
    """The first pass: every check a restore makes before it writes. Returns the header, the
    rows of each kind and the scopes; raises ``SnapshotError`` naming the line."""
    shown = os.path.basename(path)
    header: Header | None = None
    counts = dict.fromkeys(SNAPSHOT_KINDS, 0)
    seen: dict[str, set[Any]] = {kind: set() for kind in SNAPSHOT_KINDS}
    pending: list[tuple[int, str, int]] = []  # (line, what, record id) checked at the end
    scopes: set[str] = set()
    order = 0
    ended = False
    last = 0
    for number, value in _lines(path):
        last = number
        where = f"{shown}:{number}"
        if number == 1:
            header = _header(shown, value)
            continue
        assert header is not None
        if ended:
            raise SnapshotError(f"{where}: a line after the end line")
        kind = value.pop("row", None)
        if kind == "end":
            _check_end(where, value, number, counts, scopes)
            ended = True
            continue
        if kind not in FIELDS:
            raise SnapshotError(f"{where}: unknown kind {kind!r}")
        position = SNAPSHOT_KINDS.index(kind)
        if position < order:
            raise SnapshotError(f"{where}: a {kind} line after the {SNAPSHOT_KINDS[order]}s")
        order = position
        _check_fields(where, kind, value, header)
        key = _identity(kind, value)
        if key in seen[kind]:
            raise SnapshotError(f"{where}: duplicate {kind} {key}")
        seen[kind].add(key)
        scopes.add(value["scope"])
        counts[kind] += 1
        for what, ref in _references(kind, value):
            if what == "record" and ref not in seen["record"]:
                pending.append((number, "record", ref))
            elif what == "run" and ref not in seen["run"]:
                pending.append((number, "run", ref))
    if header is None:  # pragma: no cover - _lines raises on an empty file
        raise SnapshotError(f"{shown}: empty file")
    if not ended:
        raise SnapshotError(
            f"{shown}:{last + 1}: the snapshot ends without its end line (truncated after "
            f"line {last})"
        )
    for number, what, ref in pending:
        if ref not in seen[what]:
            raise SnapshotError(f"{shown}:{number}: names {what} {ref}, which is not in it")
    return header, counts, sorted(scopes)


def _check_fields(where: str, kind: str, value: dict[str, Any], header: Header) -> None:
    expected = FIELDS[kind]
    extra = set(value) - set(expected) - ({"vector"} if kind == "record" else set())
    missing = set(expected) - set(value)
    if missing or extra:
        names = ", ".join(sorted(missing)) or ", ".join(sorted(extra))
        raise SnapshotError(
            f"{where}: {kind} line {'lacks' if missing else 'has unknown'} fields {names}"
        )
    for name, types in expected.items():
        item = value[name]
        if isinstance(item, bool) and types is not bool and bool not in _as_tuple(types):
            raise SnapshotError(f"{where}: {kind}.{name} has the wrong type")
        if not isinstance(item, types):
            raise SnapshotError(f"{where}: {kind}.{name} has the wrong type")
        if isinstance(item, str) and "\x00" in item:
            raise SnapshotError(f"{where}: {kind}.{name} contains a NUL character")
    if kind == "record":
        _check_record(where, value, header)
    elif kind == "change":
        for name in ("old_state", "new_state"):
            if value[name] is not None and value[name] not in _STATES:
                raise SnapshotError(f"{where}: change.{name} is not a state")
    elif kind == "run" and value["kind"] not in ("consolidate", "undo"):
        raise SnapshotError(f"{where}: run.kind is not consolidate or undo")
    elif kind == "key":
        if value["role"] not in ("read", "write", "admin"):
            raise SnapshotError(f"{where}: key.role is not read, write or admin")
        try:
            bytes.fromhex(value["secret_hash"])
        except ValueError:
            raise SnapshotError(f"{where}: key.secret_hash is not hex") from None


def _check_record(where: str, value: dict[str, Any], header: Header) -> None:
    if value["state"] not in _STATES:
        raise SnapshotError(f"{where}: record.state is not active or archived")
    if not all(isinstance(t, str) for t in value["tags"] + value["labels"]):
        raise SnapshotError(f"{where}: record tags and labels must be strings")
    if value["event_date"] is not None:
        try:
            parsed = parse_event_date(value["event_date"])
        except InvalidDate:
            raise SnapshotError(f"{where}: record.event_date is not a date") from None
        if parsed is None or parsed.key != value["event_key"]:
            raise SnapshotError(f"{where}: record.event_key does not match its event_date")
    elif value["event_key"] is not None:
        raise SnapshotError(f"{where}: record.event_key without an event_date")
    if value["redacted"] and (value["text"] != "" or value["state"] != "archived"):
        raise SnapshotError(f"{where}: a redacted record must be an archived empty tombstone")
    vector = value.get("vector")
    if header.vectors != (vector is not None):
        raise SnapshotError(
            f"{where}: the header says vectors are {'in' if header.vectors else 'left out'}; "
            "this record disagrees"
        )
    if vector is not None:
        try:
            raw = base64.b64decode(vector, validate=True)
        except ValueError:
            raise SnapshotError(f"{where}: record.vector is not base64") from None
        dim = header.encoder[1] if header.encoder else 0
        if len(raw) != 4 * dim:
            raise SnapshotError(
                f"{where}: record.vector has {len(raw) // 4} dimensions, the encoder {dim}"
            )


def _as_tuple(types: Any) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


def _identity(kind: str, value: dict[str, Any]) -> Any:
    if kind in ("record", "run", "change", "triple"):
        return value["id"]
    if kind == "group":
        return (value["run_id"], value["group"])
    if kind in ("redaction", "extraction"):
        return value["record_id"]
    return value["key_id"]


def _references(kind: str, value: dict[str, Any]) -> Iterator[tuple[str, int]]:
    if kind == "record" and value["superseded_by"] is not None:
        yield "record", value["superseded_by"]
    if kind == "run":
        for name in ("undoes", "undone_by"):
            if value[name] is not None:
                yield "run", value[name]
    if kind in ("group", "change", "redaction"):
        yield "run", value["run_id"]
    if kind in ("change", "redaction", "triple", "extraction"):
        yield "record", value["record_id"]
    if kind == "change":
        for name in ("old_superseded_by", "new_superseded_by", "merged_id"):
            if value[name] is not None:
                yield "record", value[name]


def _check_end(
    where: str, value: dict[str, Any], number: int, counts: dict[str, int], scopes: set[str]
) -> None:
    if value.get("lines") != number:
        counted = value.get("lines")
        raise SnapshotError(f"{where}: the end line counts {counted} lines, not {number}")
    if value.get("counts") != counts:
        raise SnapshotError(f"{where}: the end line's counts differ from the rows read")
    if value.get("scopes") != sorted(scopes):
        raise SnapshotError(f"{where}: the end line's scopes differ from the rows read")


def _decoded(
    path: str, header: Header, embed: Callable[[list[str]], np.ndarray] | None, report: Any
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The second pass: the rows as the store takes them (vectors decoded, or encoded again
    in batches), the chain checked again in case the file changed since the first pass."""
    batch: list[dict[str, Any]] = []

    def flush() -> Iterator[tuple[str, dict[str, Any]]]:
        assert embed is not None and header.encoder is not None
        texts = [row["text"] for row in batch if not row["redacted"]]
        vectors = iter(embed(texts)) if texts else iter(())
        for row in batch:
            if row["redacted"]:
                row["vector"] = np.zeros(header.encoder[1], dtype=np.float32)
            else:
                row["vector"] = np.asarray(next(vectors), dtype=np.float32)
                report.encoded += 1
            yield "record", row
        batch.clear()

    for number, value in _lines(path):
        if number == 1:
            continue
        kind = value.pop("row")
        if kind == "end":
            break
        if kind == "record":
            if "vector" in value:
                raw = base64.b64decode(value.pop("vector"))
                value["vector"] = np.frombuffer(raw, dtype="<f4").astype(np.float32)
                yield kind, value
                continue
            batch.append(value)
            if len(batch) >= ENCODE_BATCH:
                yield from flush()
            continue
        if batch:
            yield from flush()
        if kind == "key":
            value["secret_hash"] = bytes.fromhex(value["secret_hash"])
        yield kind, value
    if batch:
        yield from flush()


def restore_dump(store: Store, path: str, *, embedder: Embedder | None = None) -> RestoreReport:
    """Restore the snapshot at ``path`` into ``store`` (which must be empty). ``embedder``:
    the encoder of the restoring Memory, when one was chosen; it must be the snapshot's.
    A snapshot without vectors needs it, to encode the texts again."""
    if not isinstance(store, SnapshotStore):
        raise StoreError(f"the {type(store).__name__} engine cannot restore a snapshot")
    if not os.path.isfile(path):
        raise InvalidInput(f"no snapshot at {path}")
    header, counts, scopes = check(path)
    shown = f"{os.path.basename(path)}:1"
    wanted = None if embedder is None else (embedder.name, embedder.dim)
    if wanted is not None and header.encoder is not None and wanted != header.encoder:
        raise EncoderMismatch(
            f"{shown}: the snapshot holds vectors of encoder {header.encoder[0]} "
            f"({header.encoder[1]}-d); this Memory uses {wanted[0]} ({wanted[1]}-d)"
        )
    if not header.vectors and counts["record"] and embedder is None:
        raise InvalidInput(
            f"{shown}: the snapshot has no vectors; restoring it needs its encoder "
            f"{header.encoder[0] if header.encoder else '?'} to encode the texts again"
        )
    bound = store.encoder()
    if bound is not None and header.encoder is not None and bound != header.encoder:
        raise EncoderMismatch(
            f"{shown}: the snapshot holds vectors of encoder {header.encoder[0]} "
            f"({header.encoder[1]}-d); {store.location} is bound to {bound[0]} ({bound[1]}-d)"
        )
    if not store.is_empty():
        raise InvalidInput(
            f"{store.location} is not empty: a snapshot restores only into an empty store "
            "(its ids would collide with the store's)"
        )
    report = RestoreReport(scopes=scopes)
    embed = None if embedder is None else (lambda texts: embedder.embed(texts))
    written = store.restore(header.encoder, _decoded(path, header, embed, report))
    report.counts.update(written)
    if report.counts != counts:  # pragma: no cover - the store wrote what it was given
        raise StoreError(f"restore wrote {report.counts}, the snapshot holds {counts}")
    # Derived from the rows just written, so built after them (each in its own transaction).
    for name in header.indexes:
        try:
            if name == "context" and header.context_rule is not None:
                assert isinstance(store, ContextStore)
                store.set_context_rule(header.context_rule)
            store.enable_index(name)
        except MemppError as exc:
            raise StoreError(
                f"restored every row, but the {name} index the snapshot had enabled could not "
                f"be built ({exc}); run `mempp index enable {name}`"
            ) from None
    report.indexes = list(header.indexes)
    return report
