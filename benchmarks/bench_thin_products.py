"""What one question's matrix products cost in numpy: the 24 weight products of
all-MiniLM-L6-v2 (six layers of 384x1152, 384x384, 384x1536 and 1536x384, 42 MB of float32)
for a question of 1 to 32 word pieces, on one and on two BLAS threads, and split by columns
across two Python threads of one BLAS thread each. Random weights of the model's shapes: the
cost depends on the shapes only.

    python benchmarks/bench_thin_products.py
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from threadpoolctl import threadpool_limits

_SHAPES = [(384, 1152), (384, 384), (384, 1536), (1536, 384)] * 6


def quantiles(run: Callable[[], object], repeat: int = 60) -> str:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        samples.append(1000 * (time.perf_counter() - started))
    return "{:.2f} / {:.2f}".format(*np.percentile(samples, [50, 95]))


def main() -> None:
    rng = np.random.default_rng(0)
    weights = [rng.random(shape, dtype=np.float32) for shape in _SHAPES]
    halves = [
        (
            np.ascontiguousarray(w[:, : w.shape[1] // 2]),
            np.ascontiguousarray(w[:, w.shape[1] // 2 :]),
        )
        for w in weights
    ]
    print(f"{sum(w.nbytes for w in weights) / 1e6:.1f} MB of weights; p50 / p95 ms")
    with ThreadPoolExecutor(1) as pool:
        for pieces in (1, 8, 13, 16, 32):
            x = rng.random((pieces, 1536), dtype=np.float32)

            def serial(x: np.ndarray = x) -> None:
                for w in weights:
                    x[:, : w.shape[0]] @ w

            def split(x: np.ndarray = x) -> None:
                for left, right in halves:
                    rows = x[:, : left.shape[0]]
                    out = np.empty((len(rows), left.shape[1] + right.shape[1]), np.float32)
                    other = pool.submit(np.matmul, rows, right, out=out[:, left.shape[1] :])
                    np.matmul(rows, left, out=out[:, : left.shape[1]])
                    other.result()

            with threadpool_limits(1):
                one, two_python = quantiles(serial), quantiles(split)
            with threadpool_limits(2):
                two_blas = quantiles(serial)
            print(
                f"{pieces:3d} pieces: one BLAS thread {one}   two BLAS threads {two_blas}   "
                f"two Python threads by columns {two_python}"
            )


if __name__ == "__main__":
    main()
