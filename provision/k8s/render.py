"""The serving plan as Kubernetes objects: every served pool of the inventory, from
:func:`provision.serving.plan.serving_plan` (the plan ``provision serve explain`` prints), planned with a
pod's addresses (:data:`POD_ADDRESSES`) instead of the node's.

Per pool (``vllm-<pool>``, the pool's container name): a Deployment (single-node pool; one replica per host
that serves it) or a LeaderWorkerSet (a multi-node data-parallel group: the leader is the group's head, the
workers run headless with their start rank from the worker index); a Service; a PodDisruptionBudget; an
HPA on External metrics or a KEDA ScaledObject (:mod:`provision.k8s.autoscale`); a ServiceMonitor. Once:
the prometheus-adapter rules (a ConfigMap), a PodMonitor for NPU-Exporter and a PrometheusRule carrying the
monitoring role's alert rules (read from the files the role ships).

What the pod does not take from the plan, and why: the device selection variables (the device plugin
hands the NPUs out, and vLLM must not be told the node's ids: it would look for NPUs 2 and 3 in a
container that holds 0 and 1); the docker ``run`` wrapper (the pod is the container); the driver mounts (the
device plugin and the Ascend runtime bring them).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from provision.ascend.hardware import model_for_line
from provision.errors import InputError
from provision.inventory.load import Inventory, plain
from provision.inventory.roles import role_value
from provision.k8s import autoscale
from provision.paths import ansible_root
from provision.serving.container import DRIVER_MOUNTS
from provision.serving.plan import Addresses, HostPlan, PoolPlan, serving_plan

POD_IP = "POD_IP"
LEADER_ADDRESS = "LWS_LEADER_ADDRESS"
WORKER_INDEX = "LWS_WORKER_INDEX"
POD_ADDRESSES = Addresses(bind_host="0.0.0.0", node_ip=f"$({POD_IP})", head_address=f"$({LEADER_ADDRESS})")
"""The plan's node-specific addresses in a pod: bind every interface of the pod, ``HCCL_IF_IP`` is the
pod's own IP, the head is the LeaderWorkerSet's leader (both ``$(VAR)``, expanded by the kubelet)."""

DEVICE_ENV = ("ASCEND_RT_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES")
"""The plan's device selection, which the device plugin owns in a pod."""

MANAGED_BY = "provision"
LABEL_POOL = "provision.io/pool"
LABEL_JOB = "provision.io/job"
LABEL_MANAGED = "app.kubernetes.io/managed-by"
CONTAINER = "vllm"
SHM = "dshm"

PROBE_PERIOD_S = 10
PROBE_TIMEOUT_S = 5
LIVENESS_FAILURES = 3
DRAIN_MARGIN_S = 30
"""Seconds of the grace period after the preStop drain: SIGTERM, and vLLM's own shutdown."""
ENDPOINT_GRACE_S = 5
"""Seconds the preStop drain waits before it looks: Kubernetes takes a terminating pod out of the Service's
endpoints while preStop runs, not before, and each node's kube-proxy drops it a moment later; a request
routed to the pod in that moment must still find the engine up."""
QUIET_S = 5
"""Seconds without a request the preStop drain waits for: an empty queue is not enough, as clients that keep
their HTTP connections alive go on sending over connections opened before the pod left the endpoints."""

API_KEY_SECRET = "provision-vllm-api-key"
API_KEY_FIELD = "api-key"
DEFAULT_LINE = "910b"
"""The NPU line when the inventory does not say (the drivers role's default)."""
RESOURCE_VARIABLE = "provision_k8s_npu_resource"
KUBE_VERSION = (1, 33)
"""The Kubernetes release objects target unless told (``--kube-version``)."""
OLDEST = (1, 20)
EXPORTER_NAMESPACE = "npu-exporter"
"""Where MindCluster's manifests run NPU-Exporter."""
EXPORTER_PORT = "http"


@dataclass(frozen=True)
class Options:
    namespace: str = "default"
    kube_version: tuple[int, int] = KUBE_VERSION
    autoscaler: str = "hpa"
    """``hpa``, ``keda`` or ``none``."""
    signals: tuple[str, ...] = autoscale.DEFAULT_SIGNALS
    targets: Mapping[str, float] = field(default_factory=dict)
    max_replicas: int | None = None
    monitoring: bool = True
    api_key_secret: str = API_KEY_SECRET
    prometheus: str = autoscale.DEFAULT_PROMETHEUS


