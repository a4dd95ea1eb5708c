"""Duration histograms of the dashboard rollup (jobs.dashboard.rollup): log-spaced buckets of
duration_ms, bucket i holding 1 + ms in [e^(i/SCALE), e^((i+1)/SCALE)), 2 % wide, stored as
parallel lists {"b": buckets, "n": steps}; percentiles read from them are within one bucket
(2 %) of the exact value."""

import math
from collections.abc import Iterable, Sequence

# Buckets per e-fold of (1 + duration_ms): bucket i spans a factor e^(1/50) = 1.0202.
SCALE = 50


def bucket_of(duration_ms: float) -> int:
    """The histogram bucket of a duration (the SQL above computes the same)."""
    return math.floor(math.log(1 + max(duration_ms, 0)) * SCALE)


def merge(histograms: Iterable[dict | None]) -> dict[int, int]:
    """Stored histograms ({"b": [bucket, ...], "n": [steps, ...]}) summed: {bucket: steps}.
    Parallel lists of small integers, because a week holds thousands of them to merge."""
    stored = [histogram for histogram in histograms if histogram and histogram["b"]]
    if not stored:
        return {}
    total = [0] * (max(max(histogram["b"]) for histogram in stored) + 1)
    for histogram in stored:
        for bucket, count in zip(histogram["b"], histogram["n"], strict=True):
            total[bucket] += count
    return {bucket: count for bucket, count in enumerate(total) if count}


def percentiles(histogram: dict[int, int], fractions: Sequence[float]) -> list[float]:
    """percentile_cont of each fraction estimated from a histogram: the values at the two ranks
    around fraction*(n-1), each spread evenly inside its bucket, linearly interpolated. Each is
    inside its bucket, as the exact one is, so the error is under one bucket width (2 %)."""
    buckets = sorted(histogram.items())
    total = sum(count for _bucket, count in buckets)
    if not total:
        return [0.0 for _ in fractions]

    def value_at(rank: int) -> float:
        before = 0
        for bucket, count in buckets:
            if rank < before + count:
                low, high = math.exp(bucket / SCALE) - 1, math.exp((bucket + 1) / SCALE) - 1
                return max(0.0, low + (high - low) * (rank - before + 0.5) / count)
            before += count
        raise ValueError(rank)

    values = []
    for fraction in fractions:
        position = fraction * (total - 1)
        lower = int(position)
        value = value_at(lower)
        if position > lower:
            value += (value_at(lower + 1) - value) * (position - lower)
        values.append(value)
    return values
