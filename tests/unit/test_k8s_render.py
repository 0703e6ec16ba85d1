"""``provision k8s render`` (provision.k8s.render) on the examples: the pod runs what ``serve explain``
shows, the probes cover the load budget, the objects pass the real schemas in strict mode, bad input exits 2
naming file, pool and field.

Schemas: core kinds with ``kubernetes-validate`` (the official OpenAPI schemas, strict: unknown fields
refused) for the releases docs/kubernetes.md claims; ServiceMonitor/PodMonitor/PrometheusRule and KEDA's
ScaledObject with the models ``cloudcoil-models-*`` generate from those projects' CRDs (a round trip through
the model must give back the object, so a field the CRD does not know is caught); no package carries the
LeaderWorkerSet CRD, so its pod templates are checked as core Pods and the rest by the assertions here.
"""

from __future__ import annotations

import http.server
import json
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import kubernetes_validate
import pytest
import yaml
from cloudcoil.models.keda import v1alpha1 as keda
from cloudcoil.models.prometheus_operator import v1 as monitoring

from provision.inventory.validate import check
from provision.k8s import autoscale
from provision.k8s.render import (
    DEVICE_ENV,
    POD_ADDRESSES,
    Options,
    alert_groups,
    drain_script,
    render,
    startup_failures,
)
from provision.serving.explain import explain
from provision.serving.plan import serving_plan
from tests.helpers import run_cli

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).parents[2] / "examples"
A2 = EXAMPLES / "inventory.ini"
DEEPSEEK = EXAMPLES / "deepseek-r1-2node" / "inventory.ini"
VERSIONS = ("1.25", "1.30", "1.33", "1.37")
"""The releases docs/kubernetes.md claims the objects for (kubernetes-validate's oldest to newest)."""
CRD_MODELS: dict[str, Any] = {
    "ServiceMonitor": monitoring.ServiceMonitor,
    "PodMonitor": monitoring.PodMonitor,
    "PrometheusRule": monitoring.PrometheusRule,
    "ScaledObject": keda.ScaledObject,
}


def _render(inventory: Path, **options: Any) -> list[dict[str, Any]]:
    return render(check(inventory), Options(namespace="serving", **options))


def _by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {obj["metadata"]["name"]: obj for obj in objects if obj["kind"] == kind}


def _pod_templates(obj: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    if obj["kind"] == "Deployment":
        return [("single", obj["spec"]["template"])]
    if obj["kind"] == "LeaderWorkerSet":
        lws = obj["spec"]["leaderWorkerTemplate"]
        return [("head", lws["leaderTemplate"]), ("worker", lws["workerTemplate"])]
    return []


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container["env"] if "value" in item}


# ------------------------------------------------------------------------------- one plan, two targets


@pytest.mark.parametrize("inventory", [A2, DEEPSEEK], ids=["a2", "deepseek-2node"])
def test_pod_runs_what_serve_explain_shows(inventory: Path) -> None:
    loaded = check(inventory)
    objects = render(loaded, Options(namespace="serving"))
    records = explain(loaded)
    pod_plan = serving_plan(loaded, addresses=POD_ADDRESSES)
    compared = 0
    for obj in objects:
        for role, template in _pod_templates(obj):
            pool = obj["metadata"]["labels"]["provision.io/pool"]
            (container,) = template["spec"]["containers"]
            argv = [*container.get("command", []), *container["args"]]
            plan = next(p for _, p in pod_plan.pools() if p.pool == pool and p.start == role)
            record = next(r for r in records if r["pool"] == pool and r["role"] == role)
            # The pod's command line is the plan's, inside the container ...
            assert argv == [*plan.command, *plan.args]
            # ... and explain's docker line ends with it, the node's addresses in the pod's places.
            host_vars = loaded.hosts[record["host"]]
            head = loaded.hosts[record.get("head") or record["host"]]["ansible_host"]
            on_node = [
                host_vars["ansible_host"]
                if word == POD_ADDRESSES.bind_host
                else head
                if word == POD_ADDRESSES.head_address
                else word
                for word in argv
            ]
            assert record["argv"][-len(on_node) :] == on_node, shlex.join(record["argv"])
            assert record["argv"][-len(on_node) - 1] == container["image"] or container.get("command")
            # The environment is explain's, less the device selection the device plugin owns.
            env = _env(container)
            wanted = {k: v for k, v in record["env"].items() if k not in DEVICE_ENV}
            if "HCCL_IF_IP" in wanted:
                assert wanted.pop("HCCL_IF_IP") == host_vars["ansible_host"]
                assert env.pop("HCCL_IF_IP") == "$(POD_IP)"
            assert env == wanted
            assert not set(DEVICE_ENV) & {item["name"] for item in container["env"]}
            compared += 1
    assert compared == 2  # A2: the pools chat and batch; DeepSeek: the head and the worker of r1


