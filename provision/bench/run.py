"""One benchmark run, or a sweep of them, against one server: warm-up, arrivals, bounded concurrency, an
overall timeout, then the metrics and the energy of each run's window.

Every run stops by itself: after its ``--num-prompts`` requests, or at ``--timeout`` (requests still out
then are cancelled and count as failed). Warm-up requests go first and are not counted. In a sweep the same
prompts are sent at each point (one ``--max-concurrency`` or ``--request-rate`` after the other); the power
sampler runs once across the sweep and each point's window is integrated on its own.
"""

from __future__ import annotations

import asyncio
import gc
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from provision.bench import metrics, power
from provision.bench.arrivals import arrival_times
from provision.bench.client import Target, Unreachable, send, session
from provision.bench.datasets import SampleRequest
from provision.bench.metrics import RequestOutput

Progress = Callable[[int, int], None]
"""Called with (requests finished, requests in the run) as each request ends."""


@dataclass(frozen=True)
class Workload:
    requests: Sequence[SampleRequest]
    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    ignore_eos: bool = False
    num_warmups: int = 0
    timeout_s: float = 3600.0
    seed: int = 0
    slo: dict[str, float] | None = None
    percentiles: tuple[float, ...] = metrics.DEFAULT_PERCENTILES
    """vLLM's ``--metric-percentiles``."""
    selected: tuple[str, ...] = metrics.LATENCIES
    """vLLM's ``--percentile-metrics``: the latencies reported."""
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    """Sampling parameters and ``--extra-body``, merged into every request's body."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Result keys the command line sets (``label``, ``--metadata``, ``model_id``, ``tokenizer_id``)."""


@dataclass
class RunResult:
    """One run: its summary (vLLM's keys, plus energy) and every request's timings."""

    summary: dict[str, Any]
    outputs: list[RequestOutput]
    window: tuple[float, float]
    """Wall-clock start and end (seconds since the epoch), for the power integration."""

    @property
    def failures(self) -> list[str]:
        return [o.error for o in self.outputs if not o.success]

    def saved(self, detailed: bool = True) -> dict[str, Any]:
        """What ``--save-result`` writes: the summary and, under vLLM's names, every request's timings and
        text (``--save-detailed``) or, as vLLM keeps them without it, their latencies only."""
        timings = metrics.per_request(self.outputs)
        return {**self.summary, **(timings if detailed else {"latencies": timings["latencies"]})}


async def _measure(
    target: Target, workload: Workload, progress: Progress | None
) -> tuple[list[RequestOutput], float, tuple[float, float]]:
    count = len(workload.requests)
    concurrency = workload.max_concurrency
    pool = concurrency or min(count, 1000)
    async with session(pool) as client:
        gate = asyncio.Semaphore(concurrency or count or 1)

        async def bounded(request: SampleRequest) -> RequestOutput:
            async with gate:
                return await send(
                    client, target, request, ignore_eos=workload.ignore_eos, extra_body=workload.extra_body
                )

        if workload.num_warmups and workload.requests:
            warming = asyncio.gather(*(bounded(workload.requests[0]) for _ in range(workload.num_warmups)))
            try:
                warm = await asyncio.wait_for(warming, workload.timeout_s)
            except TimeoutError:
                late = f"did not finish within --timeout {workload.timeout_s:g} s"
                raise Unreachable(f"{target.url}: the warm-up requests {late}") from None
            if not any(w.success for w in warm):
                raise Unreachable(f"{target.url}: the warm-up request failed: {warm[0].error}")

        times = arrival_times(count, workload.request_rate, workload.burstiness, workload.seed)
        finished = 0
        started = time.perf_counter()
        wall_start = time.time()

        async def one(request: SampleRequest, at: float) -> RequestOutput:
            nonlocal finished
            wait = started + at - time.perf_counter()
            if wait > 0:  # all at once (rate inf): straight on, without a round of the loop each
                await asyncio.sleep(wait)
            out = await bounded(request)
            finished += 1
            if progress is not None:
                progress(finished, count)
            return out

        tasks = [asyncio.create_task(one(r, at)) for r, at in zip(workload.requests, times, strict=True)]
        if tasks:
            await asyncio.wait(tasks, timeout=workload.timeout_s)
        outputs: list[RequestOutput] = []
        for task, request in zip(tasks, workload.requests, strict=True):
            if task.done() and not task.cancelled() and task.exception() is None:
                outputs.append(task.result())
                continue
            error = f"not finished within --timeout {workload.timeout_s:g} s"
            if task.done() and not task.cancelled():
                error = f"{type(task.exception()).__name__}: {task.exception()}"
            task.cancel()
            outputs.append(RequestOutput(prompt_len=request.prompt_len, error=error))
        await asyncio.gather(*tasks, return_exceptions=True)
        duration = time.perf_counter() - started
        return outputs, duration, (wall_start, time.time())


