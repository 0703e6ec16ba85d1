"""The external metrics path of the rendered autoscaling on the shared serving cluster: Debian's real
Prometheus scraping the real vLLM CPU engines (the labels a PodMonitor would give: ``namespace``, ``pool``)
-> the external metrics API (``provision_sim.k8s.external_metrics``: the prometheus-adapter
``externalRules`` that ``provision.k8s.autoscale`` renders, evaluated as the adapter does) -> the test
control plane's aggregation layer (APIService ``v1beta1.external.metrics.k8s.io``, TLS, the front-proxy
client certificate). The metric is exactly the rendered query, per namespace, and only the apiserver may ask.

The HPA scaling real pods on that path, under load through a Service, is the node drill
(``tests/integration/test_k8s_node.py``).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
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
]

NAMESPACE = "drill"


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
    try:
        series = f'{autoscale.QUEUE.series}{{namespace="{NAMESPACE}",pool="{POOL_NAME}"}}'
        prometheus.wait("both engines' queue", lambda: len(prometheus.query(series)) == 2, timeout=60)
        url = f"http://127.0.0.1:{prometheus.port}"
        with external_metrics.serving(k8s_control_plane, url, folder / "external-metrics") as (server, took):
            yield Rig(k8s_control_plane, served, prometheus, server, {"APIService available": took})
    finally:
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
    print("\nrig: " + ", ".join(f"{k} {v:.1f} s" for k, v in rig.timings.items()))
