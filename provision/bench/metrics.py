"""Per-request timings → ``vllm bench serve``'s metrics, under its result keys.

The definitions are those of vLLM 0.32's ``vllm/benchmarks/serve.py`` (``calculate_metrics``) and
``lib/endpoint_request_func.py``, written down in docs/bench.md:

* TTFT: request sent → first streamed chunk that carries a choice.
* ITL: the gaps between consecutive such chunks (every gap of every request is one sample).
* E2E latency (``e2el``): request sent → last chunk that carries a choice (the usage chunk is not a token).
* TPOT: ``(e2el - ttft) / (output_tokens - 1)`` per request with more than one output token.
* Throughputs divide by the benchmark's duration: ``request_throughput`` completed requests,
  ``output_throughput`` output tokens, ``total_token_throughput`` input + output tokens, per second.
* Goodput: completed requests per second whose TTFT, TPOT (0 for a one-token answer) and E2EL are all
  within their SLOs.

Statistics as numpy computes them there: mean, median, population standard deviation and linearly
interpolated percentiles; 0 for a metric without samples.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from provision.errors import InputError

DEFAULT_PERCENTILES = (90.0, 99.0)
"""Reported besides mean and median (vLLM reports p99 unless --metric-percentiles says otherwise)."""

NOT_MEASURED = ("client_queue_time", "e2el_including_client_queue")
"""vLLM's ``--percentile-metrics`` names provision does not measure."""

SLO_METRICS = ("ttft", "tpot", "e2el")
"""The request-level metrics an SLO may bound, as vLLM's ``--goodput`` names them."""


@dataclass
class RequestOutput:
    """What one request did, as the load generator saw it (seconds, ``time.perf_counter`` based)."""

    prompt_len: int = 0
    """The prompt's tokens: the server's ``usage.prompt_tokens`` when it sent usage, else the estimate."""
    output_tokens: int | None = None
    """The server's ``usage.completion_tokens``; None when it sent no usage."""
    success: bool = False
    error: str = ""
    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    latency: float = 0.0
    start_time: float = 0.0
    generated_text: str = ""

    @property
    def output_len(self) -> int:
        """Output tokens: the server's count, else one per streamed chunk (vLLM streams one token each)."""
        if self.output_tokens:
            return self.output_tokens
        return 1 + len(self.itl) if self.success else 0


def percentile(values: Sequence[float], p: float) -> float:
    """numpy's default (linear) percentile: 0 for no values, like vLLM's ``np.percentile(x or 0, p)``."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _stats(name: str, values: Sequence[float], percentiles: Sequence[float]) -> dict[str, float]:
    """``mean_<name>_ms``, ``median_``, ``std_``, ``p<P>_`` in milliseconds, vLLM's key names."""
    out = {
        f"mean_{name}_ms": (statistics.fmean(values) if values else 0.0) * 1000,
        f"median_{name}_ms": (statistics.median(values) if values else 0.0) * 1000,
        f"std_{name}_ms": (statistics.pstdev(values) if values else 0.0) * 1000,
    }
    for p in percentiles:
        word = str(int(p)) if int(p) == p else str(p)
        out[f"p{word}_{name}_ms"] = percentile(values, p) * 1000
    return out


def parse_slo(text: str, option: str = "--slo") -> dict[str, float]:
    """``ttft=500,tpot=50`` (milliseconds; ``:`` works too, as in vLLM's ``--goodput ttft:500``) → a
    mapping; InputError naming the option for anything else."""
    slo: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.replace(":", "=", 1).partition("=")
        key = key.strip().lower()
        if not sep or key not in SLO_METRICS:
            raise InputError(
                f"{option} {text}: {part!r} is not METRIC=MILLISECONDS "
                f"with METRIC one of {', '.join(SLO_METRICS)}"
            )
        try:
            ms = float(value)
        except ValueError:
            raise InputError(f"{option} {text}: {key}={value!r} is not a number of milliseconds") from None
        if not (math.isfinite(ms) and ms > 0):
            raise InputError(f"{option} {text}: {key} must be above 0 ms, not {value}")
        if key in slo:
            raise InputError(f"{option} {text}: {key} is given twice")
        slo[key] = ms
    if not slo:
        raise InputError(f"{option} {text!r}: no SLO given (e.g. ttft=500,tpot=50)")
    return slo


LATENCIES = ("ttft", "tpot", "itl", "e2el")
"""The per-request latencies, vLLM's names (``*_ttft_ms``, ...)."""


def samples(outputs: Sequence[RequestOutput]) -> dict[str, list[float]]:
    """Each latency's samples in seconds, as :func:`calculate` takes them: the completed requests' TTFT
    and E2EL, TPOT of those with more than one output token, and every ITL gap."""
    found: dict[str, list[float]] = {name: [] for name in LATENCIES}
    for out in outputs:
        if not out.success:
            continue
        if out.output_len > 1:
            found["tpot"].append((out.latency - out.ttft) / (out.output_len - 1))
        found["itl"] += out.itl
        found["ttft"].append(out.ttft)
        found["e2el"].append(out.latency)
    return found


