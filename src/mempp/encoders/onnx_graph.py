"""ONNX Runtime graphs of mempp's transformer encoders, built from their numpy weights.

The graph of a BERT-style encoder (embeddings and LayerNorm, post-LN layers with exact-erf
GELU, padding keys masked out of attention, mask-weighted sum of the last hidden states) is
built node by node with the ``onnx`` helper API from the arrays the numpy encoders load: no
PyTorch export, no model downloaded. all-MiniLM-L6-v2 (:mod:`mempp.encoders.minilm_onnx`) and
all-mpnet-base-v2 (:mod:`mempp.encoders.mpnet_onnx`, which adds a relative-position bias to
every attention score) share it.

Building costs seconds (``import onnx`` alone took 4 s on the loaded 2-core bench machine, the
protobuf copies of the weights 2 s more), which a default encoder cannot pay on every
``mempp search``. So the serialized graph is kept in the model cache
(:func:`mempp.encoders.mpnet_parts.cache_root`, ``onnx/``) under a key of the weights file
(path, size, modification time), the graph version and the variant; later loads read it with
``onnxruntime`` alone. It is written under a temporary name and renamed into place, so a killed
process leaves no half file; a cache that cannot be written or read back is rebuilt in memory,
without a word (the vectors do not depend on it).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mempp.encoders.minilm import EncoderUnavailable, _cores

__all__ = [
    "EXTRA_HINT",
    "GraphBuilder",
    "OnnxUnavailable",
    "batch_workers",
    "cached_session",
    "encoder_graph",
    "run_threads",
]

EXTRA_HINT = 'pip install "mempp[onnx]"'
# Bump when encoder_graph's output changes for the same weights: the cache key holds it.
GRAPH_VERSION = 2
_OPSET = 17  # LayerNormalization
# Minus this is added to the scores of padding keys: exp() of it is exactly 0 in float32, as
# with the numpy encoders' -inf, without risking inf - inf in a softmax's max subtraction.
_MASKED = np.float32(1e30)


class OnnxUnavailable(EncoderUnavailable):
    """onnx or onnxruntime is not installed (the default encoder then runs in numpy)."""


def require(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise OnnxUnavailable(
            f"The ONNX encoders need onnx and onnxruntime ({module} is not installed). "
            f"Install them with `{EXTRA_HINT}`, or use the numpy encoders (`minilm-numpy`, "
            "`mpnet`)."
        ) from exc


def runtime_installed() -> bool:
    """Whether onnxruntime can be imported (without importing it)."""
    try:
        return importlib.util.find_spec("onnxruntime") is not None
    except ValueError:  # in sys.modules as None: a test hiding it
        return False


class GraphBuilder:
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

    def layer_norm(
        self, value: str, gamma: np.ndarray, beta: np.ndarray, name: str, eps: float
    ) -> str:
        return self.op(
            "LayerNormalization",
            value,
            self.const(name + "_g", gamma),
            self.const(name + "_b", beta),
            axis=-1,
            epsilon=eps,
        )


def encoder_graph(
    name: str,
    word: np.ndarray,
    position: np.ndarray,
    emb_ln: tuple[np.ndarray, np.ndarray],
    layers: list[Any],
    *,
    heads: int,
    eps: float,
    positions_input: bool = False,
    relative_bias: bool = False,
    int8: bool = False,
) -> Any:
    """The ONNX model of a BERT-style encoder.

    Inputs: ``ids`` (int64, batch x seq) and ``mask`` (float32, 1 for a word piece, 0 for
    padding); with ``positions_input`` also ``positions`` (int64, batch x seq, rows of
    ``position`` to add), else the first ``seq`` rows of ``position`` are added to every text;
    with ``relative_bias`` also ``bias`` (float32, heads x seq x seq), added to every layer's
    attention scores. Output ``summed``: the mask-weighted sum of the last hidden states
    (batch x hidden), which the caller divides by its norm. ``layers`` hold the fields of
    :class:`mempp.encoders.minilm._Layer` (query weights pre-scaled).

    ``int8``: the query/key/value, attention output and FFN up-projection products in int8.
    The FFN down-projection stays float32: its input, the GELU output, has outlier columns
    that one per-call activation scale flattens (with it in int8 too, MiniLM's lowest cosine
    to float32 fell from 0.992 to 0.986 on the bench texts, for little more speed).
    """
    onnx = require("onnx")
    helper = onnx.helper
    hidden = word.shape[1]
    g = GraphBuilder(onnx, int8=int8)
    i64 = np.int64

    word_t = g.const("word", word)
    position_t = g.const("position", position)
    f_one = g.const("f_one", np.array(1.0, dtype=np.float32))
    masked = g.const("masked", np.array(_MASKED, dtype=np.float32))
    inv_sqrt2 = g.const("inv_sqrt2", np.array(1.0 / np.sqrt(2.0), dtype=np.float32))
    half = g.const("half", np.array(0.5, dtype=np.float32))
    heads_shape = g.const("heads_shape", np.array([0, 0, heads, hidden // heads], dtype=i64))
    hidden_shape = g.const("hidden_shape", np.array([0, 0, hidden], dtype=i64))
    qkv_split = g.const("qkv_split", np.array([hidden] * 3, dtype=i64))
    pool_axes = g.const("pool_axes", np.array([1], dtype=i64))
    bias_axes = g.const("bias_axes", np.array([1, 2], dtype=i64))
    last_axis = g.const("last_axis", np.array([-1], dtype=i64))

    if positions_input:
        placed = g.op("Gather", position_t, "positions")
    else:  # the positions of this batch's length, the same for every text
        zero = g.const("zero", np.array([0], dtype=i64))
        one = g.const("one", np.array([1], dtype=i64))
        two = g.const("two", np.array([2], dtype=i64))
        seq = g.op("Slice", g.op("Shape", "ids"), one, two)
        placed = g.op("Slice", position_t, zero, seq, zero)
    x = g.op("Add", g.op("Gather", word_t, "ids"), placed)
    x = g.layer_norm(x, *emb_ln, "emb_ln", eps)
    # (mask - 1) * 1e30: -1e30 on padding keys, 0 on word pieces; shaped (batch, 1, 1, seq).
    key_bias = g.op("Unsqueeze", g.op("Mul", g.op("Sub", "mask", f_one), masked), bias_axes)
    if relative_bias:  # one (heads, seq, seq) table for every layer, the padding mask on it
        key_bias = g.op("Add", key_bias, "bias")
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
        x = g.layer_norm(g.op("Add", attended, x), layer.ln1_g, layer.ln1_b, p + "ln1", eps)

        up = g.linear(x, layer.w_up, layer.b_up, p + "up", exact=False)
        # Exact GELU: x * (1 + erf(x / sqrt 2)) / 2 (ONNX Runtime fuses it into one kernel).
        gelu = g.op("Erf", g.op("Mul", up, inv_sqrt2))
        gelu = g.op("Mul", g.op("Mul", up, g.op("Add", gelu, f_one)), half)
        down = g.linear(gelu, layer.w_down, layer.b_down, p + "down", exact=True)
        x = g.layer_norm(g.op("Add", down, x), layer.ln2_g, layer.ln2_b, p + "ln2", eps)

    pooled = g.op("Mul", x, g.op("Unsqueeze", "mask", last_axis))
    g.nodes.append(helper.make_node("ReduceSum", [pooled, pool_axes], ["summed"], keepdims=0))

    tensor = onnx.TensorProto
    inputs = [
        helper.make_tensor_value_info("ids", tensor.INT64, ["batch", "seq"]),
        helper.make_tensor_value_info("mask", tensor.FLOAT, ["batch", "seq"]),
    ]
    if positions_input:
        inputs.append(helper.make_tensor_value_info("positions", tensor.INT64, ["batch", "seq"]))
    if relative_bias:
        inputs.append(helper.make_tensor_value_info("bias", tensor.FLOAT, [heads, "seq", "seq"]))
    graph = helper.make_graph(
        g.nodes,
        name,
        inputs,
        [helper.make_tensor_value_info("summed", tensor.FLOAT, ["batch", hidden])],
        g.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)])
    model.ir_version = 8  # what every onnxruntime of the last years reads
    # onnx.checker would add 0.4 s to every build; the tests run it on every graph.
    return model


def _cache_file(label: str, weights: Path, variant: str) -> Path:
    from mempp.encoders.mpnet_parts import cache_root

    stat = weights.stat()
    key = f"{GRAPH_VERSION}|{variant}|{weights.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:20]
    return cache_root() / "onnx" / f"{label}-{digest}.onnx"


def _write_atomically(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}-", dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.chmod(temporary, 0o644)  # mkstemp's 0o600 would hide the cache from the group
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def run_threads() -> int:
    """ONNX Runtime threads per run of a session: two where the process may use two cores or
    more, so that a lone question (a search's critical path) is split over both of a small
    machine's cores. The threads sleep rather than spin between operators: spinning helpers
    cost concurrent questions a third of their throughput on a busy 2-core machine, sleeping
    ones cost nothing measurable (docs/encoders.md). More than two gain a question of 20-30
    word pieces little, so wider machines spread batches over more callers instead
    (:func:`batch_workers`)."""
    return min(2, _cores())


def batch_workers(threads: int) -> int:
    """Threads a many-batch call spreads its batches over by default, each running the
    session on ``threads`` ONNX Runtime threads: the process's cores (at most 8) in all."""
    return max(1, min(_cores(), 8) // threads)


def cached_session(
    label: str, weights: Path, variant: str, build: Callable[[], Any], *, threads: int = 1
) -> Any:
    """An ONNX Runtime session of the graph ``build()`` returns for ``weights``, read from the
    model cache when an earlier load saved it there, running each call on ``threads``
    intra-op threads (see :func:`run_threads`)."""
    ort = require("onnxruntime")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if threads > 1:  # helpers wait on the OS between operators, never in a busy loop
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    providers = ["CPUExecutionProvider"]
    try:
        target: Path | None = _cache_file(label, weights, variant)
    except (OSError, RuntimeError):  # no home (Path.home raises RuntimeError), or moved weights
        target = None
    if target is not None and target.is_file():
        try:
            return ort.InferenceSession(str(target), sess_options=options, providers=providers)
        except Exception:  # a damaged cache file is rebuilt, never trusted
            target.unlink(missing_ok=True)
    data = build().SerializeToString()
    if target is not None:
        with contextlib.suppress(OSError):  # a read-only cache: every load builds the graph
            _write_atomically(target, data)
    return ort.InferenceSession(data, sess_options=options, providers=providers)