@dataclass(frozen=True)
class Pool:
    """One pool across the hosts that serve it: the plan of its (head) instance, of a worker, how many."""

    name: str
    plan: PoolPlan
    worker: PoolPlan | None
    replicas: int
    hosts: list[str]
    resource: str
    api_key: bool
    drain_timeout_s: float


def object_name(pool: str) -> str:
    return f"vllm-{pool}"


def labels(pool: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": object_name(pool),
        LABEL_MANAGED: MANAGED_BY,
        LABEL_POOL: pool,
    }


def selector(pool: str) -> dict[str, str]:
    return {"app.kubernetes.io/instance": object_name(pool), LABEL_POOL: pool}


# ------------------------------------------------------------------------------------------------ pools


def pools(inventory: Inventory, only: str | None = None) -> list[Pool]:
    """The served pools of the inventory, each once, checked for what Kubernetes needs."""
    plan = serving_plan(inventory, addresses=POD_ADDRESSES)
    by_name: dict[str, list[tuple[HostPlan, PoolPlan]]] = {}
    for host, pool in plan.pools():
        by_name.setdefault(pool.pool, []).append((host, pool))
    if only is not None and only not in by_name:
        served = ", ".join(sorted(by_name)) or "none"
        raise InputError(f"{inventory.source}: no served pool {only}; served: {served}")
    out = []
    for name, found in by_name.items():
        if only is not None and name != only:
            continue
        out.append(_pool(inventory, name, found))
    return out


def _pool(inventory: Inventory, name: str, found: list[tuple[HostPlan, PoolPlan]]) -> Pool:
    source = inventory.source

    def refuse(host: str, field_: str, why: str) -> InputError:
        return InputError(f"{source}: host {host}, pool {name}, {field_}: {why}")

    first_host, first = found[0]
    for host, pool in found:
        if host.mode != "container":
            raise refuse(host.host, "vllm_serve_mode", f"{host.mode}: a pod runs a container; set container")
        for key, mine, theirs in (
            ("profile", pool.profile, first.profile),
            ("devices", len(pool.devices), len(first.devices)),
            ("port", pool.port, first.port),
        ):
            if mine != theirs:
                raise refuse(
                    host.host,
                    key,
                    f"{mine} here, {theirs} on {first_host.host}: the replicas of one pool must be alike",
                )
        if pool.multinode is not None and not pool.multinode.native_dp:
            raise refuse(
                host.host, "profile", "a ray multi-node group is not rendered (native data parallelism only)"
            )
        host_vars = inventory.hosts.get(host.host, {})
        if "vllm_serve_api_key" not in host_vars and not _allowed_open(host_vars):
            # The pod binds every interface of its network: the house's listener rule, without its
            # loopback exception (provision.inventory.listen).
            raise refuse(
                host.host,
                "vllm_serve_api_key",
                "not set, and a pod's engine listens beyond loopback; `provision serve key` makes one "
                "(put it in the Secret too), or set vllm_serve_allow_unauthenticated: true",
            )
    heads = [pool for _, pool in found if pool.start != "worker"]
    workers = [pool for _, pool in found if pool.start == "worker"]
    head = heads[0]
    variables = inventory.hosts.get(first_host.host, {})
    return Pool(
        name=name,
        plan=head,
        worker=workers[0] if workers else None,
        replicas=len(heads),
        hosts=[host.host for host, _ in found],
        resource=_resource(inventory, first_host.host, variables),
        api_key="vllm_serve_api_key" in variables,
        drain_timeout_s=float(role_value(variables, "vllm_serve_drain_timeout_s", "vllm_serve") or 0),
    )


def _allowed_open(variables: Mapping[str, Any]) -> bool:
    from ansible.module_utils.parsing.convert_bool import boolean

    value = role_value(variables, "vllm_serve_allow_unauthenticated", "vllm_serve")
    return bool(boolean(value, strict=False)) if value is not None else False


def _resource(inventory: Inventory, host: str, variables: Mapping[str, Any]) -> str:
    """The device plugin's resource for the host's NPUs: the inventory's, else its NPU line's."""
    given = variables.get(RESOURCE_VARIABLE)
    if given:
        return str(given)  # validated by the inventory's rule (provision.inventory.rules, k8s_resource)
    npus = plain(variables.get("ascend_npus") or {})
    line = str((npus.get("line") if isinstance(npus, Mapping) else None) or DEFAULT_LINE)
    model = model_for_line(line)
    if model is None:
        raise InputError(
            f"{inventory.source}: host {host}, ascend_npus.line: unknown NPU line {line!r}; "
            f"set {RESOURCE_VARIABLE}"
        )
    return model.k8s_resource


