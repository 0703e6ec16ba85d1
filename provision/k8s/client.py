"""A small Kubernetes API client for ``provision k8s diff|apply``: a kubeconfig's current context, server-side
apply (field manager ``provision``), dry-run, list by label, delete.

httpx (already a dependency of the health gate) speaks the API directly: the three verbs need a handful of
REST calls, and the official ``kubernetes`` client would add a large generated package and its own
dependencies for them. Only what a kubeconfig states is honoured: a bearer token (or token file), a client
certificate and key, a CA (file or data) or ``insecure-skip-tls-verify``. An ``exec`` or ``auth-provider``
user (cloud plugins) is refused with its name: run ``kubectl`` to get a token, or use a service account.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from provision.errors import InputError, ProvisionError

FIELD_MANAGER = "provision"
TIMEOUT_S = 30.0

# kind -> plural of the API path (the kinds provision renders).
PLURALS = {
    "ConfigMap": "configmaps",
    "Service": "services",
    "Deployment": "deployments",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "HorizontalPodAutoscaler": "horizontalpodautoscalers",
    "LeaderWorkerSet": "leaderworkersets",
    "ScaledObject": "scaledobjects",
    "ServiceMonitor": "servicemonitors",
    "PodMonitor": "podmonitors",
    "PrometheusRule": "prometheusrules",
}


class ApiError(ProvisionError):
    """The apiserver refused a request: its status and message."""

    def __init__(self, what: str, status: int, message: str) -> None:
        super().__init__(f"{what}: {status} {message}")
        self.status = status


@dataclass(frozen=True)
class Config:
    """What a kubeconfig's current context says."""

    source: str
    server: str
    token: str | None = None
    ca_file: str | None = None
    ca_data: str | None = None
    cert_file: str | None = None
    cert_data: bytes | None = None
    key_file: str | None = None
    key_data: bytes | None = None
    insecure: bool = False


def kubeconfig_path(given: Path | None) -> Path:
    """``--kubeconfig``, else the first file of ``$KUBECONFIG``, else ``~/.kube/config``."""
    if given is not None:
        return given
    env = os.environ.get("KUBECONFIG", "")
    first = next((part for part in env.split(os.pathsep) if part), "")
    return Path(first) if first else Path.home() / ".kube" / "config"


