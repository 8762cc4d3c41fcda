"""Reading the files of an export, whether unpacked in a folder or packed in a zip, with a cap
on what unpacking may produce (a zip bomb stops at the cap) and a way past a truncated zip.

A zip's table of contents is at its end, so a download cut short has none; the members before
the cut are still there, each behind a local header. :class:`ZipTree` then indexes them from
those headers, and the member the cut went through is reported, not the whole archive.
"""

from __future__ import annotations

import mmap
import os
import struct
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from mempp.errors import InvalidInput

GIB = 1 << 30
MIB = 1 << 20
MAX_UNPACKED = 8 * GIB  # a whole export
# One file of it, read whole and parsed as JSON (~10x its size in RAM): a day of one busy
# channel is a few MiB; a larger member is refused with its size, never read.
MAX_MEMBER = 32 * MIB

_LOCAL = b"PK\x03\x04"
_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")
_CHUNK = 1 << 16


class MemberError(Exception):
    """One file of the export cannot be read (too large, damaged, cut off)."""


class Tree(Protocol):
    """The files of an export by their ``/``-separated path inside it."""

    label: str  # how locations name the export: the path given

    def names(self) -> list[str]: ...

    def read(self, name: str) -> bytes: ...

    def close(self) -> None: ...


def open_tree(
    path: str | os.PathLike[str], *, max_unpacked: int = MAX_UNPACKED, max_member: int = MAX_MEMBER
) -> tuple[Tree, str | None]:
    """The export at ``path`` (a folder or a ``.zip``), and a warning when it had to be
    recovered. Raises ``InvalidInput`` when it is neither, or would unpack past the cap."""
    where = Path(path)
    if where.is_dir():
        return FolderTree(where, max_member), None
    if not where.exists():
        raise InvalidInput(f"{path}: no such file or folder")
    if not where.is_file():
        raise InvalidInput(f"{path}: not a file or folder")
    try:
        return ZipTree(where, max_unpacked, max_member), None
    except zipfile.BadZipFile:
        pass
    except OSError as exc:
        raise InvalidInput(f"{path}: {exc.strerror or exc}") from None
    recovered = RecoveredZipTree(where, max_unpacked, max_member)
    if not recovered.names():
        raise InvalidInput(f"{path}: not a zip file, nor a folder")
    return recovered, (
        f"the zip has no table of contents (truncated or damaged): {len(recovered.names())} "
        "files read from their local headers; files after the damage are missing"
    )