def peaks(outputs: Sequence[RequestOutput]) -> tuple[float, int]:
    """vLLM's ``max_output_tokens_per_s`` and ``max_concurrent_requests``: the most token events, and the
    most completed requests in flight, in any one-second bucket from the first request's start."""
    done = [out for out in outputs if out.success]
    if not done:
        return 0.0, 0
    first = min(out.start_time for out in done)
    buckets = math.ceil(max(out.start_time + out.latency for out in done) - first) + 1
    tokens = [0] * buckets
    in_flight = [0] * buckets
    for out in done:
        at = out.start_time + out.ttft
        for gap in [0.0, *out.itl]:
            at += gap
            if 0 <= int(at - first) < buckets:
                tokens[int(at - first)] += 1
        for second in range(int(out.start_time - first), int(out.start_time + out.latency - first) + 1):
            in_flight[second] += 1
    return float(max(tokens)), max(in_flight)


def calculate(
    outputs: Sequence[RequestOutput],
    duration_s: float,
    *,
    slo: Mapping[str, float] | None = None,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    selected: Sequence[str] = LATENCIES,
) -> dict[str, Any]:
    """The summary of one run under vLLM's result keys (``request_goodput`` is None without an SLO);
    mean, median, std and ``percentiles`` of the ``selected`` latencies (vLLM's ``--percentile-metrics``)."""
    done = [out for out in outputs if out.success]
    total_input = sum(out.prompt_len for out in done)
    total_output = sum(out.output_len for out in done)
    no_usage = sum(out.output_tokens is None for out in done)
    found = samples(done)
    good = 0
    if slo:
        # vLLM: a one-token answer meets any TPOT SLO
        tpots = [(o.latency - o.ttft) / (o.output_len - 1) if o.output_len > 1 else 0.0 for o in done]
        per_metric = {"ttft": found["ttft"], "tpot": tpots, "e2el": found["e2el"]}
        bounded = [(per_metric[key], ms / 1000) for key, ms in slo.items()]
        good = sum(all(values[i] <= bound for values, bound in bounded) for i in range(len(done)))
    duration = duration_s if duration_s > 0 else float("nan")
    peak_tokens, peak_requests = peaks(done)
    result: dict[str, Any] = {
        "duration": duration_s,
        "completed": len(done),
        "failed": len(outputs) - len(done),
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": len(done) / duration,
        "request_goodput": good / duration if slo else None,
        "output_throughput": total_output / duration,
        "total_token_throughput": (total_input + total_output) / duration,
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_requests,
        "requests_without_usage": no_usage,
    }
    for name in LATENCIES:
        if name in selected:
            result |= _stats(name, found[name], percentiles)
    return result


def percentile_metrics(text: str) -> tuple[str, ...]:
    """``--percentile-metrics ttft,tpot``: vLLM's metric names; InputError naming the option otherwise."""
    names = [part.strip() for part in text.split(",")]
    for name in names:
        if not name:
            raise InputError(f"--percentile-metrics {text}: an empty item (e.g. ttft,tpot,itl)")
        if name in NOT_MEASURED:
            raise InputError(
                f"--percentile-metrics {text}: provision does not measure {name}; "
                f"one of {', '.join(LATENCIES)}"
            )
        if name not in LATENCIES:
            raise InputError(f"--percentile-metrics {text}: {name!r} is not one of {', '.join(LATENCIES)}")
    return tuple(dict.fromkeys(names))


def metric_percentiles(text: str) -> tuple[float, ...]:
    """``--metric-percentiles 50,90,99``: numbers from 0 to 100; InputError naming the option otherwise."""
    found: list[float] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise InputError(f"--metric-percentiles {text}: an empty item (e.g. 50,90,99)")
        try:
            value = float(part)
        except ValueError:
            value = math.nan
        if not 0 <= value <= 100:
            raise InputError(f"--metric-percentiles {text}: {part!r} is not a percentile from 0 to 100")
        found.append(value)
    return tuple(dict.fromkeys(found))


def per_request(outputs: Sequence[RequestOutput]) -> dict[str, list[Any]]:
    """Every request's timings and text, under the names vLLM saves them (``--save-detailed``)."""
    return {
        "generated_texts": [o.generated_text for o in outputs],
        "input_lens": [o.prompt_len for o in outputs],
        "output_lens": [o.output_len for o in outputs],
        "ttfts": [o.ttft for o in outputs],
        "itls": [o.itl for o in outputs],
        "latencies": [o.latency for o in outputs],
        "start_times": [o.start_time for o in outputs],
        "errors": [o.error for o in outputs],
    }