def load_config(path: Path, context: str | None = None) -> Config:
    """The current (or ``context``) context of a kubeconfig; InputError names the file and the field."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise InputError(f"{path}: cannot read the kubeconfig: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not YAML: {exc}") from None
    if not isinstance(data, Mapping):
        raise InputError(f"{path}: not a kubeconfig (a mapping)")
    name = context or data.get("current-context")
    if not name:
        raise InputError(f"{path}: current-context: not set; give --context")

    def named(kind: str, wanted: Any) -> Mapping[str, Any]:
        for item in data.get(kind) or []:
            if isinstance(item, Mapping) and item.get("name") == wanted:
                return dict(item.get(kind[:-1]) or {})
        raise InputError(f"{path}: {kind}: no entry named {wanted!r}")

    ctx = named("contexts", name)
    cluster = named("clusters", ctx.get("cluster"))
    user = named("users", ctx.get("user")) if ctx.get("user") else {}
    for unsupported in ("exec", "auth-provider"):
        if unsupported in user:
            raise InputError(
                f"{path}: users[{ctx.get('user')}].{unsupported}: not supported; give a kubeconfig with a "
                "token or a client certificate"
            )
    server = str(cluster.get("server") or "")
    if not server.startswith("https://") and not server.startswith("http://"):
        raise InputError(f"{path}: clusters[{ctx.get('cluster')}].server: {server!r} is not a URL")
    base = path.parent

    def file(value: Any) -> str | None:
        return str(base / str(value)) if value else None

    def decoded(field: str, value: Any) -> bytes | None:
        if not value:
            return None
        try:
            return base64.b64decode(str(value), validate=True)
        except ValueError:
            raise InputError(f"{path}: {field}: not base64") from None

    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = Path(str(file(user["tokenFile"]))).read_text(encoding="utf-8").strip()
    ca_data = decoded("certificate-authority-data", cluster.get("certificate-authority-data"))
    return Config(
        source=str(path),
        server=server.rstrip("/"),
        token=str(token) if token else None,
        ca_file=file(cluster.get("certificate-authority")),
        ca_data=ca_data.decode() if ca_data else None,
        cert_file=file(user.get("client-certificate")),
        cert_data=decoded("client-certificate-data", user.get("client-certificate-data")),
        key_file=file(user.get("client-key")),
        key_data=decoded("client-key-data", user.get("client-key-data")),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
    )


@contextmanager
def _tls(config: Config) -> Iterator[ssl.SSLContext | bool]:
    if config.insecure:
        yield False
        return
    try:
        context = ssl.create_default_context(cafile=config.ca_file, cadata=config.ca_data)
    except (OSError, ssl.SSLError) as exc:
        raise InputError(
            f"{config.source}: certificate-authority{'' if config.ca_file else '-data'} "
            f"{config.ca_file or ''}: {exc.strerror or exc}"
        ) from None
    if config.cert_file or config.cert_data:
        with tempfile.TemporaryDirectory(prefix="provision-k8s-") as folder:
            cert, key = config.cert_file, config.key_file
            if config.cert_data:
                cert = os.path.join(folder, "cert.pem")
                Path(cert).write_bytes(config.cert_data)
            if config.key_data:
                key = os.path.join(folder, "key.pem")
                Path(key).write_bytes(config.key_data)
                os.chmod(key, 0o600)
            try:
                context.load_cert_chain(str(cert), key)
            except (OSError, ssl.SSLError) as exc:
                raise InputError(
                    f"{config.source}: client-certificate/client-key: {exc.strerror or exc}"
                ) from None
        # loaded into the context: the files may go
    yield context


def path_of(obj: Mapping[str, Any], name: str | None = None) -> str:
    """The API path of an object (``name``: another of its kind; '' for the collection)."""
    group_version = str(obj["apiVersion"])
    prefix = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
    namespace = obj["metadata"]["namespace"]
    plural = PLURALS[str(obj["kind"])]
    tail = obj["metadata"]["name"] if name is None else name
    return f"{prefix}/namespaces/{namespace}/{plural}" + (f"/{tail}" if tail else "")


def describe(obj: Mapping[str, Any]) -> str:
    """``Deployment/vllm-chat``: how messages name an object."""
    return f"{obj['kind']}/{obj['metadata']['name']}"


class Client:
    """The apiserver of one kubeconfig context."""

    def __init__(self, config: Config) -> None:
        self.config = config
        headers = {"Accept": "application/json"}
        if config.token:
            headers["Authorization"] = f"Bearer {config.token}"
        with _tls(config) as verify:
            self._http = httpx.Client(
                base_url=config.server, headers=headers, verify=verify, timeout=TIMEOUT_S
            )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.close()

    def _request(self, what: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ProvisionError(
                f"{what}: cannot reach {self.config.server} ({self.config.source}): {exc}"
            ) from None

    def _json(self, what: str, response: httpx.Response) -> dict[str, Any]:
        if response.status_code >= 400:
            try:
                message = str(response.json().get("message") or response.text)
            except ValueError:
                message = response.text
            raise ApiError(what, response.status_code, message)
        data = response.json()
        return dict(data) if isinstance(data, Mapping) else {}

    def served(self, api_version: str) -> set[str]:
        """The kinds the apiserver serves under ``api_version`` (empty: the group/version is not served)."""
        path = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        response = self._request(f"discovery {api_version}", "GET", path)
        if response.status_code == 404:
            return set()
        data = self._json(f"discovery {api_version}", response)
        return {
            str(item.get("kind")) for item in data.get("resources") or [] if "/" not in str(item.get("name"))
        }

    def get(self, obj: Mapping[str, Any]) -> dict[str, Any] | None:
        response = self._request(describe(obj), "GET", path_of(obj))
        if response.status_code == 404:
            return None
        return self._json(describe(obj), response)

    def apply(self, obj: Mapping[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """Server-side apply of ``obj`` with field manager ``provision``."""
        params = {"fieldManager": FIELD_MANAGER}
        if dry_run:
            params["dryRun"] = "All"
        response = self._request(
            describe(obj),
            "PATCH",
            path_of(obj),
            params=params,
            content=yaml.safe_dump(dict(obj), sort_keys=False).encode(),
            headers={"Content-Type": "application/apply-patch+yaml"},
        )
        return self._json(describe(obj), response)

    def managed(self, like: Mapping[str, Any], label_selector: str) -> list[dict[str, Any]]:
        """The objects of ``like``'s kind in its namespace that match ``label_selector``."""
        response = self._request(
            f"list {like['kind']}", "GET", path_of(like, ""), params={"labelSelector": label_selector}
        )
        if response.status_code == 404:
            return []
        items = self._json(f"list {like['kind']}", response).get("items") or []
        return [
            {**item, "apiVersion": like["apiVersion"], "kind": like["kind"]}
            for item in items
            if isinstance(item, Mapping)
        ]

    def delete(self, obj: Mapping[str, Any]) -> None:
        response = self._request(
            describe(obj), "DELETE", path_of(obj), params={"propagationPolicy": "Foreground"}
        )
        if response.status_code != 404:
            self._json(describe(obj), response)
