"""The regression gate: a run compared with the same run (same server, same sweep point) of a previous
``--json`` or ``--save-result`` output.

A run regressed when its output throughput or its request throughput fell, or its p99 TTFT rose, by more
than the bound (``--max-regression``, a fraction of the baseline's value). Everything about the baseline
file is checked before any request is sent: a bad one is an InputError naming the file, the run and the
field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.errors import InputError

GATED = (
    ("output_throughput", "output tok/s", True),
    ("request_throughput", "req/s", True),
    ("p99_ttft_ms", "p99 TTFT ms", False),
)
"""(result key, label, higher is better) of each metric the gate holds."""

Point = tuple[str, int | None, float]
"""(base_url, max_concurrency, request_rate) of a run: what a baseline run is matched by."""


def parse_bound(text: str, option: str = "--max-regression") -> float:
    """``10%`` (or ``10``) → 0.10; InputError naming the option for anything not in [0 %, 100 %)."""
    number = text.strip().removesuffix("%").strip()
    try:
        value = float(number)
    except ValueError:
        value = math.nan
    if not (0 <= value < 100):
        raise InputError(f"{option} {text}: not a percentage from 0 to below 100 (e.g. 10%)")
    return value / 100


def _rate(value: Any) -> float | None:
    if value == "inf":
        return math.inf
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def point_of(run: Mapping[str, Any]) -> Point:
    """The point of a run summary (this run's or a checked baseline's)."""
    rate = _rate(run["request_rate"])
    assert rate is not None  # checked by load() for a baseline; config() writes it for this run
    return str(run["base_url"]), run["max_concurrency"], rate


def describe(point: Point) -> str:
    url, concurrency, rate = point
    return f"{url} at --max-concurrency {concurrency or '-'}, --request-rate {rate:g}"


@dataclass(frozen=True)
class Baseline:
    path: Path
    runs: dict[Point, dict[str, Any]]

    def run_for(self, point: Point) -> dict[str, Any]:
        """The baseline's run at ``point``; InputError (naming the file and what it has) when none."""
        found = self.runs.get(point)
        if found is None:
            has = "; ".join(describe(p) for p in self.runs)
            raise InputError(f"--baseline {self.path}: no run of {describe(point)} (it has: {has})")
        return found


def load(path: Path) -> Baseline:
    """A previous ``provision bench --json`` / ``--save-result`` output: one run object or a list of them."""
    where = f"--baseline {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{where}: cannot be read: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    listed = data if isinstance(data, list) else [data]
    if not listed or not all(isinstance(run, dict) for run in listed):
        raise InputError(
            f"{where}: not a provision bench --json or --save-result output (a run object or a list of them)"
        )
    runs: dict[Point, dict[str, Any]] = {}
    for number, run in enumerate(listed, 1):
        at = f"{where}: run {number}" if isinstance(data, list) else where
        if not isinstance(run.get("base_url"), str):
            raise InputError(f"{at}: base_url is {_shown(run, 'base_url')}, not a URL")
        concurrency = run.get("max_concurrency", "missing")
        if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)):
            raise InputError(
                f"{at}: max_concurrency is {_shown(run, 'max_concurrency')}, not a number or null"
            )
        if _rate(run.get("request_rate")) is None:
            raise InputError(f'{at}: request_rate is {_shown(run, "request_rate")}, not a rate or "inf"')
        for key, _label, _higher in GATED:
            value = run.get(key)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise InputError(f"{at}: {key} is {_shown(run, key)}, not a number")
        point = point_of(run)
        if point in runs:
            raise InputError(f"{at}: a second run of {describe(point)}")
        runs[point] = run
    return Baseline(path, runs)


def _shown(run: Mapping[str, Any], key: str) -> str:
    return json.dumps(run[key]) if key in run else "missing"


@dataclass(frozen=True)
class Row:
    point: Point
    metric: str
    label: str
    baseline: float
    now: float
    change: float | None
    """(now - baseline) / baseline; None when the baseline is 0 (nothing to compare with)."""
    regressed: bool

    @property
    def verdict(self) -> str:
        if self.change is None:
            return "n/a (baseline 0)"
        return "REGRESSED" if self.regressed else "ok"


def compare(baseline: Mapping[str, Any], now: Mapping[str, Any], bound: float) -> list[Row]:
    """One row per gated metric of one run against its baseline run."""
    rows: list[Row] = []
    for key, label, higher in GATED:
        then, value = float(baseline[key]), float(now[key])
        change = (value - then) / then if then > 0 else None
        worse = change is not None and (-change if higher else change) > bound
        rows.append(Row(point_of(now), key, label, then, value, change, worse))
    return rows


def regressed(rows: Sequence[Row]) -> list[Row]:
    return [row for row in rows if row.regressed]


def verdict(rows: Sequence[Row], path: Path, bound: float) -> str:
    """The gate's last line: ``no regression beyond 10% of FILE (N compared)``, or ``regression beyond 10%
    of FILE: METRICS (K of N compared)`` naming the regressed metrics."""
    worse = regressed(rows)
    limit = f"{bound * 100:g}%"
    if worse:
        names = ", ".join(sorted({row.label for row in worse}))
        return f"regression beyond {limit} of {path}: {names} ({len(worse)} of {len(rows)} compared)"
    return f"no regression beyond {limit} of {path} ({len(rows)} compared)"


def shown(row: Row) -> str:
    """One compared metric in words: ``output tok/s 10.00 -> 7.98 (-20.2%) REGRESSED``."""
    change = "n/a" if row.change is None else f"{row.change * 100:+.1f}%"
    return f"{row.label} {row.baseline:.2f} -> {row.now:.2f} ({change}) {row.verdict}"