def test_multinode_group_is_one_leaderworkerset_with_a_headless_worker() -> None:
    objects = _render(DEEPSEEK)
    lws = _by_kind(objects, "LeaderWorkerSet")["vllm-r1"]
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    spec = lws["spec"]["leaderWorkerTemplate"]
    assert spec["size"] == 2
    worker = spec["workerTemplate"]["spec"]["containers"][0]
    assert worker["args"][-2:] == ["--data-parallel-start-rank", "2"]
    assert "--headless" in worker["args"]
    assert "ports" not in worker and "readinessProbe" not in worker  # serves no API: gated through the head
    assert "$(LWS_LEADER_ADDRESS)" in worker["args"]
    assert (
        _by_kind(objects, "Service")["vllm-r1"]["spec"]["selector"][
            "leaderworkerset.sigs.k8s.io/worker-index"
        ]
        == "0"
    )


def test_larger_group_computes_the_start_rank_from_the_worker_index(tmp_path: Path) -> None:
    site = tmp_path / "four"
    shutil.copytree(DEEPSEEK.parent, site)
    hosts = "".join(f"atlas-a0{n} ansible_host=192.0.2.1{n}\n" for n in range(1, 5))
    (site / "inventory.ini").write_text(f"[npu_nodes]\n{hosts}", encoding="utf-8")
    group_vars = site / "group_vars" / "npu_nodes.yml"
    text = group_vars.read_text(encoding="utf-8").replace("deepseek-r1-w8a8-2node", "r1-4node")
    group_vars.write_text(
        text + "vllm_serve_profiles:\n  r1-4node:\n    model: /data/models/DeepSeek-R1-W8A8\n"
        "    served_model_name: deepseek-r1\n    nodes: 4\n    tensor_parallel_size: 4\n"
        "    data_parallel_size: 8\n    data_parallel_size_local: 2\n    enable_expert_parallel: true\n",
        encoding="utf-8",
    )
    lws = _by_kind(_render(site / "inventory.ini"), "LeaderWorkerSet")["vllm-r1"]
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 4
    worker = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    assert "--data-parallel-start-rank" not in worker["args"] and "--headless" in worker["args"]
    # What the container runs once the kubelet has reduced $$ to $: worker 3 holds ranks 6 and 7.
    argv = [word.replace("$$", "$") for word in worker["command"]]
    done = subprocess.run(
        [*argv, "echo", *worker["args"][-2:]],
        env={"LWS_WORKER_INDEX": "3", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == [*worker["args"][-2:], "--data-parallel-start-rank", "6"]


# --------------------------------------------------------------------------------------------- probes


@pytest.mark.parametrize("inventory", [A2, DEEPSEEK], ids=["a2", "deepseek-2node"])
def test_startup_probe_covers_the_load_budget_and_liveness_waits_for_it(inventory: Path) -> None:
    loaded = check(inventory)
    budgets = {p.pool: p.budget_s for _, p in serving_plan(loaded).pools()}
    for obj in render(loaded, Options()):
        for role, template in _pod_templates(obj):
            if role == "worker":
                continue
            (container,) = template["spec"]["containers"]
            startup = container["startupProbe"]
            budget = budgets[obj["metadata"]["labels"]["provision.io/pool"]]
            assert startup["failureThreshold"] * startup["periodSeconds"] >= budget > 0
            # Kubernetes runs no liveness probe before the startup probe succeeds: the load is covered.
            assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
            readiness = container["readinessProbe"]["exec"]["command"]
            assert "/v1/models" in readiness[-1] and "/health" in readiness[-1]
            pool = obj["metadata"]["labels"]["provision.io/pool"]
            model = next(p.served_model_name for _, p in serving_plan(loaded).pools() if p.pool == pool)
            assert repr(model) in readiness[-1]


def test_startup_failures_round_up() -> None:
    assert startup_failures(3600) == 360
    assert startup_failures(1234) == 124
    assert startup_failures(1) == 1


def test_drain_and_grace_period_come_from_the_drain_timeout() -> None:
    deployment = _by_kind(_render(A2), "Deployment")["vllm-chat"]
    pod = deployment["spec"]["template"]["spec"]
    # vllm_serve_drain_timeout_s + the endpoints' grace + SIGTERM margin
    assert pod["terminationGracePeriodSeconds"] == 120 + 5 + 30
    stop = pod["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
    assert stop[:2] == ["python3", "-c"] and stop[2] == drain_script(8000, 120)


class _Engine(http.server.BaseHTTPRequestHandler):
    """An engine's /metrics: requests running and waiting, drained one per scrape, and the requests finished
    so far (``arriving``: one more finished at every scrape, as when kept-alive connections keep sending)."""

    left: ClassVar[list[float]] = [2.0]
    finished: ClassVar[list[float]] = [0.0]
    arriving: ClassVar[list[bool]] = [False]

    def do_GET(self) -> None:
        body = (
            f'vllm:num_requests_running{{model_name="m"}} {self.left[0]}\n'
            'vllm:num_requests_waiting{model_name="m"} 0.0\n'
            f'vllm:request_success_total{{finished_reason="length",model_name="m"}} {self.finished[0]}\n'
            'vllm:request_success_total{finished_reason="stop",model_name="m"} 3.0\n'
        ).encode()
        self.left[0] = max(self.left[0] - 1, 0)
        self.finished[0] += 1 if self.arriving[0] else 0
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


def _drained(port: int, timeout_s: float, grace_s: float, *, left: float, arriving: bool = False) -> float:
    _Engine.left, _Engine.arriving = [left], [arriving]
    began = time.monotonic()
    script = drain_script(port, timeout_s, grace_s=grace_s, quiet_s=1)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=30)
    return time.monotonic() - began


def test_drain_waits_out_the_endpoints_grace_then_until_no_request_comes() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        # idle: the grace, then a look that starts the quiet second and the look that ends it
        idle = _drained(port, 30, 0.5, left=0.0)
        # 2 running, one fewer at each look (a second apart): idle from the third look, quiet a second later
        busy = _drained(port, 30, 0.5, left=2.0)
        # the queue is empty at every look, but a request finished between each two: not quiet, so the drain
        # waits until the requests stop or, here, its timeout
        arriving = _drained(port, 4, 0, left=0.0, arriving=True)
        # never idle within the timeout: the timeout ends it
        capped = _drained(port, 1, 0, left=9.0)
    finally:
        server.shutdown()
    assert 1.5 <= idle < 3.5, idle
    assert 3.5 <= busy < 5.5, busy
    assert 4.0 <= arriving < 6.0, arriving
    assert 1.0 <= capped < 3.0, capped


# ---------------------------------------------------------------------------------- devices, security


def test_npus_requested_by_the_device_plugin_resource_and_never_privileged() -> None:
    for inventory in (A2, DEEPSEEK):
        for obj in _render(inventory):
            for _, template in _pod_templates(obj):
                spec = template["spec"]
                (container,) = spec["containers"]
                assert container["resources"]["limits"] == {
                    "huawei.com/Ascend910": "4" if inventory == A2 else "8"
                }
                assert container["resources"]["requests"] == container["resources"]["limits"]
                assert container["securityContext"]["privileged"] is False
                for volume in spec["volumes"]:
                    assert not volume.get("hostPath", {}).get("path", "").startswith("/dev")
                key = next(item for item in container["env"] if item["name"] == "VLLM_API_KEY")
                assert key == {
                    "name": "VLLM_API_KEY",
                    "valueFrom": {"secretKeyRef": {"name": "provision-vllm-api-key", "key": "api-key"}},
                }


def _copy(tmp_path: Path, extra: str) -> Path:
    site = tmp_path / "site"
    shutil.copytree(EXAMPLES, site, ignore=shutil.ignore_patterns("deepseek-r1-2node"))
    with (site / "group_vars" / "npu_nodes.yml").open("a", encoding="utf-8") as fh:
        fh.write(extra)
    return site / "inventory.ini"


def test_a_volume_mounts_a_file_or_a_folder_as_docker_does(tmp_path: Path) -> None:
    # A real kubelet refused hostPath type Directory for a library file the CPU engine mounts; the pod
    # now mounts what is there, as `docker run -v` does.
    volumes = ["/opt/models:/models:ro", "/usr/lib/libnuma.so.1:/usr/lib/libnuma.so.1:ro"]
    inventory = _copy(tmp_path, yaml.safe_dump({"vllm_serve_container_volumes": volumes}))
    spec = _by_kind(_render(inventory), "Deployment")["vllm-chat"]["spec"]["template"]["spec"]
    hosts = [volume["hostPath"] for volume in spec["volumes"] if "hostPath" in volume]
    assert {"path": "/usr/lib/libnuma.so.1"} in hosts and {"path": "/opt/models"} in hosts
    assert all("type" not in host for host in hosts)
    (container,) = spec["containers"]
    mounted = {
        m["mountPath"]: m["readOnly"] for m in container["volumeMounts"] if m["name"].startswith("host-")
    }
    assert mounted.items() >= {"/models": True, "/usr/lib/libnuma.so.1": True}.items()


def test_inventory_names_its_own_resource_for_cce(tmp_path: Path) -> None:
    inventory = _copy(tmp_path, "provision_k8s_npu_resource: huawei.com/ascend-1980\n")
    deployment = _by_kind(_render(inventory), "Deployment")["vllm-chat"]
    limits = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"huawei.com/ascend-1980": "4"}


# ----------------------------------------------------------------------------------------- autoscaling


def test_hpa_reads_the_adapter_metrics_and_waits_longer_than_a_load() -> None:
    objects = _render(A2, signals=("queue", "npu"))
    hpa = _by_kind(objects, "HorizontalPodAutoscaler")["vllm-chat"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["metrics"] == autoscale.hpa_metrics("chat", ["queue", "npu"])
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "vllm-chat",
    }
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 3600
    assert "replicas" not in _by_kind(objects, "Deployment")["vllm-chat"]["spec"]  # the HPA owns it
    adapter = _by_kind(objects, "ConfigMap")["provision-prometheus-adapter"]
    assert yaml.safe_load(adapter["data"]["config.yaml"]) == autoscale.adapter_config()


def test_keda_scaled_object_asks_the_same_query() -> None:
    objects = _render(A2, autoscaler="keda")
    scaled = _by_kind(objects, "ScaledObject")["vllm-chat"]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["metadata"]["query"] == 'sum(vllm:num_requests_waiting{namespace="serving",pool="chat"})'
    assert not _by_kind(objects, "HorizontalPodAutoscaler")


def test_old_release_gets_the_versions_it_serves() -> None:
    objects = _render(A2, kube_version=(1, 20))
    assert {obj["apiVersion"] for obj in objects if obj["kind"] == "HorizontalPodAutoscaler"} == {
        "autoscaling/v2beta2"
    }
    assert {obj["apiVersion"] for obj in objects if obj["kind"] == "PodDisruptionBudget"} == {
        "policy/v1beta1"
    }


def test_prometheus_rule_carries_the_monitoring_role_rules() -> None:
    rule = _by_kind(_render(A2), "PrometheusRule")["provision-alerts"]
    shipped = []
    for path in sorted(
        (Path(__file__).parents[2] / "roles" / "monitoring" / "files" / "rules").glob("*.yml")
    ):
        shipped += yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]
    assert rule["spec"]["groups"] == shipped == list(alert_groups())
    assert any(r.get("alert") == "VllmEngineDown" for g in shipped for r in g["rules"])


