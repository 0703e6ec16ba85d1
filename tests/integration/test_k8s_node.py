"""The rendered Deployment on a real node: kubelet 1.20.2 and Debian's containerd inside a simulated node,
joined to a real control plane (with the scheduler and the node lifecycle controller), the simulated Ascend
device plugin advertising its eight 910B3 chips, and the serving image imported into containerd from its
tarball as an air-gapped site does.

``provision k8s apply`` of a one-pool inventory starts the real vLLM CPU engine in a pod: its startupProbe
holds readiness through the load without a restart, the pod gets exactly the NPU the device plugin
allocated and no other, and the engine answers on the pod's address. Chips made unhealthy through the
simulator's fault knob leave the node's allocatable count, a second replica stays Pending ("Insufficient
huawei.com/Ascend910") until one chip is healthy again, and is then given exactly that chip.

Its own module (and pytest-xdist group): it runs beside the serving group, with a control plane of its own
(its node lifecycle controller would taint the shared plane's heartbeat-less nodes). Costs: one node with
the container runtime stage (about 1 min), the plane and the node (about 1 min), one engine load.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision_sim import faults
from provision_sim.cluster import Cluster
from provision_sim.k8s.controlplane import ControlPlane
from provision_sim.k8s.node import PAUSE_IMAGE, KubeNode
from provision_sim.serving.image import ensure_serve_image
from provision_sim.serving.setup import container_volumes, engine_binds, engine_profile_vars
from tests.conftest import start_cluster
from tests.helpers import copy_inventory, json_summary, mirror_vars, provision_cli

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

POOL = "smol"
DEPLOYMENT = f"vllm-{POOL}"
API_KEY = "k8s-node-key"
RESOURCE = "huawei.com/Ascend910"
APPLY = ["--kube-version", "1.20", "--no-monitoring", "--autoscaler", "none", "--json"]
LOAD_S = 600.0


@dataclass
class Rig:
    cluster: Cluster
    plane: ControlPlane
    node: KubeNode
    inventory: Path
    runs: Path

    def get(self, path: str) -> dict[str, Any]:
        with self.plane.client() as http:
            answer = http.get(path)
        assert answer.status_code == 200, f"GET {path}: {answer.status_code} {answer.text[:500]}"
        found: dict[str, Any] = answer.json()
        return found

    def pods(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.get("/api/v1/namespaces/default/pods")["items"]
        return [p for p in items if p["metadata"]["labels"].get("provision.io/pool") == POOL]

    def scale(self, replicas: int) -> None:
        with self.plane.client() as http:
            done = http.patch(
                f"/apis/apps/v1/namespaces/default/deployments/{DEPLOYMENT}/scale",
                content=json.dumps({"spec": {"replicas": replicas}}),
                headers={"Content-Type": "application/merge-patch+json"},
            )
        assert done.status_code == 200, done.text

    def delete_now(self, pod: str) -> None:
        """Force-delete a pod (``kubectl delete --grace-period=0 --force``): the object goes at once, the
        kubelet ends the container when its kill under way ends."""
        with self.plane.client() as http:
            done = http.request(
                "DELETE", f"/api/v1/namespaces/default/pods/{pod}", json={"gracePeriodSeconds": 0}
            )
        assert done.status_code in (200, 404), done.text

    def allocatable(self) -> int:
        return int(self.get("/api/v1/nodes/node1")["status"]["allocatable"].get(RESOURCE, "0"))

    def allocated(self) -> dict[str, list[str]]:
        """The kubelet's own record of what the device plugin gave each pod (its checkpoint)."""
        done = self.cluster.exec(
            "node1", ["cat", "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"]
        )
        entries = json.loads(done.stdout)["Data"]["PodDeviceEntries"]
        return {
            e["PodUID"]: sorted(d for ids in e["DeviceIDs"].values() for d in ids)
            for e in entries
            if e["ResourceName"] == RESOURCE
        }

    def container_devices(self, container_id: str) -> list[str]:
        """The device nodes in a container's OCI spec, as containerd holds it."""
        done = self.cluster.exec("node1", ["ctr", "-n", "k8s.io", "containers", "info", container_id])
        assert done.returncode == 0, done.stderr
        spec = json.loads(done.stdout)["Spec"]
        return sorted(d["path"] for d in spec["linux"].get("devices") or [])


