"""An external metrics API (``external.metrics.k8s.io/v1beta1``) answered from a real Prometheus, for the
test control plane (:mod:`provision_sim.k8s.controlplane`).

It does what prometheus-adapter does for its ``externalRules`` and nothing else, so that the real HPA
controller scales on exactly the PromQL a product renders for the adapter:

* the rules are prometheus-adapter's documented configuration (``docs/config.md`` of
  kubernetes-sigs/prometheus-adapter): ``seriesQuery`` (a series selector, discovered with Prometheus'
  ``/api/v1/series``), optional ``seriesFilters`` (``is`` / ``isNot`` regular expressions on the series
  name), ``name`` (``matches`` a regular expression, ``as`` its replacement; ``$1`` when ``matches`` has a
  group, else the whole name), ``resources`` (``overrides`` ``{label: {resource: namespace}}`` or a
  ``template``; ``namespaced: false`` for a cluster-wide metric) and ``metricsQuery``, a Go template with
  ``<<`` ``>>`` delimiters over ``.Series``, ``.LabelMatchers``, ``.GroupBy`` and ``.GroupBySlice``;
* a request ``GET /apis/external.metrics.k8s.io/v1beta1/namespaces/NS/METRIC?labelSelector=SEL`` renders
  the rule's ``metricsQuery`` as the adapter does for an external metric: ``.LabelMatchers`` = the namespace
  label (unless ``namespaced: false``) and the HPA's metric selector as PromQL matchers, ``.GroupBy`` empty;
  the instant vector Prometheus returns becomes an ``ExternalMetricValueList``, one item per series;
* served over TLS with a certificate of its own CA (the APIService's ``caBundle``) for
  ``SERVICE.NAMESPACE.svc``, the name the aggregator checks, and the apiserver is authenticated as
  aggregated API servers do: a client certificate of the front-proxy CA whose common name is an allowed
  name, the user in ``X-Remote-User``. Requests without one are refused (401). No SubjectAccessReview: the
  apiserver's RBAC already allowed the request before proxying it.

:func:`register` makes the apiserver route to it: an ``ExternalName`` Service (the aggregator resolves such
a Service to its name and the APIService's port, without kube-proxy or endpoints) and the APIService
``v1beta1.external.metrics.k8s.io``, then waits for its ``Available`` condition.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import re
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from provision.errors import ProvisionError
from provision.k8s import autoscale
from provision_sim.k8s.controlplane import ControlPlane, _certificate, _write_pair

GROUP = "external.metrics.k8s.io"
VERSION = "v1beta1"
APISERVICE = f"{VERSION}.{GROUP}"
SERVICE = "provision-external-metrics"
NAMESPACE = "kube-system"
ALLOWED_NAMES = ("front-proxy-client",)  # the apiserver's --requestheader-allowed-names
_PREFIX = f"/apis/{GROUP}/{VERSION}"
_TEMPLATE = re.compile(r"<<\s*(.*?)\s*>>")


class RuleError(ProvisionError):
    """A rule the adapter would refuse (a field missing, a template it cannot render)."""


# --------------------------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class ExternalRule:
    """One entry of prometheus-adapter's ``externalRules``."""

    series_query: str
    metrics_query: str
    matches: str = ""
    as_: str = ""
    is_filters: tuple[str, ...] = ()
    is_not_filters: tuple[str, ...] = ()
    namespaced: bool = True
    namespace_label: str | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, Any], where: str) -> ExternalRule:
        for key in ("seriesQuery", "metricsQuery"):
            if not isinstance(raw.get(key), str) or not raw[key].strip():
                raise RuleError(f"{where}: {key} is required (a string)")
        name = raw.get("name") or {}
        filters = raw.get("seriesFilters") or []
        resources = raw.get("resources") or {}
        label: str | None = None
        for candidate, target in (resources.get("overrides") or {}).items():
            if str((target or {}).get("resource", "")) in ("namespace", "namespaces"):
                label = str(candidate)
        if label is None and resources.get("template"):
            label = str(resources["template"]).replace("<<.Resource>>", "namespace")
        return cls(
            series_query=raw["seriesQuery"],
            metrics_query=raw["metricsQuery"],
            matches=str(name.get("matches", "")),
            as_=str(name.get("as", "")),
            is_filters=tuple(str(f["is"]) for f in filters if "is" in f),
            is_not_filters=tuple(str(f["isNot"]) for f in filters if "isNot" in f),
            namespaced=bool(resources.get("namespaced", True)),
            namespace_label=label,
        )

    def metric_name(self, series: str) -> str | None:
        """The external metric's name for the discovered ``series``, None if the rule does not take it."""
        if any(not re.search(f, series) for f in self.is_filters):
            return None
        if any(re.search(f, series) for f in self.is_not_filters):
            return None
        if not self.matches:
            return series
        found = re.search(self.matches, series)
        if found is None:
            return None
        replacement = self.as_ or ("$1" if found.re.groups else "$0")
        return found.expand(_go_replacement(replacement))

    def query(self, series: str, namespace: str, selector: str) -> str:
        """The ``metricsQuery`` rendered for one request (prometheus-adapter's ``BuildExternal``)."""
        matchers: list[str] = []
        if self.namespaced and namespace:
            if not self.namespace_label:
                raise RuleError(
                    f"rule {self.series_query!r}: namespaced, but no label maps to the namespace resource "
                    "(resources.overrides or template; or namespaced: false)"
                )
            matchers.append(f'{self.namespace_label}="{_escape(namespace)}"')
        matchers += selector_matchers(selector)
        values = {".Series": series, ".LabelMatchers": ",".join(matchers), ".GroupBy": ""}

        def render(match: re.Match[str]) -> str:
            action = match[1]
            if action in values:
                return values[action]
            if re.fullmatch(r'join\s+\.GroupBySlice\s+"[^"]*"', action):
                return ""
            raise RuleError(f"metricsQuery {self.metrics_query!r}: cannot render <<{action}>>")

        return _TEMPLATE.sub(render, self.metrics_query)