def config(target: Target, workload: Workload, tokenizer_id: str | None) -> dict[str, Any]:
    """The run's settings under vLLM's result keys."""
    return {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": target.backend_name,  # vLLM writes its --backend here too
        "backend": target.backend_name,
        "label": None,
        "base_url": target.url,
        "model_id": target.model,
        "tokenizer_id": tokenizer_id or "server",
        **workload.meta,
        "num_prompts": len(workload.requests),
        "request_rate": workload.request_rate if math.isfinite(workload.request_rate) else "inf",
        "burstiness": workload.burstiness,
        "max_concurrency": workload.max_concurrency,
        "ignore_eos": workload.ignore_eos,
        "num_warmups": workload.num_warmups,
    }


def run_one(
    target: Target, workload: Workload, *, progress: Progress | None = None, tokenizer_id: str | None = None
) -> RunResult:
    """One run, measured (no energy yet: :func:`with_energy`)."""
    # What the process holds before the run (the CLI's imports, the prompts) is frozen out of the garbage
    # collector's scans: a full collection walks it all, which costs the client CPU per request and puts
    # pauses into the timings it takes.
    gc.collect()
    gc.freeze()
    try:
        outputs, duration, window = asyncio.run(_measure(target, workload, progress))
    finally:
        gc.unfreeze()
    summary = {
        **config(target, workload, tokenizer_id),
        **metrics.calculate(
            outputs, duration, slo=workload.slo, percentiles=workload.percentiles, selected=workload.selected
        ),
    }
    return RunResult(summary, outputs, window)


def with_energy(
    result: RunResult,
    trace: power.PowerTrace | None,
    problems: Sequence[str],
    source: str,
    why_none: str,
    label: str | None = None,
) -> RunResult:
    """The run's summary with its energy over its own window (``why_none`` when no sampler ran)."""
    if trace is None:
        found = power.not_measured(why_none)
    else:
        tokens = int(result.summary["total_output_tokens"])
        found = power.energy(trace, *result.window, tokens, source, label)
        if found.joules is None and problems:
            found = replace(found, note=f"{found.note}; {'; '.join(problems[:3])}")
    result.summary |= found.as_dict()
    return result


def sweep(
    target: Target,
    workload: Workload,
    points: Sequence[Workload],
    *,
    sampler: power.PowerSampler | None,
    why_no_power: str,
    progress: Progress | None = None,
    tokenizer_id: str | None = None,
) -> list[RunResult]:
    """Each of ``points`` (a workload each; one for a plain run) in turn, the power sampled across all."""
    results: list[RunResult] = []
    if sampler is not None:
        sampler.start()
    try:
        for point in points or [workload]:
            results.append(run_one(target, point, progress=progress, tokenizer_id=tokenizer_id))
    finally:
        trace, problems = sampler.stop() if sampler is not None else (None, [])
    source = sampler.source if sampler is not None else ""
    label = sampler.label if sampler is not None else None
    return [with_energy(r, trace, problems, source, why_no_power, label) for r in results]
