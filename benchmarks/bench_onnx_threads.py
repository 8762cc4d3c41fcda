"""ONNX Runtime intra-op threads for an encoder: one thread a run, two sleeping between
operators (the default on two cores or more, ``mempp.encoders.onnx_graph.run_threads``), and
two spinning, taking turns in one process.

Not a test: run it, read the figures. For each variant: a lone question (wall and CPU ms,
p50 / p95), 2 and 4 threads asking at once (questions/s, latency, CPU per question), and a
batch of mail-sized texts spread over ``workers`` callers (texts per wall and per CPU second).
Questions are the scale bench's (``bench_scale.Corpus``); the texts six of them joined.

    PYTHONPATH=src:benchmarks python benchmarks/bench_onnx_threads.py --rounds 2
    PYTHONPATH=src:benchmarks python benchmarks/bench_onnx_threads.py --encoder mpnet-onnx
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Callable

from bench_scale import Corpus
from mempp.encoders import embedder_named


def p50_p95(samples: list[float]) -> str:
    ordered = sorted(samples)
    return f"{statistics.median(ordered):.1f}/{ordered[int(0.95 * (len(ordered) - 1))]:.1f}"


def session(path: str, threads: int, spin: bool) -> object:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if not spin:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])


def lone(embed: Callable[[list[str]], object], questions: list[str]) -> str:
    wall, cpu = [], []
    for question in questions:
        began, began_cpu = time.perf_counter(), time.process_time()
        embed([question])
        wall.append(1000 * (time.perf_counter() - began))
        cpu.append(1000 * (time.process_time() - began_cpu))
    return f"lone question wall {p50_p95(wall)} ms, CPU {p50_p95(cpu)} ms"


def concurrent(embed: Callable[[list[str]], object], questions: list[str], askers: int) -> str:
    latencies: list[float] = []
    share = len(questions) // askers

    def ask(part: list[str]) -> None:
        for question in part:
            began = time.perf_counter()
            embed([question])
            latencies.append(1000 * (time.perf_counter() - began))

    parts = [questions[i * share : (i + 1) * share] for i in range(askers)]
    began, began_cpu = time.perf_counter(), time.process_time()
    threads = [threading.Thread(target=ask, args=(part,)) for part in parts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds, cpu = time.perf_counter() - began, time.process_time() - began_cpu
    return (
        f"{askers} askers {len(latencies) / seconds:.0f} questions/s, latency "
        f"{p50_p95(latencies)} ms, CPU {1000 * cpu / len(latencies):.2f} ms a question"
    )


def batch(embed: Callable[[list[str]], object], texts: list[str], workers: int) -> str:
    began, began_cpu = time.perf_counter(), time.process_time()
    embed(texts)
    seconds, cpu = time.perf_counter() - began, time.process_time() - began_cpu
    return (
        f"{len(texts)} texts on {workers} caller(s): {len(texts) / seconds:.1f}/s, "
        f"{len(texts) / cpu:.1f} per CPU-s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--encoder", default="minilm-onnx", choices=["minilm-onnx", "mpnet-onnx"])
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--texts", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    encoder = embedder_named(args.encoder)
    path = encoder._session._model_path  # type: ignore[attr-defined]  # the cached graph
    variants = {
        "1 thread": (session(path, 1, spin=True), 2),
        "2 threads, sleeping": (session(path, 2, spin=False), 1),
        "2 threads, sleeping, 2 callers": (session(path, 2, spin=False), 2),
        "2 threads, spinning": (session(path, 2, spin=True), 1),
    }
    corpus = Corpus(1)
    questions = corpus.questions(args.questions)
    texts = [
        " ".join(questions[(i + j) % len(questions)] for j in range(6)) for i in range(args.texts)
    ]
    for round_number in range(args.rounds):
        print(f"round {round_number + 1}, load average {os.getloadavg()[0]:.1f}")
        for name, (variant, workers) in variants.items():
            encoder._session = variant  # type: ignore[attr-defined]
            encoder._workers = workers  # type: ignore[attr-defined]
            figures = [lone(encoder.embed, questions)]
            if "callers" not in name:
                figures += [concurrent(encoder.embed, questions, n) for n in (2, 4)]
            figures.append(batch(encoder.embed, texts, workers))
            print(f"  {name}: " + "; ".join(figures))


if __name__ == "__main__":
    main()
