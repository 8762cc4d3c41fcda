"""``OnnxMPNetEmbedder``: all-mpnet-base-v2 on ONNX Runtime must give the numpy encoder's
vectors (to 2e-6 per component) on real text, batched and one text a call, short and past the
384-piece cut, a literal "<pad>" placed as the reference places it; and carry the numpy
encoder's name. Skipped without the five weight parts or the ``onnx`` extra."""

from __future__ import annotations

import importlib.util
import mailbox
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from mempp.encoders import embedder_named, registry_name
from mempp.encoders import mpnet_parts as parts
from mempp.encoders.minilm import EncoderUnavailable
from realdata import sample

# The two sum in other orders (measured at most 4.3e-7); a wrong position, bias or mask
# moves components by 1e-2 or more.
MAX_DIFFERENCE = 2e-6


def _onnx_installed() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxruntime"))


@pytest.fixture(scope="module")
def directory() -> Path:
    try:
        parts._find_parts()
    except EncoderUnavailable:
        pytest.skip(f"all-mpnet-base-v2 parts not installed ({parts.INSTALL_LINE})")
    return parts.model_dir()  # joined in the user's cache, as the numpy tests use it


@pytest.fixture(scope="module")
def graph_cache(directory: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The graph is cached here (built once for the module), not in the user's cache."""
    folder = tmp_path_factory.mktemp("model-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(parts.ENV_MODEL_CACHE, str(folder))
        yield folder


@pytest.fixture(scope="module")
def numpy_encoder(directory: Path):
    from mempp.encoders.mpnet import MPNetEmbedder

    return MPNetEmbedder(directory)


@pytest.fixture(scope="module")
def onnx_encoder(directory: Path, graph_cache: Path):
    if not _onnx_installed():
        pytest.skip('needs pip install "mempp[onnx]"')
    from mempp.encoders.mpnet_onnx import OnnxMPNetEmbedder

    return OnnxMPNetEmbedder(directory)


def _real_mail() -> tuple[list[str], list[str]]:
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


def test_equals_numpy_on_real_mail_batched_and_alone(onnx_encoder, numpy_encoder) -> None:
    subjects, bodies = _real_mail()
    texts = [*subjects, *bodies, "", "a <pad> inside the text", "</s> <s> <mask> literal"]
    pieces = [len(e.ids) for e in onnx_encoder._encode(bodies)]
    assert max(pieces) == 384 and min(pieces) < 64  # past the cut and short
    batched = onnx_encoder.embed(texts)
    assert batched.shape == (len(texts), 768) and batched.dtype == np.float32
    assert np.abs(batched - numpy_encoder.embed(texts)).max() < MAX_DIFFERENCE
    for text in [*subjects[:8], *bodies[:3], "a <pad> inside the text"]:
        alone = onnx_encoder.embed([text])
        assert np.abs(alone - numpy_encoder.embed([text])).max() < MAX_DIFFERENCE
        assert np.abs(alone[0] - batched[texts.index(text)]).max() < MAX_DIFFERENCE
    # Same function, same name: a store filled by either is searched by the other.
    assert (onnx_encoder.name, onnx_encoder.dim) == (numpy_encoder.name, numpy_encoder.dim)
    assert registry_name(onnx_encoder.name) == "mpnet"


def test_cached_graph_loads_without_onnx(
    onnx_encoder, numpy_encoder, directory: Path, graph_cache: Path, monkeypatch
) -> None:
    from mempp.encoders.mpnet_onnx import OnnxMPNetEmbedder

    (cached,) = (graph_cache / "onnx").iterdir()
    assert cached.name.startswith("all-mpnet-base-v2-") and cached.stat().st_size > 4e8
    monkeypatch.setitem(sys.modules, "onnx", None)  # the cache is read with onnxruntime only
    again = OnnxMPNetEmbedder(directory)
    texts = ["Entity locks in asterixdb", "what changed in the release plan? " * 40]
    assert np.abs(again.embed(texts) - numpy_encoder.embed(texts)).max() < MAX_DIFFERENCE


def test_threads_follow_the_cores_and_keep_the_vectors(
    onnx_encoder, numpy_encoder, directory: Path, graph_cache: Path, monkeypatch
) -> None:
    """As MiniLM's: two ONNX Runtime threads a run on two cores (one batch caller), one on
    one core; the vectors are the same either way, alone, beside other askers and batched."""
    from concurrent.futures import ThreadPoolExecutor

    from mempp.encoders import onnx_graph
    from mempp.encoders.mpnet_onnx import OnnxMPNetEmbedder

    monkeypatch.setattr(onnx_graph, "_cores", lambda: 2)
    two = OnnxMPNetEmbedder(directory)
    assert two._session.get_session_options().intra_op_num_threads == 2
    assert two._workers == 1
    monkeypatch.setattr(onnx_graph, "_cores", lambda: 1)
    one = OnnxMPNetEmbedder(directory)  # the cached graph
    assert one._session.get_session_options().intra_op_num_threads == 1
    texts = [f"who owns the launch budget of team {i}?" for i in range(6)]
    texts += ["a longer note about the release plan " * 30, ""]
    alone = np.stack([one.embed([t])[0] for t in texts])
    with ThreadPoolExecutor(3) as pool:
        beside = np.stack(list(pool.map(lambda t: two.embed([t])[0], texts)))
    assert np.abs(beside - alone).max() < MAX_DIFFERENCE
    assert np.abs(two.embed(texts) - alone).max() < MAX_DIFFERENCE
    assert np.abs(alone - numpy_encoder.embed(texts)).max() < MAX_DIFFERENCE


def test_by_name_and_missing_extra(monkeypatch, directory: Path) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(EncoderUnavailable, match=r"mempp\[onnx\]"):
        embedder_named("mpnet-onnx")