# --------------------------------------------------------------------------------------------- schemas


def _core(obj: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_passes_its_schema(version: str) -> None:
    checked: set[str] = set()
    for inventory in (A2, DEEPSEEK):
        for autoscaler in ("hpa", "keda"):
            for obj in _render(inventory, autoscaler=autoscaler, signals=("queue", "npu")):
                kind = obj["kind"]
                if kind in CRD_MODELS:
                    model = CRD_MODELS[kind].model_validate(obj)
                    back = model.model_dump(by_alias=True, exclude_none=True, mode="json")
                    assert _subset(obj, back), f"{kind}: a field its CRD does not know"
                elif kind == "LeaderWorkerSet":
                    for _, template in _pod_templates(obj):
                        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": template["metadata"]}
                        _core({**pod, "spec": template["spec"]}, version)
                else:
                    _core(obj, version)
                checked.add(kind)
    assert checked == {
        "Deployment", "LeaderWorkerSet", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler",
        "ScaledObject", "ServiceMonitor", "PodMonitor", "PrometheusRule", "ConfigMap",
    }  # fmt: skip


def _subset(given: Any, back: Any) -> bool:
    """Everything ``given`` holds is in ``back`` (the model may add defaults; it drops unknown fields)."""
    if isinstance(given, dict):
        return isinstance(back, dict) and all(k in back and _subset(v, back[k]) for k, v in given.items())
    if isinstance(given, list):
        return isinstance(back, list) and len(given) == len(back) and all(map(_subset, given, back))
    return bool(given == back)


def test_strict_schemas_do_refuse_what_they_must() -> None:
    deployment = _by_kind(_render(A2), "Deployment")["vllm-chat"]
    deployment["spec"]["template"]["spec"]["containers"][0]["startupprobe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        _core(deployment, "1.33")
    monitor = _by_kind(_render(A2), "ServiceMonitor")["vllm-chat"]
    monitor["spec"]["endpoints"][0]["relabellings"] = []
    back = monitoring.ServiceMonitor.model_validate(monitor).model_dump(by_alias=True, exclude_none=True)
    assert not _subset(monitor, back)


# ------------------------------------------------------------------------------------- the command line


def test_render_writes_one_file_per_object(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    assert run_cli(["k8s", "render", str(A2), "-o", str(out), "-n", "serving", "--json"], monkeypatch) == 0
    names = sorted(p.name for p in out.iterdir())
    assert "deployment-vllm-chat.yaml" in names and "prometheusrule-provision-alerts.yaml" in names
    assert json.loads((out / "deployment-vllm-chat.yaml").read_text())["metadata"]["namespace"] == "serving"


def test_render_pool_to_stdout(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_cli(["k8s", "render", str(A2), "--pool", "batch", "--no-monitoring"], monkeypatch) == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    assert {obj["metadata"]["labels"].get("provision.io/pool") for obj in objects} == {"batch", None}
    assert [obj["kind"] for obj in objects] == [
        "Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler", "ConfigMap",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "args", "message"),
    [
        ("", ["--pool", "nope"], "inventory.ini: no served pool nope; served: batch, chat"),
        ("", ["-n", "Serving"], "--namespace 'Serving'"),
        ("", ["--kube-version", "1.19"], "--kube-version 1.19: older than 1.20"),
        ("", ["--kube-version", "latest"], "--kube-version 'latest': MAJOR.MINOR"),
        ("", ["--target", "queue=lots"], "--target 'queue=lots'"),
        ("", ["--scale-on", "cpu"], "unknown autoscaling signal 'cpu'"),
        ("", ["--autoscaler", "vpa"], "--autoscaler 'vpa'"),
        ("provision_k8s_npu_resource: Ascend910\n", [], "provision_k8s_npu_resource"),
        ("vllm_serve_mode: service\n", [], "pool chat, vllm_serve_mode: service"),
    ],
)
def test_bad_input_exits_2_naming_what(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    extra: str,
    args: list[str],
    message: str,
) -> None:
    inventory = _copy(tmp_path, extra)
    assert run_cli(["k8s", "render", str(inventory), *args], monkeypatch) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_an_open_engine_is_refused_unless_the_inventory_accepts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = _copy(tmp_path, "")
    group_vars = inventory.parent / "group_vars" / "npu_nodes.yml"
    text = "\n".join(
        line
        for line in group_vars.read_text(encoding="utf-8").splitlines()
        if "vllm_serve_api_key" not in line
    )
    group_vars.write_text(text + "\nvllm_serve_bind_host: 127.0.0.1\n", encoding="utf-8")
    assert run_cli(["k8s", "render", str(inventory)], monkeypatch) == 2
    assert "host atlas-a01, pool chat, vllm_serve_api_key: not set" in capsys.readouterr().err
    group_vars.write_text(text + "\nvllm_serve_allow_unauthenticated: true\n", encoding="utf-8")
    assert run_cli(["k8s", "render", str(inventory), "--json"], monkeypatch) == 0
    pods = json.loads(capsys.readouterr().out)["items"]
    env = [item["name"] for item in pods[0]["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert "VLLM_API_KEY" not in env


def test_replicas_of_a_pool_must_be_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = _copy(tmp_path, "")
    host_vars = inventory.parent / "host_vars"
    host_vars.mkdir()
    (host_vars / "atlas-a02.yml").write_text(
        "npu_pools_list:\n"
        "  - {name: chat, devices: [0, 1, 2, 3], port: 8000, profile: batch-tp4}\n"
        "  - {name: batch, devices: [4, 5, 6, 7], port: 8001, profile: batch-tp4}\n",
        encoding="utf-8",
    )
    assert run_cli(["k8s", "render", str(inventory)], monkeypatch) == 2
    err = capsys.readouterr().err
    assert "inventory.ini: host atlas-a02, pool chat, profile: batch-tp4 here, chat-tp4 on atlas-a01" in err
