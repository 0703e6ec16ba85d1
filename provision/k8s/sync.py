"""``provision k8s diff`` and ``apply``: the rendered objects against what a cluster holds.

Before any write the cluster's discovery is asked whether it serves every kind rendered (a missing CRD is
named, with the option that leaves its objects out). Apply is server-side apply with field manager
``provision``: an object is ``changed`` when its ``resourceVersion`` moved (a HorizontalPodAutoscaler has no
``metadata.generation`` on older releases, and the resourceVersion is what every kind has), ``created`` when
it was absent. Objects labelled ``app.kubernetes.io/managed-by: provision`` in the namespace that the
inventory no longer renders (a pool removed) are named, and deleted only with ``prune``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from provision.errors import InputError
from provision.k8s.client import FIELD_MANAGER, Client, describe
from provision.k8s.render import LABEL_MANAGED, MANAGED_BY

# Fields the server writes: not part of what the inventory decides.
_SERVER_METADATA = (
    "managedFields",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "uid",
    "selfLink",
    "annotations",
)
_HINTS = {
    "LeaderWorkerSet": "install LeaderWorkerSet (leaderworkerset.x-k8s.io), or --pool a one-node pool",
    "ScaledObject": "install KEDA, or --autoscaler hpa",
    "ServiceMonitor": "install prometheus-operator's CRDs, or --no-monitoring",
    "PodMonitor": "install prometheus-operator's CRDs, or --no-monitoring",
    "PrometheusRule": "install prometheus-operator's CRDs, or --no-monitoring",
}


@dataclass
class Outcome:
    objects: list[dict[str, Any]] = field(default_factory=list)
    """``{"object": "Deployment/vllm-chat", "state": "created|changed|unchanged|...", "diff": [...]}``"""
    stale: list[str] = field(default_factory=list)
    pruned: bool = False

    def count(self, state: str) -> int:
        return sum(1 for item in self.objects if item["state"] == state)

    def as_dict(self) -> dict[str, Any]:
        return {"objects": self.objects, "stale": self.stale, "pruned": self.pruned}


def check_served(client: Client, objects: Sequence[Mapping[str, Any]]) -> None:
    """Every kind rendered is served by the cluster, or an error naming each one that is not."""
    missing = []
    cache: dict[str, set[str]] = {}
    for obj in objects:
        version = str(obj["apiVersion"])
        if version not in cache:
            cache[version] = client.served(version)
        if obj["kind"] not in cache[version]:
            hint = _HINTS.get(str(obj["kind"]), f"the cluster is older than {version}: --kube-version")
            missing.append(f"{obj['kind']} ({version}): {hint}")
    if missing:
        unique = list(dict.fromkeys(missing))
        raise InputError(
            f"{client.config.server} does not serve " + "; ".join(unique) + " (nothing was written)"
        )


def stale(client: Client, objects: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Objects provision manages in the namespaces rendered that the render no longer holds."""
    rendered = {
        (str(obj["kind"]), str(obj["metadata"]["namespace"]), str(obj["metadata"]["name"])) for obj in objects
    }
    seen: set[tuple[str, str, str]] = set()
    out = []
    for obj in objects:
        kind = (str(obj["kind"]), str(obj["apiVersion"]), str(obj["metadata"]["namespace"]))
        if kind in seen:
            continue
        seen.add(kind)
        for found in client.managed(obj, f"{LABEL_MANAGED}={MANAGED_BY}"):
            key = (str(found["kind"]), str(found["metadata"]["namespace"]), str(found["metadata"]["name"]))
            if key not in rendered:
                out.append(found)
    return out


def _comparable(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    if obj is None:
        return {}
    metadata = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _SERVER_METADATA}
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": metadata}


