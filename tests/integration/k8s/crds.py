"""CustomResourceDefinitions for the kinds ``provision k8s render`` writes beyond core Kubernetes, installed
on the test control plane so that its apiserver validates, stores and server-side applies them.

The projects' CRD manifests are not reachable from here. Their schemas are: ``cloudcoil-models-*`` are
generated from prometheus-operator's (v0.80) and KEDA's (v2.16) published CRDs, so the OpenAPI schema of
each CRD below is rebuilt from those models' JSON schema, in the *structural* form apiextensions/v1 requires
(every ``$ref`` inlined, ``anyOf [X, null]`` as X, ``anyOf [integer, string]`` as
``x-kubernetes-int-or-string``, no titles and no defaults). An object with a field the schema does not know
loses it (the apiserver prunes it) and one with a wrong type or pattern is refused, as the real CRD would.

No package carries LeaderWorkerSet's schema: its CRD here keeps ``spec`` unchecked
(``x-kubernetes-preserve-unknown-fields``); its pod templates are checked as core Pods in
tests/unit/test_k8s_render.py. Group, version, kind, plural and scope are each project's own.
No controller runs for any of these kinds (no prometheus-operator, KEDA or LWS controller): the apiserver
accepts and stores the objects, nothing acts on them.
"""

from __future__ import annotations

import time
from typing import Any

from cloudcoil.models.keda import v1alpha1 as keda
from cloudcoil.models.prometheus_operator import v1 as monitoring

from provision_sim.k8s.controlplane import ControlPlane

# kind -> (group, version, plural, model or None for spec left unchecked)
KINDS: dict[str, tuple[str, str, str, Any]] = {
    "ServiceMonitor": ("monitoring.coreos.com", "v1", "servicemonitors", monitoring.ServiceMonitor),
    "PodMonitor": ("monitoring.coreos.com", "v1", "podmonitors", monitoring.PodMonitor),
    "PrometheusRule": ("monitoring.coreos.com", "v1", "prometheusrules", monitoring.PrometheusRule),
    "ScaledObject": ("keda.sh", "v1alpha1", "scaledobjects", keda.ScaledObject),
    "LeaderWorkerSet": ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", None),
}
_KEPT = ("type", "format", "pattern", "enum", "minimum", "maximum", "minLength", "maxLength", "minItems",
         "maxItems", "required", "description")  # fmt: skip
_FORMATS = {"int32", "int64", "float", "double", "byte", "date", "date-time", "password"}


class SchemaError(ValueError):
    """A model's JSON schema has a construct with no structural equivalent."""


def structural(node: dict[str, Any], defs: dict[str, Any], path: str = "") -> dict[str, Any]:
    """The structural OpenAPI v3 schema of one pydantic JSON schema node (``defs``: its ``$defs``)."""
    node = _deref(node, defs)
    if "allOf" in node and len(node["allOf"]) == 1:
        return structural({**node["allOf"][0], **_rest(node, "allOf")}, defs, path)
    if "anyOf" in node:
        options = [_deref(option, defs) for option in node["anyOf"] if option != {"type": "null"}]
        if len(options) == 1:
            return structural({**options[0], **_rest(node, "anyOf")}, defs, path)
        if sorted(option.get("type", "") for option in options) == ["integer", "string"]:
            return {"x-kubernetes-int-or-string": True}
        raise SchemaError(f"{path or '/'}: anyOf {options} has no structural form")
    out: dict[str, Any] = {key: node[key] for key in _KEPT if key in node}
    if "const" in node:
        out["enum"] = [node["const"]]
    if out.get("format") not in _FORMATS:
        out.pop("format", None)
    if "type" not in out:
        if "enum" in out:
            out["type"] = "string"
        else:
            return {"x-kubernetes-preserve-unknown-fields": True}
    if out["type"] == "array":
        out["items"] = structural(node.get("items", {}), defs, f"{path}[]")
    elif out["type"] == "object":
        properties = node.get("properties") or {}
        extra = node.get("additionalProperties")
        if properties:
            out["properties"] = {
                name: structural(value, defs, f"{path}.{name}") for name, value in properties.items()
            }
        elif isinstance(extra, dict):
            out["additionalProperties"] = structural(extra, defs, f"{path}.*")
        else:
            out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def _deref(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = {**defs[node["$ref"].rsplit("/", 1)[1]], **_rest(node, "$ref")}
    return node


def _rest(node: dict[str, Any], key: str) -> dict[str, Any]:
    return {name: value for name, value in node.items() if name not in (key, "title", "default")}


def definition(kind: str) -> dict[str, Any]:
    """The CustomResourceDefinition of ``kind``."""
    group, version, plural, model = KINDS[kind]
    if model is None:
        spec: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    else:
        schema = model.model_json_schema(by_alias=True)
        spec = structural(schema["properties"]["spec"], schema.get("$defs", {}), "spec")
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec,
                                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            },
                        }
                    },
                }
            ],
        },
    }


def install(plane: ControlPlane, timeout: float = 60.0) -> list[str]:
    """Create every CRD of :data:`KINDS` and wait until each is established and served; their names."""
    names = []
    with plane.client() as client:
        for kind in KINDS:
            crd = definition(kind)
            made = client.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd)
            if made.status_code not in (201, 409):
                raise RuntimeError(f"CRD of {kind} refused: {made.status_code} {made.text}")
            names.append(crd["metadata"]["name"])
        deadline = time.monotonic() + timeout
        for kind, name in zip(KINDS, names, strict=True):
            group, version, plural, _ = KINDS[kind]
            while True:
                got = client.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}").json()
                conditions = {c["type"]: c["status"] for c in got.get("status", {}).get("conditions", [])}
                listed = client.get(f"/apis/{group}/{version}")
                served = listed.status_code == 200 and plural in {
                    resource["name"] for resource in listed.json().get("resources", [])
                }
                if conditions.get("Established") == "True" and served:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"CRD {name} not established in {timeout:.0f} s: {conditions}")
                time.sleep(0.5)
    return names


def remove(plane: ControlPlane, names: list[str], timeout: float = 60.0) -> None:
    """Delete the CRDs (and so every object of their kinds) and wait until they are gone."""
    with plane.client() as client:
        for name in names:
            client.delete(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        deadline = time.monotonic() + timeout
        for name in names:
            path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
            while client.get(path).status_code != 404:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"CRD {name} still there after {timeout:.0f} s")
                time.sleep(0.5)
