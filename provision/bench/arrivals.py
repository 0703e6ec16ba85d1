"""When each request is sent: ``vllm bench serve``'s arrival process (``get_request`` in its serve.py).

At a finite ``--request-rate`` R the gaps between requests are drawn from a gamma distribution with shape
``burstiness`` and scale ``1 / (R * burstiness)`` (mean 1/R; burstiness 1 is a Poisson process, below 1
burstier, above 1 more even; infinite burstiness is a constant gap 1/R). The cumulative times are then
rescaled so the last request leaves at ``N / R``, as vLLM does to keep runs of different seeds comparable.
An infinite rate sends every request at once (``--max-concurrency`` then bounds what is in flight).
"""

from __future__ import annotations

import math
import random


def arrival_times(count: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """Seconds after the start at which each of ``count`` requests is sent, non-decreasing."""
    if count <= 0:
        return []
    if not burstiness > 0:
        raise ValueError(f"burstiness must be above 0, not {burstiness}")
    if math.isinf(rate):
        return [0.0] * count
    if not rate > 0:
        raise ValueError(f"request rate must be above 0, not {rate}")
    rng = random.Random(seed)
    gaps = [
        1.0 / rate if math.isinf(burstiness) else rng.gammavariate(burstiness, 1.0 / (rate * burstiness))
        for _ in range(count)
    ]
    times: list[float] = []
    total = 0.0
    for gap in gaps:
        total += gap
        times.append(total)
    if times[-1] > 0:
        scale = (count / rate) / times[-1]
        times = [t * scale for t in times]
    return times
