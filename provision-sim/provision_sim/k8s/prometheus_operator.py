"""The scrape job prometheus-operator makes of a ServiceMonitor, for a real Prometheus outside the rig.

The rig has no prometheus-operator (its CRDs and its image are not reachable here), so a test that wants
Prometheus to scrape what a rendered ServiceMonitor selects turns it into the job the operator would
write: ``generateServiceMonitorConfig`` of prometheus-operator's ``pkg/prometheus/promcfg.go``, the
subset a ServiceMonitor of :mod:`provision.k8s.render` uses, relabelings unchanged.

Debian builds its Prometheus without Kubernetes service discovery (``kubernetes_sd_configs`` is "not
found"), so :class:`EndpointsDiscovery` stands in for the ``endpoints`` role: it reads the Endpoints,
Services and Pods of the plane each second and writes the targets, with the ``__meta_kubernetes_*`` labels
that role gives them (Prometheus' configuration docs, ``<kubernetes_sd_config>``), to a ``file_sd_configs``
file. The operator's relabelings then keep, drop and name the targets as in a cluster, and pods that come
and go with the autoscaler are found within a second or two.

A field the subset does not translate is refused (:class:`MonitorError`), so that a change to the
rendered ServiceMonitor cannot be dropped here without a test noticing.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from provision.errors import ProvisionError
from provision_sim.k8s.external_metrics import label_name

_SPEC_KEYS = {"jobLabel", "selector", "endpoints", "namespaceSelector"}
_ENDPOINT_KEYS = {"port", "path", "relabelings", "interval"}
_RELABEL_KEYS = {
    "sourceLabels": "source_labels",
    "separator": "separator",
    "targetLabel": "target_label",
    "regex": "regex",
    "replacement": "replacement",
    "action": "action",
}


class MonitorError(ProvisionError):
    """A ServiceMonitor field this translation does not know."""


def _relabel(entry: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(entry) - set(_RELABEL_KEYS)
    if unknown:
        raise MonitorError(f"relabeling fields not translated: {sorted(unknown)}")
    return {_RELABEL_KEYS[key]: value for key, value in entry.items()}


def scrape_configs(monitor: Mapping[str, Any], targets: Path, interval: str = "1s") -> list[dict[str, Any]]:
    """One scrape job per endpoint of ``monitor``, its targets discovered from the file ``targets`` that an
    :class:`EndpointsDiscovery` keeps (where the operator writes ``kubernetes_sd_configs``)."""
    if monitor.get("kind") != "ServiceMonitor":
        raise MonitorError(f"not a ServiceMonitor: {monitor.get('kind')}")
    meta, spec = monitor["metadata"], monitor["spec"]
    unknown = set(spec) - _SPEC_KEYS
    if unknown:
        raise MonitorError(f"ServiceMonitor spec fields not translated: {sorted(unknown)}")
    selector = spec.get("selector", {})
    if set(selector) - {"matchLabels"}:
        raise MonitorError(f"selector fields not translated: {sorted(set(selector) - {'matchLabels'})}")
    # namespaceSelector: the discovery is given the namespaces (EndpointsDiscovery), as the operator
    # gives them to kubernetes_sd_configs; the relabelings do not depend on them.
    jobs = []
    for index, endpoint in enumerate(spec["endpoints"]):
        if set(endpoint) - _ENDPOINT_KEYS:
            raise MonitorError(f"endpoint fields not translated: {sorted(set(endpoint) - _ENDPOINT_KEYS)}")
        relabel: list[dict[str, Any]] = [
            {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"}
        ]
        for key, value in sorted(selector.get("matchLabels", {}).items()):
            relabel.append(
                {
                    "action": "keep",
                    "source_labels": [
                        f"__meta_kubernetes_service_label_{label_name(key)}",
                        f"__meta_kubernetes_service_labelpresent_{label_name(key)}",
                    ],
                    "regex": f"({value});true",
                }
            )
        relabel.append(
            {
                "action": "keep",
                "source_labels": ["__meta_kubernetes_endpoint_port_name"],
                "regex": endpoint["port"],
            }
        )
        target = [
            "__meta_kubernetes_endpoint_address_target_kind",
            "__meta_kubernetes_endpoint_address_target_name",
        ]
        relabel += [
            {
                "source_labels": target,
                "separator": ";",
                "regex": "Node;(.*)",
                "replacement": "${1}",
                "target_label": "node",
            },
            {
                "source_labels": target,
                "separator": ";",
                "regex": "Pod;(.*)",
                "replacement": "${1}",
                "target_label": "pod",
            },
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
            {
                "source_labels": ["__meta_kubernetes_service_name"],
                "target_label": "job",
                "replacement": "${1}",
            },
        ]
        if spec.get("jobLabel"):
            relabel.append(
                {
                    "source_labels": [f"__meta_kubernetes_service_label_{label_name(spec['jobLabel'])}"],
                    "target_label": "job",
                    "regex": "(.+)",
                    "replacement": "${1}",
                }
            )
        relabel.append({"target_label": "endpoint", "replacement": endpoint["port"]})
        relabel += [_relabel(entry) for entry in endpoint.get("relabelings", [])]
        jobs.append(
            {
                "job_name": f"serviceMonitor/{meta['namespace']}/{meta['name']}/{index}",
                "honor_labels": False,
                "scrape_interval": endpoint.get("interval", interval),
                "metrics_path": endpoint.get("path", "/metrics"),
                "file_sd_configs": [{"files": [str(targets)], "refresh_interval": "5s"}],
                "relabel_configs": relabel,
            }
        )
    return jobs


# ------------------------------------------------------------------------------- endpoints discovery


def _meta(prefix: str, labels: Mapping[str, str]) -> dict[str, str]:
    found = {}
    for key, value in labels.items():
        found[f"__meta_kubernetes_{prefix}_label_{label_name(key)}"] = value
        found[f"__meta_kubernetes_{prefix}_labelpresent_{label_name(key)}"] = "true"
    return found


def endpoint_targets(
    endpoints: Sequence[Mapping[str, Any]],
    services: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """The target groups Prometheus' ``endpoints`` role finds for these objects: one target per address
    and port of each Endpoints object (ready and not ready), with the Service's labels and, for an address
    that is a pod, the pod's (its node, the container that declares the port)."""
    by_service = {(s["metadata"]["namespace"], s["metadata"]["name"]): s for s in services}
    by_pod = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
    groups = []
    for item in endpoints:
        namespace, name = item["metadata"]["namespace"], item["metadata"]["name"]
        service = by_service.get((namespace, name))
        for subset in item.get("subsets") or []:
            addresses = [(a, "true") for a in subset.get("addresses") or []]
            addresses += [(a, "false") for a in subset.get("notReadyAddresses") or []]
            for address, ready in addresses:
                for port in subset.get("ports") or []:
                    labels = {
                        "__meta_kubernetes_namespace": namespace,
                        "__meta_kubernetes_endpoints_name": name,
                        "__meta_kubernetes_endpoint_ready": ready,
                        "__meta_kubernetes_endpoint_port_name": port.get("name", ""),
                        "__meta_kubernetes_endpoint_port_protocol": port.get("protocol", "TCP"),
                        **_meta("endpoints", item["metadata"].get("labels") or {}),
                    }
                    if address.get("nodeName"):
                        labels["__meta_kubernetes_endpoint_node_name"] = address["nodeName"]
                    if service is not None:
                        labels["__meta_kubernetes_service_name"] = name
                        labels.update(_meta("service", service["metadata"].get("labels") or {}))
                    ref = address.get("targetRef") or {}
                    if ref:
                        labels["__meta_kubernetes_endpoint_address_target_kind"] = ref.get("kind", "")
                        labels["__meta_kubernetes_endpoint_address_target_name"] = ref.get("name", "")
                    pod = by_pod.get((namespace, ref.get("name", ""))) if ref.get("kind") == "Pod" else None
                    if pod is not None:
                        labels.update(_pod_labels(pod, port["port"]))
                    groups.append({"targets": [f"{address['ip']}:{port['port']}"], "labels": labels})
    return groups


