"""``provision doctor`` on the shared serving cluster (container mode, ``cluster.py``): the converged cluster
is reported OK and left exactly as it was; then real faults are planted at once (npu-smi's DCMI -8005 on
node1; on node2 an NPU port down, the engine stopped, and a process outside the pool's unit on an NPU) and
doctor names each, on its node, with its evidence and fix. The cluster is restored and serving again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from provision_sim import hardware
from tests.helpers import provision_cli
from tests.integration.serving.cluster import UNIT, Served

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.engine,
    pytest.mark.slow,
]

NODES = ("node1", "node2")
DOWN_NPU = 3  # the pool's NPU (container_settings): its port down breaks the pool
SQUATTED_NPU = 5
SQUATTER = "doctor-squatter.service"
WATCHED = (
    "/var/lib/provision/converged.json",
    "/etc/ansible/facts.d",
    "/etc/docker/daemon.json",
    "/etc/systemd/system",
    "/etc/provision",
)


def doctor(served: Served, *args: str) -> tuple[int, dict[str, Any]]:
    done = provision_cli("doctor", str(served.inventory), "--json", *args, runs=served.runs, timeout=300)
    assert done.stdout.strip(), f"doctor printed nothing (rc {done.returncode}): {done.stderr[-3000:]}"
    report: dict[str, Any] = json.loads(done.stdout)
    return done.returncode, report


def state(served: Served, node: str) -> dict[str, str]:
    """What doctor must not change: sha256 of every watched file, and the units' states."""
    listing = served.sh(
        node, "sh", "-c", f"find {' '.join(WATCHED)} -type f 2>/dev/null | sort | xargs -r sha256sum"
    )
    units = served.sh(
        node, "systemctl", "show", "-p", "Id", "-p", "ActiveState", "-p", "MainPID", UNIT, "docker"
    )
    return {"files": listing, "units": units}


def by_host(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {node["host"]: node for node in report["nodes"]}


def findings(node: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {finding["id"]: finding for finding in node["findings"]}


@contextmanager
def npu_process(served: Served, node: str, npu: int) -> Iterator[str]:
    """A real process on ``node`` (a transient unit that is not a pool's), shown by npu-smi on ``npu``."""
    served.sh(node, "systemd-run", f"--unit={SQUATTER}", "sleep", "900")
    pid = served.sh(node, "systemctl", "show", "-P", "MainPID", SQUATTER).strip()
    config_path = Path(served.cluster.node(node).root) / hardware.HW_CONFIG.lstrip("/")
    original = config_path.read_text(encoding="utf-8")
    config = json.loads(original)
    entry = next(n for n in config["npus"] if int(n["id"]) == npu)
    entry["processes"] = [{"pid": int(pid), "name": "sleep", "memory_mb": 512}]
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    try:
        yield pid
    finally:
        config_path.write_text(original, encoding="utf-8")
        served.cluster.exec(node, ["systemctl", "stop", SQUATTER], timeout=60)


def test_a_converged_cluster_is_ok_and_doctor_changes_nothing(served: Served, tmp_path: Path) -> None:
    before = {node: state(served, node) for node in NODES}
    bundle = tmp_path / "support.tar.gz"
    code, report = doctor(served, "--bundle", str(bundle))
    assert code == 0, json.dumps(report, indent=2)
    assert [(n["host"], n["ok"]) for n in report["nodes"]] == [("node1", True), ("node2", True)]
    assert {node: state(served, node) for node in NODES} == before, "doctor changed a node"
    assert bundle.stat().st_size < 1024 * 1024, "small enough to attach to an issue"
    print(f"\nbundle of 2 healthy nodes: {bundle.stat().st_size} bytes")


def test_planted_faults_are_named_on_their_node_with_the_fix(served: Served) -> None:
    node1 = served.cluster.node("node1").root
    node2 = served.cluster.node("node2").root
    hardware.set_faults(node1, {"dcmi_error": -8005})
    hardware.set_faults(node2, {"link_down": [DOWN_NPU]})
    served.sh("node2", "systemctl", "stop", UNIT)
    try:
        with npu_process(served, "node2", SQUATTED_NPU) as pid:
            code, report = doctor(served)
        assert code == 1
        hosts = by_host(report)
        one, two = findings(hosts["node1"]), findings(hosts["node2"])
        assert "npu-busy-8005" in one, one
        assert one["npu-busy-8005"]["evidence"] == [
            "npu-smi info: dcmi module initialize failed. ret is -8005"
        ]
        assert one["npu-busy-8005"]["fix"].startswith("Find the holder")
        assert {"hccn-link-down", "vllm-unit-down", "npu-foreign-process"} <= set(two), two
        assert two["hccn-link-down"]["evidence"] == [f"hccn_tool -i {DOWN_NPU} -link -g: link status: DOWN"]
        assert two["vllm-unit-down"]["evidence"][0].startswith(f"{UNIT}: inactive/dead")
        assert two["npu-foreign-process"]["evidence"] == [
            f"NPU {SQUATTED_NPU} chip 0: process {pid} (unit {SQUATTER})"
        ]
        assert "npu-busy-8005" not in two and "hccn-link-down" not in one
        text = provision_cli(
            "doctor", str(served.inventory), "--limit", "node2", runs=served.runs, timeout=300
        )
        assert text.returncode == 1
        assert text.stdout.splitlines()[0].startswith("node2  ")
        assert "  [vllm-unit-down] a vLLM instance is not running" in text.stdout
        assert "    fix: Read the journal lines in the evidence" in text.stdout
    finally:
        hardware.set_faults(node1, {"dcmi_error": None})
        hardware.set_faults(node2, {"link_down": None})
        served.sh("node2", "systemctl", "start", UNIT)
    served.wait_ready("node2")
    code, report = doctor(served)
    assert code == 0, json.dumps(report, indent=2)
    assert all(n["ok"] for n in report["nodes"]), "the cluster is left healthy"
