"""Energy per token: NPU power sampled on the serving nodes during a run, integrated over time.

Each NPU's samples ``(t, W)`` are integrated with the trapezoid rule over the run's window ``[t0, t1]``
(the power at the window's edges interpolated between the samples around them); the joules of all NPUs of
the instance, divided by the run's output tokens, are its J/token. That counts what the NPUs draw while they
serve, idle stretches included: the energy an operator pays per token, not a kernel's marginal cost.

When the samples cover less of the window than :data:`MIN_COVERAGE`, no figure is given (the reason says
so); between that and full coverage the mean power over the covered part stands for the rest. The
timestamps are the nodes' clocks and the window the controller's: the two must agree (NTP) to well
within the sampling interval.

A sampler (:class:`PowerSampler`) starts before the run and hands its samples back after it:
:class:`NpuSmiSampler` runs ``npu-smi info -t power -i N`` in a loop on each node over the house's
ad-hoc runner (:func:`provision.runner.run.run_module`) and parses it with
:func:`provision.ascend.npu_smi.parse_npu_smi_power`; tests use :class:`ScriptedSampler`.
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from provision.ascend.npu_smi import ParseError, parse_npu_smi_power

MIN_COVERAGE = 0.9
"""The share of the run the samples must span for a J/token figure."""
DEFAULT_INTERVAL_S = 1.0

Sample = tuple[float, float]
"""(seconds since the epoch, watts)"""
PowerTrace = dict[str, list[Sample]]
"""Samples per NPU, keyed ``"<host> NPU <id>"``."""


@dataclass(frozen=True)
class Energy:
    """The energy of one run, or why there is none (``joules`` None and ``note`` says why)."""

    joules: float | None
    j_per_token: float | None
    interval_s: float | None
    """The median gap between two samples of one NPU: the sampling interval achieved."""
    npus: int
    coverage: float
    note: str
    source: str = ""
    label: str | None = None
    """What the inventory says of these NPUs' figures (``provision_power_label``, e.g. ``simulated``)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "energy_j": self.joules,
            "j_per_output_token": self.j_per_token,
            "power_sample_interval_s": self.interval_s,
            "power_npus": self.npus,
            "power_coverage": round(self.coverage, 3),
            "power_source": self.source,
            "power_label": self.label,
            "energy_note": self.note,
        }


def not_measured(why: str) -> Energy:
    return Energy(None, None, None, 0, 0.0, why)


def integrate(samples: Sequence[Sample], t0: float, t1: float) -> tuple[float, float]:
    """(joules, seconds covered) of one NPU's samples over ``[t0, t1]``: trapezoids between samples, the
    edges interpolated; nothing is assumed outside the samples' span."""
    points = sorted(samples)
    start, end = max(t0, points[0][0]) if points else t0, min(t1, points[-1][0]) if points else t0
    if len(points) < 2 or end <= start:
        return 0.0, 0.0

    def at(t: float) -> float:
        for (ta, wa), (tb, wb) in itertools.pairwise(points):
            if ta <= t <= tb:
                return wa if tb == ta else wa + (wb - wa) * (t - ta) / (tb - ta)
        return points[-1][1]

    inner = [(t, w) for t, w in points if start < t < end]
    line = [(start, at(start)), *inner, (end, at(end))]
    joules = sum((tb - ta) * (wa + wb) / 2 for (ta, wa), (tb, wb) in itertools.pairwise(line))
    return joules, end - start


def energy(
    trace: Mapping[str, Sequence[Sample]],
    t0: float,
    t1: float,
    output_tokens: int,
    source: str = "",
    label: str | None = None,
) -> Energy:
    """The run's energy and J/token from every NPU's samples over ``[t0, t1]``."""
    window = t1 - t0
    if not trace:
        return not_measured("no power samples")
    gaps = [b[0] - a[0] for s in trace.values() for a, b in zip(sorted(s), sorted(s)[1:], strict=False)]
    interval = statistics.median(gaps) if gaps else None
    total = 0.0
    coverages: list[float] = []
    for samples in trace.values():
        joules, covered = integrate(samples, t0, t1)
        coverages.append(covered / window if window > 0 else 0.0)
        if covered > 0:
            total += joules * window / covered  # the covered part's mean power for the rest
    coverage = min(coverages) if coverages else 0.0
    if coverage < MIN_COVERAGE:
        return Energy(
            None,
            None,
            interval,
            len(trace),
            coverage,
            f"power samples cover {coverage:.0%} of the run (need {MIN_COVERAGE:.0%}): "
            "run longer, or sample faster",
            source,
            label,
        )
    if output_tokens <= 0:
        return Energy(total, None, interval, len(trace), coverage, "no output tokens", source, label)
    note = f"{len(trace)} NPU(s), sampled every {interval:.2f} s" if interval else f"{len(trace)} NPU(s)"
    return Energy(total, total / output_tokens, interval, len(trace), coverage, note, source, label)


class PowerSampler(Protocol):
    """Samples power from :meth:`start` until :meth:`stop`, which returns them (and any problem)."""

    source: str
    label: str | None

    def start(self) -> None: ...

    def stop(self) -> tuple[PowerTrace, list[str]]: ...


@dataclass
class ScriptedSampler:
    """Hands back a fixed trace (tests, replays)."""

    trace: PowerTrace
    problems: list[str] = field(default_factory=list)
    source: str = "scripted"
    label: str | None = None
    started: bool = False

    def start(self) -> None:
        self.started = True

    def stop(self) -> tuple[PowerTrace, list[str]]:
        return self.trace, self.problems