def _until(check: Callable[[], Any], what: str, timeout: float, rig: Rig) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = check()
        if seen:
            return seen
        time.sleep(2.0)
    pods = [
        (p["metadata"]["name"], p["metadata"].get("deletionTimestamp"), p["status"].get("conditions"))
        for p in rig.pods()
    ]
    pytest.fail(f"timed out waiting for {what}; pods {pods}\n{rig.node.journal(lines=30)}", pytrace=False)


@pytest.fixture(scope="module")
def rig(
    request: pytest.FixtureRequest,
    k8s_built: Any,
    fresh_host_network: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Rig]:
    cluster = start_cluster(request, "knode", nodes=1, os_list="openeuler-22.03", binds=engine_binds())
    folder = tmp_path_factory.mktemp("k8s-node")
    inventory = copy_inventory(cluster, folder, mirror_vars(cluster))
    runs = folder / "runs"
    for stage in ("repos", "driver", "container_runtime"):
        json_summary(provision_cli("apply", str(inventory), "-p", stage, "--json", runs=runs), stage)
    settings = {
        **yaml.safe_load((folder / "group_vars" / "npu_nodes.yml").read_text()),
        "npu_pools_list": [{"name": POOL, "devices": [0], "port": 8000, "profile": "smollm2-cpu"}],
        "vllm_serve_image": ensure_serve_image().tag,
        "vllm_serve_container_volumes": container_volumes(),
        "vllm_serve_api_key": API_KEY,
        **engine_profile_vars(),
    }
    (folder / "group_vars" / "npu_nodes.yml").write_text(yaml.safe_dump(settings))
    plane = ControlPlane.start(folder / "plane", address=cluster.host_ip, scheduler=True, node_lifecycle=True)
    try:
        node = KubeNode.join(cluster, "node1", plane, image_tarballs=[ensure_serve_image().path])
        try:
            secret = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "provision-vllm-api-key", "namespace": "default"},
                "data": {"api-key": base64.b64encode(API_KEY.encode()).decode()},
            }
            with plane.client() as http:
                made = http.post("/api/v1/namespaces/default/secrets", json=secret)
                assert made.status_code == 201, made.text
            yield Rig(cluster, plane, node, inventory, runs)
        finally:
            node.leave()
    finally:
        plane.stop()


def test_node_joins_with_its_npus_and_the_images_an_air_gapped_site_loads(rig: Rig) -> None:
    node = rig.get("/api/v1/nodes/node1")
    ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert ready["Ready"] == "True", node["status"]["conditions"]
    assert node["status"]["capacity"][RESOURCE] == "8"
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.20.2"
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://1.6")
    # The node lifecycle controller lifted the taint the kubelet registers with.
    assert not node["spec"].get("taints"), node["spec"]
    assert set(rig.node.images) == {PAUSE_IMAGE, f"docker.io/{ensure_serve_image().tag}"}


