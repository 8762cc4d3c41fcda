"""The vectors of a Memory's recent questions, so that asking one again skips the encoder.

The same question comes back often and soon: the next page of results, an as-of slider
dragged on the web page, ``ask`` after ``search``, an agent asking "and as of March?". On
this project's 2-core machine the encoder is half of a 100k-record search (docs/scaling.md),
and a vector depends on nothing but the encoder and the text.

Bounded (least recently used out first) and held per ``Memory``, so per scope: one tenant's
search never runs faster because another tenant asked the same question.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

RECENT_QUESTIONS = 64  # 64 x 384 float32: 96 KiB a scope


class QuestionVectors:
    """Text -> its vector under one encoder, for the last ``size`` questions asked."""

    def __init__(self, size: int = RECENT_QUESTIONS) -> None:
        self._size = size
        self._vectors: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, encoder: str, question: str) -> np.ndarray | None:
        with self._lock:
            vector = self._vectors.get((encoder, question))
            if vector is not None:
                self._vectors.move_to_end((encoder, question))
            return vector

    def put(self, encoder: str, question: str, vector: np.ndarray) -> np.ndarray:
        """Hold ``vector`` (a read-only copy, so no caller can change what the next search
        of the question gets) and return the copy."""
        held = np.array(vector, dtype=np.float32)
        held.setflags(write=False)
        with self._lock:
            self._vectors[(encoder, question)] = held
            self._vectors.move_to_end((encoder, question))
            while len(self._vectors) > self._size:
                self._vectors.popitem(last=False)
        return held

    def __len__(self) -> int:
        return len(self._vectors)
