"""A real Kubernetes node inside a simulated one: kubelet, containerd, CNI and the simulated device plugin.

The rig's control plane (:mod:`provision_sim.k8s.controlplane`) admits objects and runs the controllers;
this module gives it a node that runs pods. On a simulated node whose container runtime stage ran (Debian's
containerd and runc, installed by ``provision apply -p container_runtime`` from the cluster's mirror):

- **kubelet** 1.20.2, built with the control plane (:mod:`provision_sim.k8s.build`), copied to
  ``/usr/local/bin/kubelet`` and run by a systemd unit against containerd's CRI socket, with a kubeconfig of
  the ``system:nodes`` group and the plane's CA (``--node-ip`` the node's cluster address);
- **containerd's CRI** configured as a site does it for Kubernetes: the sandbox image, Debian's CNI folders,
  and the images imported with ``ctr -n k8s.io images import`` from tarballs, as an air-gapped site loads
  them (no registry: every pod's ``imagePullPolicy`` must find its image there);
- **CNI**: Debian's ``containernetworking-plugins`` (``bridge``, ``host-local``, ``portmap``, ``loopback``)
  with one pod subnet per node (``10.244.<n>.0/24``);
- the **pause image** built from the same source tree (``build/pause/linux/pause.c``, ``gcc -static`` as
  its Makefile does) and tagged ``k8s.gcr.io/pause:3.4`` (the tree's ``TAG``);
- **kube-proxy** 1.20.2 from the same build, ``iptables`` mode, so that Services route to the node's pods;
- the **simulated Ascend device plugin** (:mod:`provision_sim.k8s.device_plugin`), run on the host against
  the node's ``/var/lib/kubelet/device-plugins``, registered once the kubelet listens.

The network an overlay (flannel, Calico) would give, and what stands in for it: flannel's two ``FORWARD``
accepts for the pod network inside the node (docker, which the container runtime stage set up, makes that
chain's policy ``DROP``), and on the host routes to the node's pod subnet and to the Service network through
the node's address, so that tests, Prometheus and ``provision bench`` on the host reach pods and ClusterIPs.

What a systemd-nspawn node does not give a kubelet, and what stands in for it (each kept inside the node):

- ``/proc/sys`` is read-only, and the kubelet's container manager sets ``vm.overcommit_memory=1``,
  ``kernel.panic=10``, ``kernel.panic_on_oops=1`` and stops when it cannot. A script run before the kubelet
  bind-mounts a file holding the wanted value over each of them that differs: the kubelet reads what it
  would have written; the host's kernel is not touched.
- ``CAP_SYS_RESOURCE`` is not in the node's bounding set, so runc cannot lower a sandbox's
  ``oom_score_adj``: containerd's ``restrict_oom_score_adj`` (its setting for exactly this) keeps it at
  the caller's.
- No ``/dev/kmsg``: it links to ``/dev/console`` (the kubelet's OOM watcher reads it).
- No cgroup hierarchy of its own to manage: ``--cgroups-per-qos=false``, ``--enforce-node-allocatable=``,
  ``--cgroup-driver=cgroupfs``; and ``--fail-swap-on=false`` (the host's swap is the node's).
- containerd's overlayfs snapshots cannot live on the node's overlayfs root: ``/var/lib/containerd`` is one
  of the node's data disks (:data:`provision_sim.nodes.DATA_DISKS`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.errors import EnvironmentProblem, ProvisionError
from provision_sim import images
from provision_sim.cluster import Cluster
from provision_sim.k8s import build, device_plugin
from provision_sim.k8s.controlplane import SERVICE_CIDR, ControlPlane

PAUSE_IMAGE = "k8s.gcr.io/pause:3.4"
"""The sandbox image: ``build/pause`` of the 1.20.2 tree (``TAG = 3.4``), as its Makefile builds it."""
CNI_PACKAGE = "containernetworking-plugins"
POD_NETWORK = ipaddress.ip_network("10.244.0.0/16")
"""Pod subnets: node number N gets ``10.244.N.0/24`` (host-local IPAM on the node's ``cni0`` bridge)."""
READY_TIMEOUT_S = 120.0

KUBELET = "/usr/local/bin/kubelet"
KUBELET_UNIT = "kubelet.service"
KUBE_PROXY = "/usr/local/bin/kube-proxy"
KUBE_PROXY_UNIT = "kube-proxy.service"
SERVICE_NETWORK = ipaddress.ip_network(SERVICE_CIDR)
KERNEL_FLAGS_SCRIPT = "/usr/local/libexec/provision-rig/kernel-flags"
KERNEL_FLAGS = {"vm/overcommit_memory": 1, "kernel/panic": 10, "kernel/panic_on_oops": 1}
"""What the kubelet's container manager sets (``setupKernelTunables``: the others it checks are already
the kernel's defaults)."""

CONTAINERD_CONFIG = f"""\
# Debian's containerd configuration, with what a Kubernetes node adds (written by provision's test rig).
version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "{PAUSE_IMAGE}"
    # runc cannot lower oom_score_adj without CAP_SYS_RESOURCE, which a systemd-nspawn node lacks
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.internal.v1.opt"]
    path = "/var/lib/containerd/opt"
"""


class NodeError(ProvisionError):
    """The node could not be prepared or did not become Ready; the message carries the kubelet's words."""


# ------------------------------------------------------------------------------------ the cached parts


@dataclass(frozen=True)
class NodeParts:
    """What every rig node gets besides kubelet: the pause image's tarball and the CNI plugins."""

    pause_image: Path
    cni_dir: Path


def parts_dir() -> Path:
    return build.build_dir() / "node"


def node_parts() -> NodeParts:
    """Build (once, cached beside the binaries) the pause image and fetch Debian's CNI plugins."""
    folder = parts_dir()
    parts = NodeParts(folder / "pause.tar", folder / "cni")
    if parts.pause_image.is_file() and (parts.cni_dir / "bridge").is_file():
        return parts
    folder.mkdir(parents=True, exist_ok=True)
    with build.locked(folder / ".lock"):
        if not parts.pause_image.is_file():
            _build_pause(parts.pause_image)
        if not (parts.cni_dir / "bridge").is_file():
            _fetch_cni(parts.cni_dir)
    return parts


def _build_pause(dest: Path) -> None:
    gcc = shutil.which("gcc")
    if gcc is None:
        raise EnvironmentProblem("gcc is missing: install Debian's gcc and libc6-dev (make deps)")
    tarball = build.orig_tarball()
    with tempfile.TemporaryDirectory(prefix="pause-") as tmp, tarfile.open(tarball) as tree:
        member = next((m for m in tree.getmembers() if m.name.endswith("/build/pause/linux/pause.c")), None)
        if member is None:
            raise NodeError(f"{tarball} holds no build/pause/linux/pause.c")
        source = Path(tmp) / "pause.c"
        extracted = tree.extractfile(member)
        assert extracted is not None  # a regular file member
        source.write_bytes(extracted.read())
        binary = Path(tmp) / "pause"
        version = PAUSE_IMAGE.rsplit(":", 1)[1]
        build.run_step(
            [
                gcc,
                "-Os",
                "-Wall",
                "-Werror",
                "-static",
                f"-DVERSION=v{version}",
                "-o",
                str(binary),
                str(source),
            ],
            "compile pause.c (gcc -static)",
        )
        build.run_step(["strip", str(binary)], "strip pause")
        layer = images.Layer.from_entries([images.Entry("/pause", data=binary.read_bytes(), mode=0o755)])
        partial = dest.with_suffix(".tmp")
        images.save_image(partial, PAUSE_IMAGE, [layer], images.ImageConfig(env={}, entrypoint=["/pause"]))
        partial.replace(dest)


def _fetch_cni(dest: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="cni-") as tmp:
        build.run_step(
            ["apt-get", "download", CNI_PACKAGE],
            f"download Debian's {CNI_PACKAGE} (apt-get download)",
            cwd=Path(tmp),
        )
        [deb] = Path(tmp).glob(f"{CNI_PACKAGE}_*.deb")
        unpacked = Path(tmp) / "tree"
        build.run_step(["dpkg-deb", "-x", str(deb), str(unpacked)], f"unpack {deb.name}")
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(unpacked / "usr" / "lib" / "cni", dest)


# ------------------------------------------------------------------------------------------ the node


@dataclass
class KubeNode:
    """One simulated node joined to a :class:`ControlPlane`, its kubelet Ready and its NPUs advertised."""

    cluster: Cluster
    name: str
    ip: str
    pod_subnet: str
    plugin: device_plugin.Running | None = None
    images: list[str] = field(default_factory=list)
    routes: list[str] = field(default_factory=list)

    @classmethod
    def join(
        cls,
        cluster: Cluster,
        name: str,
        plane: ControlPlane,
        *,
        image_tarballs: Sequence[Path] = (),
        ascend_docker: bool = False,
        timeout: float = READY_TIMEOUT_S,
    ) -> KubeNode:
        """Make ``name`` a Kubernetes node of ``plane``: configure, import the images, start the kubelet,
        wait for the node to be Ready, then start and register the device plugin and wait for the NPUs
        in the node's allocatable resources. ``ascend_docker=False`` (the node's containerd has no Ascend
        runtime) has the plugin hand out the device nodes itself."""
        node = cluster.node(name)
        subnet = str(list(POD_NETWORK.subnets(new_prefix=24))[node.number])
        kube = cls(cluster, name, node.ip, subnet)
        parts = node_parts()
        root = node.root
        kube._write(root, parts, plane)
        kube._sh("systemctl restart containerd", "restart containerd with the CRI configuration")
        for tarball in [parts.pause_image, *image_tarballs]:
            kube.import_image(tarball)
        kube._sh(f"systemctl daemon-reload && systemctl enable --now {KUBELET_UNIT}", "start the kubelet")
        deadline = time.monotonic() + timeout
        kube._wait(plane, deadline, "Ready", lambda n: _condition(n, "Ready") == "True")
        kube._sh(f"systemctl enable --now {KUBE_PROXY_UNIT}", "start kube-proxy")
        kube._until_proxying(deadline)
        kube._forward_pod_network()
        kube._route_from_host()
        kube.plugin = kube._start_plugin(root, ascend_docker, deadline)
        resource = kube.plugin.plugin.resource
        kube._wait(plane, deadline, f"{resource} allocatable", lambda n: resource in _allocatable(n))
        return kube

    def import_image(self, tarball: Path) -> None:
        """Import a ``docker save`` tarball into containerd's ``k8s.io`` namespace (``ctr images import``),
        from a copy in the node that is removed after."""
        inside = f"/var/tmp/provision-rig-{tarball.name}"  # not a data disk: the host sees it in the root
        target = self.cluster.node(self.name).root / inside.lstrip("/")
        shutil.copyfile(tarball, target)
        try:
            done = self._sh(f"ctr -n k8s.io images import {inside}", f"import {tarball.name}", timeout=600)
        finally:
            target.unlink(missing_ok=True)
        self.images += [line.split()[1] for line in done.stdout.splitlines() if line.startswith("unpacking ")]

    def journal(self, unit: str = KUBELET_UNIT, lines: int = 40) -> str:
        done = self.cluster.exec(self.name, ["journalctl", "-u", unit, "--no-pager", "-n", str(lines)])
        return done.stdout

    def leave(self) -> None:
        """Stop the device plugin, the kubelet and kube-proxy (the node's pods stay until the node stops),
        and remove the host's routes to the node's networks."""
        for route in self.routes:
            subprocess.run(["ip", "route", "del", *route.split()], capture_output=True, check=False)
        self.routes = []
        if self.plugin is not None:
            self.plugin.stop()
            self.plugin = None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.cluster.exec(self.name, ["systemctl", "stop", KUBELET_UNIT, KUBE_PROXY_UNIT], timeout=60)

    # -- steps ------------------------------------------------------------------------------------------

    def _write(self, root: Path, parts: NodeParts, plane: ControlPlane) -> None:
        def put(path: str, text: str, mode: int = 0o644) -> None:
            target = root / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            target.chmod(mode)

        kubelet = root / KUBELET.lstrip("/")
        kubelet.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(build.binary("kubelet"), kubelet)
        kubelet.chmod(0o755)
        cni = root / "usr/lib/cni"
        shutil.rmtree(cni, ignore_errors=True)
        shutil.copytree(parts.cni_dir, cni)
        put("/etc/containerd/config.toml", CONTAINERD_CONFIG)
        put("/etc/cni/net.d/10-rig.conflist", json.dumps(_cni_config(self.pod_subnet), indent=2) + "\n")
        put("/etc/kubernetes/pki/ca.crt", plane.ca.read_text())
        plane.kubelet_kubeconfig(root / "etc/kubernetes/kubelet.conf", "/etc/kubernetes/pki/ca.crt")
        proxy = root / KUBE_PROXY.lstrip("/")
        shutil.copyfile(build.binary("kube-proxy"), proxy)
        proxy.chmod(0o755)
        plane.kube_proxy_kubeconfig(root / "etc/kubernetes/kube-proxy.conf", "/etc/kubernetes/pki/ca.crt")
        put(f"/etc/systemd/system/{KUBE_PROXY_UNIT}", _kube_proxy_unit(self.name, self.ip))
        put(KERNEL_FLAGS_SCRIPT, _kernel_flags_script(), 0o755)
        put(f"/etc/systemd/system/{KUBELET_UNIT}", _kubelet_unit(self.name, self.ip))

    def _until_proxying(self, deadline: float) -> None:
        """kube-proxy has synced the Services into iptables once its KUBE-SERVICES chain exists."""
        while True:
            done = self.cluster.exec(self.name, ["iptables", "-t", "nat", "-S", "KUBE-SERVICES"])
            if done.returncode == 0 and "KUBE-" in done.stdout:
                return
            if time.monotonic() > deadline:
                raise NodeError(f"{self.name}: kube-proxy wrote no rules\n{self.journal(KUBE_PROXY_UNIT)}")
            time.sleep(1.0)

    def _forward_pod_network(self) -> None:
        """Forward the pod network's traffic through the node, as flannel (whose default network this
        is) adds to ``FORWARD``: docker, on every node the container runtime stage set up, makes that
        chain's policy DROP, and kube-proxy accepts only its own marked and established traffic."""
        for rule in (f"-s {POD_NETWORK} -j ACCEPT", f"-d {POD_NETWORK} -j ACCEPT"):
            self._sh(f"iptables -C FORWARD {rule} 2>/dev/null || iptables -A FORWARD {rule}", "forward pods")

    def _route_from_host(self) -> None:
        """The host (where tests, Prometheus and ``provision bench`` run) reaches the node's pods and the
        Service addresses through the node, as a cluster's routers do: kube-proxy's rules on the node
        translate a Service address to a pod's."""
        wanted = [f"{self.pod_subnet} via {self.ip}"]
        present = subprocess.run(
            ["ip", "route", "show", str(SERVICE_NETWORK)], capture_output=True, text=True
        )
        if not present.stdout.strip():
            wanted.append(f"{SERVICE_NETWORK} via {self.ip}")
        for route in wanted:
            done = subprocess.run(["ip", "route", "replace", *route.split()], capture_output=True, text=True)
            if done.returncode != 0:
                raise NodeError(f"{self.name}: ip route replace {route}: {done.stderr.strip()}")
            self.routes.append(route)

    def _start_plugin(self, root: Path, ascend_docker: bool, deadline: float) -> device_plugin.Running:
        while True:  # the kubelet opens its registration socket shortly after it starts
            try:
                return device_plugin.serve(root, ascend_docker=ascend_docker, timeout_s=5.0)
            except device_plugin.PluginError as exc:
                if time.monotonic() > deadline:
                    raise NodeError(f"{self.name}: {exc}\n{self.journal()}") from exc
                time.sleep(1.0)

    def _wait(self, plane: ControlPlane, deadline: float, what: str, check: Any) -> None:
        seen: dict[str, Any] = {}
        with plane.client() as http:
            while time.monotonic() < deadline:
                answer = http.get(f"/api/v1/nodes/{self.name}")
                if answer.status_code == 200:
                    seen = answer.json()
                    if check(seen):
                        return
                time.sleep(1.0)
        status = json.dumps(seen.get("status", {}).get("conditions", "no node object"))[:1500]
        raise NodeError(f"{self.name}: not {what} in time; conditions {status}\n{self.journal()}")

    def _sh(self, command: str, what: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        done = self.cluster.exec(self.name, ["sh", "-c", command], timeout=timeout)
        if done.returncode != 0:
            raise NodeError(f"{self.name}: {what} failed ({command}): {(done.stderr or done.stdout)[-1500:]}")
        return done


def _condition(node: dict[str, Any], kind: str) -> str:
    for condition in node.get("status", {}).get("conditions", []):
        if condition.get("type") == kind:
            return str(condition.get("status"))
    return "Unknown"


def _allocatable(node: dict[str, Any]) -> dict[str, str]:
    return dict(node.get("status", {}).get("allocatable", {}))


def _cni_config(subnet: str) -> dict[str, Any]:
    return {
        "cniVersion": "0.4.0",
        "name": "rig",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": subnet}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def _kernel_flags_script() -> str:
    lines = [
        "#!/bin/sh",
        "# /proc/sys is read-only in a systemd-nspawn node; the kubelet stops when it cannot set these.",
        "# Show it a file holding the value it wants over each one that differs (inside this node only).",
        "set -eu",
        "mkdir -p /run/provision-rig/kernel",
    ]
    for key, value in KERNEL_FLAGS.items():
        name = key.replace("/", ".")
        lines += [
            f'if [ "$(cat /proc/sys/{key})" != {value} ]; then',
            f"    echo {value} > /run/provision-rig/kernel/{name}",
            f"    mount --bind /run/provision-rig/kernel/{name} /proc/sys/{key}",
            "fi",
        ]
    return "\n".join(lines) + "\n"


def _kubelet_unit(name: str, ip: str) -> str:
    flags = [
        "--kubeconfig=/etc/kubernetes/kubelet.conf",
        "--container-runtime=remote",
        "--container-runtime-endpoint=unix:///run/containerd/containerd.sock",
        f"--hostname-override={name}",
        f"--node-ip={ip}",
        "--cgroup-driver=cgroupfs",
        "--cgroups-per-qos=false",
        "--enforce-node-allocatable=",
        "--fail-swap-on=false",
        # The host's disks are shared by every node and test: no eviction on their fill level.
        "--eviction-hard=",
        "--feature-gates=LocalStorageCapacityIsolation=false",
        # The rig's apiserver reaches the kubelet only for logs; no webhook authentication is set up.
        "--authentication-token-webhook=false",
        "--authorization-mode=AlwaysAllow",
        "--v=1",
    ]
    return (
        "[Unit]\n"
        "Description=kubelet (provision test rig)\n"
        "After=containerd.service\n"
        "Requires=containerd.service\n\n"
        "[Service]\n"
        f"ExecStartPre={KERNEL_FLAGS_SCRIPT}\n"
        f"ExecStartPre=/bin/sh -c '[ -e /dev/kmsg ] || ln -s /dev/console /dev/kmsg'\n"
        f"ExecStart={KUBELET} {' '.join(flags)}\n"
        "Restart=always\n"
        "RestartSec=2\n\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def _kube_proxy_unit(name: str, ip: str) -> str:
    flags = [
        "--kubeconfig=/etc/kubernetes/kube-proxy.conf",
        f"--hostname-override={name}",
        f"--bind-address={ip}",
        "--proxy-mode=iptables",
        f"--cluster-cidr={POD_NETWORK}",
        # The conntrack table's size and timeouts are the host kernel's, shared by every node: leave them.
        "--conntrack-max-per-core=0",
        "--conntrack-tcp-timeout-established=0",
        "--conntrack-tcp-timeout-close-wait=0",
        "--metrics-bind-address=127.0.0.1:10249",
        "--healthz-bind-address=127.0.0.1:10256",
        "--v=1",
    ]
    return (
        "[Unit]\n"
        "Description=kube-proxy (provision test rig)\n"
        "After=network-online.target\n\n"
        "[Service]\n"
        f"ExecStart={KUBE_PROXY} {' '.join(flags)}\n"
        "Restart=always\n"
        "RestartSec=2\n\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )
