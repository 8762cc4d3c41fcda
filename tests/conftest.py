"""Shared fixtures: a real SQLite file per test and a small, fully predictable encoder."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from mempp import Memory

_WORD = re.compile(r"[^\W_]+")


class KeywordEmbedder:
    """A real ``Embedder`` whose geometry a test can reason about.

    Each listed keyword owns one axis; every other word shares a last "other" axis. A text's
    vector is its normalised keyword count, so cosine similarity is plain keyword overlap.
    """

    def __init__(self, keywords: Sequence[str] = ()) -> None:
        self.keywords = {word: i for i, word in enumerate(keywords)}
        self._dim = len(self.keywords) + 1
        self.calls = 0

    @property
    def name(self) -> str:
        return "keywords/" + ",".join(self.keywords)

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                out[row, self.keywords.get(word, self._dim - 1)] += 1.0
            norm = np.linalg.norm(out[row])
            if norm == 0:
                out[row, self._dim - 1] = 1.0
            else:
                out[row] /= norm
        return out


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "memory.db"


@pytest.fixture
def keyword_memory(db_path: Path):
    embedder = KeywordEmbedder(["alpha", "beta", "gamma", "delta", "budget", "launch"])
    with Memory(db_path, embedder=embedder) as memory:
        yield memory
