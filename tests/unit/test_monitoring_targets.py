"""What the monitoring role tells Prometheus to scrape (provision.monitoring): every exporter, every vLLM
instance that serves an API (a multi-node group only at its head), their labels, and the pool of each NPU."""

from __future__ import annotations

from typing import Any

import pytest

from provision.monitoring import scrape_targets

pytestmark = pytest.mark.unit

PROFILES = {
    "small": {"model": "/models/qwen", "served_model_name": "qwen", "tensor_parallel_size": 4},
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
