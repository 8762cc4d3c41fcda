"""Means over questions with 95% bootstrap intervals, overall and per category.

Overall figures are question-weighted: the plain mean over every scored question, so a large
category weighs more. Intervals are percentile bootstraps over questions with a fixed seed,
so the same rows always give the same interval. Differences between two systems use the same
resampled question sets for both (a paired bootstrap).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 0
LEVEL = 0.95


def _resample_means(values: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    # Chunked so large benchmarks do not build one huge index matrix.
    means = np.empty(resamples, dtype=np.float64)
    step = max(1, 2_000_000 // max(1, len(values)))
    for start in range(0, resamples, step):
        stop = min(resamples, start + step)
        picks = rng.integers(0, len(values), size=(stop - start, len(values)))
        means[start:stop] = values[picks].mean(axis=1)
    return means


def bootstrap_ci(
    values: Sequence[float],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    level: float = LEVEL,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean; ``None`` for no values."""
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        return None
    if data.size == 1 or resamples < 1:
        return float(data.mean()), float(data.mean())
    means = _resample_means(data, resamples, seed)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)


def summarize(
    values: Sequence[float], *, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED
) -> dict[str, float | int | None]:
    """``{"mean", "lo", "hi", "n"}`` of the non-missing values."""
    data = [float(v) for v in values if v is not None and not math.isnan(v)]
    interval = bootstrap_ci(data, resamples=resamples, seed=seed)
    return {
        "mean": float(np.mean(data)) if data else None,
        "lo": interval[0] if interval else None,
        "hi": interval[1] if interval else None,
        "n": len(data),
    }


def paired_delta(
    a: Sequence[float | None],
    b: Sequence[float | None],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> dict[str, float | int | None]:
    """Mean of ``a - b`` over questions scored in both, with a paired bootstrap interval."""
    diffs = [
        float(x) - float(y) for x, y in zip(a, b, strict=True) if x is not None and y is not None
    ]
    return summarize(diffs, resamples=resamples, seed=seed)


def aggregate(
    rows: Iterable[Mapping[str, Any]],
    metrics: Sequence[str],
    categories: Sequence[str],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> dict[str, Any]:
    """Per metric: overall and per-category summaries of one system's per-question rows."""
    rows = list(rows)
    out: dict[str, Any] = {"overall": {}, "by_category": {c: {} for c in categories}}
    for metric in metrics:
        values = [row.get(metric) for row in rows]
        if all(v is None for v in values):
            continue
        out["overall"][metric] = summarize(values, resamples=resamples, seed=seed)
        for category in categories:
            subset = [row.get(metric) for row in rows if row["category"] == category]
            out["by_category"][category][metric] = summarize(subset, resamples=resamples, seed=seed)
    return out