class FolderTree:
    def __init__(self, root: Path, max_member: int) -> None:
        self.root = root
        self.label = str(root)
        self._max_member = max_member

    def names(self) -> list[str]:
        found = []
        for current, _, files in os.walk(self.root):
            relative = os.path.relpath(current, self.root).replace(os.sep, "/")
            prefix = "" if relative == "." else relative + "/"
            found.extend(prefix + name for name in files)
        return sorted(found)

    def read(self, name: str) -> bytes:
        try:
            with open(os.path.join(self.root, name), "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size > self._max_member:
                    raise MemberError(
                        f"is {_size(size)}, over the {_size(self._max_member)} limit of one file"
                    )
                return handle.read()
        except OSError as exc:
            raise MemberError(exc.strerror or str(exc)) from None

    def close(self) -> None:
        pass


class ZipTree:
    def __init__(self, path: Path, max_unpacked: int, max_member: int) -> None:
        self.label = str(path)
        self._zip = zipfile.ZipFile(path)
        self._infos = {i.filename: i for i in self._zip.infolist() if not i.is_dir()}
        declared = sum(i.file_size for i in self._infos.values())
        if declared > max_unpacked:
            self._zip.close()
            raise InvalidInput(
                f"{path}: unpacks to {_size(declared)}, over the {_size(max_unpacked)} cap "
                "(a zip bomb?); if it is genuine, unpack it and import the folder"
            )
        self._budget = _Budget(path, max_unpacked, max_member)

    def names(self) -> list[str]:
        return sorted(self._infos)

    def read(self, name: str) -> bytes:
        info = self._infos[name]
        if info.file_size > self._budget.max_member:  # declared: refuse before unpacking
            raise MemberError(
                f"unpacks to {_size(info.file_size)}, over the "
                f"{_size(self._budget.max_member)} limit of one file"
            )
        try:
            with self._zip.open(info) as handle:
                return self._budget.collect(iter(lambda: handle.read(_CHUNK), b""))
        except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as exc:
            raise MemberError(f"damaged in the zip: {exc}") from None
        except RuntimeError as exc:  # encrypted members
            raise MemberError(str(exc)) from None

    def close(self) -> None:
        self._zip.close()


class RecoveredZipTree:
    """A zip without its table of contents, indexed by walking its local headers."""

    def __init__(self, path: Path, max_unpacked: int, max_member: int) -> None:
        self.label = str(path)
        with path.open("rb") as handle:  # mapped, not read: the export may be gigabytes
            self._data: bytes | mmap.mmap = (
                mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
                if path.stat().st_size
                else b""
            )
        self._budget = _Budget(path, max_unpacked, max_member)
        # name -> (method, start of data, compressed size or None, damage found while indexing)
        self._members: dict[str, tuple[int, int, int | None, str | None]] = {}
        self._index()

    def _index(self) -> None:
        data, offset = self._data, 0
        while data[offset : offset + 4] == _LOCAL and offset + _LOCAL_HEADER.size <= len(data):
            fields = _LOCAL_HEADER.unpack_from(data, offset)
            flags, method, csize, name_len, extra_len = (
                fields[2],
                fields[3],
                fields[7],
                fields[9],
                fields[10],
            )
            start = offset + _LOCAL_HEADER.size + name_len + extra_len
            raw_name = data[offset + _LOCAL_HEADER.size : offset + _LOCAL_HEADER.size + name_len]
            name = raw_name.decode("utf-8" if flags & 0x800 else "cp437", "replace")
            extra = data[start - extra_len : start]
            if csize == 0xFFFFFFFF:
                csize = _zip64_size(extra)
            if flags & 0x8:  # sizes follow the data: only a deflate stream shows its own end
                if method != zipfile.ZIP_DEFLATED:
                    self._members[name] = (method, start, None, "cannot be delimited")
                    return
                end = _deflate_end(data, start)
                if end is None:
                    self._members[name] = (method, start, None, "cut off by the truncation")
                    return
                csize = end - start
                offset = _after_descriptor(data, end)
            else:
                offset = start + csize
            if offset > len(data):
                self._members[name] = (method, start, None, "cut off by the truncation")
                return
            if not name.endswith("/"):
                self._members[name] = (method, start, csize, None)

    def names(self) -> list[str]:
        return sorted(self._members)

    def read(self, name: str) -> bytes:
        method, start, csize, damage = self._members[name]
        if damage is not None or csize is None:
            raise MemberError(damage or "damaged in the zip")
        raw = self._data[start : start + csize]
        if method == zipfile.ZIP_STORED:
            return self._budget.collect(iter([raw]))
        if method != zipfile.ZIP_DEFLATED:
            raise MemberError(f"compressed with method {method}, which this reader lacks")
        return self._budget.collect(_inflate(raw))

    def close(self) -> None:
        if isinstance(self._data, mmap.mmap):
            self._data.close()


class _Budget:
    """Counts what unpacking produces, per member and for the whole export."""

    def __init__(self, path: Path, max_unpacked: int, max_member: int) -> None:
        self.path = path
        self.max_unpacked = max_unpacked
        self.max_member = max_member
        self.total = 0

    def collect(self, chunks: Iterator[bytes]) -> bytes:
        parts: list[bytes] = []
        size = 0
        for chunk in chunks:
            size += len(chunk)
            self.total += len(chunk)
            if size > self.max_member:
                raise MemberError(f"unpacks to more than {_size(self.max_member)}")
            if self.total > self.max_unpacked:
                raise InvalidInput(
                    f"{self.path}: unpacks to more than the {_size(self.max_unpacked)} cap "
                    "(a zip bomb?); stopped there"
                )
            parts.append(chunk)
        return b"".join(parts)


def _inflate(raw: bytes) -> Iterator[bytes]:
    """Raw deflate, at most a chunk of output at a time (a bomb never lands in RAM whole)."""
    inflater = zlib.decompressobj(-15)
    pending = raw
    try:
        while pending and not inflater.eof:
            yield inflater.decompress(pending, _CHUNK)
            pending = inflater.unconsumed_tail
        if not inflater.eof:
            yield inflater.flush()
    except zlib.error as exc:
        raise MemberError(f"damaged in the zip: {exc}") from None


def _deflate_end(data: bytes | mmap.mmap, start: int) -> int | None:
    """Where the deflate stream that starts at ``start`` ends, or ``None`` if it is cut off."""
    inflater = zlib.decompressobj(-15)
    position = start
    try:
        while position < len(data) and not inflater.eof:
            piece = data[position : position + _CHUNK]
            inflater.decompress(piece, _CHUNK)
            while inflater.unconsumed_tail and not inflater.eof:
                inflater.decompress(inflater.unconsumed_tail, _CHUNK)
            position += len(piece)
    except zlib.error:
        return None
    if not inflater.eof:
        return None
    return position - len(inflater.unused_data)


def _after_descriptor(data: bytes | mmap.mmap, end: int) -> int:
    """The offset after the data descriptor at ``end``: an optional signature, the crc-32,
    then both sizes in 4 bytes each, or 8 each in a zip64 archive."""
    if data[end : end + 4] == b"PK\x07\x08":
        end += 4
    for size in (12, 20):
        if data[end + size : end + size + 4] in (_LOCAL, b"PK\x01\x02"):
            return end + size
    return end + 12


def _zip64_size(extra: bytes) -> int:
    position = 0
    while position + 4 <= len(extra):
        tag, size = struct.unpack_from("<HH", extra, position)
        if tag == 0x0001 and size >= 16:
            return int(struct.unpack_from("<Q", extra, position + 12)[0])
        position += 4 + size
    return 0xFFFFFFFF


def _size(size: int) -> str:
    return f"{size / GIB:.3g} GiB" if size >= GIB else f"{size / MIB:.3g} MiB"