def parse_rules(config: Mapping[str, Any], where: str = "adapter config") -> list[ExternalRule]:
    """The ``externalRules`` of a prometheus-adapter configuration (its ``config.yaml`` as a mapping)."""
    raw = config.get("externalRules")
    if not isinstance(raw, list) or not raw:
        raise RuleError(f"{where}: externalRules is missing or empty")
    return [ExternalRule.parse(rule, f"{where}: externalRules[{i}]") for i, rule in enumerate(raw)]


def _go_replacement(text: str) -> str:
    """Go's ``regexp.Expand`` template (``$1``, ``${1}``, ``$name``) as Python's ``Match.expand``'s."""
    text = text.replace("\\", "\\\\")
    return re.sub(r"\$(?:\{(\w+)\}|(\w+))", lambda m: f"\\g<{m[1] or m[2]}>", text)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


_SET = re.compile(r"^\s*([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ = re.compile(r"^\s*([\w./-]+)\s*(==|=|!=)\s*([\w./-]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([\w./-]+)\s*$")


def selector_matchers(selector: str) -> list[str]:
    """A Kubernetes label selector (the ``labelSelector`` query parameter) as PromQL label matchers."""
    if not selector.strip():
        return []
    parts: list[str] = []
    depth, current = 0, ""
    for char in selector:  # commas inside ``in (a, b)`` do not split requirements
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    matchers: list[str] = []
    for part in parts:
        if found := _SET.match(part):
            values = [re.escape(v.strip()) for v in found[3].split(",") if v.strip()]
            op = "=~" if found[2] == "in" else "!~"
            matchers.append(f'{label_name(found[1])}{op}"{_escape("|".join(values))}"')
        elif found := _EQ.match(part):
            op = "!=" if found[2] == "!=" else "="
            matchers.append(f'{label_name(found[1])}{op}"{_escape(found[3])}"')
        elif found := _EXISTS.match(part):
            matchers.append(f'{label_name(found[2])}{"=" if found[1] else "!="}""')
        else:
            raise RuleError(f"labelSelector {selector!r}: cannot read {part!r}")
    return matchers


def label_name(name: str) -> str:
    """A Kubernetes label key as a Prometheus label name: every character not valid in one becomes ``_``
    (prometheus-adapter's selector keys, prometheus-operator's ``sanitizeLabelName``, the ``__meta_*``
    labels of Prometheus' Kubernetes discovery)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def quantity(value: float) -> str:
    """A Kubernetes quantity: whole numbers as they are, else in milli-units (``1500m``)."""
    if float(value).is_integer():
        return str(int(value))
    return f"{round(value * 1000)}m"


# --------------------------------------------------------------------------------------------- server


@dataclass
class Request:
    """One request the server answered: who asked (the apiserver's front-proxy headers), what, the
    PromQL it ran and the values it returned."""

    at: float
    user: str
    path: str
    status: int
    query: str = ""
    values: list[float] = field(default_factory=list)


@dataclass
class ExternalMetricsServer:
    """The API over TLS on 127.0.0.1, in a thread of this process; :meth:`stop` ends it."""

    rules: list[ExternalRule]
    prometheus: str  # base URL, e.g. http://127.0.0.1:9090
    folder: Path
    front_proxy_ca: Path
    port: int = 0
    ca_pem: bytes = b""
    requests: list[Request] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def start(
        cls,
        rules: list[ExternalRule],
        prometheus: str,
        folder: Path,
        front_proxy_ca: Path,
        *,
        service: str = SERVICE,
        namespace: str = NAMESPACE,
    ) -> ExternalMetricsServer:
        folder.mkdir(parents=True, exist_ok=True)
        ca_key, ca_cert = _certificate("provision-external-metrics-ca", None, ca=True)
        _write_pair(folder, "ca", ca_key, ca_cert)
        names: list[x509.GeneralName] = [
            x509.DNSName(f"{service}.{namespace}.svc"),
            x509.DNSName("localhost"),
        ]
        key, cert = _certificate(
            f"{service}.{namespace}.svc", (ca_key, ca_cert), sans=names, usage=ExtendedKeyUsageOID.SERVER_AUTH
        )
        _write_pair(folder, "serving", key, cert)
        me = cls(rules=rules, prometheus=prometheus.rstrip("/"), folder=folder, front_proxy_ca=front_proxy_ca)
        me.ca_pem = (folder / "ca.crt").read_bytes()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(folder / "serving.crt", folder / "serving.key")
        context.load_verify_locations(cafile=str(front_proxy_ca))
        context.verify_mode = ssl.CERT_OPTIONAL  # a request without a client certificate gets a 401
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(me))
        server.daemon_threads = True
        server.socket = context.wrap_socket(server.socket, server_side=True)
        me.port = int(server.server_address[1])
        me._server = server
        me._thread = threading.Thread(target=server.serve_forever, name="external-metrics", daemon=True)
        me._thread.start()
        return me

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def seen(self) -> list[Request]:
        with self._lock:
            return list(self.requests)

    # ------------------------------------------------------------------------------------ answers

    def metrics(self) -> dict[str, tuple[ExternalRule, str]]:
        """External metric name -> (its rule, the series name), discovered in Prometheus now."""
        found: dict[str, tuple[ExternalRule, str]] = {}
        for rule in self.rules:
            data = self._prometheus("series", {"match[]": rule.series_query})
            for series in sorted({str(s.get("__name__", "")) for s in data}):
                name = rule.metric_name(series) if series else None
                if name and name not in found:
                    found[name] = (rule, series)
        return found

    def resource_list(self) -> dict[str, Any]:
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{GROUP}/{VERSION}",
            "resources": [
                {
                    "name": name,
                    "singularName": "",
                    "namespaced": True,
                    "kind": "ExternalMetricValueList",
                    "verbs": ["get"],
                }
                for name in sorted(self.metrics())
            ],
        }

    def values(self, namespace: str, metric: str, selector: str) -> tuple[str, dict[str, Any]]:
        """(the PromQL run, the ``ExternalMetricValueList``) of a request; KeyError for an unknown metric."""
        rule, series = self.metrics()[metric]
        query = rule.query(series, namespace, selector)
        result = self._prometheus("query", {"query": query})
        if not isinstance(result, dict) or result.get("resultType") != "vector":
            raise RuleError(f"{query}: Prometheus answered {result!r}, not an instant vector")
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        items = [
            {
                "metricName": metric,
                "metricLabels": {k: v for k, v in sample["metric"].items() if k != "__name__"},
                "timestamp": now,
                "value": quantity(float(sample["value"][1])),
            }
            for sample in result["result"]
        ]
        body = {
            "kind": "ExternalMetricValueList",
            "apiVersion": f"{GROUP}/{VERSION}",
            "metadata": {},
            "items": items,
        }
        return query, body

    def _prometheus(self, endpoint: str, params: Mapping[str, str]) -> Any:
        answer = httpx.get(f"{self.prometheus}/api/v1/{endpoint}", params=params, timeout=10.0)
        answer.raise_for_status()
        return answer.json()["data"]

    def _record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)


def _handler(server: ExternalMetricsServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            user = self._user()
            if user is None:
                self._reply(
                    401, _status(401, "Unauthorized", "no front-proxy client certificate"), url.path, ""
                )
                return
            if url.path in ("/healthz", "/readyz", "/livez"):
                self._send(200, b"ok", "text/plain")
                return
            if url.path == _PREFIX:
                self._reply(200, server.resource_list(), url.path, user)
                return
            if url.path == f"/apis/{GROUP}":
                group = {
                    "kind": "APIGroup",
                    "apiVersion": "v1",
                    "name": GROUP,
                    "versions": [{"groupVersion": f"{GROUP}/{VERSION}", "version": VERSION}],
                    "preferredVersion": {"groupVersion": f"{GROUP}/{VERSION}", "version": VERSION},
                }
                self._reply(200, group, url.path, user)
                return
            found = re.fullmatch(rf"{re.escape(_PREFIX)}/namespaces/([^/]+)/([^/]+)", url.path)
            if not found:
                self._reply(404, _status(404, "NotFound", f"no such path {url.path}"), url.path, user)
                return
            selector = urllib.parse.parse_qs(url.query).get("labelSelector", [""])[0]
            namespace, metric = found[1], urllib.parse.unquote(found[2])
            try:
                query, body = server.values(namespace, metric, selector)
            except KeyError:
                message = f"the server could not find the metric {metric} for namespace {namespace}"
                self._reply(404, _status(404, "NotFound", message), url.path, user)
                return
            except (RuleError, httpx.HTTPError, ValueError) as exc:
                self._reply(500, _status(500, "InternalError", str(exc)), url.path, user)
                return
            values = [_number(item["value"]) for item in body["items"]]
            server._record(Request(time.time(), user, self.path, 200, query, values))
            self._send(200, json.dumps(body).encode(), "application/json")

        def _user(self) -> str | None:
            """The user the apiserver vouches for: its front-proxy client certificate, then the header."""
            cert = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
            if not cert:
                return None
            subject: Any = cert.get("subject", ())
            names = [pair[1] for rdn in subject for pair in rdn if pair[0] == "commonName"]
            if not set(names) & set(ALLOWED_NAMES):
                return None
            return self.headers.get("X-Remote-User") or None

        def _reply(self, code: int, body: Mapping[str, Any], path: str, user: str) -> None:
            if code != 200 or not path.startswith(f"{_PREFIX}/namespaces/"):
                server._record(Request(time.time(), user, self.path, code))
            self._send(code, json.dumps(body).encode(), "application/json")

        def _send(self, code: int, data: bytes, kind: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _number(text: str) -> float:
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


# --------------------------------------------------------------------------------------------- apiserver

# The HPA controller's own role does not reach external.metrics.k8s.io on 1.20: prometheus-adapter's
# manifests bind one to its service account (the chart's external-metrics cluster role and binding).
READER_ROLE = "provision-rig-external-metrics"
READER_BINDING = "provision-rig-hpa-controller-external-metrics"
READER: dict[str, Any] = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRole",
    "metadata": {"name": READER_ROLE},
    "rules": [{"apiGroups": [GROUP], "resources": ["*"], "verbs": ["list", "get", "watch"]}],
}
READER_FOR_HPA: dict[str, Any] = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRoleBinding",
    "metadata": {"name": READER_BINDING},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": READER_ROLE},
    "subjects": [{"kind": "ServiceAccount", "name": "horizontal-pod-autoscaler", "namespace": "kube-system"}],
}


def register(
    plane: ControlPlane,
    server: ExternalMetricsServer,
    *,
    service: str = SERVICE,
    namespace: str = NAMESPACE,
    timeout: float = 60.0,
) -> float:
    """The ExternalName Service and the APIService ``v1beta1.external.metrics.k8s.io`` pointing at
    ``server``, applied server-side; returns the seconds until the apiserver says it is ``Available``."""
    began = time.monotonic()
    service_object = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service, "namespace": namespace},
        "spec": {"type": "ExternalName", "externalName": "localhost"},
    }
    apiservice = {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": APISERVICE},
        "spec": {
            "group": GROUP,
            "version": VERSION,
            "service": {"name": service, "namespace": namespace, "port": server.port},
            "caBundle": base64.b64encode(server.ca_pem).decode(),
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
        },
    }
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    with plane.client() as http:
        for path, body in (
            (f"/api/v1/namespaces/{namespace}/services/{service}", service_object),
            (f"{rbac}/clusterroles/{READER_ROLE}", READER),
            (f"{rbac}/clusterrolebindings/{READER_BINDING}", READER_FOR_HPA),
        ):
            answer = http.patch(
                path,
                params={"fieldManager": "provision-rig", "force": "true"},
                content=json.dumps(body),
                headers={"Content-Type": "application/apply-patch+yaml"},
            )
            if answer.status_code >= 300:
                raise ProvisionError(f"apply {path}: {answer.status_code} {answer.text[:500]}")
        # Not server-side apply: 1.20's aggregator has no field manager for APIServices (the apiserver
        # panics, "FieldManager must be installed to run apply", and drops the connection).
        collection = "/apis/apiregistration.k8s.io/v1/apiservices"
        http.delete(f"{collection}/{APISERVICE}")
        answer = http.post(collection, json=apiservice)
        if answer.status_code >= 300:
            raise ProvisionError(f"create {collection}: {answer.status_code} {answer.text[:500]}")
        deadline = began + timeout
        last: Any = None
        while time.monotonic() < deadline:
            got = http.get(f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}").json()
            last = got.get("status", {}).get("conditions")
            available = any(c["type"] == "Available" and c["status"] == "True" for c in last or [])
            # the aggregator installs its proxy a moment after: until then the path answers 404
            if available and http.get(_PREFIX).status_code == 200:
                return time.monotonic() - began
            time.sleep(0.5)
    raise ProvisionError(f"APIService {APISERVICE} not Available in {timeout:.0f} s: {last}")


def unregister(plane: ControlPlane, *, service: str = SERVICE, namespace: str = NAMESPACE) -> None:
    with plane.client() as http, contextlib.suppress(httpx.HTTPError):
        http.delete(f"/apis/apiregistration.k8s.io/v1/apiservices/{APISERVICE}")
        http.delete(f"/api/v1/namespaces/{namespace}/services/{service}")
        http.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{READER_BINDING}")
        http.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{READER_ROLE}")


@contextlib.contextmanager
def serving(
    plane: ControlPlane, prometheus: str, folder: Path, rules: list[ExternalRule] | None = None
) -> Iterator[tuple[ExternalMetricsServer, float]]:
    """The external metrics API over ``prometheus`` (a base URL), answering ``rules`` (the product's
    rendered ones unless given) and registered with ``plane``; yields the server and the seconds until
    the APIService was ``Available``; unregistered and stopped on exit."""
    if rules is None:
        rules = parse_rules(autoscale.adapter_config(), "provision.k8s.autoscale")
    server = None
    try:
        server = ExternalMetricsServer.start(
            rules, prometheus, folder, plane.folder / "pki" / "front-proxy-ca.crt"
        )
        yield server, register(plane, server)
    finally:
        unregister(plane)
        if server is not None:
            server.stop()
