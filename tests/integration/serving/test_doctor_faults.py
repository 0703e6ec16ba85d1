"""Rehearsed faults: fourteen faults planted at once on the shared serving cluster (container mode), each
named by ONE `provision doctor --json` run with its node, its evidence and its fix; then every fault is
taken away and the cluster is healthy again (doctor OK, exit 0).

The faults are planted the way a user rehearses them — `provision sim fault NODE KNOB...` — and, for what is
no knob (a stopped docker or vLLM unit, a rewritten daemon.json, an NPU's TLS switch), with the node's own
tools. Each sits on its own node or NPU so that none hides another: node1 gets the ones its npu-smi
failure (-8005) cannot mask, node2 the ones that need npu-smi and hccn_tool to answer. node1's port 3
flaps and its engine journal gets a real HCCL execution timeout (EI0002): doctor names the dead and the
flapped link before the timeout they cause, and the timeout names them as its cause.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from provision.doctor.catalog import shipped
from provision_sim import faults
from tests.helpers import PROVISION
from tests.integration.serving.cluster import UNIT, Served
from tests.integration.serving.test_doctor import by_host, doctor, findings

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.engine,
    pytest.mark.slow,
]

HCCN = "/usr/local/Ascend/driver/tools/hccn_tool"
DAEMON_JSON = "etc/docker/daemon.json"
KNOBS = {
    "node1": [
        "dcmi_error",
        "link_down=[5]",
        "driver_version=24.1.rc2",
        "tmp_full",
        "link_flap=[3]",
        "hccl_timeout",
    ],
    "node2": [
        'npu_health={"6": "Critical"}',
        "foreign_process=5",
        "devnode_missing=7",
        'net_health={"2": "Receive timeout"}',
    ],
}
TLS_NPU = 4  # node2


@dataclass
class Rehearsal:
    code: int
    report: dict[str, Any]
    foreign_pid: int
    after_code: int
    after: dict[str, Any]


def sim_fault(served: Served, node: str, *words: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PROVISION_SIM_DIR": str(served.cluster.dir.parent)}
    done = subprocess.run(
        [*PROVISION, "sim", "fault", node, *words, "--name", served.cluster.name, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.fixture(scope="module")
def rehearsed(served: Served) -> Rehearsal:
    daemon = Path(served.cluster.node("node1").root) / DAEMON_JSON
    original = daemon.read_bytes()
    try:
        for node, words in KNOBS.items():
            sim_fault(served, node, *words)
        foreign_pid = int(faults.current(served.cluster.node("node2"))["npu_processes"]["5"][0]["pid"])
        settings = json.loads(original)
        settings.get("runtimes", {}).pop("ascend", None)
        daemon.write_text(json.dumps(settings, indent=2) + "\n")  # read by doctor, not by the running dockerd
        served.sh("node1", "systemctl", "stop", UNIT)
        served.sh(
            "node2", "sh", "-c", "systemctl stop docker.socket 2>/dev/null; systemctl stop docker.service"
        )
        served.sh("node2", HCCN, "-i", str(TLS_NPU), "-tls", "-s", "enable", "1")
        code, report = doctor(served)
    finally:
        for node in KNOBS:
            sim_fault(served, node, "--clear")
        daemon.write_bytes(original)
        served.sh("node2", HCCN, "-i", str(TLS_NPU), "-tls", "-s", "enable", "0")
        served.sh(
            "node2", "sh", "-c", "systemctl start docker.socket 2>/dev/null; systemctl start docker.service"
        )
        for node in KNOBS:
            served.sh(node, "sh", "-c", f"systemctl reset-failed {UNIT}; systemctl restart {UNIT}")
    for node in KNOBS:
        served.wait_ready(node)
    after_code, after = doctor(served)
    return Rehearsal(code, report, foreign_pid, after_code, after)


CASES = [
    ("node1", "npu-busy-8005", "dcmi_error"),
    ("node1", "hccn-link-down", "link_down"),
    ("node1", "stack-off-lock", "driver_version"),
    ("node1", "disk-low", "tmp_full"),
    ("node1", "vllm-unit-down", "systemctl stop vllm-smol"),
    ("node1", "ascend-runtime-unregistered", "daemon.json without the ascend runtime"),
    ("node2", "docker-down", "systemctl stop docker"),
    ("node2", "npu-unhealthy", "npu_health"),
    ("node2", "npu-foreign-process", "foreign_process"),
    ("node2", "device-nodes-missing", "devnode_missing"),
    ("node2", "hccn-tls-mixed", "hccn_tool -tls -s enable 1"),
    ("node2", "hccn-net-unhealthy", "net_health"),
    ("node1", "hccn-link-flapped", "link_flap"),
    ("node1", "hccl-notify-wait-timeout-ei0002", "hccl_timeout"),
]


def expected_evidence(rehearsal: Rehearsal, failure: str, evidence: list[str]) -> bool:
    first = evidence[0] if evidence else ""
    checks = {
        "npu-busy-8005": evidence == ["npu-smi info: dcmi module initialize failed. ret is -8005"],
        "hccn-link-down": evidence == ["hccn_tool -i 5 -link -g: link status: DOWN"],
        "stack-off-lock": first.startswith("driver 24.1.rc2 installed, the lock wants "),
        "disk-low": any(
            line.startswith("/tmp: ") and line.endswith("MiB free (below 1024 MiB)") for line in evidence
        ),
        "vllm-unit-down": first.startswith(f"{UNIT}: inactive/dead"),
        "ascend-runtime-unregistered": evidence == ['/etc/docker/daemon.json has no "ascend" in "runtimes"'],
        "docker-down": first.startswith("docker.service: inactive/dead"),
        "npu-unhealthy": evidence == ["NPU 6 chip 0: Health Critical"],
        "npu-foreign-process": evidence
        == [f"NPU 5 chip 0: process {rehearsal.foreign_pid} (unit provision-sim-foreign-npu5.service)"],
        "device-nodes-missing": first.startswith("missing: /dev/davinci7 (driver "),
        "hccn-tls-mixed": evidence == ["TLS enabled on NPU 4, disabled on NPU 0, 1, 2, 3, 5, 6, 7"],
        "hccn-net-unhealthy": evidence
        == ["hccn_tool -i 2 -net_health -g: net health status: Receive timeout"],
        "hccn-link-flapped": len(evidence) == 1
        and first.startswith("hccn_tool -i 3 -link_stat -g: LINK DOWN at ")
        and first.endswith("; link up count 2"),
        "hccl-notify-wait-timeout-ei0002": evidence
        == [f"{UNIT}: {faults.HCCL_TIMEOUT_LINE}", "  peer: rank 24"],
    }
    return checks[failure]


@pytest.mark.parametrize(("node", "failure", "planted"), CASES, ids=[c[1] for c in CASES])
def test_doctor_names_the_planted_fault(rehearsed: Rehearsal, node: str, failure: str, planted: str) -> None:
    assert rehearsed.code == 1
    found = findings(by_host(rehearsed.report)[node])
    assert failure in found, f"{planted} on {node}: {sorted(found)}"
    entry = found[failure]
    assert expected_evidence(rehearsed, failure, entry["evidence"]), entry["evidence"]
    catalogued = next(f for f in shipped().failures if f.id == failure)
    assert (entry["cause"], entry["fix"]) == (catalogued.cause, catalogued.fix)
    assert entry["sources"] == [s.url for s in catalogued.sources]


def test_the_links_come_before_the_hccl_timeout_they_cause(rehearsed: Rehearsal) -> None:
    order = [f["id"] for f in by_host(rehearsed.report)["node1"]["findings"]]
    timeout = order.index("hccl-notify-wait-timeout-ei0002")
    assert order.index("hccn-link-down") < timeout and order.index("hccn-link-flapped") < timeout, order
    found = findings(by_host(rehearsed.report)["node1"])
    assert found["hccl-notify-wait-timeout-ei0002"]["caused_by"] == ["hccn-link-down", "hccn-link-flapped"]
    assert found["hccn-link-flapped"]["caused_by"] == []


def test_every_fault_taken_away_the_cluster_is_healthy_again(rehearsed: Rehearsal) -> None:
    assert rehearsed.after_code == 0, json.dumps(rehearsed.after, indent=2)
    assert [(n["host"], n["ok"]) for n in rehearsed.after["nodes"]] == [("node1", True), ("node2", True)]