# ----------------------------------------------------------------------------------------- containers


def container_argv(plan: PoolPlan) -> tuple[list[str], list[str]]:
    """(``command``, ``args``) of the pod's container: what the plan runs inside its container."""
    return list(plan.command), list(plan.args)


def container_env(plan: PoolPlan, options: Options, api_key: bool) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = []
    values = {key: value for key, value in sorted(plan.env.items()) if key not in DEVICE_ENV}
    if any(f"$({POD_IP})" in value for value in values.values()):
        # Defined first: the kubelet expands $(POD_IP) only from variables above it.
        env.append({"name": POD_IP, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    env += [{"name": key, "value": value} for key, value in values.items()]
    if api_key:
        env.append(
            {
                "name": "VLLM_API_KEY",
                "valueFrom": {"secretKeyRef": {"name": options.api_key_secret, "key": API_KEY_FIELD}},
            }
        )
    return env


def probes(plan: PoolPlan) -> dict[str, Any]:
    """startupProbe covering the load budget, readinessProbe with the gate's meaning, livenessProbe that
    only runs once the startup probe has passed (Kubernetes holds the others until then)."""
    health = {"httpGet": {"path": "/health", "port": "http"}, "timeoutSeconds": PROBE_TIMEOUT_S}
    return {
        "startupProbe": {
            **health,
            "periodSeconds": PROBE_PERIOD_S,
            "failureThreshold": startup_failures(plan.budget_s),
        },
        "readinessProbe": {
            "exec": {"command": ["python3", "-c", readiness_script(plan.port, plan.served_model_name)]},
            "periodSeconds": PROBE_PERIOD_S,
            "timeoutSeconds": PROBE_TIMEOUT_S,
            "failureThreshold": 1,
        },
        "livenessProbe": {**health, "periodSeconds": PROBE_PERIOD_S, "failureThreshold": LIVENESS_FAILURES},
    }


def startup_failures(budget_s: float) -> int:
    """failureThreshold of the startup probe: failureThreshold x periodSeconds >= the load budget."""
    return max(1, math.ceil(budget_s / PROBE_PERIOD_S))


def readiness_script(port: int, model: str) -> str:
    """The health gate's meaning in the pod: /health answers 200 and /v1/models lists the served model
    (with the API key when the pod has one). Python: the serving image has it, it may have no curl."""
    return (
        "import json,os,sys,urllib.request as r\n"
        f"b='http://127.0.0.1:{port}'\n"
        "r.urlopen(b+'/health',timeout=4)\n"
        "k=os.environ.get('VLLM_API_KEY')\n"
        "q=r.Request(b+'/v1/models',headers={'Authorization':'Bearer '+k} if k else {})\n"
        "d=json.load(r.urlopen(q,timeout=4))\n"
        f"sys.exit(0 if any(m.get('id')=={model!r} for m in d.get('data',[])) else 1)\n"
    )


def drain_script(
    port: int, timeout_s: float, grace_s: float = ENDPOINT_GRACE_S, quiet_s: float = QUIET_S
) -> str:
    """preStop: after ``grace_s`` (the endpoints reach every kube-proxy), wait until the engine has had no
    request for ``quiet_s``: none running or waiting at each look (once a second) and none finished between
    two looks; at most the drain timeout. Then the kubelet sends SIGTERM, which ends vLLM's open streams."""
    return (
        "import re,time,urllib.request as r\n"
        f"time.sleep({grace_s:g})\n"
        f"end=time.time()+{timeout_s:g}\n"
        "quiet=None\n"
        "done=None\n"
        "while time.time()<end:\n"
        "    try:\n"
        f"        t=r.urlopen('http://127.0.0.1:{port}/metrics',timeout=4).read().decode()\n"
        "    except Exception:\n"
        "        break\n"
        r"    v=lambda p:sum(float(x) for x in re.findall(p+r'\{[^}]*\} (\S+)',t,re.M))"
        "\n"
        "    busy=v(r'^vllm:num_requests_(?:running|waiting)')\n"
        "    now,seen=time.time(),v(r'^vllm:request_success_total')\n"
        "    quiet=(quiet or now) if busy==0 and seen==done else None\n"
        "    done=seen\n"
        f"    if quiet is not None and now-quiet>={quiet_s:g}:\n"
        "        break\n"
        "    time.sleep(1)\n"
    )


def _mounts(source: str, pool: Pool, plan: PoolPlan) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    for spec in plan.mounts:
        src, dst, *rest = spec.split(":")
        if src in DRIVER_MOUNTS:
            continue
        if src == "/dev" or src.startswith("/dev/"):
            raise InputError(
                f"{source}: pool {pool.name}, vllm_serve_container_volumes: {src}: no /dev in a pod"
            )
        name = f"host-{len(volumes)}"
        # No hostPath type: a volume may be a file (a library) or a folder, and `docker run -v` mounts
        # either; "Directory" stopped the kubelet at a file.
        volumes.append({"name": name, "hostPath": {"path": src}})
        mounts.append({"name": name, "mountPath": dst, "readOnly": "ro" in rest})
    shm = plan.container.settings.shm_size if plan.container else "1g"
    volumes.append({"name": SHM, "emptyDir": {"medium": "Memory", "sizeLimit": _size(shm)}})
    mounts.append({"name": SHM, "mountPath": "/dev/shm"})
    return volumes, mounts


def _size(docker: str) -> str:
    """docker's --shm-size (``1g``, ``512m``) as a Kubernetes quantity (``1Gi``)."""
    match = re.fullmatch(r"(\d+)([bkmg]?)", docker.strip().lower())
    if not match:
        return docker
    number, unit = match.groups()
    return number + {"": "", "b": "", "k": "Ki", "m": "Mi", "g": "Gi"}[unit]


def pod_spec(source: str, pool: Pool, plan: PoolPlan, options: Options, *, serves: bool) -> dict[str, Any]:
    """The pod of one instance (``serves``: it serves the API: probes, port, drain)."""
    if plan.container is None:
        raise InputError(f"{source}: pool {pool.name}: no container image in the plan")
    command, args = container_argv(plan)
    volumes, mounts = _mounts(source, pool, plan)
    count = str(len(plan.devices))
    container: dict[str, Any] = {"name": CONTAINER, "image": plan.container.image}
    if command:
        container["command"] = command
    container["args"] = args
    container["env"] = container_env(plan, options, pool.api_key)
    container["resources"] = {"limits": {pool.resource: count}, "requests": {pool.resource: count}}
    container["volumeMounts"] = mounts
    container["securityContext"] = {"privileged": False, "allowPrivilegeEscalation": False}
    spec: dict[str, Any] = {}
    if serves:
        container["ports"] = [{"name": "http", "containerPort": plan.port, "protocol": "TCP"}]
        container.update(probes(plan))
        container["lifecycle"] = {
            "preStop": {"exec": {"command": ["python3", "-c", drain_script(plan.port, pool.drain_timeout_s)]}}
        }
        spec["terminationGracePeriodSeconds"] = int(pool.drain_timeout_s) + ENDPOINT_GRACE_S + DRAIN_MARGIN_S
    spec["containers"] = [container]
    spec["volumes"] = volumes
    return spec


def worker_args(pool: Pool) -> tuple[list[str], list[str]]:
    """A headless worker's command and args: the plan of worker 1; in a group of more than two nodes its
    start rank comes from the worker index, which only a shell can multiply."""
    assert pool.worker is not None and pool.worker.multinode is not None
    command, args = container_argv(pool.worker)
    nodes = len(pool.worker.multinode.hosts)
    if nodes <= 2:
        return command, args
    at = args.index("--data-parallel-start-rank")
    step = int(args[at + 1])  # worker 1's start rank: the ranks each node holds
    rest = args[:at] + args[at + 2 :]
    # $$: the kubelet reduces it to $, and never reads the shell's $(( )) as one of its $(VAR) references.
    script = f'exec "$@" --data-parallel-start-rank $$(( {WORKER_INDEX} * {step} ))'
    return ["/bin/sh", "-c", script, "sh"], [*command, *rest]


# -------------------------------------------------------------------------------------------- objects


def _meta(
    name: str, pool: str | None, options: Options, extra: Mapping[str, str] | None = None
) -> dict[str, Any]:
    meta_labels = labels(pool) if pool else {LABEL_MANAGED: MANAGED_BY}
    return {"name": name, "namespace": options.namespace, "labels": {**meta_labels, **(extra or {})}}


def workload(source: str, pool: Pool, options: Options) -> dict[str, Any]:
    name = object_name(pool.name)
    template_meta = {"labels": labels(pool.name)}
    if pool.worker is None:
        spec: dict[str, Any] = {
            "selector": {"matchLabels": selector(pool.name)},
            "template": {
                "metadata": template_meta,
                "spec": pod_spec(source, pool, pool.plan, options, serves=True),
            },
        }
        if options.autoscaler == "none":
            spec["replicas"] = pool.replicas  # else the autoscaler owns it: an apply must not reset it
        # One new pod at a time, none removed before it is ready: the drain rule of the rolling restart.
        spec["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _meta(name, pool.name, options),
            "spec": spec,
        }
    command, args = worker_args(pool)
    worker = pod_spec(source, pool, pool.worker, options, serves=False)
    container = worker["containers"][0]
    container.pop("command", None)
    if command:
        container["command"] = command
    container["args"] = args
    assert pool.plan.multinode is not None
    lws_spec: dict[str, Any] = {
        "leaderWorkerTemplate": {
            "size": len(pool.plan.multinode.hosts),
            "restartPolicy": "RecreateGroupOnPodRestart",
            "leaderTemplate": {
                "metadata": template_meta,
                "spec": pod_spec(source, pool, pool.plan, options, serves=True),
            },
            "workerTemplate": {"metadata": template_meta, "spec": worker},
        },
        "startupPolicy": "LeaderReady",
    }
    if options.autoscaler == "none":
        lws_spec["replicas"] = pool.replicas
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": _meta(name, pool.name, options),
        "spec": lws_spec,
    }


def service(pool: Pool, options: Options) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": selector(pool.name),
        "ports": [{"name": "http", "port": pool.plan.port, "targetPort": "http", "protocol": "TCP"}],
    }
    if pool.worker is not None:
        spec["selector"] = {**selector(pool.name), "leaderworkerset.sigs.k8s.io/worker-index": "0"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(object_name(pool.name), pool.name, options, {LABEL_JOB: autoscale_job()}),
        "spec": spec,
    }


