"""What the monitoring role tells Prometheus to scrape (provision.monitoring): every exporter, every vLLM
instance that serves an API (a multi-node group only at its head), their labels, the pool of each NPU, the
opt-in node_exporter job, each instance's TTFT SLO; and the role's prometheus.yml template rendered by
Ansible's Templar and checked by the real promtool."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from provision.monitoring import TTFT_SLO_RECORD, scrape_targets
from tests.helpers import promtool

pytestmark = pytest.mark.unit

PROFILES = {
    "small": {"model": "/models/qwen", "served_model_name": "qwen", "tensor_parallel_size": 4,
              "ttft_slo_ms": 800},
    "ds2": {"model": "/models/ds", "served_model_name": "ds", "nodes": 2, "tensor_parallel_size": 2,
            "data_parallel_size": 2},
}  # fmt: skip
HOSTVARS: dict[str, dict[str, Any]] = {
    "node1": {
        "ansible_host": "10.0.0.1",
        "provision_stack": "default",
        "vllm_serve_profiles": PROFILES,
        "npu_pools_list": [
            {"name": "chat", "devices": [0, 1, 2, 3], "port": 8000, "profile": "small"},
            {"name": "spare", "devices": [4, 5], "port": 8001},
            {"name": "ds", "devices": [6, 7], "port": 8100, "profile": "ds2"},
        ],
    },
    "node2": {
        "ansible_host": "10.0.0.2",
        "vllm_serve_profiles": PROFILES,
        "npu_pools_list": [{"name": "ds", "devices": [6, 7], "port": 8100, "profile": "ds2"}],
    },
}


def test_exporters_engines_and_labels() -> None:
    found = scrape_targets(["node1", "node2"], HOSTVARS, 8082)
    assert found["npu-exporter"] == [
        {"targets": ["10.0.0.1:8082"], "labels": {"host": "node1", "stack": "default"}},
        {"targets": ["10.0.0.2:8082"], "labels": {"host": "node2", "stack": ""}},
    ]
    # The 2-node group ds is one instance, at its head node1; node2 runs headless. spare serves nothing.
    node1 = {"host": "node1", "stack": "default"}
    assert found["vllm"] == [
        {
            "targets": ["10.0.0.1:8000"],
            "labels": {**node1, "pool": "chat", "model": "qwen", "profile": "small"},
        },
        {"targets": ["10.0.0.1:8100"], "labels": {**node1, "pool": "ds", "model": "ds", "profile": "ds2"}},
    ]


def test_every_pool_names_its_npus() -> None:
    relabel = scrape_targets(["node1", "node2"], HOSTVARS, 8082)["pool_relabel_configs"]
    assert [(r["regex"], r["replacement"]) for r in relabel] == [
        ("node1;(0|1|2|3)", "chat"),
        ("node1;(4|5)", "spare"),
        ("node1;(6|7)", "ds"),
        ("node2;(6|7)", "ds"),
    ]
    assert {(tuple(r["source_labels"]), r["separator"], r["target_label"]) for r in relabel} == {
        (("host", "id"), ";", "pool")
    }


def test_node_exporter_targets_every_node_on_its_port() -> None:
    found = scrape_targets(["node1", "node2"], HOSTVARS, 8082, node_exporter_port=9100)
    assert found["node"] == [
        {"targets": ["10.0.0.1:9100"], "labels": {"host": "node1", "stack": "default"}},
        {"targets": ["10.0.0.2:9100"], "labels": {"host": "node2", "stack": ""}},
    ]


def test_every_engine_target_has_its_ttft_slo() -> None:
    found = scrape_targets(["node1", "node2"], HOSTVARS, 8082, default_ttft_slo_ms=2500)
    (group,) = found["slo_rules"]["groups"]
    # chat's profile sets 800 ms; ds's none (the default); the 2-node group once, at its head, as its target.
    assert [(r["record"], r["expr"], r["labels"]) for r in group["rules"]] == [
        (TTFT_SLO_RECORD, "vector(0.8)", {"host": "node1", "pool": "chat", "profile": "small"}),
        (TTFT_SLO_RECORD, "vector(2.5)", {"host": "node1", "pool": "ds", "profile": "ds2"}),
    ]


ROLE = Path(__file__).parents[2] / "roles" / "monitoring"


def _render(text: str, variables: dict[str, Any]) -> str:
    """``text`` as the role's template or copy task renders it (Ansible's Templar and filters)."""
    return str(Templar(loader=DataLoader(), variables=variables).template(trust_as_template(text)))


@pytest.mark.parametrize("node_exporter", [False, True], ids=["npu-only", "with-node-exporter"])
def test_the_rendered_configuration_passes_promtool(tmp_path: Path, node_exporter: bool) -> None:
    scrape = scrape_targets(["node1", "node2"], HOSTVARS, 8082)
    jobs = ["npu-exporter", "vllm"] + (["node"] if node_exporter else [])
    (tmp_path / "targets").mkdir()
    (tmp_path / "rules").mkdir()
    for job in jobs:  # as the role writes them (to_nice_json)
        (tmp_path / "targets" / f"{job}.json").write_text(json.dumps(scrape[job], indent=4))
    slo = _render("{{ slo | to_nice_yaml(indent=2) }}", {"slo": scrape["slo_rules"]})
    (tmp_path / "rules" / "slo.yml").write_text(slo)
    for rules in (ROLE / "files" / "rules").glob("*.yml"):
        (tmp_path / "rules" / rules.name).write_bytes(rules.read_bytes())
    config = _render(
        (ROLE / "templates" / "prometheus.yml.j2").read_text(encoding="utf-8"),
        {
            "ansible_managed": "Ansible managed",
            "monitoring_scrape_interval": "15s",
            "monitoring_node_exporter": node_exporter,
            "_monitoring_base": str(tmp_path),
            "__monitoring_scrape": scrape,
        },
    )
    (tmp_path / "prometheus.yml").write_text(config)
    done = subprocess.run(
        [promtool(), "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
        check=False,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "SUCCESS" in out and "WARNING" not in out, out
    assert "slo.yml" in out and "SUCCESS: 2 rules found" in out, "the generated SLO rules are loaded"
    parsed = yaml.safe_load(config)
    assert [job["job_name"] for job in parsed["scrape_configs"]] == jobs
    # Plain http everywhere: none of the three exporters, as installed, serves TLS.
    assert all("scheme" not in job and "tls_config" not in job for job in parsed["scrape_configs"])