def differences(before: Any, after: Any, path: str = "") -> list[str]:
    """The paths where ``after`` differs from ``before`` (``spec.replicas``), for the diff's listing."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        out: list[str] = []
        for key in sorted(set(before) | set(after), key=str):
            out += differences(before.get(key), after.get(key), f"{path}.{key}" if path else str(key))
        return out
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        out = []
        for index, (one, two) in enumerate(zip(before, after, strict=True)):
            out += differences(one, two, f"{path}[{index}]")
        return out
    return [] if before == after else [path or "."]


def owned_fields(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    """The fields (``fieldsV1``) the field manager ``provision`` owns in ``obj``."""
    out: dict[str, Any] = {}
    for entry in (obj or {}).get("metadata", {}).get("managedFields") or []:
        if entry.get("manager") == FIELD_MANAGER and entry.get("operation") == "Apply":
            out = _merge(out, entry.get("fieldsV1") or {})
    return out


def _merge(one: Mapping[str, Any], two: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(one)
    for key, value in two.items():
        out[key] = _merge(out.get(key) or {}, value) if isinstance(value, Mapping) else value
    return out


def project(value: Any, fields: Mapping[str, Any]) -> Any:
    """``value`` cut down to ``fields`` (server-side apply's ``fieldsV1`` trie: ``f:`` a field, ``k:`` a
    list item by its keys, ``v:`` a set member, ``.`` the value itself)."""
    if not fields or set(fields) == {"."}:
        return value
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, sub in fields.items():
            if key.startswith("f:") and key[2:] in value:
                out[key[2:]] = project(value[key[2:]], sub)
        return out
    if isinstance(value, list):
        items: list[Any] = []
        for key, sub in fields.items():
            if key.startswith("k:"):
                wanted = json.loads(key[2:])
                match = [
                    i
                    for i in value
                    if isinstance(i, Mapping) and all(i.get(k) == v for k, v in wanted.items())
                ]
                items.append([project(i, sub) for i in match])
            elif key.startswith("v:"):
                items.append(json.loads(key[2:]) in value)
        return items
    return value


def diff(client: Client, objects: Sequence[Mapping[str, Any]]) -> Outcome:
    """What ``apply`` would do: each object's state with the paths that would change, and the stale
    objects. The change is a server-side dry-run apply (defaults and merges the server's) compared with
    the live object on the fields ``provision`` owns before or after: what other managers and the server
    write (an autoscaler's replicas, an allocated cluster IP, status) is theirs, not a change of ours."""
    check_served(client, objects)
    outcome = Outcome()
    for obj in objects:
        current = client.get(obj)
        planned = _without_repeated_metrics(client.apply(obj, dry_run=True))
        owned = _merge(owned_fields(current), owned_fields(planned))
        changed = differences(project(_comparable(current), owned), project(_comparable(planned), owned))
        state = "create" if current is None else ("change" if changed else "unchanged")
        outcome.objects.append({"object": describe(obj), "state": state, "diff": changed if current else []})
    outcome.stale = [describe(found) for found in stale(client, objects)]
    return outcome


def _without_repeated_metrics(obj: dict[str, Any]) -> dict[str, Any]:
    """A HorizontalPodAutoscaler with each ``spec.metrics`` entry once. 1.20 stores an HPA as
    ``autoscaling/v1`` with its v2 metrics in an annotation; its answer to a dry-run apply of an
    ``autoscaling/v2beta2`` HPA lists every metric twice (the annotation's copy and the applied one), so
    the unchanged object read as a change. A rendered HPA never repeats a metric, so nothing is lost."""
    spec = obj.get("spec")
    if obj.get("kind") != "HorizontalPodAutoscaler" or not isinstance(spec, dict):
        return obj
    metrics = spec.get("metrics")
    if not isinstance(metrics, list):
        return obj
    once: list[Any] = []
    for metric in metrics:
        if metric not in once:
            once.append(metric)
    return {**obj, "spec": {**spec, "metrics": once}}


def apply(client: Client, objects: Sequence[Mapping[str, Any]], *, prune: bool = False) -> Outcome:
    check_served(client, objects)
    outcome = Outcome()
    for obj in objects:
        current = client.get(obj)
        applied = client.apply(obj)
        before = (current or {}).get("metadata", {}).get("resourceVersion")
        after = applied.get("metadata", {}).get("resourceVersion")
        state = "created" if current is None else ("unchanged" if before == after else "changed")
        outcome.objects.append({"object": describe(obj), "state": state})
    found = stale(client, objects)
    outcome.stale = [describe(item) for item in found]
    if prune:
        for item in found:
            client.delete(item)
        outcome.pruned = True
    return outcome