def autoscale_job() -> str:
    from provision.monitoring import ENGINE_JOB

    return ENGINE_JOB


def disruption_budget(pool: Pool, options: Options) -> dict[str, Any]:
    """Keep the last ready replica: a node drain waits rather than take the pool's last server."""
    version = "policy/v1" if options.kube_version >= (1, 21) else "policy/v1beta1"
    spec: dict[str, Any] = {"minAvailable": 1, "selector": {"matchLabels": selector(pool.name)}}
    if pool.worker is not None:
        spec["selector"]["matchLabels"]["leaderworkerset.sigs.k8s.io/worker-index"] = "0"
    return {
        "apiVersion": version,
        "kind": "PodDisruptionBudget",
        "metadata": _meta(object_name(pool.name), pool.name, options),
        "spec": spec,
    }


def _target(pool: Pool) -> dict[str, Any]:
    if pool.worker is None:
        return {"apiVersion": "apps/v1", "kind": "Deployment", "name": object_name(pool.name)}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "name": object_name(pool.name),
    }


def _max_replicas(pool: Pool, options: Options) -> int:
    return max(options.max_replicas or pool.replicas, 1)


def hpa(pool: Pool, options: Options) -> dict[str, Any]:
    version = "autoscaling/v2" if options.kube_version >= (1, 23) else "autoscaling/v2beta2"
    return {
        "apiVersion": version,
        "kind": "HorizontalPodAutoscaler",
        "metadata": _meta(object_name(pool.name), pool.name, options),
        "spec": {
            "scaleTargetRef": _target(pool),
            "minReplicas": 1,
            "maxReplicas": _max_replicas(pool, options),
            "metrics": autoscale.hpa_metrics(pool.name, list(options.signals), options.targets),
            "behavior": autoscale.behavior(pool.plan.budget_s),
        },
    }


