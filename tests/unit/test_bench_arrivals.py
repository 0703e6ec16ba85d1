"""The arrival process of ``provision bench``: vLLM's gamma arrivals (``get_request`` in its serve.py)."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest

from provision.bench.arrivals import arrival_times

pytestmark = pytest.mark.unit


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip([0.0, *times], times, strict=False)]


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_the_last_request_leaves_at_n_over_r_and_times_only_grow(burstiness: float) -> None:
    times = arrival_times(2000, 10.0, burstiness, seed=3)
    assert len(times) == 2000
    assert times[-1] == pytest.approx(200.0)  # rescaled as vLLM does: N / R
    assert all(b >= a >= 0 for a, b in itertools.pairwise(times))
    assert statistics.fmean(_gaps(times)) == pytest.approx(0.1)


def test_burstiness_is_the_gamma_shape_coefficient_of_variation_one_over_sqrt() -> None:
    # gamma(k, theta): CV = 1 / sqrt(k); Poisson (k = 1) has CV 1
    for burstiness in (0.25, 1.0, 4.0):
        gaps = _gaps(arrival_times(20000, 5.0, burstiness, seed=1))
        cv = statistics.pstdev(gaps) / statistics.fmean(gaps)
        assert cv == pytest.approx(1 / math.sqrt(burstiness), rel=0.06), burstiness


def test_infinite_rate_sends_all_at_once_and_infinite_burstiness_evenly() -> None:
    assert arrival_times(5, math.inf) == [0.0] * 5
    assert arrival_times(4, 2.0, math.inf) == pytest.approx([0.5, 1.0, 1.5, 2.0])


def test_the_same_seed_gives_the_same_arrivals() -> None:
    assert arrival_times(50, 3.0, 0.5, seed=7) == arrival_times(50, 3.0, 0.5, seed=7)
    assert arrival_times(50, 3.0, 0.5, seed=7) != arrival_times(50, 3.0, 0.5, seed=8)


def test_no_request_no_arrival_and_bad_values_refused() -> None:
    assert arrival_times(0, 1.0) == []
    with pytest.raises(ValueError, match="burstiness must be above 0"):
        arrival_times(3, 1.0, 0.0)
    with pytest.raises(ValueError, match="request rate must be above 0"):
        arrival_times(3, 0.0)
