"""The serving role's pre-serve checks and post-start smoke on the shared serving cluster (container mode:
the simulated driver with npu-smi, docker and the real vLLM CPU engine on both nodes, ``cluster.py``).

1. The fixture's first apply started both instances: the post-start smoke ran inside each container (the
   NPU runtime's count, ``import torch, torch_npu``, answered by the simulated image's torch_npu: 1, the
   pool's) and found ``Platform plugin ascend is activated`` in the engine's log (printed by the simulated
   image's launcher where vllm-ascend's plugin would make vLLM log it).
2. Three problems planted on node1's pool NPU 3 at once, the way they happen: a foreign process holding the
   NPU (``provision sim fault node1 foreign_process=3``: a real process, in npu-smi's process table), an HBM
   too small for the model (``hbm_mb={"3": 256}``: npu-smi reports a 256 MB part), and the pool's profile
   pointed at weights whose msModelSlim description says W8A8 while the profile says none. ONE ``apply -p
   serve``: node1 refused before anything was written or started, each problem named with host, pool, NPU
   and its fix; its running instance untouched; node2 served on, unchanged.
3. Everything taken away, ONE more apply: both nodes pass the checks and nothing changes or restarts (an
   instance running on its own NPUs is not foreign).

Before those, the image-stack check: node1 is given an image whose stack labels say it was built for the
Atlas A3 line (``provision.stack.soc=a3``, the serving image relabelled with ``docker commit --change``)
while its PCI bus shows 910B NPUs. ``apply -p serve``: refused before anything is written or started, the
message naming the image's line and the node's; its running instance untouched, node2 unchanged. Then the
driver: node1's driver reports 25.0.rc1.1 (``sim fault driver_version``), older than every HDK line the
CANN of the image's stack works with: refused the same way, naming the image's CANN, its lines and the
node's driver.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from provision.ascend import lock
from provision_sim import faults
from provision_sim.serving import vllm_cpu as engine
from tests.helpers import Run, host_vars
from tests.helpers import provision as run_provision
from tests.integration.serving.cluster import ARGS, POOL_NAME, UNIT, Served, complete
from tests.integration.serving.test_doctor_faults import sim_fault
from tests.integration.serving.test_serve import entered

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.engine,
    pytest.mark.slow,
]

NODES = ("node1", "node2")
NPU = 3  # the pool's NPU on both nodes (cluster.container_settings)
QUANTIZED = "/srv/provision-test/smollm2-w8a8"
# msModelSlim's description of W8A8 weights: the example of its docs ("quant_model_description.json 详解",
# gitcode.com/Ascend/msmodelslim), shortened to its global keys and one layer
DESCRIPTION = {
    "model_quant_type": "W8A8",
    "version": "1.0.0",
    "group_size": 128,
    "kv_quant_type": "KV8",
    "model.layers.0.self_attn.qkv_proj.weight": "W8A8",
    "metadata": {},
    "optional": {},
}
# The serving image, relabelled as built for the Atlas A3 line (node1 shows 910B NPUs).
OTHER_LINE_IMAGE = "provision-sim/vllm-cpu:a3-labels"
SOC_LABEL = "provision.stack.soc"
# A driver of the HDK 25.0 line: CANN 9.1.0 (the default stack's) works with 25.2.X and later only.
OLD_DRIVER = "25.0.rc1.1"
PRESERVE = "vllm_serve : Check the pools' NPUs, HBM and weights before anything starts"
SMOKE = "vllm_serve : Post-start smoke inside the instance"


@dataclass
class Refusal:
    refused: Run
    foreign_pid: int
    started_before: dict[str, str]
    started_after: dict[str, str]
    args_before: str
    args_after: str
    node2_answer: str
    restored: Run
    started_restored: dict[str, str]


def task_results(run: Run, prefix: str) -> dict[str, dict[str, Any]]:
    """host -> ``res`` of the last ``runner_on_ok`` of the task whose name starts with ``prefix``."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(
        run.run_dir.glob("artifacts/*/job_events/*.json"), key=lambda p: int(p.name.split("-")[0])
    ):
        event = json.loads(path.read_text())
        data = event.get("event_data") or {}
        name = f"{data['role']} : {data.get('task')}" if data.get("role") else str(data.get("task"))
        if event.get("event") == "runner_on_ok" and name.startswith(prefix):
            found[str(data["host"])] = data.get("res") or {}
    return found


@dataclass
class StackRefusal:
    refused: Run
    started_before: dict[str, str]
    started_after: dict[str, str]
    args_before: str
    args_after: str
    node1_answer: str


