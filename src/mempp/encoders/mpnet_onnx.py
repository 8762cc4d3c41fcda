"""all-mpnet-base-v2 on ONNX Runtime in float32 (``--encoder mpnet-onnx``).

The graph is :func:`mempp.encoders.onnx_graph.encoder_graph` over the weights the numpy
encoder (:mod:`mempp.encoders.mpnet`) reads, with MPNet's two differences from BERT as inputs
computed beside it in numpy: the rows of the position table (pieces from 2 on, a literal
"<pad>" as the reference places it) and the relative-position bias of the batch's length,
(head, seq, seq), added to every layer's attention scores with the padding mask. Tokenizer,
384-piece cut, batching by length and worker threads are the numpy encoder's, so the vectors
equal its own (to about 1e-7 per component) and carry its name, ``all-mpnet-base-v2/384``: a
store filled by one is searched by the other. The graph (0.44 GB) is built once into the model
cache; a later load reads the cache and, from the weights file, only the bias table.

Needs the ``onnx`` extra: ``pip install "mempp[onnx]"``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from safetensors import safe_open

from mempp.encoders.mpnet import (
    _HEADS,
    _PAD_ID,
    RELATIVE_BIAS,
    MPNetEmbedder,
    literal_pad_positions,
    position_bias,
)
from mempp.encoders.onnx_graph import (
    batch_workers,
    cached_session,
    encoder_graph,
    require,
    run_threads,
)

__all__ = ["OnnxMPNetEmbedder"]


class OnnxMPNetEmbedder(MPNetEmbedder):
    """all-mpnet-base-v2 run by ONNX Runtime; the constructor of
    :class:`~mempp.encoders.mpnet.MPNetEmbedder`, and the threading of
    :class:`~mempp.encoders.minilm_onnx.OnnxMiniLMEmbedder`: each run of the session on
    :func:`~mempp.encoders.onnx_graph.run_threads` ONNX Runtime threads (a lone question on
    both cores of a small machine: 27-28 against 44-46 ms p50 on an idle one, at 1.1 times
    the CPU), the batches of a call on ``workers`` threads (default
    :func:`~mempp.encoders.onnx_graph.batch_workers`; ``benchmarks/bench_onnx_threads.py``,
    docs/encoders.md)."""

    _numpy_forward = False  # ONNX Runtime runs the products on threads of its own

    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        max_tokens: int = 384,
        batch_size: int = 32,
        workers: int | None = None,
    ) -> None:
        require("onnxruntime")  # before the weights are joined: a missing extra is named first
        self._threads = run_threads()
        if workers is None:
            workers = batch_workers(self._threads)
        super().__init__(model_dir, max_tokens=max_tokens, batch_size=batch_size, workers=workers)

    def _load_weights(self, file: Path, n_layers: int) -> None:
        def build() -> Any:
            super(OnnxMPNetEmbedder, self)._load_weights(file, n_layers)
            model = encoder_graph(
                "all-mpnet-base-v2",
                self._word,
                self._position_table,
                (self._emb_ln_g, self._emb_ln_b),
                self._layers,
                heads=_HEADS,
                eps=float(self._ln_eps),
                positions_input=True,
                relative_bias=True,
            )
            # The graph holds the weights now; the numpy copies would only double the memory.
            del self._word, self._position_table, self._position, self._layers
            del self._emb_ln_g, self._emb_ln_b
            return model

        self._session = cached_session(
            "all-mpnet-base-v2", file, f"{self._max_tokens}", build, threads=self._threads
        )
        if not hasattr(self, "_position_bias"):  # read from the cache: only the bias table
            with safe_open(str(file), framework="np") as weights:
                table = weights.get_tensor(RELATIVE_BIAS)
            self._position_bias = position_bias(table, self._max_tokens)

    def _forward(self, ids: list[list[int]], lengths: np.ndarray) -> np.ndarray:
        n, seq = len(ids), int(lengths.max())
        tokens = np.full((n, seq), _PAD_ID, dtype=np.int64)
        for row, piece_ids in zip(tokens, ids, strict=True):
            row[: len(piece_ids)] = piece_ids
        valid = np.arange(seq) < lengths[:, None]
        positions = literal_pad_positions(tokens, valid)
        if positions is None:
            positions = np.broadcast_to(np.arange(_PAD_ID + 1, _PAD_ID + 1 + seq), (n, seq))
        feeds = {
            "ids": tokens,
            "mask": valid.astype(np.float32),
            "positions": np.ascontiguousarray(positions, dtype=np.int64),
            "bias": np.ascontiguousarray(self._position_bias[:, :seq, :seq]),
        }
        (summed,) = self._session.run(["summed"], feeds)
        summed /= np.linalg.norm(summed, axis=1, keepdims=True)
        return summed
