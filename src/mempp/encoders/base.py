"""The ``Embedder`` protocol every sentence encoder implements.

A store remembers the ``name`` and ``dim`` of the encoder that filled it and refuses
another one, because cosine scores between two encoders' vectors mean nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of a fixed size."""

    @property
    def name(self) -> str:
        """A stable identifier of the model and its settings, e.g. ``all-MiniLM-L6-v2/256``."""
        ...

    @property
    def dim(self) -> int:
        """Length of every vector."""
        ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return an array of shape ``(len(texts), dim)``, dtype float32, rows of unit length.

        Must accept an empty sequence (returning shape ``(0, dim)``) and empty strings.
        """
        ...