@pytest.fixture(scope="module")
def stack_refusal(served: Served) -> StackRefusal:
    """node1 told to serve OTHER_LINE_IMAGE: the serving image with its SoC label changed to a3."""
    assert served.image is not None
    own_host_vars = served.inventory.parent / "host_vars" / "node1.yml"
    assert not own_host_vars.exists()
    started_before = {n: entered(served, n) for n in NODES}
    args_before = served.sh("node1", "cat", ARGS)
    served.sh("node1", "docker", "create", "--name", "provision-relabel", served.image.tag)
    served.sh(
        "node1",
        "docker",
        "commit",
        "--change",
        f"LABEL {SOC_LABEL}=a3",
        "provision-relabel",
        OTHER_LINE_IMAGE,
    )
    served.sh("node1", "docker", "rm", "provision-relabel")
    try:
        host_vars(served.inventory, "node1", {"vllm_serve_image": OTHER_LINE_IMAGE})
        refused = run_provision("apply", served.inventory, "-p", "serve")
        started_after = {n: entered(served, n) for n in NODES}
        args_after = served.sh("node1", "cat", ARGS)
        node1_answer = complete(served.url("node1"))
    finally:
        host_vars(served.inventory, "node1", None)
        served.sh("node1", "docker", "rmi", OTHER_LINE_IMAGE)
    return StackRefusal(refused, started_before, started_after, args_before, args_after, node1_answer)


@pytest.fixture(scope="module")
def driver_refusal(served: Served) -> StackRefusal:
    """node1's driver reporting OLD_DRIVER, its own (labelled) serving image unchanged."""
    started_before = {n: entered(served, n) for n in NODES}
    args_before = served.sh("node1", "cat", ARGS)
    try:
        sim_fault(served, "node1", f"driver_version={OLD_DRIVER}")
        refused = run_provision("apply", served.inventory, "-p", "serve")
        started_after = {n: entered(served, n) for n in NODES}
        args_after = served.sh("node1", "cat", ARGS)
        node1_answer = complete(served.url("node1"))
    finally:
        sim_fault(served, "node1", "--clear")
    return StackRefusal(refused, started_before, started_after, args_before, args_after, node1_answer)


@pytest.fixture(scope="module")
def refusal(served: Served) -> Refusal:
    node = served.cluster.node("node1")
    assert not faults.current(node), "node1 has faults planted before this module"
    own_host_vars = served.inventory.parent / "host_vars" / "node1.yml"
    assert not own_host_vars.exists()
    profiles = served.settings()["vllm_serve_profiles"]
    quantized = {name: dict(profile) for name, profile in profiles.items()}
    quantized["smollm2-cpu"]["model"] = QUANTIZED
    started_before = {n: entered(served, n) for n in NODES}
    args_before = served.sh("node1", "cat", ARGS)
    try:
        sim_fault(served, "node1", f"foreign_process={NPU}", f"hbm_mb={json.dumps({str(NPU): 256})}")
        foreign_pid = int(faults.current(node)["npu_processes"][str(NPU)][0]["pid"])
        # the same weights (links to the engine's model), with the description msModelSlim writes
        served.sh(
            "node1",
            "sh",
            "-c",
            f'mkdir -p {QUANTIZED} && for f in {engine.model_dir()}/*; do ln -sf "$f" {QUANTIZED}/; done && '
            f"printf '%s\\n' '{json.dumps(DESCRIPTION)}' > {QUANTIZED}/quant_model_description.json",
        )
        host_vars(served.inventory, "node1", {"vllm_serve_profiles": quantized})
        refused = run_provision("apply", served.inventory, "-p", "serve")
        started_after = {n: entered(served, n) for n in NODES}
        args_after = served.sh("node1", "cat", ARGS)
        node2_answer = complete(served.url("node2"))
    finally:
        sim_fault(served, "node1", "--clear", "foreign_process", "hbm_mb")
        host_vars(served.inventory, "node1", None)
        served.sh("node1", "rm", "-rf", QUANTIZED)
    restored = run_provision("apply", served.inventory, "-p", "serve")
    return Refusal(
        refused,
        foreign_pid,
        started_before,
        started_after,
        args_before,
        args_after,
        node2_answer,
        restored,
        {n: entered(served, n) for n in NODES},
    )


def test_the_first_start_was_smoke_tested_inside_each_container(served: Served) -> None:
    first = Run(0, served.first_apply, "", 0.0)
    results = task_results(first, SMOKE)
    assert sorted(results) == list(NODES), results
    for node, res in results.items():
        assert res.get("device_count") == 1, (node, res)
        assert "Platform plugin ascend is activated" in str(res.get("plugin_line")), (node, res)
    journal = served.sh("node1", "journalctl", "-u", UNIT, "--no-pager", "-o", "cat")
    assert "Platform plugin ascend is activated" in journal