def scaled_object(pool: Pool, options: Options) -> dict[str, Any]:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": _meta(object_name(pool.name), pool.name, options),
        "spec": {
            "scaleTargetRef": _target(pool),
            "minReplicaCount": 1,
            "maxReplicaCount": _max_replicas(pool, options),
            "advanced": {
                "horizontalPodAutoscalerConfig": {"behavior": autoscale.behavior(pool.plan.budget_s)}
            },
            "triggers": autoscale.keda_triggers(
                pool.name, options.namespace, list(options.signals), options.targets, options.prometheus
            ),
        },
    }


def adapter_config_map(options: Options) -> dict[str, Any]:
    """prometheus-adapter's rules (mount as its ``--config``), beside the HPAs that read them."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta("provision-prometheus-adapter", None, options),
        "data": {"config.yaml": yaml.safe_dump(autoscale.adapter_config(), sort_keys=False)},
    }


def service_monitor(pool: Pool, options: Options) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": _meta(object_name(pool.name), pool.name, options),
        "spec": {
            "jobLabel": LABEL_JOB,  # job="vllm", as the role's alert rules read it
            "selector": {"matchLabels": selector(pool.name)},
            "endpoints": [
                {
                    "port": "http",
                    "path": "/metrics",
                    "relabelings": [
                        {"targetLabel": autoscale.POOL_LABEL, "replacement": pool.name},
                        {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "host"},
                    ],
                }
            ],
        },
    }


def pod_monitor(found: Sequence[Pool], options: Options) -> dict[str, Any]:
    """NPU-Exporter's pods: job="npu-exporter" as the role's rules read it, its own ``namespace`` label
    (the serving pod's) kept, and ``pool`` from the serving pod's name."""
    relabel = [
        {
            "sourceLabels": ["pod_name"],
            "regex": f"{re.escape(object_name(pool.name))}-.*",
            "targetLabel": autoscale.POOL_LABEL,
            "replacement": pool.name,
        }
        for pool in found
    ]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": _meta("provision-npu-exporter", None, options),
        "spec": {
            "namespaceSelector": {"matchNames": [EXPORTER_NAMESPACE]},
            "selector": {"matchLabels": {"app": "npu-exporter"}},
            "podMetricsEndpoints": [
                {
                    "port": EXPORTER_PORT,
                    "path": "/metrics",
                    "honorLabels": True,
                    "relabelings": [
                        {"targetLabel": "job", "replacement": "npu-exporter"},
                        {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "host"},
                    ],
                    "metricRelabelings": relabel,
                }
            ],
        },
    }


@cache
def alert_groups() -> tuple[dict[str, Any], ...]:
    """The monitoring role's alert rules, read from the files it ships (one source)."""
    folder = ansible_root() / "roles" / "monitoring" / "files" / "rules"
    groups: list[dict[str, Any]] = []
    for path in sorted(Path(folder).glob("*.yml")):
        groups += yaml.safe_load(path.read_text(encoding="utf-8")).get("groups") or []
    return tuple(groups)


def prometheus_rule(options: Options) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": _meta("provision-alerts", None, options),
        "spec": {"groups": list(alert_groups())},
    }


