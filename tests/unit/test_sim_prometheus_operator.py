"""The test rig's stand-in for prometheus-operator (provision_sim.k8s.prometheus_operator): the product's
rendered ServiceMonitor becomes a scrape job the real promtool accepts, with the monitor's relabelings
unchanged; the endpoints role's labels come from the Endpoints, Service and Pod as Prometheus documents
them; a field the translation does not know is refused, never dropped."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.inventory.validate import check
from provision.k8s.render import Options, render
from provision_sim.k8s.prometheus_operator import MonitorError, endpoint_targets, scrape_configs
from tests.helpers import promtool

pytestmark = pytest.mark.unit
EXAMPLES = Path(__file__).parents[2] / "examples"


def _monitor() -> dict[str, Any]:
    objects = render(check(EXAMPLES / "inventory.ini"), Options(namespace="serving"))
    return next(obj for obj in objects if obj["kind"] == "ServiceMonitor")


def test_the_rendered_monitor_is_a_job_promtool_accepts(tmp_path: Path) -> None:
    monitor = _monitor()
    targets = tmp_path / "targets.json"
    targets.write_text("[]")
    jobs = scrape_configs(monitor, targets)
    assert [job["job_name"] for job in jobs] == [
        f"serviceMonitor/serving/{monitor['metadata']['name']}/{index}"
        for index in range(len(monitor["spec"]["endpoints"]))
    ]
    (job,) = jobs
    endpoint = monitor["spec"]["endpoints"][0]
    relabel = job["relabel_configs"]
    # The operator's keep on the selector's labels, the endpoint's port, then the monitor's own relabelings
    # last and unchanged (camelCase to Prometheus' snake_case).
    for key, value in monitor["spec"]["selector"]["matchLabels"].items():
        safe = key.replace(".", "_").replace("/", "_").replace("-", "_")
        assert {
            "action": "keep",
            "source_labels": [
                f"__meta_kubernetes_service_label_{safe}",
                f"__meta_kubernetes_service_labelpresent_{safe}",
            ],
            "regex": f"({value});true",
        } in relabel
    assert {
        "action": "keep",
        "source_labels": ["__meta_kubernetes_endpoint_port_name"],
        "regex": endpoint["port"],
    } in relabel
    own = relabel[-len(endpoint["relabelings"]) :]
    assert [entry.get("target_label") for entry in own] == [
        e.get("targetLabel") for e in endpoint["relabelings"]
    ]
    assert all("targetLabel" not in entry and "sourceLabels" not in entry for entry in own)
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"scrape_configs": jobs}))
    checked = subprocess.run([promtool(), "check", "config", str(config)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize(
    ("where", "field"),
    [("spec", "sampleLimit"), ("endpoint", "tlsConfig"), ("relabeling", "modulus")],
)
def test_a_field_not_translated_is_refused(tmp_path: Path, where: str, field: str) -> None:
    monitor = _monitor()
    endpoint = monitor["spec"]["endpoints"][0]
    {"spec": monitor["spec"], "endpoint": endpoint, "relabeling": endpoint["relabelings"][0]}[where][
        field
    ] = 1
    with pytest.raises(MonitorError, match=field):
        scrape_configs(monitor, tmp_path / "targets.json")


def test_endpoint_targets_carry_the_endpoints_roles_labels() -> None:
    service = {
        "metadata": {"namespace": "serving", "name": "vllm-chat", "labels": {"provision.io/pool": "chat"}}
    }
    pod = {
        "metadata": {"namespace": "serving", "name": "vllm-chat-abc", "uid": "u1", "labels": {"app": "vllm"}},
        "spec": {
            "nodeName": "node1",
            "containers": [{"name": "vllm", "ports": [{"name": "http", "containerPort": 8000}]}],
        },
        "status": {"podIP": "10.244.1.5", "phase": "Running"},
    }
    endpoints = {
        "metadata": {"namespace": "serving", "name": "vllm-chat"},
        "subsets": [
            {
                "addresses": [
                    {
                        "ip": "10.244.1.5",
                        "nodeName": "node1",
                        "targetRef": {"kind": "Pod", "name": "vllm-chat-abc"},
                    }
                ],
                "notReadyAddresses": [{"ip": "10.244.1.6"}],
                "ports": [{"name": "http", "port": 8000, "protocol": "TCP"}],
            }
        ],
    }
    ready, loading = endpoint_targets([endpoints], [service], [pod])
    assert ready["targets"] == ["10.244.1.5:8000"] and loading["targets"] == ["10.244.1.6:8000"]
    labels = ready["labels"]
    assert labels["__meta_kubernetes_endpoint_ready"] == "true"
    assert loading["labels"]["__meta_kubernetes_endpoint_ready"] == "false"
    assert labels["__meta_kubernetes_service_label_provision_io_pool"] == "chat"
    assert labels["__meta_kubernetes_service_labelpresent_provision_io_pool"] == "true"
    assert labels["__meta_kubernetes_endpoint_port_name"] == "http"
    assert labels["__meta_kubernetes_pod_name"] == "vllm-chat-abc"
    assert labels["__meta_kubernetes_pod_node_name"] == "node1"
    assert labels["__meta_kubernetes_pod_container_name"] == "vllm"
    assert labels["__meta_kubernetes_pod_label_app"] == "vllm"
    assert "__meta_kubernetes_pod_name" not in loading["labels"]  # no targetRef: no pod to describe
    json.dumps([ready, loading])  # file_sd reads it as JSON
