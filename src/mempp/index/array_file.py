"""A file of named numpy arrays with a JSON header and a checksum per array.

The in-RAM indexes save their arrays beside the database so that the next process reads them
back in one pass instead of rebuilding them from SQLite. Layout (little-endian):

    b"MEMPPARR" | header length (uint64) | header (UTF-8 JSON) | its CRC-32 (uint32)
    | arrays, each 64-byte aligned

The header holds the caller's ``meta`` object and, per array, its name, dtype, shape, offset
and CRC-32. ``read`` refuses (``ValueError`` naming the file) anything that does not add up:
another magic, a header that is not this layout's, a size that is not the sum of its parts
(a truncated file), a checksum that differs (a damaged one). Writes go to a temporary file in
the same folder, renamed over the target, so a reader sees the old file or the new one; two
writers never share a temporary file, and nothing ever writes into a file in place.

``read(..., mapped=True)`` maps the file instead of copying it: the arrays are views of a
private, copy-on-write map (writes to them stay in the process), so a load costs one pass
(the checksums) and no copy, processes that map one file share its pages in the OS cache, and
only the pages touched count in the process's resident memory. Since no writer edits a file
in place, a map keeps seeing the file it opened, even once a newer one is renamed over it.
``write(..., pad_rows=n)`` stores every array with ``n`` zero rows after its own: room that
a mapped reader appends into without copying (spare rows of a plain read are allocated).
``read(..., mapped=True, lazy=True)`` then hands the pages its checksums read back to the OS
(``MADV_DONTNEED``: they stay in its page cache, nothing was written to them yet), so the
process's resident memory counts only the pages its searches touch later: for an index whose
searches read a few of its lists (the BM25 postings, the tag postings), not one that every
search scans whole (the vectors' scan copy).
"""

from __future__ import annotations

import json
import mmap
import os
import threading
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import numpy as np

from mempp.private import keep_mode, open_new

MAGIC = b"MEMPPARR"
_ALIGN = 64
_CHUNK = 16 << 20  # bytes per read or checksum step


