"""``provision bench``'s metrics on scripted timings, against the definitions of vLLM 0.32's
``vllm/benchmarks/serve.py`` (``calculate_metrics``): the expected figures are worked out by hand from
them."""

from __future__ import annotations

import pytest

from provision.bench.metrics import RequestOutput, calculate, parse_slo, percentile
from provision.errors import InputError

pytestmark = pytest.mark.unit


def _runs() -> list[RequestOutput]:
    return [
        # sent at 0: first token at 100 ms, then two more 20 and 40 ms apart; 3 tokens by usage
        RequestOutput(prompt_len=10, output_tokens=3, success=True, ttft=0.1, itl=[0.02, 0.04], latency=0.16),
        RequestOutput(prompt_len=20, output_tokens=2, success=True, ttft=0.3, itl=[0.05], latency=0.35),
        RequestOutput(prompt_len=7, success=False, error="HTTP 500: boom"),
    ]


def test_counts_and_throughputs_divide_by_the_duration() -> None:
    got = calculate(_runs(), 2.0)
    assert (got["completed"], got["failed"]) == (2, 1)
    assert (got["total_input_tokens"], got["total_output_tokens"]) == (
        30,
        5,
    )  # a failed prompt is not counted
    assert got["request_throughput"] == pytest.approx(1.0)
    assert got["output_throughput"] == pytest.approx(2.5)
    assert got["total_token_throughput"] == pytest.approx(17.5)
    assert got["request_goodput"] is None  # no SLO given, as vLLM reports it


def test_ttft_tpot_itl_e2el_as_vllm_defines_them() -> None:
    got = calculate(_runs(), 2.0)
    # TTFT per request; p99/p90 interpolated linearly between the two samples (numpy's default)
    assert got["mean_ttft_ms"] == pytest.approx(200.0)
    assert got["median_ttft_ms"] == pytest.approx(200.0)
    assert got["p90_ttft_ms"] == pytest.approx(280.0)
    assert got["p99_ttft_ms"] == pytest.approx(298.0)
    assert got["std_ttft_ms"] == pytest.approx(100.0)  # population std
    # TPOT excludes the first token: (e2el - ttft) / (tokens - 1) = 30 ms and 50 ms
    assert got["mean_tpot_ms"] == pytest.approx(40.0)
    assert got["median_tpot_ms"] == pytest.approx(40.0)
    # ITL: every gap of every request is one sample
    assert got["mean_itl_ms"] == pytest.approx((20 + 40 + 50) / 3)
    assert got["median_itl_ms"] == pytest.approx(40.0)
    assert got["median_e2el_ms"] == pytest.approx(255.0)


def test_a_one_token_answer_has_no_tpot_and_meets_any_tpot_slo() -> None:
    one = RequestOutput(prompt_len=5, output_tokens=1, success=True, ttft=0.5, latency=0.5)
    got = calculate([one], 1.0, slo={"tpot": 1.0})
    assert got["mean_tpot_ms"] == 0.0 and got["p99_tpot_ms"] == 0.0
    assert got["request_goodput"] == pytest.approx(1.0)


def test_goodput_counts_requests_within_every_slo() -> None:
    assert calculate(_runs(), 2.0, slo={"ttft": 200})["request_goodput"] == pytest.approx(0.5)
    assert calculate(_runs(), 2.0, slo={"ttft": 300, "tpot": 50})["request_goodput"] == pytest.approx(1.0)
    assert calculate(_runs(), 2.0, slo={"ttft": 300, "tpot": 40})["request_goodput"] == pytest.approx(0.5)
    assert calculate(_runs(), 2.0, slo={"e2el": 100})["request_goodput"] == 0.0


def test_without_usage_one_token_per_streamed_chunk_and_it_is_counted() -> None:
    blind = RequestOutput(prompt_len=4, success=True, ttft=0.1, itl=[0.01, 0.01, 0.01], latency=0.13)
    got = calculate([blind], 1.0)
    assert got["total_output_tokens"] == 4
    assert got["requests_without_usage"] == 1
    assert got["mean_tpot_ms"] == pytest.approx(10.0)


def test_no_completed_request_gives_zeros_not_an_error() -> None:
    got = calculate([RequestOutput(error="refused")], 1.0)
    assert (got["completed"], got["failed"], got["median_ttft_ms"], got["output_throughput"]) == (
        0,
        1,
        0.0,
        0.0,
    )


def test_percentile_is_numpys_linear_one() -> None:
    assert percentile([1, 2, 3, 4], 90) == pytest.approx(3.7)  # numpy.percentile([1, 2, 3, 4], 90)
    assert percentile([15, 20, 35, 40, 50], 40) == pytest.approx(29.0)
    assert percentile([], 99) == 0.0


def test_slo_parsing() -> None:
    assert parse_slo("ttft=500,tpot=50") == {"ttft": 500.0, "tpot": 50.0}
    assert parse_slo("ttft:500, e2el=2000") == {"ttft": 500.0, "e2el": 2000.0}  # vLLM's KEY:VALUE too


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ttft", "'ttft' is not METRIC=MILLISECONDS with METRIC one of ttft, tpot, e2el"),
        ("itl=5", "'itl=5' is not METRIC=MILLISECONDS"),
        ("ttft=fast", "ttft='fast' is not a number of milliseconds"),
        ("ttft=-1", "ttft must be above 0 ms, not -1"),
        ("ttft=1,ttft=2", "ttft is given twice"),
        (",", "no SLO given"),
    ],
)
def test_bad_slo_names_the_option(text: str, message: str) -> None:
    with pytest.raises(InputError, match=r"^--slo ") as info:
        parse_slo(text)
    assert message in str(info.value)
    assert info.value.exit_code == 2
