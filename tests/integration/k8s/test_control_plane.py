"""The Kubernetes test control plane is a real one: server-side apply, admission, and the HPA controller.

What later tests (the rendered objects, the autoscaling drill) stand on: objects applied with the field
manager ``provision`` are accepted, a second identical apply changes nothing, the apiserver refuses an
invalid object, and the real controllers reconcile what was applied (a ReplicaSet for the Deployment, a
condition on the HorizontalPodAutoscaler). Kubernetes 1.20 serves ``autoscaling/v2beta2``, not ``v2``.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from provision_sim.k8s import build as k8s_build
from provision_sim.k8s.controlplane import ADMIN_USER, ControlPlane

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

NAMESPACE = "default"
APPLY = {"Content-Type": "application/apply-patch+yaml"}
PATHS = {
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments/{name}",
    "Service": "/api/v1/namespaces/{ns}/services/{name}",
    "HorizontalPodAutoscaler": "/apis/autoscaling/v2beta2/namespaces/{ns}/horizontalpodautoscalers/{name}",
}


def _objects(name: str) -> list[dict[str, Any]]:
    labels = {"app.kubernetes.io/name": name}
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [
                            {
                                "name": "engine",
                                "image": "registry.invalid/vllm:1",
                                "ports": [{"name": "http", "containerPort": 8000, "protocol": "TCP"}],
                                "resources": {"requests": {"cpu": "1"}},
                            }
                        ]
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
            # 1.20's server-side apply refuses a port without its protocol (a key of the ports list):
            # "associative list with keys has an element that omits key field \"protocol\"".
            "spec": {
                "selector": labels,
                "ports": [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}],
            },
        },
        {
            "apiVersion": "autoscaling/v2beta2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                "minReplicas": 1,
                "maxReplicas": 4,
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {
                            "name": "cpu",
                            "target": {"type": "Utilization", "averageUtilization": 80},
                        },
                    }
                ],
            },
        },
    ]


def _path(obj: dict[str, Any]) -> str:
    return PATHS[obj["kind"]].format(ns=obj["metadata"]["namespace"], name=obj["metadata"]["name"])


def _apply(http: httpx.Client, obj: dict[str, Any]) -> httpx.Response:
    return http.patch(
        _path(obj), params={"fieldManager": "provision"}, content=json.dumps(obj), headers=APPLY
    )


def _wait_for(what: str, probe: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen within {timeout:.0f} s")
        time.sleep(0.5)


def test_the_control_plane_is_kubernetes_1_20_on_loopback(k8s_control_plane: ControlPlane) -> None:
    plane = k8s_control_plane
    assert plane.server.startswith("https://127.0.0.1:")
    with plane.client() as http:
        version = http.get("/version").json()
        assert version["gitVersion"] == k8s_build.KUBE_VERSION
        assert http.get("/readyz").text == "ok"
        who = http.post(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            json={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": plane.token},
            },
        ).json()
        assert who["status"]["user"]["username"] == ADMIN_USER
    # A wrong token is refused: the token file, not an open door, decides who may talk to it.
    with httpx.Client(
        base_url=plane.server, verify=False, headers={"Authorization": "Bearer wrong"}
    ) as stranger:
        assert stranger.get("/api/v1/namespaces").status_code == 401
    assert set(plane.pids()) == {"etcd", "kube-apiserver", "kube-controller-manager"}
    assert all(rss > 0 for rss in plane.rss_bytes().values())


def test_server_side_apply_twice_and_the_hpa_controller_reconciles(k8s_control_plane: ControlPlane) -> None:
    name = "rig-apply"
    objects = _objects(name)
    hpa = objects[2]
    with k8s_control_plane.client() as http:
        for obj in objects:
            answer = _apply(http, obj)
            assert answer.status_code == 201, f"{obj['kind']}: {answer.status_code} {answer.text}"
            managers = {(m["manager"], m["operation"]) for m in answer.json()["metadata"]["managedFields"]}
            assert ("provision", "Apply") in managers, managers

        # The controllers are real: the Deployment's ReplicaSet and pod appear (no kubelet runs the pod).
        def replica_sets() -> list[dict[str, Any]]:
            items = http.get(
                f"/apis/apps/v1/namespaces/{NAMESPACE}/replicasets",
                params={"labelSelector": f"app.kubernetes.io/name={name}"},
            ).json()["items"]
            return [rs for rs in items if rs["metadata"]["ownerReferences"][0]["name"] == name]

        _wait_for("the Deployment's ReplicaSet", replica_sets)

        # The HPA controller read the Deployment's scale, and says why it cannot scale: no metrics API.
        def conditions() -> dict[str, dict[str, Any]]:
            found = http.get(_path(hpa)).json()
            # `conditions: null` until the controller's first pass
            return {c["type"]: c for c in (found.get("status") or {}).get("conditions") or []}

        seen = _wait_for(
            "the HPA controller's conditions", lambda: "ScalingActive" in conditions() and conditions()
        )
        assert seen["AbleToScale"]["status"] == "True", seen
        assert seen["AbleToScale"]["reason"] == "SucceededGetScale", seen
        assert seen["ScalingActive"]["status"] == "False", seen
        assert seen["ScalingActive"]["reason"] == "FailedGetResourceMetric", seen

        # Once the controllers have written their status (which moves resourceVersion on its own), the same
        # apply again writes nothing: every object keeps its resourceVersion.
        def settled() -> bool:
            deployment = http.get(_path(objects[0])).json()
            status = deployment.get("status", {})
            return status.get("observedGeneration") == deployment["metadata"]["generation"] and (
                status.get("replicas") == 1
            )

        _wait_for("the Deployment's status", settled)
        for obj in objects:
            before = http.get(_path(obj)).json()["metadata"]
            answer = _apply(http, obj)
            assert answer.status_code == 200, f"{obj['kind']}: {answer.status_code} {answer.text}"
            after = answer.json()["metadata"]
            assert after["resourceVersion"] == before["resourceVersion"], (
                f"a second identical apply changed the {obj['kind']}"
            )
            assert after.get("generation") == before.get("generation")

        # The comparison can fail: an apply that changes the spec writes a new resourceVersion.
        hpa["spec"]["maxReplicas"] = 5
        before = http.get(_path(hpa)).json()["metadata"]
        changed = _apply(http, hpa).json()
        assert changed["spec"]["maxReplicas"] == 5
        assert changed["metadata"]["resourceVersion"] != before["resourceVersion"]


def test_an_invalid_object_is_refused(k8s_control_plane: ControlPlane) -> None:
    broken = _objects("rig-invalid")[0]
    broken["spec"]["replicas"] = -1
    with k8s_control_plane.client() as http:
        answer = _apply(http, broken)
        assert answer.status_code == 422, answer.text
        assert "spec.replicas" in answer.json()["message"]
        assert http.get(_path(broken)).status_code == 404


def test_the_build_is_cached(k8s_control_plane: ControlPlane) -> None:
    again = k8s_build.prepare()
    assert again.cached and again.seconds < 1
    assert set(again.binaries) == set(k8s_build.COMPONENTS)
    for name in k8s_build.COMPONENTS:
        with k8s_build.binary(name).open("rb") as executable:
            assert executable.read(4) == b"\x7fELF", name