def _pod_labels(pod: Mapping[str, Any], port: int) -> dict[str, str]:
    labels = {
        "__meta_kubernetes_pod_name": pod["metadata"]["name"],
        "__meta_kubernetes_pod_ip": pod.get("status", {}).get("podIP", ""),
        "__meta_kubernetes_pod_node_name": pod.get("spec", {}).get("nodeName", ""),
        "__meta_kubernetes_pod_uid": pod["metadata"].get("uid", ""),
        "__meta_kubernetes_pod_phase": pod.get("status", {}).get("phase", ""),
        **_meta("pod", pod["metadata"].get("labels") or {}),
    }
    for container in pod.get("spec", {}).get("containers", []):
        for declared in container.get("ports") or []:
            if declared.get("containerPort") == port:
                labels["__meta_kubernetes_pod_container_name"] = container["name"]
                labels["__meta_kubernetes_pod_container_port_name"] = declared.get("name", "")
                labels["__meta_kubernetes_pod_container_port_number"] = str(port)
    return labels


class EndpointsDiscovery:
    """Keeps ``path`` (a ``file_sd_configs`` file) holding :func:`endpoint_targets` of ``namespaces``,
    read through ``client`` (an apiserver client) every ``period_s``; written atomically, so Prometheus'
    file watch never reads half a file."""

    def __init__(
        self, client: httpx.Client, namespaces: Sequence[str], path: Path, period_s: float = 1.0
    ) -> None:
        self.client, self.namespaces, self.path, self.period_s = client, list(namespaces), path, period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="endpoints-discovery", daemon=True)
        self.errors: list[str] = []

    def start(self) -> EndpointsDiscovery:
        self.refresh()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def refresh(self) -> None:
        found: dict[str, list[dict[str, Any]]] = {"endpoints": [], "services": [], "pods": []}
        for namespace in self.namespaces:
            for kind in found:
                answer = self.client.get(f"/api/v1/namespaces/{namespace}/{kind}")
                answer.raise_for_status()
                found[kind] += answer.json()["items"]
        groups = endpoint_targets(found["endpoints"], found["services"], found["pods"])
        partial = self.path.with_suffix(".tmp")
        partial.write_text(json.dumps(groups, indent=1))
        os.replace(partial, self.path)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self.refresh()
            except (httpx.HTTPError, OSError, ValueError) as exc:  # kept, and tried again next period
                self.errors.append(str(exc))