def test_an_image_built_for_another_npu_line_is_refused_before_start_naming_both(
    stack_refusal: StackRefusal,
) -> None:
    run = stack_refusal.refused
    assert run.rc == 1, run.explain()
    failures = run.failures()
    assert sorted(failures) == ["node1"], failures
    message = failures["node1"]
    # both sides: the image's line (its label) and the node's (its PCI bus), then the fix
    assert (
        f"{OTHER_LINE_IMAGE} is built for the a3 NPU line ({SOC_LABEL}=a3); node1 shows 910b NPUs on its PCI "
        "bus: serve the image built for 910b"
    ) in message, message
    assert "Nothing was started on node1 (vllm_serve_preserve_force: true starts it anyway)." in message
    # before start: nothing written, nothing restarted, on either node; node1 serves on with its own image
    assert run.changed() == {"node1": 0, "node2": 0}
    assert stack_refusal.args_after == stack_refusal.args_before
    assert stack_refusal.started_after == stack_refusal.started_before, "an engine was restarted"
    assert stack_refusal.node1_answer.strip(), "node1 serves on"


def test_an_image_whose_cann_needs_a_newer_driver_is_refused_before_start_naming_both(
    served: Served, driver_refusal: StackRefusal
) -> None:
    run = driver_refusal.refused
    assert run.rc == 1, run.explain()
    failures = run.failures()
    assert sorted(failures) == ["node1"], failures
    message = failures["node1"]
    assert served.image is not None
    stack = lock.default_stack()
    lines = ", ".join(str(line) for line in stack["hdk"])
    # both sides: the image's CANN with the HDK lines it works with, and the node's driver; then the fix
    assert (
        f"{served.image.tag} carries CANN {stack['cann']} (stack {stack['name']}), which works with "
        f"Ascend HDK {lines}; node1 runs NPU driver {OLD_DRIVER}: install a driver of those lines"
    ) in message, message
    assert run.changed() == {"node1": 0, "node2": 0}
    assert driver_refusal.args_after == driver_refusal.args_before
    assert driver_refusal.started_after == driver_refusal.started_before, "an engine was restarted"
    assert driver_refusal.node1_answer.strip(), "node1 serves on"


def test_three_problems_on_node1_are_refused_before_start_naming_host_pool_and_npu(refusal: Refusal) -> None:
    run = refusal.refused
    assert run.rc == 1, run.explain()
    failures = run.failures()
    assert sorted(failures) == ["node1"], failures
    message = failures["node1"]
    where = f"node1 pool {POOL_NAME} NPU {NPU}: "
    assert PRESERVE.split(" : ")[1] in message, message
    assert "Refused before start on node1 (4 problem(s); nothing was started or changed):" in message, message
    expected = [
        f"{where}process {refusal.foreign_pid} (",  # the foreign process, its unit and the fix
        "unit provision-sim-foreign-npu3.service) holds it with 512 MB of HBM (npu-smi's process table). "
        "Fix: stop it (`systemctl stop provision-sim-foreign-npu3.service`)",
        f"{where}the weights do not fit its HBM: ",  # the HBM too small
        ">= gpu_memory_utilization 0.9 x 256 MB = 230 MB, nothing left for the KV cache (profile "
        "smollm2-cpu)",
        "MB of its 256 MB HBM is free, vLLM reserves gpu_memory_utilization 0.9 x 256 MB = 230 MB at start",
        f"{where}the weights in {QUANTIZED} are W8A8 (quant_model_description.json model_quant_type), "
        "profile smollm2-cpu says weights_quantization none (unquantized weights). Fix: set quantization: "
        "ascend and weights_quantization",
        "vllm_serve_preserve_force: true starts the instances anyway.",
    ]
    for part in expected:
        assert part in message, f"{part!r} not in:\n{message}"
    # before start: nothing written, nothing restarted, on either node
    assert refusal.args_after == refusal.args_before
    assert refusal.started_after == refusal.started_before, "an engine was restarted"
    assert run.changed() == {"node1": 0, "node2": 0}
    assert refusal.node2_answer.strip(), "node2 serves on"


def test_with_the_problems_gone_both_pass_and_nothing_restarts(served: Served, refusal: Refusal) -> None:
    run = refusal.restored
    assert run.rc == 0, run.explain()
    assert run.changed() == {"node1": 0, "node2": 0}
    passed = task_results(run, PRESERVE)
    assert {node: res.get("problems") for node, res in passed.items()} == {"node1": [], "node2": []}
    assert refusal.started_restored == refusal.started_before, "an engine was restarted"
    skipped = task_results(run, SMOKE)
    assert sorted(skipped) == list(NODES), skipped
    assert all("not (re)started in this run" in str(res.get("msg")) for res in skipped.values()), skipped
    for node in NODES:
        assert complete(served.url(node)).strip(), f"{node} answers"
    assert not Path(served.inventory.parent / "host_vars" / "node1.yml").exists()