# ------------------------------------------------------------------------------------------ npu-smi


_MARK = "@@"


def sampler_script(devices: Sequence[int], interval_s: float, stop_file: str, deadline: int) -> str:
    """The shell loop run on a node: ``@@ <epoch> <npu>`` then ``npu-smi info -t power -i <npu>``'s output
    for each NPU, every ``interval_s``, until ``stop_file`` appears or the epoch ``deadline`` passes.
    (No ``name=value`` in it: an ad-hoc shell command is read as Ansible's key=value arguments.)"""
    ids = " ".join(str(int(d)) for d in devices)
    return (
        f'while [ ! -e {stop_file} ] && [ "$(date +%s)" -lt {deadline} ]; do '
        f'for d in {ids}; do echo "{_MARK} $(date +%s.%N) $d"; npu-smi info -t power -i "$d" 2>&1; done; '
        f"sleep {interval_s:g}; done; rm -f {stop_file}"
    )


def parse_samples(host: str, stdout: str) -> tuple[PowerTrace, list[str]]:
    """The samples in a node's sampler output; one problem per NPU whose output did not parse."""
    trace: PowerTrace = {}
    problems: dict[str, str] = {}
    blocks = stdout.split(f"{_MARK} ")
    for block in blocks[1:]:
        head, _, body = block.partition("\n")
        parts = head.split()
        if len(parts) != 2:
            continue
        key = f"{host} NPU {parts[1]}"
        try:
            when = float(parts[0])
            watts = parse_npu_smi_power(body).power_w
        except (ValueError, ParseError) as exc:
            problems.setdefault(key, f"{key}: {exc}")
            continue
        if watts is None:
            problems.setdefault(key, f"{key}: npu-smi printed no power (NA)")
            continue
        trace.setdefault(key, []).append((when, watts))
    return trace, list(problems.values())


@dataclass
class NpuSmiSampler:
    """``npu-smi info -t power -i N`` in a loop on each node (``devices``: host -> NPU ids), through
    ansible-runner; one ad-hoc run per node for the whole benchmark, stopped by a file it waits for."""

    inventory: Path
    devices: Mapping[str, Sequence[int]]
    interval_s: float = DEFAULT_INTERVAL_S
    max_s: float = 3600.0
    start_timeout_s: float = 120.0
    settle_s: float = 3.0
    source: str = ""
    label: str | None = None
    _threads: list[threading.Thread] = field(default_factory=list)
    _outputs: dict[str, str] = field(default_factory=dict)
    _problems: list[str] = field(default_factory=list)
    _stop_file: str = field(default_factory=lambda: f"/tmp/provision-bench-{uuid.uuid4().hex}.stop")

    def __post_init__(self) -> None:
        if not self.source:
            shown = "; ".join(f"{h} NPU {','.join(map(str, d))}" for h, d in self.devices.items())
            self.source = f"npu-smi info -t power ({shown})"

    def start(self) -> None:
        deadline = int(time.time() + self.max_s)
        started: list[threading.Event] = []
        for host, devices in self.devices.items():
            event = threading.Event()
            started.append(event)
            script = sampler_script(devices, self.interval_s, self._stop_file, deadline)
            thread = threading.Thread(target=self._sample, args=(host, script, event), daemon=True)
            thread.start()
            self._threads.append(thread)
        until = time.monotonic() + self.start_timeout_s
        for event in started:
            event.wait(max(0.0, until - time.monotonic()))
        # The task started on every node; its module takes a moment more to start (measured: ~1.5 s on a
        # local connection): let each node take its first sample before the run begins.
        time.sleep(self.interval_s + self.settle_s)

    def _sample(self, host: str, script: str, started: threading.Event) -> None:
        from provision.runner.events import Outcome, TaskEvent, on_tasks
        from provision.runner.run import run_module

        def handle(task: TaskEvent) -> None:
            if task.outcome is Outcome.STARTED:
                started.set()
            elif task.done:
                res = task.result
                self._outputs[host] = str(res.get("stdout") or "")
                if task.outcome is not Outcome.OK:
                    why = res.get("msg") or res.get("stderr") or task.outcome.value
                    self._problems.append(f"{host}: {str(why).strip()}")
                started.set()

        try:
            run = run_module(
                "ansible.builtin.shell",
                self.inventory,
                host_pattern=host,
                module_args=script,
                verb="bench-power",
                observer=on_tasks(handle),
            )
            if run.rc != 0 and host not in self._outputs:
                self._problems.append(
                    f"{host}: the power sampler did not run: {run.stdout.strip()[-300:] or run.status}"
                )
        finally:
            started.set()

    def stop(self) -> tuple[PowerTrace, list[str]]:
        from provision.runner.run import run_module

        hosts = ",".join(self.devices)
        run_module(
            "ansible.builtin.file",
            self.inventory,
            host_pattern=hosts,
            module_args=f"path={self._stop_file} state=touch",
            verb="bench-power-stop",
        )
        for thread in self._threads:
            thread.join(timeout=self.interval_s * 4 + 60)
        trace: PowerTrace = {}
        problems = list(self._problems)
        for host, stdout in self._outputs.items():
            found, bad = parse_samples(host, stdout)
            trace |= found
            problems += bad
        return trace, problems
