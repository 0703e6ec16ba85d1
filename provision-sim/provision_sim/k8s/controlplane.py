"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager (1.20.2).

For the tests of what ``provision`` would apply to a Kubernetes cluster: the real apiserver admits (or
refuses) the objects, server-side apply computes the managed fields, and the real controllers reconcile
them (the ReplicaSet and HPA controllers above all). There is no kubelet: pods are never run, and the node
lifecycle controller is off (nodes without a kubelet send no heartbeats).

Everything a :class:`ControlPlane` writes lives in its own folder: certificates (its own CA, the
apiserver's serving certificate, a front-proxy CA and client for aggregated APIs, the service-account key),
the static token file, etcd's data, the logs, and ``kubeconfig`` (the admin, group ``system:masters``).
Every process listens on 127.0.0.1 on ports picked free at start, runs in its own process group and is
stopped by its PID.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import secrets
import signal
import ssl
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from provision.errors import EnvironmentProblem, ProvisionError
from provision_sim.k8s import build
from provision_sim.serving.vllm_cpu import free_port

ETCD = "etcd"
SERVICE_CIDR = "10.0.0.0/24"
READY_TIMEOUT_S = 180.0
# How often the HPA controller reconciles (the default is 15 s): tests see its decisions sooner.
HPA_SYNC_PERIOD = "2s"
# The static users (token file): the admin, and the controller-manager's own identity (the RBAC roles the
# apiserver bootstraps name it); the controllers then run with their own service accounts, as in kubeadm.
ADMIN_USER = "provision-admin"
_CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
# The kubelets of the rig's nodes (group system:nodes, bound to the ClusterRole system:node by
# :meth:`ControlPlane.kubelet_kubeconfig`; RBAC no longer binds that group by itself).
KUBELET_USER = "system:node:rig"
# kube-proxy's user: the apiserver's bootstrap policy binds it to the ClusterRole system:node-proxier.
KUBE_PROXY_USER = "system:kube-proxy"


class ControlPlaneError(ProvisionError):
    """A component did not start or did not become ready; the message shows the tail of its log."""


@dataclass
class Component:
    """One running process of the control plane."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def rss_bytes(self) -> int:
        """The resident set size now (``VmRSS``), 0 once the process is gone."""
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@dataclass
class ControlPlane:
    """A started control plane. :meth:`start` builds it; :meth:`stop` ends every process it started."""

    folder: Path
    server: str
    token: str
    kubelet_token: str
    proxy_token: str
    ca: Path
    kubeconfig: Path
    components: list[Component] = field(default_factory=list)
    started_s: float = 0.0

    @classmethod
    def start(
        cls,
        folder: Path,
        *,
        scheduler: bool = False,
        address: str = "127.0.0.1",
        node_lifecycle: bool = False,
        timeout: float = READY_TIMEOUT_S,
    ) -> ControlPlane:
        """etcd, kube-apiserver and kube-controller-manager (and ``kube-scheduler`` when asked), ready.

        The apiserver listens on ``address`` (default loopback; a simulated cluster's host address, such as
        10.200.K.254, lets its nodes' kubelets reach it), everything else on loopback. ``node_lifecycle``
        runs the node lifecycle controller: with real kubelets (:mod:`provision_sim.k8s.node`) it lifts the
        ``not-ready`` taint a kubelet registers with; without one it would taint and evict the rig's
        heartbeat-less nodes, so it is off by default.

        Ready means: ``/readyz`` of the apiserver answers ok, the controller-manager's ``/healthz`` answers
        ok, and its service-account controller created the ``default`` service account (without which no
        pod is admitted). Builds the binaries first if the cache has none (:func:`build.prepare`).
        """
        began = time.monotonic()
        if not build.is_built():
            build.prepare()
        etcd = _which(ETCD, "etcd-server")
        folder.mkdir(parents=True, exist_ok=True)
        pki = _write_pki(folder / "pki", address)
        token = secrets.token_hex(24)
        manager_token = secrets.token_hex(24)
        kubelet_token = secrets.token_hex(24)
        proxy_token = secrets.token_hex(24)
        tokens = folder / "tokens.csv"
        _write_private(
            tokens,
            f'{token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n'
            f"{manager_token},{_CONTROLLER_MANAGER_USER},{_CONTROLLER_MANAGER_USER}\n"
            f'{kubelet_token},{KUBELET_USER},{KUBELET_USER},"system:nodes"\n'
            f"{proxy_token},{KUBE_PROXY_USER},{KUBE_PROXY_USER}\n",
        )
        ports = {name: free_port() for name in ("etcd", "etcd-peer", "apiserver", "controller-manager")}
        server = f"https://{address}:{ports['apiserver']}"
        plane = cls(
            folder=folder,
            server=server,
            token=token,
            kubelet_token=kubelet_token,
            proxy_token=proxy_token,
            ca=pki / "ca.crt",
            kubeconfig=folder / "kubeconfig",
        )
        _write_kubeconfig(plane.kubeconfig, server, pki / "ca.crt", ADMIN_USER, token)
        manager_kubeconfig = folder / "controller-manager.kubeconfig"
        _write_kubeconfig(manager_kubeconfig, server, pki / "ca.crt", _CONTROLLER_MANAGER_USER, manager_token)
        try:
            etcd_url = f"http://127.0.0.1:{ports['etcd']}"
            peer_url = f"http://127.0.0.1:{ports['etcd-peer']}"
            plane._spawn(
                "etcd",
                [
                    etcd,
                    "--name=rig",
                    f"--data-dir={folder / 'etcd'}",
                    f"--listen-client-urls={etcd_url}",
                    f"--advertise-client-urls={etcd_url}",
                    f"--listen-peer-urls={peer_url}",
                    f"--initial-advertise-peer-urls={peer_url}",
                    f"--initial-cluster=rig={peer_url}",
                    "--log-level=warn",
                ],
            )
            plane._wait("etcd", lambda: _http_ok(f"{etcd_url}/health"), began + timeout)
            plane._spawn(
                "kube-apiserver",
                [
                    str(build.binary("kube-apiserver")),
                    f"--etcd-servers={etcd_url}",
                    f"--bind-address={address}",
                    f"--advertise-address={address}",
                    f"--secure-port={ports['apiserver']}",
                    "--insecure-port=0",
                    f"--cert-dir={folder / 'pki'}",
                    f"--tls-cert-file={pki / 'apiserver.crt'}",
                    f"--tls-private-key-file={pki / 'apiserver.key'}",
                    f"--client-ca-file={pki / 'ca.crt'}",
                    f"--token-auth-file={tokens}",
                    "--authorization-mode=RBAC",
                    f"--service-cluster-ip-range={SERVICE_CIDR}",
                    # No kubelet, no real endpoints: the `kubernetes` Service's endpoints stay unmanaged.
                    "--endpoint-reconciler-type=none",
                    f"--service-account-key-file={pki / 'sa.pub'}",
                    f"--service-account-signing-key-file={pki / 'sa.key'}",
                    "--service-account-issuer=https://kubernetes.default.svc",
                    # Aggregated APIs (an external metrics server) authenticate the apiserver by this client.
                    f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
                    "--requestheader-allowed-names=front-proxy-client",
                    "--requestheader-username-headers=X-Remote-User",
                    "--requestheader-group-headers=X-Remote-Group",
                    "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                    f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
                    f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
                    "--enable-aggregator-routing=false",
                    # A rig node's name does not resolve on the host: reach its kubelet (logs) by address.
                    "--kubelet-preferred-address-types=InternalIP",
                    "--profiling=false",
                ],
            )
            plane._wait("kube-apiserver", lambda: plane._get_ok("/readyz"), began + timeout)
            plane._spawn(
                "kube-controller-manager",
                [
                    str(build.binary("kube-controller-manager")),
                    f"--kubeconfig={manager_kubeconfig}",
                    f"--authentication-kubeconfig={manager_kubeconfig}",
                    f"--authorization-kubeconfig={manager_kubeconfig}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={ports['controller-manager']}",
                    "--port=0",
                    f"--cert-dir={folder / 'pki'}",
                    "--leader-elect=false",
                    "--use-service-account-credentials=true",
                    f"--service-account-private-key-file={pki / 'sa.key'}",
                    f"--root-ca-file={pki / 'ca.crt'}",
                    # Without kubelets no node sends heartbeats: the node lifecycle controller would taint
                    # and evict the rig's nodes.
                    "--controllers=*" if node_lifecycle else "--controllers=*,-nodelifecycle",
                    f"--horizontal-pod-autoscaler-sync-period={HPA_SYNC_PERIOD}",
                    "--profiling=false",
                ],
            )
            manager_health = f"https://127.0.0.1:{ports['controller-manager']}/healthz"
            plane._wait(
                "kube-controller-manager", lambda: _http_ok(manager_health, verify=False), began + timeout
            )
            plane._wait(
                "kube-controller-manager",
                lambda: plane._get_ok("/api/v1/namespaces/default/serviceaccounts/default"),
                began + timeout,
            )
            if scheduler:
                scheduler_kubeconfig = folder / "kubeconfig"  # the scheduler needs no narrower identity here
                plane._spawn(
                    "kube-scheduler",
                    [
                        str(build.binary("kube-scheduler")),
                        f"--kubeconfig={scheduler_kubeconfig}",
                        "--bind-address=127.0.0.1",
                        f"--secure-port={free_port()}",
                        "--port=0",
                        "--leader-elect=false",
                    ],
                )
        except BaseException:
            plane.stop()
            raise
        plane.started_s = time.monotonic() - began
        return plane

    # ----------------------------------------------------------------------------------------- use

    def client(self, timeout: float = 30.0) -> httpx.Client:
        """An HTTPS client of the apiserver as the admin (the CA checked, the token sent)."""
        return httpx.Client(
            base_url=self.server,
            verify=ssl.create_default_context(cafile=str(self.ca)),
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=timeout,
        )

    def kubelet_kubeconfig(self, path: Path, ca: str) -> None:
        """A kubeconfig for a node's kubelet at ``path`` (on the controller), naming the CA as ``ca`` (where
        the node will find a copy of :attr:`ca`); binds the group ``system:nodes`` to the ClusterRole
        ``system:node`` first (once)."""
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "provision-rig-nodes"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:node",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}],
        }
        with self.client() as http:
            made = http.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", json=binding)
            if made.status_code not in (201, 409):
                raise ControlPlaneError(f"could not bind system:nodes to system:node: {made.text}")
        _write_kubeconfig(path, self.server, Path(ca), KUBELET_USER, self.kubelet_token)

    def kube_proxy_kubeconfig(self, path: Path, ca: str) -> None:
        """A kubeconfig for a node's kube-proxy at ``path``, naming the CA as ``ca`` (as
        :meth:`kubelet_kubeconfig`); its user is bound to ``system:node-proxier`` by the bootstrap policy."""
        _write_kubeconfig(path, self.server, Path(ca), KUBE_PROXY_USER, self.proxy_token)

    def rss_bytes(self) -> dict[str, int]:
        """Resident memory of each running component, by name."""
        return {component.name: component.rss_bytes() for component in self.components}

    def pids(self) -> dict[str, int]:
        return {component.name: component.pid for component in self.components}

    def stop(self, timeout: float = 20.0) -> list[str]:
        """SIGTERM each component's process group, newest first, then SIGKILL what is left.

        Returns warnings (a component that had to be killed); an empty list when all ended on SIGTERM.
        """
        warnings: list[str] = []
        for component in reversed(self.components):
            process = component.process
            if process.poll() is None:
                _signal_group(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    _signal_group(process.pid, signal.SIGKILL)
                    process.wait(timeout=timeout)
                    warnings.append(f"{component.name} (pid {process.pid}) ignored SIGTERM: killed")
        self.components.clear()
        return warnings

    # ----------------------------------------------------------------------------------------- internals

    def _spawn(self, name: str, argv: Sequence[str]) -> None:
        log = self.folder / f"{name}.log"
        with log.open("ab") as output:
            process = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                cwd=self.folder,
                start_new_session=True,  # its own process group, which stop() signals
            )
        self.components.append(Component(name=name, process=process, log=log))

    def _wait(self, name: str, ready: Callable[[], bool], deadline: float) -> None:
        component = next(c for c in self.components if c.name == name)
        while True:
            if component.process.poll() is not None:
                raise ControlPlaneError(
                    f"{name} exited with {component.process.returncode} while starting "
                    f"(log {component.log}):\n{component.log_tail()}"
                )
            if ready():
                return
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"{name} not ready in time (log {component.log}):\n{component.log_tail()}"
                )
            time.sleep(0.5)

    def _get_ok(self, path: str) -> bool:
        try:
            with self.client(timeout=5.0) as http:
                return http.get(path).status_code == 200
        except httpx.HTTPError:
            return False


def _http_ok(url: str, *, verify: bool = True) -> bool:
    try:
        return httpx.get(url, timeout=5.0, verify=verify).status_code == 200
    except httpx.HTTPError:
        return False


def _signal_group(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signum)


def _which(program: str, package: str) -> str:
    for folder in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep):
        candidate = Path(folder) / program
        if os.access(candidate, os.X_OK):
            return str(candidate)
    raise EnvironmentProblem(f"{program} is missing: install Debian's {package} (make deps)")


def _write_private(path: Path, text: str | bytes) -> None:
    data = text.encode() if isinstance(text, str) else text
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _write_kubeconfig(path: Path, server: str, ca: Path, user: str, token: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "rig", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "rig", "context": {"cluster": "rig", "user": user}}],
        "current-context": "rig",
    }
    _write_private(path, yaml.safe_dump(config, sort_keys=False))


# --------------------------------------------------------------------------------------------- PKI


def _write_pki(pki: Path, address: str = "127.0.0.1") -> Path:
    """The control plane's CA and certificates, and the service-account key pair, written to ``pki``."""
    pki.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _certificate("provision-rig-ca", None, ca=True)
    _write_pair(pki, "ca", ca_key, ca_cert)
    names: list[x509.GeneralName] = [
        x509.DNSName(name)
        for name in ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
    ]
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in sorted({"127.0.0.1", address})]
    # The `kubernetes` Service's cluster IP: the first address of the service range.
    names += [x509.IPAddress(ipaddress.IPv4Network(SERVICE_CIDR)[1])]
    key, cert = _certificate(
        "kube-apiserver", (ca_key, ca_cert), sans=names, usage=ExtendedKeyUsageOID.SERVER_AUTH
    )
    _write_pair(pki, "apiserver", key, cert)
    proxy_ca_key, proxy_ca_cert = _certificate("provision-rig-front-proxy-ca", None, ca=True)
    _write_pair(pki, "front-proxy-ca", proxy_ca_key, proxy_ca_cert)
    key, cert = _certificate(
        "front-proxy-client", (proxy_ca_key, proxy_ca_cert), usage=ExtendedKeyUsageOID.CLIENT_AUTH
    )
    _write_pair(pki, "front-proxy-client", key, cert)
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_private(pki / "sa.key", _key_pem(sa_key))
    (pki / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki


def _certificate(
    common_name: str,
    issuer: tuple[ec.EllipticCurvePrivateKey, x509.Certificate] | None,
    *,
    ca: bool = False,
    sans: Sequence[x509.GeneralName] = (),
    usage: x509.ObjectIdentifier | None = None,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    signer_key, issuer_name = (key, subject) if issuer is None else (issuer[0], issuer[1].subject)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return key, builder.sign(signer_key, hashes.SHA256())


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write_pair(pki: Path, name: str, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
    _write_private(pki / f"{name}.key", _key_pem(key))
    (pki / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