def write(
    path: str | os.PathLike[str],
    meta: Mapping[str, Any],
    arrays: Mapping[str, np.ndarray],
    pad_rows: int = 0,
) -> None:
    """Write ``arrays`` (at least one dimension each; C-contiguous copies are taken where
    needed), each followed by ``pad_rows`` zero rows that its stored shape counts, and
    ``meta`` (JSON) to ``path`` atomically. ``OSError`` if the folder refuses the temporary
    file."""
    target = Path(path)
    laid_out = {name: np.ascontiguousarray(array) for name, array in arrays.items()}
    if any(array.ndim == 0 or array.dtype.hasobject for array in laid_out.values()):
        raise ValueError("array_file.write: arrays of numbers with at least one dimension")
    if pad_rows < 0:
        raise ValueError("array_file.write: pad_rows must not be negative")
    entries = []
    paddings = []
    offset = 0
    for name, array in laid_out.items():
        offset = -(-offset // _ALIGN) * _ALIGN
        padding = pad_rows * array.dtype.itemsize * int(np.prod(array.shape[1:], dtype=np.int64))
        paddings.append(padding)
        entries.append(
            {
                "name": name,
                "dtype": array.dtype.newbyteorder("<").str,
                "shape": [array.shape[0] + pad_rows, *array.shape[1:]],
                "offset": offset,
                "crc32": _crc(array, padding),
            }
        )
        offset += array.nbytes + padding
    header = json.dumps({"meta": dict(meta), "arrays": entries}).encode("utf-8")
    start = _data_start(len(header))
    partial = target.with_name(f"{target.name}.{os.getpid()}-{threading.get_ident()}.partial")
    try:
        with _create(partial) as out:
            out.write(MAGIC + len(header).to_bytes(8, "little") + header)
            out.write(zlib.crc32(header).to_bytes(4, "little"))
            for entry, array, padding in zip(entries, laid_out.values(), paddings, strict=True):
                out.seek(start + entry["offset"])
                out.write(_bytes(array))
                zeros = bytes(min(_CHUNK, padding))
                for at in range(0, padding, _CHUNK):
                    out.write(zeros[: min(_CHUNK, padding - at)])
            out.truncate(start + offset)
        keep_mode(partial, target)
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def read(
    path: str | os.PathLike[str],
    spare: Callable[[int], int] | None = None,
    *,
    mapped: bool = False,
    lazy: bool = False,
    check: Callable[[dict[str, Any], dict[str, np.ndarray]], None] | None = None,
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The ``meta`` and arrays ``write`` stored, writable: read into RAM, or with ``mapped``
    views of a private map of the file (see the module's note), with ``lazy`` its pages not
    kept resident once checked. ``check(meta, arrays)`` runs once the checksums matched (and,
    with ``lazy``, before the pages are handed back): the caller's own consistency checks,
    whose ``ValueError`` becomes the file's. ``spare(rows)`` gives an array of ``rows`` rows
    that many more after them (uninitialised), room to append without a copy; not with
    ``mapped`` (store ``pad_rows`` instead). ``ValueError`` naming the file if it is missing,
    truncated, damaged or not this layout."""
    if mapped and spare is not None:
        raise ValueError("array_file.read: spare rows are stored (pad_rows) in a mapped file")
    if lazy and not mapped:
        raise ValueError("array_file.read: lazy is for a mapped file")
    try:
        with open(path, "rb") as source:
            length, raw = _header(source)
            header = json.loads(raw.decode("utf-8"))
            start = _data_start(length)
            size = os.fstat(source.fileno()).st_size
            meta, entries = header["meta"], header["arrays"]
            if not isinstance(meta, dict) or not isinstance(entries, list):
                raise ValueError("not an array file header")
            # ACCESS_COPY: MAP_PRIVATE, writable, nothing written back.
            view = mmap.mmap(source.fileno(), 0, access=mmap.ACCESS_COPY) if mapped else None
            arrays = {}
            end = start
            for entry in entries:
                name = str(entry["name"])
                dtype = np.dtype(entry["dtype"])
                shape = tuple(int(n) for n in entry["shape"])
                if dtype.hasobject or not shape or any(n < 0 for n in shape):
                    raise ValueError(f"array {name!r} has a bad dtype or shape")
                offset = start + int(entry["offset"])
                nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                if offset < end or offset + nbytes > size:
                    raise ValueError(f"array {name!r} lies outside the file (truncated?)")
                if view is not None:
                    array = _view(view, dtype, shape, offset)
                    crc = _crc(array)
                else:
                    extra = 0 if spare is None else max(0, int(spare(shape[0])))
                    array = np.empty((shape[0] + extra, *shape[1:]), dtype=dtype)
                    source.seek(offset)
                    crc = _read_into(source, array[: shape[0]])
                if crc != int(entry["crc32"]):
                    raise ValueError(f"array {name!r} fails its checksum (damaged)")
                arrays[name] = array
                end = offset + nbytes
            if end != size:
                raise ValueError("file size does not match its header")
            if check is not None:
                check(meta, arrays)
            if lazy and view is not None and size and hasattr(mmap, "MADV_DONTNEED"):
                view.madvise(mmap.MADV_DONTNEED)  # checked, not yet written: see the module
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    except (OSError, KeyError, TypeError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a readable array file ({error})") from None
    return meta, arrays


def _header(source: BinaryIO) -> tuple[int, bytes]:
    """The header's length and bytes, read from the file's start and checked against the
    magic, the length bound and the header's checksum (``ValueError`` naming what failed)."""
    head = source.read(len(MAGIC) + 8)
    if len(head) != len(MAGIC) + 8 or head[: len(MAGIC)] != MAGIC:
        raise ValueError("not an array file")
    length = int.from_bytes(head[len(MAGIC) :], "little")
    if length > 1 << 26:
        raise ValueError("header too long")
    raw = source.read(length)
    if zlib.crc32(raw) != int.from_bytes(source.read(4), "little"):
        raise ValueError("the header fails its checksum (damaged or truncated)")
    return length, raw


def read_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``meta`` object of the file at ``path`` from its header alone (checked by the
    header's own checksum; the arrays are not read). ``ValueError`` naming the file if it is
    missing or its header is not this layout's."""
    try:
        with open(path, "rb") as source:
            meta = json.loads(_header(source)[1].decode("utf-8"))["meta"]
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    except (OSError, KeyError, TypeError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a readable array file ({error})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: not an array file header")
    return meta


_Built = TypeVar("_Built")


def load_lazily(
    path: str | os.PathLike[str],
    build: Callable[[dict[str, Any], dict[str, np.ndarray]], _Built],
    what: str,
) -> _Built:
    """What ``build(meta, arrays)`` makes of a file mapped with ``lazy``: it runs on the
    mapped arrays once their checksums matched, before their pages are handed back (one
    pass over the file). ``ValueError`` naming the file, and ``what`` it is not, when the
    file is unreadable or ``build`` finds its arrays inconsistent."""
    built: list[_Built] = []

    def check(meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        try:
            built.append(build(meta, arrays))
        except (KeyError, TypeError, ValueError, UnicodeDecodeError) as error:
            raise ValueError(f"not {what} ({error})") from None

    read(path, mapped=True, lazy=True, check=check)
    return built[0]


def _view(view: mmap.mmap, dtype: np.dtype, shape: tuple[int, ...], offset: int) -> np.ndarray:
    """The array of ``shape`` at ``offset`` of the map (it keeps the map open)."""
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0:
        return np.empty(shape, dtype=dtype)
    return np.frombuffer(view, dtype=dtype, count=count, offset=offset).reshape(shape)


def _data_start(header_length: int) -> int:
    return -(-(len(MAGIC) + 8 + header_length + 4) // _ALIGN) * _ALIGN


def _create(path: Path) -> Any:
    # 0600 whatever the umask (mempp.private); keep_mode gives it a replaced file's mode.
    return os.fdopen(open_new(path), "wb")


def _bytes(array: np.ndarray) -> memoryview:
    return memoryview(array.reshape(-1).view(np.uint8)) if array.size else memoryview(b"")


def _crc(array: np.ndarray, padding: int = 0) -> int:
    """CRC-32 of the array's bytes, then of ``padding`` zero bytes."""
    view = _bytes(array)
    crc = 0
    for at in range(0, len(view), _CHUNK):
        crc = zlib.crc32(view[at : at + _CHUNK], crc)
    zeros = bytes(min(_CHUNK, padding))
    for at in range(0, padding, _CHUNK):
        crc = zlib.crc32(zeros[: min(_CHUNK, padding - at)], crc)
    return crc


def _read_into(source: Any, array: np.ndarray) -> int:
    """Fill ``array`` from ``source``; the CRC-32 of what was read."""
    view = _bytes(array)
    crc = 0
    for at in range(0, len(view), _CHUNK):
        chunk = view[at : at + _CHUNK]
        if source.readinto(chunk) != len(chunk):
            raise ValueError("the file ends early (truncated)")
        crc = zlib.crc32(chunk, crc)
    return crc
