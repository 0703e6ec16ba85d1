"""``provision k8s apply`` of the A2 example against the real 1.20 control plane (``--kube-version 1.20``:
HPA ``autoscaling/v2beta2``, PDB ``policy/v1beta1``): server-side apply accepts every core object, a second
apply changes nothing, a dropped pool's objects are named and removed only with ``--prune``, and kinds the
cluster does not serve (no prometheus-operator CRDs here) stop the apply before anything is written.

The CRD kinds (LeaderWorkerSet, ServiceMonitor, PodMonitor, PrometheusRule, ScaledObject) are applied once
their CRDs are installed (``crds.py``: schemas rebuilt from the models generated from the projects' CRDs;
LeaderWorkerSet's spec unchecked): the apiserver stores each object as rendered (it prunes what its schema
does not know, so a stored spec equal to the rendered one is a field-by-field check), and a second apply
changes nothing. No controller acts on them.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from provision.inventory.validate import check
from provision.k8s.render import Options, render
from provision_sim.k8s.controlplane import ControlPlane
from tests.helpers import run_cli
from tests.integration.k8s import crds

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

EXAMPLES = Path(__file__).parents[3] / "examples"
NAMESPACE = "provision-render"
CORE = ["--kube-version", "1.20", "--no-monitoring", "-n", NAMESPACE, "--json"]


def _site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    shutil.copytree(EXAMPLES, site, ignore=shutil.ignore_patterns("deepseek-r1-2node"))
    return site / "inventory.ini"


def _run(
    args: list[str], plane: ControlPlane, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, dict[str, Any], str]:
    capsys.readouterr()
    code = run_cli(["k8s", *args, "--kubeconfig", str(plane.kubeconfig)], monkeypatch)
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if code == 0 and captured.out.strip() else {}), captured.err


def _states(outcome: dict[str, Any]) -> dict[str, str]:
    return {item["object"]: item["state"] for item in outcome["objects"]}


def _exists(plane: ControlPlane, path: str) -> bool:
    with plane.client() as client:
        return client.get(path).status_code == 200


@contextmanager
def _namespace(plane: ControlPlane, name: str) -> Iterator[str]:
    """Namespace ``name``, deleted afterwards: the control plane is shared with the autoscaling drill, whose
    HPA controller would otherwise keep querying this test's HPAs. Each test has its own: a namespace being
    deleted refuses new objects for a while."""
    with plane.client() as client:
        made = client.post(
            "/api/v1/namespaces",
            json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        )
        assert made.status_code in (201, 409), made.text
    yield name
    with plane.client() as client:
        gone = client.delete(f"/api/v1/namespaces/{name}")
        assert gone.status_code in (200, 202, 404), gone.text


@pytest.fixture
def namespace(k8s_control_plane: ControlPlane) -> Iterator[str]:
    with _namespace(k8s_control_plane, NAMESPACE) as name:
        yield name


@pytest.fixture
def crd_namespace(k8s_control_plane: ControlPlane) -> Iterator[str]:
    with _namespace(k8s_control_plane, f"{NAMESPACE}-crds") as name:
        yield name


def test_apply_is_accepted_idempotent_and_prunes_only_when_asked(
    namespace: str,
    k8s_control_plane: ControlPlane,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    plane = k8s_control_plane
    inventory = _site(tmp_path)
    deployment = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/vllm-batch"

    # Kinds the cluster does not serve: refused before any write, each named with its way out.
    code, _, err = _run(
        ["apply", str(inventory), "--kube-version", "1.20", "-n", NAMESPACE], plane, monkeypatch, capsys
    )
    assert code == 2
    assert (
        "does not serve ServiceMonitor (monitoring.coreos.com/v1): install prometheus-operator's CRDs" in err
    )
    assert "nothing was written" in err
    assert not _exists(plane, deployment)

    code, first, err = _run(["apply", str(inventory), *CORE], plane, monkeypatch, capsys)
    assert code == 0, err
    assert _states(first) == {
        f"{kind}/vllm-{pool}": "created"
        for pool in ("chat", "batch")
        for kind in ("Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler")
    } | {"ConfigMap/provision-prometheus-adapter": "created"}
    with plane.client() as client:
        hpa = client.get(
            f"/apis/autoscaling/v2beta2/namespaces/{NAMESPACE}/horizontalpodautoscalers/vllm-chat"
        )
        assert (
            hpa.json()["spec"]["metrics"][0]["external"]["metric"]["name"]
            == "provision_vllm_requests_waiting"
        )
        pod = client.get(deployment).json()["spec"]["template"]["spec"]
        assert pod["containers"][0]["resources"]["limits"] == {"huawei.com/Ascend910": "4"}
        managers = {entry["manager"] for entry in client.get(deployment).json()["metadata"]["managedFields"]}
        assert "provision" in managers

    # The controllers write status (and move resourceVersion) on their own just after a create: let them.
    time.sleep(3)
    code, again, err = _run(["apply", str(inventory), *CORE], plane, monkeypatch, capsys)
    assert code == 0, err
    assert set(_states(again).values()) == {"unchanged"}, again
    code, diff, err = _run(["diff", str(inventory), *CORE], plane, monkeypatch, capsys)
    assert code == 0, err
    # 1.20's answer to a dry-run apply of a v2beta2 HPA repeats its metrics; the diff reads past that.
    assert {item["object"]: item["diff"] for item in diff["objects"] if item["state"] != "unchanged"} == {}
    assert len(diff["objects"]) == len(_states(first))
    assert diff["stale"] == []

    # Drop the pool batch: its objects are named, and stay until --prune.
    group_vars = inventory.parent / "group_vars" / "npu_nodes.yml"
    text = group_vars.read_text(encoding="utf-8")
    start = text.index("  - name: batch")
    group_vars.write_text(text[:start] + text[text.index("vllm_serve_profiles:") :], encoding="utf-8")
    code, kept, err = _run(["apply", str(inventory), *CORE], plane, monkeypatch, capsys)
    assert code == 0, err
    assert sorted(kept["stale"]) == sorted(
        f"{kind}/vllm-batch"
        for kind in ("Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler")
    )
    assert kept["pruned"] is False and _exists(plane, deployment)
    code, pruned, err = _run(["apply", str(inventory), *CORE, "--prune"], plane, monkeypatch, capsys)
    assert code == 0, err
    assert pruned["pruned"] is True and len(pruned["stale"]) == 4
    deadline = time.monotonic() + 60
    while _exists(plane, deployment) and time.monotonic() < deadline:  # foreground deletion: the GC's
        time.sleep(1)
    assert not _exists(plane, deployment)
    assert _exists(plane, f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/vllm-chat")


def test_crd_kinds_are_stored_as_rendered_and_a_second_apply_changes_nothing(
    crd_namespace: str,
    k8s_control_plane: ControlPlane,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    plane, namespace = k8s_control_plane, crd_namespace
    # The 2-node DeepSeek example: a LeaderWorkerSet, KEDA's ScaledObject and the monitoring kinds.
    inventory = EXAMPLES / "deepseek-r1-2node" / "inventory.ini"
    args = ["--kube-version", "1.20", "--autoscaler", "keda", "-n", namespace, "--json"]
    rendered = render(check(inventory), Options(namespace=namespace, kube_version=(1, 20), autoscaler="keda"))
    custom = [obj for obj in rendered if obj["kind"] in crds.KINDS]
    assert {obj["kind"] for obj in custom} == set(crds.KINDS)
    names = crds.install(plane)
    try:
        code, first, err = _run(["apply", str(inventory), *args], plane, monkeypatch, capsys)
        assert code == 0, err
        assert set(_states(first).values()) == {"created"}, first
        assert {f"{obj['kind']}/{obj['metadata']['name']}" for obj in rendered} == set(_states(first))
        with plane.client() as client:
            for obj in custom:
                group, version, plural, _ = crds.KINDS[obj["kind"]]
                stored = client.get(
                    f"/apis/{group}/{version}/namespaces/{namespace}/{plural}/{obj['metadata']['name']}"
                ).json()
                assert stored["spec"] == obj["spec"], f"{obj['kind']}: the apiserver kept another spec"
                assert stored["metadata"]["labels"] == obj["metadata"]["labels"]

        time.sleep(3)
        code, again, err = _run(["apply", str(inventory), *args], plane, monkeypatch, capsys)
        assert code == 0, err
        assert set(_states(again).values()) == {"unchanged"}, again

        # A field no schema knows is pruned by the apiserver: the check above can fail.
        rule = next(obj for obj in custom if obj["kind"] == "PrometheusRule")
        group, version, plural, _ = crds.KINDS["PrometheusRule"]
        with plane.client() as client:
            stranger = {**rule, "metadata": {"name": "stranger", "namespace": namespace}}
            stranger["spec"] = {**rule["spec"], "unknownField": 1}
            made = client.post(f"/apis/{group}/{version}/namespaces/{namespace}/{plural}", json=stranger)
            assert made.status_code == 201, made.text
            assert "unknownField" not in made.json()["spec"]
            wrong = {**stranger, "metadata": {"name": "wrong", "namespace": namespace}}
            wrong["spec"] = {"groups": [{"name": "", "rules": []}]}
            refused = client.post(f"/apis/{group}/{version}/namespaces/{namespace}/{plural}", json=wrong)
            assert refused.status_code == 422, refused.text
    finally:
        crds.remove(plane, names)