def test_rendered_deployment_serves_the_engine_on_the_npu_it_was_given(rig: Rig) -> None:
    applied = json_summary(
        provision_cli(
            "k8s",
            "apply",
            str(rig.inventory),
            *APPLY,
            "--kubeconfig",
            str(rig.plane.kubeconfig),
            runs=rig.runs,
        ),
        "k8s apply",
    )
    assert {o["object"]: o["state"] for o in applied["objects"]} == {
        f"Deployment/{DEPLOYMENT}": "created",
        f"Service/{DEPLOYMENT}": "created",
        f"PodDisruptionBudget/{DEPLOYMENT}": "created",
    }

    def ready() -> dict[str, Any] | None:
        pods = rig.pods()
        return pods[0] if len(pods) == 1 and _ready(pods[0]) else None

    pod = _until(ready, "the pod to be Ready", LOAD_S, rig)
    (status,) = pod["status"]["containerStatuses"]
    # The startupProbe held the pod through the load: the liveness probe never restarted it, and readiness
    # came only once the engine answered (its first startup probes were refused while it loaded).
    assert status["restartCount"] == 0
    events = rig.get(
        f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.name={pod['metadata']['name']}"
    )
    reasons = [e["reason"] for e in events["items"]]
    assert "Killing" not in reasons, reasons
    # The container holds the chip the device plugin allocated (the kubelet's checkpoint) and no other.
    [chips] = rig.allocated().values()
    assert len(chips) == 1
    chip = int(chips[0].rsplit("-", 1)[1])
    container_id = status["containerID"].removeprefix("containerd://")
    assert rig.container_devices(container_id) == sorted(
        ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc", f"/dev/davinci{chip}"]
    )
    # The engine answers on the pod's address, from the node (the pod network is the node's).
    answer = _complete_from_node(rig, pod["status"]["podIP"])
    assert answer["model"] == "smollm2" and answer["choices"][0]["text"], answer


def test_unhealthy_npus_are_never_allocated(rig: Rig) -> None:
    node = rig.cluster.node("node1")
    [serving] = [p for p in rig.pods() if _ready(p)]
    [in_use] = rig.allocated()[serving["metadata"]["uid"]]
    used = int(in_use.rsplit("-", 1)[1])
    others = [chip for chip in range(8) if chip != used]
    spare = others[0]
    health = {str(chip): "Critical" for chip in others}
    health[str(others[1])] = "Warning"  # any health but OK is unhealthy to the plugin
    faults.plant(node, {"npu_health": health})
    try:
        _until(lambda: rig.allocatable() == 1, "the node's allocatable NPUs to drop to 1", 60, rig)
        rig.scale(2)

        def unschedulable() -> str | None:
            for pod in rig.pods():
                for condition in pod["status"].get("conditions", []):
                    if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
                        return str(condition["message"])
            return None

        message = _until(unschedulable, "the second replica to be refused a node", 60, rig)
        assert f"Insufficient {RESOURCE}" in message
        time.sleep(5)  # the scheduler retries: nothing may start on an unhealthy chip meanwhile
        assert len(rig.allocated()) == 1

        del health[str(spare)]
        faults.plant(node, {"npu_health": health})
        second = _until(
            lambda: len(rig.allocated()) == 2 and rig.allocated(), "the second pod's NPU", 90, rig
        )
        new = [chips for uid, chips in second.items() if uid != serving["metadata"]["uid"]]
        assert new == [[f"Ascend910-{spare}"]]
    finally:
        rig.scale(1)
        faults.clear(node, ["npu_health"])
        # The ReplicaSet removes the replica still loading. vLLM does not stop on SIGTERM mid-load (seen
        # here), so the kubelet waits out the whole grace period (150 s) before SIGKILL, and 1.20 keeps
        # that period for a kill under way even when a shorter one is asked: force-delete it.
        _until(lambda: len([p for p in rig.pods() if _live(p)]) == 1, "the scale-in", 30, rig)
        for pod in rig.pods():
            if not _live(pod):
                rig.delete_now(pod["metadata"]["name"])
    _until(lambda: len(rig.pods()) == 1, "the Deployment to be back at one pod", 60, rig)


def _live(pod: dict[str, Any]) -> bool:
    """Not being deleted."""
    return not pod["metadata"].get("deletionTimestamp")


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def _complete_from_node(rig: Rig, pod_ip: str) -> dict[str, Any]:
    body = json.dumps({"model": "smollm2", "prompt": "The capital of France is", "max_tokens": 8})
    script = (
        "import json,sys,urllib.request as r\n"
        f"q=r.Request('http://{pod_ip}:8000/v1/completions',data=sys.argv[1].encode(),"
        f"headers={{'Content-Type':'application/json','Authorization':'Bearer {API_KEY}'}})\n"
        "print(r.urlopen(q,timeout=60).read().decode())\n"
    )
    done = rig.cluster.exec("node1", ["python3", "-c", script, body], timeout=90)
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer
