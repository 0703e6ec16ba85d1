"""The autoscaling signals' one home (provision.k8s.autoscale): the adapter rules in prometheus-adapter's
config format, the query the adapter would send (checked by the real promtool), the HPA metrics and KEDA
triggers built on the same query, and a stabilisation longer than a load."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from provision.k8s import autoscale
from tests.helpers import promtool

pytestmark = pytest.mark.unit


def test_adapter_config_serves_both_signals_renamed_and_namespaced() -> None:
    config = autoscale.adapter_config()
    rules = {rule["name"]["as"]: rule for rule in config["externalRules"]}
    assert set(rules) == {"provision_vllm_requests_waiting", "provision_npu_utilization"}
    queue = rules["provision_vllm_requests_waiting"]
    assert queue == {
        "seriesQuery": '{__name__="vllm:num_requests_waiting",namespace!="",pool!=""}',
        "resources": {"overrides": {"namespace": {"resource": "namespace"}}},
        "name": {"matches": "^vllm:num_requests_waiting$", "as": "provision_vllm_requests_waiting"},
        "metricsQuery": "sum(<<.Series>>{<<.LabelMatchers>>})",
    }
    # External metric names end up in a URL path: the adapter's name must not keep vLLM's colon.
    assert all(":" not in name for name in rules)


def test_query_is_the_adapter_template_filled_and_valid_promql(tmp_path: Path) -> None:
    text = autoscale.query(autoscale.QUEUE, "qwen", "serving")
    assert text == 'sum(vllm:num_requests_waiting{namespace="serving",pool="qwen"})'
    npu = autoscale.query(autoscale.NPU, "qwen", "serving")
    assert npu == 'avg(npu_chip_info_utilization{namespace="serving",pool="qwen"})'
    rules = {
        "groups": [
            {"name": "q", "rules": [{"record": "q:queue", "expr": text}, {"record": "q:npu", "expr": npu}]}
        ]
    }
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules), encoding="utf-8")
    done = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_hpa_metrics_select_the_pool_and_read_the_queue_per_replica() -> None:
    metrics = autoscale.hpa_metrics("qwen", ["queue", "npu"], {"npu": 70, "queue": 2.5})
    assert metrics == [
        {
            "type": "External",
            "external": {
                "metric": {
                    "name": "provision_vllm_requests_waiting",
                    "selector": {"matchLabels": {"pool": "qwen"}},
                },
                "target": {"type": "AverageValue", "averageValue": "2500m"},
            },
        },
        {
            "type": "External",
            "external": {
                "metric": {
                    "name": "provision_npu_utilization",
                    "selector": {"matchLabels": {"pool": "qwen"}},
                },
                "target": {"type": "Value", "value": "70"},
            },
        },
    ]
    with pytest.raises(ValueError, match="unknown autoscaling signal 'cpu'"):
        autoscale.hpa_metrics("qwen", ["cpu"])


def test_keda_trigger_asks_prometheus_the_adapter_query() -> None:
    (trigger,) = autoscale.keda_triggers("qwen", "serving")
    assert trigger["type"] == "prometheus"
    assert trigger["metricType"] == "AverageValue"
    assert trigger["metadata"]["query"] == autoscale.query(autoscale.QUEUE, "qwen", "serving")
    assert trigger["metadata"]["threshold"] == "5"


@pytest.mark.parametrize(("budget", "window"), [(600, 660), (1800, 1860), (3590, 3600), (7200, 3600)])
def test_scale_down_waits_longer_than_a_load(budget: int, window: int) -> None:
    behavior = autoscale.behavior(budget)
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == window
    assert behavior["scaleUp"]["stabilizationWindowSeconds"] == 0
