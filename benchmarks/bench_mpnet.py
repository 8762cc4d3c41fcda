"""mempp's all-mpnet-base-v2 (numpy, and ONNX Runtime when installed) beside
sentence-transformers running the same model.

Prints, for each: word pieces/s on documents that fill the 384-piece window, texts/s on short
chat-like turns (each per wall-clock second and per CPU second of the process), one
question's encoding time (p50 / p95 over ``--queries`` calls), and the largest difference
between their vectors over a mixed set of texts. The two take turns within
each round; each throughput figure is the best of ``--repeat`` rounds (other processes on a
shared machine only ever slow a round down). Per CPU second counts the work both do whatever
share of the cores they got.

sentence-transformers needs PyTorch, which mempp does not: run this from a separate venv that
has torch and sentence-transformers, with mempp's source on the path. Both read the folder
mempp built from the five PyPI parts (``mempp.encoders.mpnet_parts``; set
``$MEMPP_MODEL_CACHE`` to where it is if the parts are not installed in that venv)::

    PYTHONPATH=src /work/venv-torch/bin/python benchmarks/bench_mpnet.py

Without torch it times mempp alone.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np

from bench_encoder import long_documents, short_turns
from mempp.encoders.mpnet import MPNetEmbedder
from mempp.encoders.mpnet_parts import model_dir

Embed = Callable[[list[str]], np.ndarray]

_MIXED = [
    "Hello world",
    "",
    "Crème brûlée à la française: naïve café façade, Ångström, São Paulo, Dvořák, Straße.",
    "東京は日本の首都です。我喜欢学习机器学习。",
    "def f(x: int) -> dict:  # TODO\n    return {'a': [1, 2, 3]}",
    "</s> <s> <mask> literal special tokens",
]


def _sentence_transformers(directory: str, batch_size: int) -> Embed:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(directory, device="cpu")

    def embed(texts: list[str]) -> np.ndarray:
        return model.encode(
            texts,
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )

    return embed


def _rates(embed: Embed, texts: list[str], units: int) -> tuple[float, float]:
    """Units per wall-clock second and per CPU second of this process (all its threads): on
    a machine shared with other work the second is the fairer comparison."""
    wall, cpu = time.perf_counter(), time.process_time()
    embed(texts)
    return units / (time.perf_counter() - wall), units / (time.process_time() - cpu)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--long", type=int, default=48, help="documents of 384+ pieces")
    parser.add_argument("--short", type=int, default=400, help="short turns")
    parser.add_argument("--queries", type=int, default=100, help="single-question calls timed")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32, help="batch size of both")
    args = parser.parse_args(argv)

    directory = model_dir()
    ours = MPNetEmbedder(directory, batch_size=args.batch)
    encoders: dict[str, Embed] = {"mempp mpnet (numpy)": ours.embed}
    if importlib.util.find_spec("onnxruntime"):
        from mempp.encoders.mpnet_onnx import OnnxMPNetEmbedder

        onnx = OnnxMPNetEmbedder(directory, batch_size=args.batch)
        encoders["mempp mpnet-onnx (ONNX Runtime fp32)"] = onnx.embed
    if all(importlib.util.find_spec(m) for m in ("torch", "sentence_transformers")):
        import torch

        name = f"sentence-transformers (torch {torch.__version__}, {torch.get_num_threads()} thr)"
        encoders[name] = _sentence_transformers(str(directory), args.batch)
    # Long documents, doubled so that every one fills the 384-piece window.
    docs = [d + " " + d for d in long_documents(args.long)]
    turns = short_turns(args.short)
    questions = short_turns(args.queries, seed=2)
    window = ours._encode(docs)  # the pieces both encoders actually run
    pieces = sum(len(e.ids) for e in window)
    assert all(len(e.ids) == 384 for e in window), "a document does not fill the window"
    turn_pieces = sum(len(e.ids) for e in ours._encode(turns))

    for embed in encoders.values():
        embed(turns[:32])  # warm-up: thread pools, lazy initialisation
    # Rounds interleave the encoders, so a burst of load elsewhere hits both alike; each
    # figure is the best round.
    best: dict[str, list[float]] = {name: [0.0, 0.0, 0.0, 0.0] for name in encoders}
    for _ in range(args.repeat):
        for name, embed in encoders.items():
            for slot, (texts, units) in enumerate(((docs, pieces), (turns, len(turns)))):
                wall, cpu = _rates(embed, texts, units)
                best[name][2 * slot] = max(best[name][2 * slot], wall)
                best[name][2 * slot + 1] = max(best[name][2 * slot + 1], cpu)
    times: dict[str, list[float]] = {name: [] for name in encoders}
    cpu_times: dict[str, list[float]] = {name: [] for name in encoders}
    for question in questions:  # question by question, each encoder in turn
        for name, embed in encoders.items():
            start, cpu = time.perf_counter(), time.process_time()
            embed([question])
            times[name].append((time.perf_counter() - start) * 1000)
            cpu_times[name].append((time.process_time() - cpu) * 1000)
    latency: dict[str, tuple[float, float, float]] = {}
    for name, walls in times.items():
        walls.sort()
        p95 = walls[max(0, int(len(walls) * 0.95) - 1)]
        latency[name] = (statistics.median(walls), p95, statistics.median(cpu_times[name]))

    versions = [
        f"{m} {importlib.metadata.version(m)}"
        for m in ("numpy", "onnxruntime", "torch", "sentence-transformers")
        if importlib.util.find_spec(m.replace("-", "_"))
    ]
    print(f"{', '.join(versions)}; cores {len(os.sched_getaffinity(0))}; load {os.getloadavg()}")
    print(
        f"{len(docs)} documents x 384 pieces = {pieces} pieces; {len(turns)} turns, "
        f"{turn_pieces} pieces; {len(questions)} questions"
    )
    print(
        f"{'encoder':52} {'pieces/s':>9} {'/cpu-s':>7} {'turns/s':>8} {'/cpu-s':>7} "
        f"{'q p50 ms':>9} {'q p95 ms':>9} {'q cpu ms':>9}"
    )
    for name, (rate, rate_cpu, turn_rate, turn_cpu) in best.items():
        p50, p95, cpu = latency[name]
        print(
            f"{name:52} {rate:9.0f} {rate_cpu:7.0f} {turn_rate:8.1f} {turn_cpu:7.1f} "
            f"{p50:9.1f} {p95:9.1f} {cpu:9.1f}"
        )

    texts = _MIXED + questions[:20] + docs[:4] + turns[:20]
    first, *others = encoders
    reference = encoders[first](texts)
    for name in others:
        vectors = encoders[name](texts)
        cos = np.sum(reference * vectors, axis=1)
        print(
            f"{name} against {first}, {len(texts)} texts: max |difference| "
            f"{np.abs(reference - vectors).max():.2e}, min cosine {cos.min():.8f}"
        )


if __name__ == "__main__":
    main()
