"""The Grafana dashboard the monitoring role ships: Grafana's dashboard model (title, uid, schemaVersion,
panels with id, type, gridPos and Prometheus targets), every panel's query parsed by the real promtool (as
recording rules of a temporary rules file) and naming only metrics the exporter or vLLM expose."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import known_metrics, metric_names, promtool

pytestmark = pytest.mark.unit

DASHBOARD = Path(__file__).parents[2] / "roles/monitoring/files/dashboards/provision-fleet.json"


def _dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return data


def _exprs() -> list[str]:
    return [target["expr"] for panel in _dashboard()["panels"] for target in panel["targets"]]


def test_dashboard_follows_grafanas_model() -> None:
    dash = _dashboard()
    assert dash["title"] and dash["uid"] == "provision-fleet" and isinstance(dash["schemaVersion"], int)
    assert [v["name"] for v in dash["templating"]["list"]] == ["datasource"]
    ids = [panel["id"] for panel in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dash["panels"]:
        assert panel["type"] == "timeseries" and panel["title"]
        assert (
            set(panel["gridPos"]) == {"h", "w", "x", "y"}
            and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        )
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [target["refId"] for target in panel["targets"]]
        assert refs and len(refs) == len(set(refs))


def test_dashboard_shows_what_operators_watch() -> None:
    exprs = " ".join(_exprs())
    for metric in (
        "npu_chip_info_utilization",
        "npu_chip_info_hbm_used_memory",
        "npu_chip_info_power",
        "npu_chip_info_temperature",
        "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
    ):
        assert metric in exprs, metric


def test_every_query_parses_with_promtool(tmp_path: Path) -> None:
    rules = [{"record": f"provision:dashboard_query_{i}", "expr": e} for i, e in enumerate(_exprs())]
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run(
        [promtool(), "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    broken = tmp_path / "broken.yml"
    broken.write_text(
        yaml.safe_dump({"groups": [{"name": "x", "rules": [{"record": "x", "expr": "sum by (le"}]}]})
    )
    assert subprocess.run(
        [promtool(), "check", "rules", str(broken)], capture_output=True, check=False
    ).returncode


def test_every_query_names_real_metrics() -> None:
    known = known_metrics()
    for expr in _exprs():
        assert not metric_names(expr) - known, expr


def test_the_renderer_draws_each_panel_from_its_query_range(tmp_path: Path) -> None:
    from tests.integration.serving.dashboard import finite_points, legend, render

    assert legend("{{host}} NPU {{ id }} ({{pool}})", {"host": "node1", "id": "3"}) == "node1 NPU 3 ()"
    assert finite_points([[1, "0.5"], [2, "NaN"], [3, "+Inf"], [4, "2"]]) == [(1.0, 0.5), (4.0, 2.0)]
    asked: list[str] = []

    def query_range(expr: str) -> list[dict[str, Any]]:
        asked.append(expr)
        if "kv_cache" in expr:  # a panel whose only series has no finite point draws nothing
            return [{"metric": {"host": "node1"}, "values": [[100, "NaN"]]}]
        return [{"metric": {"host": h}, "values": [[100, "1"], [102, "2"]]} for h in ("node1", "node2")]

    out = tmp_path / "dashboard.png"
    drawn = render(_dashboard(), query_range, out, title="test")
    assert sorted(asked) == sorted(_exprs())  # each query once
    kv = next(p["title"] for p in _dashboard()["panels"] if "kv_cache" in p["targets"][0]["expr"])
    assert drawn.pop(kv) == 0
    two_queries = {p["title"] for p in _dashboard()["panels"] if len(p["targets"]) == 2}
    assert drawn == {title: 4 if title in two_queries else 2 for title in drawn}
    assert out.read_bytes().startswith(b"\x89PNG")
