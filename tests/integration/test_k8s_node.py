"""The rendered Deployment on a real node: kubelet 1.20.2 and Debian's containerd inside a simulated node,
joined to a real control plane (with the scheduler and the node lifecycle controller), the simulated Ascend
device plugin advertising its eight 910B3 chips, and the serving image imported into containerd from its
tarball as an air-gapped site does.

``provision k8s apply`` of a one-pool inventory (with its HPA on the queue) starts the real vLLM CPU engine
in a pod: its startupProbe holds readiness through the load without a restart, the pod gets exactly the NPU
the device plugin allocated and no other, and the engine answers on the pod's address.

Then the autoscaling drill, end to end: Debian's Prometheus scrapes the pods the rendered ServiceMonitor
selects (as prometheus-operator would configure it), the rig's external metrics API answers the rendered
adapter rules, and the real HPA controller scales the Deployment. With six chips made unhealthy through the
simulator's fault knob, load through the Service (kube-proxy on the node) makes the HPA ask for three
replicas: one gets the one healthy spare chip, the third stays Pending ("Insufficient huawei.com/Ascend910").
The load stops; with the queue empty the rendered scale-down window alone keeps the new replica while it
loads, a trickle of requests through the Service meanwhile, which it takes once ready. The drill then
shortens the window and the HPA scales back to one pod while requests keep arriving through the Service,
and not one fails. No unhealthy chip is ever allocated.

Its own module (and pytest-xdist group): it runs beside the serving group, with a control plane of its own
(its node lifecycle controller would taint the shared plane's heartbeat-less nodes). Costs: one node with
the container runtime stage (about 1 min), the plane and the node (about 1 min), one engine load.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.k8s import autoscale
from provision_sim import faults
from provision_sim.cluster import Cluster
from provision_sim.k8s import external_metrics, prometheus_operator
from provision_sim.k8s.controlplane import ControlPlane
from provision_sim.k8s.node import PAUSE_IMAGE, KubeNode
from provision_sim.serving.image import ensure_serve_image
from provision_sim.serving.setup import container_volumes, engine_binds, engine_profile_vars
from tests.conftest import start_cluster
from tests.helpers import PROVISION, Prometheus, copy_inventory, json_summary, mirror_vars, provision_cli

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

POOL = "smol"
DEPLOYMENT = f"vllm-{POOL}"
API_KEY = "k8s-node-key"
RESOURCE = "huawei.com/Ascend910"
# The ServiceMonitor's CRD is not on the rig's plane (the drill's Prometheus reads the rendered one instead).
TARGET = 2  # waiting requests per replica, for a 135M-parameter CPU engine (the product's default: 5)
MAX_REPLICAS = 3
APPLY = [
    *("--kube-version", "1.20", "--no-monitoring"),
    *("--target", f"queue={TARGET}", "--max-replicas", str(MAX_REPLICAS), "--json"),
]
STABILISATION_S = 15
QUIET_S = 20  # the least time the rendered window must hold the scale-out with the queue empty
# Prompts per batch of the load: the engine prefills one 2048-token prompt at a time, so up to BATCH - 1 wait,
# and MAX_REPLICAS ask for a queue of 2 * TARGET + 1 = 5; 8 hold it for three prefills (12 held it for seven,
# ~50 s more per batch beside the rest of the suite). A batch that ends before the scale-out is followed by
# another.
BATCH = 8
HPA_USER = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
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

    def merge_patch(self, path: str, patch: dict[str, Any]) -> None:
        with self.plane.client() as http:
            done = http.patch(
                path, content=json.dumps(patch), headers={"Content-Type": "application/merge-patch+json"}
            )
        assert done.status_code == 200, f"PATCH {path}: {done.status_code} {done.text[:500]}"

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
        f"HorizontalPodAutoscaler/{DEPLOYMENT}": "created",
        "ConfigMap/provision-prometheus-adapter": "created",
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


@dataclass
class MetricPath:
    """Debian's Prometheus discovering the pool's pods as the rendered ServiceMonitor selects them, and the
    external metrics API answering the rendered adapter rules from it, registered with the plane."""

    prometheus: Prometheus
    server: external_metrics.ExternalMetricsServer


@pytest.fixture(scope="module")
def metric_path(rig: Rig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetricPath]:
    folder = tmp_path_factory.mktemp("k8s-node-metrics")
    rendered = json_summary(
        provision_cli("k8s", "render", str(rig.inventory), "--kube-version", "1.20", "--json", runs=rig.runs),
        "k8s render",
    )
    [monitor] = [o for o in rendered["items"] if o["kind"] == "ServiceMonitor"]
    targets = folder / "targets.json"
    client = rig.plane.client()
    discovery = prometheus_operator.EndpointsDiscovery(client, ["default"], targets)
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": prometheus_operator.scrape_configs(monitor, targets),
    }
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    prometheus = Prometheus(folder / "prometheus.yml", folder)
    try:
        discovery.start()
        prometheus.start()
        series = f'{autoscale.QUEUE.series}{{namespace="default",pool="{POOL}"}}'
        prometheus.wait("the pod's queue", lambda: len(prometheus.query(series)) == 1, timeout=60)
        url = f"http://127.0.0.1:{prometheus.port}"
        with external_metrics.serving(rig.plane, url, folder / "external-metrics") as (server, _):
            yield MetricPath(prometheus, server)
    finally:
        prometheus.stop()
        discovery.stop()
        client.close()


@dataclass
class Drill:
    """The load through the Service, and what the drill saw each second."""

    rig: Rig
    metrics: MetricPath
    url: str
    began: float = field(default_factory=time.monotonic)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)
    allocations: set[str] = field(default_factory=set)
    batches: int = 0
    saved: dict[int, Path] = field(default_factory=dict)  # a bench's pid -> its saved result

    def sample(self) -> dict[str, Any]:
        hpa = self.rig.get(
            f"/apis/autoscaling/v2beta2/namespaces/default/horizontalpodautoscalers/{DEPLOYMENT}"
        )
        scale = self.rig.get(f"/apis/apps/v1/namespaces/default/deployments/{DEPLOYMENT}")["spec"]["replicas"]
        queue = self.metrics.prometheus.query(f'sum({autoscale.QUEUE.series}{{pool="{POOL}"}})')
        pods = self.rig.pods()
        for chips in self.rig.allocated().values():
            self.allocations.update(chips)
        point = {
            "s": round(time.monotonic() - self.began, 1),
            "queue": float(queue[0]["value"][1]) if queue else 0.0,
            "desired": int(hpa.get("status", {}).get("desiredReplicas", 0)),
            "replicas": int(scale),
            "ready": sum(1 for p in pods if _ready(p) and _live(p)),
            "pending": sum(1 for p in pods if p["status"].get("phase") == "Pending"),
        }
        self.timeline.append(point)
        return point

    def bench(self, *args: str) -> subprocess.Popen[str]:
        # Every request's error saved (vLLM's --save-detailed), for the assertion's message.
        saved = self.rig.runs.parent / f"bench-{len(self.saved)}.json"
        argv = [*PROVISION, "bench", self.url, "--num-prompts", *args, "--num-warmups", "0", "--json"]
        argv += ["--save-result", "--save-detailed", "--result-dir", str(saved.parent)]
        argv += ["--result-filename", saved.name]
        env = {
            **os.environ,
            "CI": "1",
            "PROVISION_RUNS_DIR": str(self.rig.runs),
            "PROVISION_API_KEY": API_KEY,
        }
        bench = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.saved[bench.pid] = saved
        return bench

    def finish(self, bench: subprocess.Popen[str]) -> dict[str, Any]:
        out, err = bench.communicate(timeout=600)
        if bench.returncode != 0:
            saved = self.saved[bench.pid]
            errors = json.loads(saved.read_text()).get("errors", []) if saved.exists() else ["(not saved)"]
            failed = [e for e in errors if e]
            raise AssertionError(f"bench through the Service: {out[-1500:]}\n{err[-1000:]}\nerrors: {failed}")
        result: dict[str, Any] = json.loads(out)
        self.results.append(result)
        return result

    def batch(self) -> subprocess.Popen[str]:
        """BATCH prompts of 2048 tokens, all at once, each batch with prompts of its own: the same seed twice
        would give the same prompts, and the engine's prefix cache would answer the second batch at once."""
        self.batches += 1
        return self.bench(
            str(BATCH),
            "--max-concurrency",
            str(BATCH),
            "--random-input-len",
            "2048",
            "--random-output-len",
            "16",
            "--ignore-eos",
            "--seed",
            str(self.batches),
        )

    def trickle(self) -> subprocess.Popen[str]:
        """10 short requests, 2 a second: traffic that queues nothing (short, so that the drill's wait for
        the last one is short too)."""
        self.batches += 1
        return self.bench(
            "10",
            *("--request-rate", "2", "--random-input-len", "32", "--random-output-len", "4"),
            *("--seed", str(self.batches)),
        )

    def load_until(
        self,
        done: Callable[[dict[str, Any]], bool],
        what: str,
        timeout: float,
        batch: Callable[[], subprocess.Popen[str]] | None = None,
    ) -> float:
        """Batches through the Service (by default of long prompts, which the engine prefills one at a time:
        the others wait) until ``done`` holds for a sample; returns when it held (s since the drill began)."""
        batch = batch or self.batch
        deadline = time.monotonic() + timeout
        bench = batch()
        try:
            while True:
                point = self.sample()
                if done(point):
                    return float(point["s"])
                assert time.monotonic() < deadline, (
                    f"{what} not within {timeout:.0f} s: {self.timeline[-10:]}"
                )
                if bench.poll() is not None:
                    self.finish(bench)
                    bench = batch()
                time.sleep(1.0)
        finally:
            self.finish(bench)

    def until(self, done: Callable[[dict[str, Any]], bool], what: str, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while True:
            point = self.sample()
            if done(point):
                return float(point["s"])
            assert time.monotonic() < deadline, f"{what} not within {timeout:.0f} s: {self.timeline[-10:]}"
            time.sleep(1.0)


def test_the_hpa_scales_out_onto_healthy_npus_under_load_and_back_in_failing_nothing(
    rig: Rig, metric_path: MetricPath, tmp_path: Path
) -> None:
    node = rig.cluster.node("node1")
    [serving] = [p for p in rig.pods() if _ready(p)]
    [in_use] = rig.allocated()[serving["metadata"]["uid"]]
    used = int(in_use.rsplit("-", 1)[1])
    spare = next(chip for chip in range(8) if chip != used)
    healthy = {f"Ascend910-{used}", f"Ascend910-{spare}"}
    health = {str(chip): "Critical" for chip in range(8) if chip not in (used, spare)}
    health[next(iter(health))] = "Warning"  # any health but OK is unhealthy to the plugin
    # The rendered HPA adds one replica a minute; the drill, one each 5 s. Its scale-down window (the load
    # budget plus a minute) stays as rendered through the scale-out: a shorter one lets the queue's dips
    # between batches take the loading replica away before it is ready (a first drill saw exactly that).
    one_each_5s = [{"type": "Pods", "value": 1, "periodSeconds": 5}]
    hpa_path = f"/apis/autoscaling/v2beta2/namespaces/default/horizontalpodautoscalers/{DEPLOYMENT}"
    rendered = rig.get(hpa_path)["spec"]["behavior"]
    assert rendered["scaleDown"]["stabilizationWindowSeconds"] >= LOAD_S
    rig.merge_patch(
        hpa_path, {"spec": {"behavior": {"scaleUp": {**rendered["scaleUp"], "policies": one_each_5s}}}}
    )
    service = rig.get(f"/api/v1/namespaces/default/services/{DEPLOYMENT}")
    drill = Drill(
        rig, metric_path, f"http://{service['spec']['clusterIP']}:{service['spec']['ports'][0]['port']}"
    )
    faults.plant(node, {"npu_health": health})
    try:
        drill.until(
            lambda p: p["desired"] == 1 and rig.allocatable() == 2, "the HPA's reading, 2 healthy NPUs", 90
        )
        load_at = drill.sample()["s"]
        # Load: the queue rises, the HPA asks for MAX_REPLICAS, one gets the one healthy spare NPU, the last
        # finds none (Pending).
        scaled_at = drill.load_until(
            lambda p: p["replicas"] == MAX_REPLICAS and p["pending"] == 1, "the scale-out", 240
        )
        message = _unschedulable(rig)
        assert message and f"Insufficient {RESOURCE}" in message, message
        # The load stops at its batch's end: the rendered scale-down window alone keeps the new replica while
        # it loads (the queue is empty by then). A trickle through the Service meanwhile: the first replica
        # answers every request, the loading one gets none until it is ready; then it takes traffic.
        ready_at = drill.load_until(
            lambda p: p["ready"] == 2, "a second ready replica", LOAD_S, drill.trickle
        )
        [new] = [p for p in rig.pods() if _ready(p) and p["metadata"]["uid"] != serving["metadata"]["uid"]]
        assert rig.allocated()[new["metadata"]["uid"]] == [f"Ascend910-{spare}"]
        assert len(rig.pods()) == MAX_REPLICAS, "the window kept the scale-out through the load"
        served = f'sum(vllm:request_success_total{{pod="{new["metadata"]["name"]}"}})'

        def took_traffic(_: dict[str, Any]) -> bool:
            found = metric_path.prometheus.query(served)
            return bool(found) and float(found[0]["value"][1]) >= 2

        drill.load_until(took_traffic, "the new replica to serve through the Service", 120, drill.trickle)
        # The queue empty for QUIET_S at least (the batch under way at the scale-out may have ended late:
        # the drill then watches on), each HPA sync in it asking for one replica.
        idle_at = drill.until(
            lambda p: p["s"] - (quiet_since(drill.timeline, scaled_at) or p["s"]) >= QUIET_S,
            f"the queue empty for {QUIET_S} s",
            120 + QUIET_S,
        )
        # Now the drill shortens the scale-down window to STABILISATION_S, one replica each 5 s: the HPA,
        # its queue empty for a while, scales in.
        shorter = {"stabilizationWindowSeconds": STABILISATION_S, "policies": one_each_5s}
        rig.merge_patch(hpa_path, {"spec": {"behavior": {"scaleDown": shorter}}})
        # Requests keep arriving through the Service while the HPA scales in: not one may fail.
        trickle = drill.bench(
            "150", "--request-rate", "3", "--random-input-len", "32", "--random-output-len", "4"
        )
        try:
            back_at = drill.until(
                lambda p: p["replicas"] == 1 and len(rig.pods()) == 1,
                "the scale-in to 1 pod",
                STABILISATION_S + 180,
            )
        finally:
            tail = drill.finish(trickle)
        assert tail["completed"] == 150 and tail["failed"] == 0, tail
    finally:
        faults.clear(node, ["npu_health"])
        pathname = tmp_path / "timeline.json"
        pathname.write_text(json.dumps(drill.timeline))
        print(f"\ndrill timeline ({pathname}): {json.dumps(drill.timeline)}")
        figure = os.environ.get("PROVISION_K8S_DRILL_PNG")
        if figure:  # the docs' figure
            draw(drill.timeline, Path(figure))
    assert all(r["failed"] == 0 for r in drill.results), [r["failed"] for r in drill.results]
    # The rendered window held the scale-out: from the scale-out until the drill shortened the window the
    # Deployment kept MAX_REPLICAS, though the queue (which alone would ask for one replica) was empty for
    # QUIET_S at least of it (the drill waited for that), each HPA sync (2 s) in that time; the scale-in
    # came only after the shortening.
    timeline = drill.timeline
    held = [p for p in timeline if scaled_at <= p["s"] <= idle_at]
    assert all(p["replicas"] == MAX_REPLICAS for p in held), [
        p for p in held if p["replicas"] != MAX_REPLICAS
    ]
    quiet = quiet_since(held, scaled_at) or idle_at
    dropped = next(p["s"] for p in timeline if p["s"] > scaled_at and p["replicas"] < MAX_REPLICAS)
    assert dropped > idle_at
    assert drill.allocations <= healthy, f"an unhealthy NPU was allocated: {drill.allocations - healthy}"
    asked = [r for r in metric_path.server.seen() if r.user == HPA_USER]
    assert {r.query for r in asked} == {autoscale.query(autoscale.QUEUE, POOL, "default")}
    print(
        f"k8s node drill: load at {load_at:.0f} s; scaled out at {scaled_at:.0f} s; second replica ready"
        f" {ready_at - scaled_at:.0f} s after the scale-out; queue empty at {idle_at:.0f} s; one pod again at"
        f" {back_at:.0f} s;"
        f" {sum(r['completed'] for r in drill.results)} requests, 0 failed; the window held"
        f" {MAX_REPLICAS} replicas {idle_at - quiet:.0f} s with the queue empty"
    )


def draw(timeline: list[dict[str, Any]], out: Path) -> None:
    """The drill's timeline as docs/kubernetes.md shows it: replicas asked, ready and Pending, and the
    pool's queue, over the drill's seconds."""
    from matplotlib.figure import Figure

    seconds = [p["s"] for p in timeline]
    figure = Figure(figsize=(9, 4.5), layout="constrained")
    pods, queue = figure.subplots(2, 1, sharex=True, height_ratios=[3, 2])
    lines = {"replicas": "replicas (Deployment)", "ready": "ready pods", "pending": "Pending"}
    for key, label in lines.items():
        pods.step(seconds, [p[key] for p in timeline], where="post", label=label)
    pods.set_ylabel("pods")
    pods.legend(loc="upper right")
    pods.set_title("HPA on vllm:num_requests_waiting through a real node: out onto the healthy NPU, back in")
    queue.plot(seconds, [p["queue"] for p in timeline], color="tab:red")
    queue.set_ylabel("requests waiting")
    queue.set_xlabel("seconds since the drill began")
    figure.savefig(out, dpi=100)


def quiet_since(timeline: list[dict[str, Any]], after: float) -> float | None:
    """When the queue last became empty, after ``after`` s (None while it is not empty)."""
    since = None
    for point in timeline:
        if point["s"] >= after:
            since = (since if since is not None else point["s"]) if point["queue"] == 0 else None
    return since


def _unschedulable(rig: Rig) -> str | None:
    for pod in rig.pods():
        for condition in pod["status"].get("conditions", []):
            if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
                return str(condition["message"])
    return None


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