def check_options(source: str, options: Options) -> None:
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", options.namespace):
        raise InputError(
            f"--namespace {options.namespace!r}: a DNS label (lower case, digits, '-', at most 63)"
        )
    if options.kube_version < OLDEST:
        raise InputError(
            f"--kube-version {options.kube_version[0]}.{options.kube_version[1]}: older than 1.20"
        )
    if options.autoscaler not in ("hpa", "keda", "none"):
        raise InputError(f"--autoscaler {options.autoscaler!r}: hpa, keda or none")
    try:
        autoscale.signals(list(options.signals))
    except ValueError as exc:
        raise InputError(f"--scale-on: {exc}") from None
    for key, value in options.targets.items():
        if key not in autoscale.SIGNALS or not value > 0:
            raise InputError(
                f"--target {key}={value}: a signal ({', '.join(autoscale.SIGNALS)}) and a number > 0"
            )


def render(inventory: Inventory, options: Options, only: str | None = None) -> list[dict[str, Any]]:
    """Every object of the inventory's served pools (``only``: one pool), in apply order."""
    check_options(str(inventory.source), options)
    found = pools(inventory, only)
    source = str(inventory.source)
    out: list[dict[str, Any]] = []
    for pool in found:
        out += [workload(source, pool, options), service(pool, options), disruption_budget(pool, options)]
        if options.autoscaler == "hpa":
            out.append(hpa(pool, options))
        elif options.autoscaler == "keda":
            out.append(scaled_object(pool, options))
        if options.monitoring:
            out.append(service_monitor(pool, options))
    if options.autoscaler == "hpa":
        out.append(adapter_config_map(options))
    if options.monitoring and found:
        out += [pod_monitor(found, options), prometheus_rule(options)]
    # Plain data, no shared parts: YAML without anchors, and no caller edits one object through another.
    copied: list[dict[str, Any]] = json.loads(json.dumps(out))
    return copied
