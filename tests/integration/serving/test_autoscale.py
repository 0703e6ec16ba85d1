"""The autoscaling drill: the real HPA controller of the test control plane (Kubernetes 1.20,
``k8s_control_plane``) scales a Deployment on ``vllm:num_requests_waiting`` of the real vLLM CPU engines of
the shared serving cluster (container mode, ``cluster.py``), through the whole metric path a cluster has:

engines ``/metrics`` -> Debian's real Prometheus (scraping them every second, the labels a PodMonitor would
give: ``namespace``, ``pool``) -> the external metrics API (``provision_sim.k8s.external_metrics``: the
prometheus-adapter ``externalRules`` that ``provision.k8s.autoscale`` renders, evaluated as the adapter
does) -> the apiserver's aggregation layer (APIService ``v1beta1.external.metrics.k8s.io``, TLS, the
front-proxy client certificate) -> kube-controller-manager's HPA controller (sync every 2 s) -> the
Deployment's scale.

``provision bench`` load on node1 (long prompts: the engine prefills one at a time, the others wait) raises
the queue; the HPA (``autoscaling/v2beta2``: 1.20 serves no ``v2``; the product's ``metrics:`` as rendered,
with a drill target of 2 waiting requests per replica) scales 1 -> 3; once the load stops it scales back to
1 after the stabilisation window. The drill shortens the rendered behaviour (its scale-down window is the
pool's load budget plus a minute, 11 min here): a 10 s window and policy periods of 5 s.

The pods are never run (no kubelet): the HPA's ``AverageValue`` External metric divides by the
Deployment's ``status.replicas`` (pods created, ready or not), so no pod needs to be Ready.
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from provision.k8s import autoscale
from provision_sim.k8s import external_metrics
from provision_sim.k8s.controlplane import ControlPlane
from tests.helpers import Prometheus
from tests.integration.serving.cluster import POOL_NAME, PORT, Served

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.engine,
    pytest.mark.slow,
    pytest.mark.k8s,
    pytest.mark.parametrize("served", ["container"], indirect=True),
]

NAMESPACE = "drill"
DEPLOYMENT = "smol"
TARGET = 2  # waiting requests per replica, for two 135M-parameter CPU engines
MAX_REPLICAS = 3
STABILISATION_S = 10
PERIOD_S = 5
HPA_USER = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"


@dataclass
class Rig:
    plane: ControlPlane
    served: Served
    prometheus: Prometheus
    server: external_metrics.ExternalMetricsServer
    timings: dict[str, float] = field(default_factory=dict)

    def get(self, path: str, **params: str) -> dict[str, Any]:
        with self.plane.client() as http:
            answer = http.get(path, params=params)
        assert answer.status_code == 200, f"GET {path}: {answer.status_code} {answer.text[:1000]}"
        body: dict[str, Any] = answer.json()
        return body

    def apply(self, path: str, body: dict[str, Any]) -> None:
        with self.plane.client() as http:
            answer = http.patch(
                path,
                params={"fieldManager": "provision", "force": "true"},
                content=json.dumps(body),
                headers={"Content-Type": "application/apply-patch+yaml"},
            )
        assert answer.status_code < 300, f"apply {path}: {answer.status_code} {answer.text[:1000]}"


@pytest.fixture(scope="module")
def rig(
    served: Served, k8s_control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Rig]:
    folder = tmp_path_factory.mktemp("autoscale")
    ips = [served.cluster.node(n).ip for n in ("node1", "node2")]
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": "vllm",
                "static_configs": [
                    {
                        "targets": [f"{ip}:{PORT}" for ip in ips],
                        "labels": {"namespace": NAMESPACE, "pool": POOL_NAME},
                    }
                ],
            }
        ],
    }
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    prometheus = Prometheus(folder / "prometheus.yml", folder).start()
    server = None
    try:
        series = f'{autoscale.QUEUE.series}{{namespace="{NAMESPACE}",pool="{POOL_NAME}"}}'
        prometheus.wait("both engines' queue", lambda: len(prometheus.query(series)) == 2, timeout=60)
        rules = external_metrics.parse_rules(autoscale.adapter_config(), "provision.k8s.autoscale")
        server = external_metrics.ExternalMetricsServer.start(
            rules,
            f"http://127.0.0.1:{prometheus.port}",
            folder / "external-metrics",
            k8s_control_plane.folder / "pki" / "front-proxy-ca.crt",
        )
        timings = {"APIService available": external_metrics.register(k8s_control_plane, server)}
        yield Rig(k8s_control_plane, served, prometheus, server, timings)
    finally:
        external_metrics.unregister(k8s_control_plane)
        if server is not None:
            server.stop()
        prometheus.stop()


def metric_path(namespace: str = NAMESPACE) -> str:
    return f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/{autoscale.QUEUE.metric}"


def test_the_external_metric_is_the_rendered_query_through_the_aggregator(rig: Rig) -> None:
    found = rig.get("/apis/external.metrics.k8s.io/v1beta1")
    assert [r["name"] for r in found["resources"]] == [autoscale.QUEUE.metric], found
    listed = rig.get(metric_path(), labelSelector=f"pool={POOL_NAME}")
    assert listed["kind"] == "ExternalMetricValueList"
    (item,) = listed["items"]  # the adapter's sum: one series for the pool
    assert item["metricName"] == autoscale.QUEUE.metric and item["value"] == "0", item
    asked = rig.server.seen()[-1]
    assert asked.user == "provision-admin", "the apiserver vouched for the caller"
    assert asked.query == autoscale.query(autoscale.QUEUE, POOL_NAME, NAMESPACE)
    # another namespace's pool has no series: the namespace matcher is there
    assert rig.get(metric_path("elsewhere"), labelSelector=f"pool={POOL_NAME}")["items"] == []
    # only the apiserver may ask: without its front-proxy client certificate, 401
    context = ssl.create_default_context(cadata=rig.server.ca_pem.decode())
    context.check_hostname = False
    direct = httpx.get(
        f"https://127.0.0.1:{rig.server.port}{metric_path()}",
        headers={"X-Remote-User": "system:admin"},
        verify=context,
    )
    assert direct.status_code == 401, direct.text


def hpa(pool: str) -> dict[str, Any]:
    """The HPA for the drill: the product's metrics as rendered, the drill's target and short windows."""
    rendered = autoscale.behavior(600)
    behaviour = {
        direction: {
            "stabilizationWindowSeconds": STABILISATION_S if direction == "scaleDown" else 0,
            "policies": [{**p, "periodSeconds": PERIOD_S} for p in rendered[direction]["policies"]],
        }
        for direction in ("scaleUp", "scaleDown")
    }
    return {
        "apiVersion": "autoscaling/v2beta2",  # 1.20: the v2 shape, served as v2beta2
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": pool, "namespace": NAMESPACE},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": DEPLOYMENT},
            "minReplicas": 1,
            "maxReplicas": MAX_REPLICAS,
            "metrics": autoscale.hpa_metrics(pool, ["queue"], {"queue": TARGET}),
            "behavior": behaviour,
        },
    }


def deployment() -> dict[str, Any]:
    labels = {"app": DEPLOYMENT}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "engine", "image": "registry.invalid/vllm:drill"}]},
            },
        },
    }


def test_the_hpa_scales_up_under_load_and_back_after_the_window(rig: Rig, tmp_path: Path) -> None:
    rig.apply(
        f"/api/v1/namespaces/{NAMESPACE}",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
    )
    rig.apply(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{DEPLOYMENT}", deployment())
    rig.apply(
        f"/apis/autoscaling/v2beta2/namespaces/{NAMESPACE}/horizontalpodautoscalers/{DEPLOYMENT}",
        hpa(POOL_NAME),
    )
    began = time.monotonic()
    timeline: list[tuple[float, float, int, int]] = []  # (s, queue, HPA desired, Deployment replicas)

    def sample() -> tuple[float, float, int, int]:
        status = rig.get(
            f"/apis/autoscaling/v2beta2/namespaces/{NAMESPACE}/horizontalpodautoscalers/{DEPLOYMENT}"
        ).get("status", {})
        replicas = rig.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{DEPLOYMENT}")["spec"][
            "replicas"
        ]
        queue = sum(float(s["value"][1]) for s in rig.prometheus.query(autoscale.QUEUE.series))
        point = (time.monotonic() - began, queue, int(status.get("desiredReplicas", 0)), int(replicas))
        timeline.append(point)
        return point

    def until(what: str, done: Any, timeout: float) -> float:
        start = time.monotonic()
        while True:
            point = sample()
            if done(point):
                return time.monotonic() - start
            assert time.monotonic() - start < timeout, f"{what} not within {timeout:.0f} s: {timeline[-20:]}"
            time.sleep(1)

    # metrics flowing at rest: the controller asked, through the aggregator, and keeps 1 replica
    until("the HPA's first reading", lambda p: p[2] == 1, timeout=60)
    conditions = rig.get(
        f"/apis/autoscaling/v2beta2/namespaces/{NAMESPACE}/horizontalpodautoscalers/{DEPLOYMENT}"
    )["status"]["conditions"]
    active = next(c for c in conditions if c["type"] == "ScalingActive")
    assert (active["status"], active["reason"]) == ("True", "ValidMetricFound"), conditions
    load_at = time.monotonic() - began
    bench = rig.served.bench_load("node1", prompts=36, concurrency=12, input_len=2048, output_len=16)
    try:
        queued_s = until("a queue", lambda p: p[1] > 0, timeout=180)
        up_s = until(f"{MAX_REPLICAS} replicas", lambda p: p[3] == MAX_REPLICAS, timeout=240)
        until("the bench's end", lambda p: bench.poll() is not None, timeout=900)  # sampled all along
    finally:
        out, err = bench.communicate(timeout=900)
    assert bench.returncode == 0, f"{out[-2000:]}\n{err[-2000:]}"
    until("the queue empty", lambda p: p[1] == 0, timeout=120)
    idle_at = time.monotonic() - began
    down_s = until("1 replica again", lambda p: p[3] == 1, timeout=STABILISATION_S + 3 * PERIOD_S + 120)
    drawn = ", ".join(f"({t:.0f},{q:g},{d},{r})" for t, q, d, r in timeline)
    print(f"\ntimeline (s, queue, desired, replicas): {drawn}")

    # The control plane is the session's: HPAs other tests applied in their own namespaces ask too.
    asked = [r for r in rig.server.seen() if r.user == HPA_USER and f'namespace="{NAMESPACE}"' in r.query]
    assert asked, "the HPA controller asked the external metrics API"
    assert {r.query for r in asked} == {autoscale.query(autoscale.QUEUE, POOL_NAME, NAMESPACE)}
    assert max(v for r in asked for v in r.values) > TARGET * (MAX_REPLICAS - 1), "it saw the queue high"
    # The scale-down waited for the window: the first replica went no sooner than STABILISATION_S after the
    # queue last asked for MAX_REPLICAS (less the HPA's 2 s sync and Prometheus' 1 s scrape: it may have
    # read that last high value up to a sync before this test's own sample did).
    topped = next(i for i, p in enumerate(timeline) if p[3] == MAX_REPLICAS)
    dropped = next(i for i in range(topped, len(timeline)) if timeline[i][3] < MAX_REPLICAS)
    high = [p[0] for p in timeline[:dropped] if p[1] > TARGET * (MAX_REPLICAS - 1)]
    assert high, drawn
    waited = timeline[dropped][0] - high[-1]
    assert waited >= STABILISATION_S - 4, f"a replica went {waited:.1f} s after the last high queue: {drawn}"
    figures = (
        f"load started {load_at:.1f} s; queue seen after {queued_s:.1f} s; {MAX_REPLICAS} replicas"
        f" {up_s:.1f} s after that; last queue asking for {MAX_REPLICAS} at {high[-1]:.1f} s, first replica"
        f" removed {waited:.1f} s after it; bench done and queue empty at {idle_at:.1f} s; 1 replica"
        f" {down_s:.1f} s later"
    )
    (tmp_path / "timeline.json").write_text(json.dumps(timeline))
    print(f"autoscaling drill: {figures}")
    print("rig: " + ", ".join(f"{k} {v:.1f} s" for k, v in rig.timings.items()))
