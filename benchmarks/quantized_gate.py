"""The recall gate for a quantized question encoder: ``python -m mempp.bench`` with the
questions encoded by a quantized ONNX graph (``bench_quantize.py`` writes them) and the
documents left as the float32 encoder stored them.

The question encoder is the float32 one (``--encoder``: ``mpnet-onnx`` or ``minilm-onnx``)
with its ONNX Runtime session swapped for one of ``--model``, under the float32 encoder's name,
so the bench opens the cached float32 store of that name. Each question is encoded alone, as a
search encodes it: dynamic quantization scales the activations per call, so a question's
vector in a batch would not be the one a user's search gets.

The bench caches question vectors under the encoder's name too, so ``--cache`` must be a
copy of the float32 cache without its ``questions-*.npy`` (checked: the run refuses
otherwise), and must be a copy in any case, since a run may migrate the stores it opens:

    cp -r /work/mpnet-cache/orgmembench-2bab005d3ea537ce /tmp/q8/cache-q8/
    rm /tmp/q8/cache-q8/*/questions-*.npy
    PYTHONPATH=src:benchmarks python benchmarks/quantized_gate.py \
        --model /tmp/q8/models/dyn-rr-sq5-nodown.onnx --encoder mpnet-onnx -- \
        orgmembench --data ../shared/datasets --encoder mpnet-onnx --half dev \
        --systems mempp-default vector mempp-paper --sweep 0 --no-plots \
        --cache /tmp/q8/cache-q8 --out /tmp/q8/runs/org-q8-dev
    python benchmarks/compare_bench_runs.py /tmp/q8/runs/org-fp32-dev/results.json \
        /tmp/q8/runs/org-q8-dev/results.json
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import mempp.encoders as encoders
from bench_quantize import session


class SwappedSession:
    """The float32 encoder with another ONNX graph; one text per call."""

    def __init__(self, encoder: str, model: Path, threads: int) -> None:
        self._inner: Any = encoders.embedder_named(encoder)
        self._inner._session = session(model, threads)
        self.texts = 0

    @property
    def name(self) -> str:
        return str(self._inner.name)

    @property
    def dim(self) -> int:
        return int(self._inner.dim)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.texts += len(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.concatenate([self._inner.embed([text]) for text in texts])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--encoder", default="mpnet-onnx", choices=("mpnet-onnx", "minilm-onnx"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("bench", nargs=argparse.REMAINDER, help="-- then mempp.bench arguments")
    args = parser.parse_args()
    bench_args = args.bench[1:] if args.bench[:1] == ["--"] else args.bench
    cache = Path(bench_args[bench_args.index("--cache") + 1])
    stale = sorted(cache.glob("*/questions-*.npy"))
    if stale:
        raise SystemExit(f"{stale[0]}: cached question vectors would be reused; remove them")
    swapped = SwappedSession(args.encoder, args.model, args.threads)
    original = encoders.embedder_named

    def named(name: str | None = None) -> Any:
        return swapped if name in (None, args.encoder) else original(name)

    encoders.embedder_named = named  # the bench imports it from the module at run time
    from mempp.bench.cli import main as bench_main

    code = bench_main(bench_args)
    print(f"quantized question encoder: {swapped.texts} texts encoded", file=sys.stderr)
    for leftover in cache.glob("*/questions-*.npy"):  # never let a later run reuse them
        leftover.unlink()
    return code


if __name__ == "__main__":
    raise SystemExit(main())
