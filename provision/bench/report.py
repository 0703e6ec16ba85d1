"""``--report DIR``: a folder a person can read and a script can re-analyse.

- ``result.json``: what ``--json`` prints (one run object, or a list of them);
- ``requests.json``: what ``--save-result`` writes (each run's summary and every request's timings);
- ``latency_cdf_N.png`` / ``.svg``: run N's (the order of result.json, from 1) empirical CDFs of TTFT,
  TPOT, ITL and E2E latency;
- for a sweep (several points of one server): ``sweep_throughput``, ``sweep_ttft`` and, when energy was
  measured, ``sweep_energy`` (PNG and SVG), one line per server against the swept concurrency or rate.

matplotlib is an optional extra (``provision[report]``): :func:`check` says so before any request is sent.
The figures are drawn on matplotlib's Agg canvas, without pyplot, so no display and no global state.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from provision.bench import metrics
from provision.errors import InputError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from provision.bench.run import RunResult

FORMATS = ("png", "svg")
TITLES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E latency"}


def check(folder: Path) -> None:
    """InputError (exit 2, nothing sent) when matplotlib is missing or ``folder`` cannot be a folder."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError(
            f"--report {folder}: the plots need matplotlib: pip install 'provision[report]'"
        ) from None
    if folder.exists() and not folder.is_dir():
        raise InputError(f"--report {folder}: not a folder")
    if not folder.exists() and not folder.parent.is_dir():
        raise InputError(f"--report {folder}: no such folder {folder.parent}")


def write(folder: Path, runs: Sequence[tuple[str, RunResult]]) -> list[Path]:
    """Write the report of ``runs`` ((target name, result) in the order of result.json); the files."""
    folder.mkdir(exist_ok=True)
    summaries = [result.summary for _, result in runs]
    saved = [result.saved() for _, result in runs]
    files = [folder / "result.json", folder / "requests.json"]
    for path, data in zip(files, (summaries, saved), strict=True):
        path.write_text(json.dumps(data[0] if len(data) == 1 else data, indent=2) + "\n")
    for number, (name, result) in enumerate(runs, 1):
        files += _save(_cdfs(name, result), folder / f"latency_cdf_{number}")
    files += _sweeps(folder, runs)
    return files


def _save(figure: Figure, stem: Path) -> list[Path]:
    paths = [stem.with_suffix(f".{fmt}") for fmt in FORMATS]
    for path in paths:
        figure.savefig(path, format=path.suffix[1:], dpi=100)
    return paths


def _point(summary: dict[str, Any]) -> str:
    return f"concurrency {summary['max_concurrency'] or '-'}, rate {summary['request_rate']}"


def _cdfs(name: str, result: RunResult) -> Figure:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 7), layout="constrained")
    figure.suptitle(f"{name}: {_point(result.summary)}: {result.summary['completed']} requests")
    found = metrics.samples(result.outputs)
    for axes, key in zip(figure.subplots(2, 2).flat, metrics.LATENCIES, strict=True):
        values = sorted(v * 1000 for v in found[key])
        axes.set_title(f"{TITLES[key]} ({len(values)} samples)")
        axes.set_xlabel("ms")
        axes.set_ylabel("fraction of samples ≤ x")
        axes.set_ylim(0, 1.02)
        axes.grid(alpha=0.3)
        if values:
            axes.step(values, [(i + 1) / len(values) for i in range(len(values))], where="post")
        else:
            axes.text(0.5, 0.5, "no samples", ha="center", va="center", transform=axes.transAxes)
    return figure


def _sweeps(folder: Path, runs: Sequence[tuple[str, RunResult]]) -> list[Path]:
    """The sweep plots, when some server was run at several points."""
    by_target: dict[str, list[dict[str, Any]]] = {}
    for name, result in runs:
        by_target.setdefault(name, []).append(result.summary)
    swept = {name: points for name, points in by_target.items() if len(points) > 1}
    if not swept:
        return []
    first = next(iter(swept.values()))
    by_concurrency = len({p["max_concurrency"] for p in first}) > 1
    axis = "max concurrency" if by_concurrency else "request rate (req/s)"
    key = "max_concurrency" if by_concurrency else "request_rate"
    files: list[Path] = []
    plots: list[tuple[str, str, list[tuple[str, str, bool]], str]] = [
        (
            "sweep_throughput",
            "throughput",
            [("output_throughput", "output tok/s", False), ("request_throughput", "req/s", True)],
            "output tokens/s",
        ),
        (
            "sweep_ttft",
            "TTFT",
            [("median_ttft_ms", "median", False), ("p99_ttft_ms", "p99", False)],
            "TTFT (ms)",
        ),
    ]
    if any(p.get("j_per_output_token") is not None for points in swept.values() for p in points):
        plots.append(
            ("sweep_energy", "energy", [("j_per_output_token", "J/token", False)], "J / output token")
        )
    for stem, title, series, ylabel in plots:
        files += _save(_sweep_figure(swept, key, axis, title, series, ylabel), folder / stem)
    return files


def _x(value: Any) -> float:
    return math.inf if value == "inf" else float(value)


def _sweep_figure(
    swept: dict[str, list[dict[str, Any]]],
    key: str,
    axis: str,
    title: str,
    series: Sequence[tuple[str, str, bool]],
    ylabel: str,
) -> Figure:
    """One line per server and series (a series marked secondary on a right-hand axis, dashed)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 5), layout="constrained")
    axes = figure.subplots()
    right = None
    # the swept values as evenly spaced ticks: rates may include inf, and 1, 2, 64 would bunch up
    ticks = sorted({_x(p[key]) for points in swept.values() for p in points})
    where = {value: index for index, value in enumerate(ticks)}
    for name, points in swept.items():
        xs = [where[_x(p[key])] for p in points]
        for metric, label, secondary in series:
            ys = [math.nan if p.get(metric) is None else float(p[metric]) for p in points]
            if metric == "j_per_output_token":  # the inventory's word on those NPUs, e.g. simulated
                label += "".join(sorted({f" ({p['power_label']})" for p in points if p.get("power_label")}))
            if secondary:
                right = right or axes.twinx()
                right.plot(xs, ys, "--", marker="s", label=f"{name} {label}")
                right.set_ylabel(f"{label} (dashed)")
            else:
                axes.plot(xs, ys, marker="o", label=f"{name} {label}")
    axes.set_xticks(range(len(ticks)), [f"{t:g}" for t in ticks])
    axes.set_xlabel(axis)
    axes.set_ylabel(ylabel)
    axes.set_title(f"{title} vs {axis}")
    axes.grid(alpha=0.3)
    handles, labels = axes.get_legend_handles_labels()
    if right is not None:
        more = right.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    axes.legend(handles, labels, fontsize="small")
    return figure
