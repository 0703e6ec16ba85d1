"""The collection's Grafana dashboard drawn from a real Prometheus, panel by panel, with matplotlib.

Grafana itself is not installed here (AGPL; it is the user's), so the observability test renders what
Grafana would show: each panel's queries over a time range (``/api/v1/query_range``), one line per series,
named by the panel's ``legendFormat``, placed by its ``gridPos`` (24 columns). The figure in
``docs/observability.md`` comes from this, on the shared serving cluster: with ``PROVISION_DASHBOARD_PNG``
set, the observability module draws the whole of its Prometheus' history there once its drills are done.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

QueryRange = Callable[[str], list[dict[str, Any]]]
"""``expr -> result`` of ``/api/v1/query_range`` (a matrix: ``metric`` and ``values``)."""

_LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")
_MAX_LEGEND = 8  # more lines than that get no legend entry: 16 NPUs would hide the plot


def legend(template: str, labels: dict[str, str]) -> str:
    """Grafana's ``legendFormat``: ``{{label}}`` replaced by the series' label value."""
    return _LEGEND.sub(lambda m: labels.get(m[1], ""), template).strip()


def finite_points(values: list[list[Any]]) -> list[tuple[float, float]]:
    """``[[t, "v"], ...]`` as (t, v) pairs, leaving out NaN and infinities (a quantile without samples)."""
    points = [(float(t), float(v)) for t, v in values]
    return [(t, v) for t, v in points if math.isfinite(v)]


def render(dashboard: dict[str, Any], query_range: QueryRange, out: Path, title: str = "") -> dict[str, int]:
    """Draw every panel of ``dashboard`` into ``out`` (PNG); returns each panel's title and how many series
    with at least one finite point it drew."""
    from matplotlib.figure import Figure

    panels = dashboard["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    figure = Figure(figsize=(16, rows * 0.55), layout="constrained")
    grid = figure.add_gridspec(rows, 24)
    drawn: dict[str, int] = {}
    results = {(p["id"], t["refId"]): query_range(t["expr"]) for p in panels for t in p["targets"]}
    started = min((float(v[0]) for r in results.values() for s in r for v in s["values"]), default=0.0)
    for panel in panels:
        pos = panel["gridPos"]
        axes = figure.add_subplot(grid[pos["y"] : pos["y"] + pos["h"], pos["x"] : pos["x"] + pos["w"]])
        count = 0
        for target in panel["targets"]:
            for series in results[panel["id"], target["refId"]]:
                points = finite_points(series["values"])
                if not points:
                    continue
                count += 1
                name = legend(target.get("legendFormat", ""), series["metric"])
                xs = [t - started for t, _ in points]
                label = name if count <= _MAX_LEGEND else None
                axes.plot(xs, [v for _, v in points], marker=".", markersize=3, linewidth=1, label=label)
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        axes.set_title(f"{panel['title']}" + (f" ({unit})" if unit and unit != "none" else ""), fontsize=10)
        axes.set_xlabel("s", fontsize=8)
        axes.tick_params(labelsize=7)
        axes.grid(alpha=0.3)
        if count:
            axes.legend(fontsize=6, loc="upper left")
        drawn[panel["title"]] = count
    if title:
        figure.suptitle(title, fontsize=12)
    figure.savefig(out, dpi=80)
    return drawn
