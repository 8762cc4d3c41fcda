"""Files only their owner reads: a store holds an organization's mail and chats.

Every file mempp creates beside a store (the SQLite database, which SQLite's WAL and shared
memory files copy their mode from, the vector and BM25 files, the exact-scan file, the LLM
reply cache) is created mode 0600, and every folder it creates 0700, whatever the umask: the
mode is set on the open file, not left to the umask. A file that exists already keeps its
mode, also when mempp rewrites it through a temporary file (an operator who opened one up to
a group keeps it so). :func:`readable_by_others` is what ``mempp info`` warns about.

This module imports nothing of mempp, so the store, the indexes and the LLM cache can all
use it.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def open_new(path: str | os.PathLike[str], flags: int = os.O_WRONLY) -> int:
    """A file descriptor on ``path``, created now (it must not exist) with mode 0600."""
    fd = os.open(path, flags | os.O_CREAT | os.O_EXCL | _CLOEXEC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)  # the umask may have taken bits off; none may be added
    except BaseException:
        os.close(fd)
        raise
    return fd


def keep_mode(new: str | os.PathLike[str], replaced: str | os.PathLike[str]) -> None:
    """Give ``new`` (about to replace ``replaced``) the mode ``replaced`` has, if it exists."""
    with contextlib.suppress(FileNotFoundError):
        os.chmod(new, stat.S_IMODE(os.stat(replaced).st_mode))


def open_or_create(path: str | os.PathLike[str], flags: int = os.O_RDWR) -> int:
    """A file descriptor on ``path``: the existing file as it is, else a new one, 0600."""
    try:
        return open_new(path, flags)
    except FileExistsError:
        return os.open(path, flags | _CLOEXEC)


def create_file(path: str | os.PathLike[str]) -> None:
    """Create ``path`` empty with mode 0600 unless it exists (then it is left alone)."""
    with contextlib.suppress(FileExistsError):
        os.close(open_new(path))


def make_dirs(path: str | os.PathLike[str]) -> None:
    """``mkdir -p`` whose new folders are 0700; existing ones are left alone."""
    target = Path(path)
    missing = []
    while not target.exists() and target != target.parent:
        missing.append(target)
        target = target.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue  # made meanwhile by another process: its mode is its own
        os.chmod(folder, DIR_MODE)


def readable_by_others(path: str | os.PathLike[str]) -> int | None:
    """The file's permission bits when its group or others may read it, else None."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return None
    return mode if mode & (stat.S_IRGRP | stat.S_IROTH) else None
