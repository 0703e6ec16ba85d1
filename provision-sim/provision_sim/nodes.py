"""One simulated node: a copy-on-write root filesystem, booted by real systemd in its own network namespace.

Life of a node (driven by :mod:`provision_sim.cluster`)::

    prepare()   upper layer gets the node's identity (hostname, host key, authorized key, machine-id),
                its OS flavour and its simulated hardware config; then the overlayfs is mounted:
                lower = shared base rootfs (read-only), upper = this node's changes
    start()     launches the supervisor (``provision_sim.supervisor``), which runs
                ``systemd-nspawn --boot`` in the node's network namespace (its NPU fabric namespace
                bound at /run/provision-sim/npu-netns) and boots it again on reboot
    ...         the node runs sshd; Ansible reaches it over SSH like any server
    stop()      SIGTERM to the supervisor → systemd-nspawn asks the node's systemd to power off
    kill()      after a grace period: SIGKILL to the node's init (ends every process in the node),
                then to systemd-nspawn and the supervisor — only PIDs we recorded, checked by start time
    power_loss() ``provision sim power NODE off --hard``: the supervisor, then the node's init (its whole
                PID namespace ends at once), then anything left in the node's cgroups
    mount()+start() ``power on``: the same root (upper layer kept) booted again by a new supervisor
    unmount()   the overlayfs goes (and remove_cgroups() the node's cgroups); the node's files stay in
                ``upper/`` until the cluster folder is removed

Files in the node folder (``<cluster>/nodes/<name>/``): ``upper/ work/ root/`` (overlayfs), ``console.log``
(boot messages), ``supervisor.pid``, ``nspawn.pid``, ``boots``.
"""

from __future__ import annotations

import importlib
import os
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from provision.errors import ProvisionError
from provision_sim import cgroups, flavours, network
from provision_sim.system import ProcessRef, read_ref, run

DEFAULT_NPU_NETNS = "/run/provision-sim/npu-netns"


@dataclass(frozen=True)
class Node:
    cluster: str
    name: str
    number: int
    """1-based position in the cluster; the address and the hardware config derive from it."""
    flavour: str
    ip: str
    npus: int
    dir: Path
    model: str = "910B3"
    """The simulated NPUs' npu-smi Name (``910B3``, ``Ascend910`` = Atlas A3, ``310P3`` = Atlas 300I Duo)."""
    layers: tuple[str, ...] = ()
    """Read-only layers between the node's own and the base rootfs, top first: a converged node's snapshot
    (:mod:`provision_sim.snapshot`)."""

    @property
    def netns(self) -> str:
        return f"psim-{self.cluster}-{self.name}"

    @property
    def npu_netns(self) -> str:
        """The namespace of the node's simulated NPU ports (the NPU fabric), when the hardware has one."""
        return f"psim-{self.cluster}-{self.name}-npu"

    @property
    def npu_port(self) -> str:
        """The fabric end of the NPU namespace's veth, inside the controller namespace."""
        return f"{self.name}-npu"

    @property
    def machine(self) -> str:
        """systemd-nspawn's machine name, unique on the host (several clusters have a ``node1``)."""
        return f"psim-{self.cluster}-{self.name}"

    @property
    def bridge_port(self) -> str:
        """The host end of the node's veth, inside the controller namespace."""
        return self.name

    @property
    def root(self) -> Path:
        """The node's filesystem as the host sees it while the node is up (the overlayfs mount point)."""
        return self.dir / "root"

    @property
    def upper(self) -> Path:
        """Everything the node changed relative to the base rootfs."""
        return self.dir / "upper"

    @property
    def work(self) -> Path:
        return self.dir / "work"

    @property
    def console_log(self) -> Path:
        return self.dir / "console.log"

    @property
    def boots(self) -> int:
        """How many times the node has been booted (1 after ``up``, +1 per reboot)."""
        try:
            return int((self.dir / "boots").read_text())
        except (FileNotFoundError, ValueError):
            return 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "number": self.number,
            "flavour": self.flavour,
            "ip": self.ip,
            "npus": self.npus,
            "model": self.model,
            "layers": list(self.layers),
        }

    @classmethod
    def from_dict(cls, cluster: str, cluster_dir: Path, data: dict[str, Any]) -> Node:
        name = str(data["name"])
        return cls(
            cluster=cluster,
            name=name,
            number=int(data["number"]),
            flavour=str(data["flavour"]),
            ip=str(data["ip"]),
            npus=int(data["npus"]),
            dir=cluster_dir / "nodes" / name,
            model=str(data.get("model", "910B3")),
            layers=tuple(str(layer) for layer in data.get("layers", [])),
        )


@dataclass(frozen=True)
class KeyPair:
    private_openssh: str
    public_line: str
    """``ssh-ed25519 AAAA...``"""


def new_key_pair(comment: str) -> KeyPair:
    """A fresh ed25519 key in OpenSSH format (no subprocess: 10 nodes need 10 host keys quickly)."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return KeyPair(private, f"{public.decode()} {comment}")


def prepare(node: Node, base: Path, *, host_key: KeyPair, authorized_key: str, hosts: str) -> None:
    """Write the node's identity, flavour and hardware config into its upper layer, then mount its root."""
    for folder in (node.upper, node.work, node.root):
        folder.mkdir(parents=True, exist_ok=True)
    _write(node.upper, base, "/etc/hostname", f"{node.name}\n")
    _write(node.upper, base, "/etc/hosts", hosts)
    _write(node.upper, base, "/etc/machine-id", secrets.token_hex(16) + "\n")
    _write(node.upper, base, "/etc/ssh/ssh_host_ed25519_key", host_key.private_openssh, mode=0o600)
    _write(node.upper, base, "/etc/ssh/ssh_host_ed25519_key.pub", host_key.public_line + "\n")
    _write(node.upper, base, "/root/.ssh/authorized_keys", authorized_key + "\n", mode=0o600)
    (node.upper / "root/.ssh").chmod(0o700)
    flavours.apply_flavour(node.upper, base, flavours.FLAVOURS[node.flavour])
    _write_hardware_config(node)
    mount(node, base)


def mount(node: Node, base: Path) -> None:
    """Mount the node's root: the shared base (read-only), and a snapshot's layer where the node has one,
    under the node's own changes."""
    lower = ":".join([*node.layers, str(base)])
    options = f"lowerdir={lower},upperdir={node.upper},workdir={node.work}"
    if any(char in str(path) for path in (base, node.dir, *node.layers) for char in ",:"):
        raise ProvisionError(f"paths for overlayfs must not contain ',' or ':': {options}")
    run(["mount", "-t", "overlay", "overlay", "-o", options, str(node.root)])


def _write(upper: Path, base: Path, path: str, content: str, mode: int = 0o644) -> None:
    target = flavours.in_layer(upper, base, path)
    target.unlink(missing_ok=True)
    target.write_text(content)
    target.chmod(mode)


def hardware_module() -> object | None:
    """The simulated NPU hardware (``provision_sim.hardware``), or ``None`` where it is not installed."""
    try:
        return importlib.import_module("provision_sim.hardware")
    except ModuleNotFoundError as exc:
        if exc.name != "provision_sim.hardware":
            raise
        return None


def _write_hardware_config(node: Node) -> None:
    """Let the simulated NPU hardware configure this node (``/etc/provision-sim/hardware.json``)."""
    write: Callable[..., None] | None = getattr(hardware_module(), "write_node_config", None)
    if write is not None:
        write(node.upper, name=node.name, index=node.number, npus=node.npus, model=node.model)


def _npu_netns_binding(node: Node) -> list[str]:
    """Show the node's NPU fabric namespace inside it, where ``hccn_tool`` looks for it."""
    if not network.netns_exists(node.npu_netns):
        return []
    inside = str(getattr(hardware_module(), "NPU_NETNS", DEFAULT_NPU_NETNS))
    return [f"--bind-ro={network.netns_path(node.npu_netns)}:{inside}"]


DATA_DISKS = ("/var/lib/docker", "/var/lib/containers", "/var/lib/containerd")
"""Folders a server keeps on a real data disk: container engines' storage (docker's, podman's, and
containerd's for a kubelet). The node root (overlayfs) cannot be an overlay upper layer, so each node gets
these as plain host folders."""


def _data_disk_binds(node: Node) -> list[str]:
    binds = []
    for inside in DATA_DISKS:
        outside = node.dir / "disks" / inside.strip("/").replace("/", "-")
        outside.mkdir(parents=True, exist_ok=True)
        binds.append(f"--bind={outside}:{inside}")
    return binds


def nspawn_command(node: Node, binds: Sequence[str] = ()) -> list[str]:
    return [
        # systemd-nspawn runs *inside* the node's namespace instead of joining it with
        # --network-namespace-path: with that option nspawn 252 mounts the node's /sys in the host's
        # namespace, and /sys/class/net (hence Ansible's interface facts) would show the host's interfaces.
        "nsenter",
        f"--net={network.netns_path(node.netns)}",
        "--",
        "systemd-nspawn",
        "--boot",
        # No systemd on the host to register with; the node's systemd manages its own cgroup subtree.
        "--register=no",
        "--keep-unit",
        "--settings=false",
        f"--directory={node.root}",
        f"--machine={node.machine}",
        f"--hostname={node.name}",
        # What a container engine inside the node needs (podman/docker: keyrings, bpf, all capabilities).
        "--capability=all",
        "--system-call-filter=@keyring",
        "--system-call-filter=bpf",
        "--resolv-conf=off",
        "--timezone=off",
        "--link-journal=no",
        "--console=read-only",
        *_npu_netns_binding(node),
        *cgroups.node_binds(node.machine),
        *_data_disk_binds(node),
        *(f"--bind-ro={bind}" for bind in binds),
    ]


def nspawn_environment() -> dict[str, str]:
    """The environment systemd-nspawn starts with: the host's, plus a writable ``/proc/sys/net``.

    nspawn mounts ``/proc/sys`` read-only, and makes ``/proc/sys/net`` writable only for a network namespace
    it creates itself; ours is created beforehand (see :func:`nspawn_command`), so it is asked to with
    ``SYSTEMD_NSPAWN_API_VFS_WRITABLE=network``. A server's root daemons write their network settings there
    (dockerd turns on ``net.ipv4.ip_forward``, and exits when it cannot); without this a node would only work
    on a host whose own values happen to be right, since a new namespace copies the host's IPv4 settings.
    The namespace is the node's alone, so nothing it writes reaches the host.
    """
    return {**os.environ, "SYSTEMD_NSPAWN_API_VFS_WRITABLE": "network"}


def start(node: Node, binds: Sequence[str] = ()) -> ProcessRef:
    """Launch the node's supervisor in its own session (it outlives the ``provision`` command).

    ``binds`` (``SRC:DST``) are mounted read-only into the node, on every boot.
    """
    with node.console_log.open("ab") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "provision_sim.supervisor",
                str(node.dir),
                node.machine,
                "--",
                *nspawn_command(node, binds),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd="/",
            env=nspawn_environment(),
            start_new_session=True,
        )
    ref = ProcessRef.of(process.pid)
    if ref is None:
        raise ProvisionError(f"{node.name}: the supervisor exited at once; see {node.console_log}")
    (node.dir / "supervisor.pid").write_text(ref.dump())
    return ref


def supervisor(node: Node) -> ProcessRef | None:
    return read_ref(node.dir / "supervisor.pid")


def nspawn(node: Node) -> ProcessRef | None:
    return read_ref(node.dir / "nspawn.pid")


def init_process(node: Node) -> ProcessRef | None:
    """The node's PID 1 (systemd), seen from the host; ``None`` when the node is not running.

    Found as systemd-nspawn's child, or — when systemd-nspawn is gone but the node is not (it was killed
    alone: its container lives on) — as the process of the node's cgroups that is PID 1 of its own PID
    namespace.
    """
    runner = nspawn(node)
    if runner is not None and runner.alive():
        children = runner.children()
        if children:
            return children[0]
    for pid in sorted(cgroups.pids(node.machine)):
        if _namespace_pids(pid)[1:] == [1]:
            return ProcessRef.of(pid)
    return None


def _namespace_pids(pid: int) -> list[int]:
    """``NSpid`` of /proc/PID/status: the PID in the host's namespace, then in each nested one."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return [int(word) for word in line.split()[1:]]
    except (OSError, ValueError):
        pass
    return []


def processes(node: Node) -> list[ProcessRef]:
    """The processes we started for this node that are still alive."""
    candidates = [init_process(node), nspawn(node), supervisor(node)]
    return [ref for ref in candidates if ref is not None and ref.alive()]


def any_process(node: Node) -> bool:
    """Whether anything of the node still runs: ours, or any process left in its cgroups."""
    return bool(processes(node)) or bool(cgroups.pids(node.machine))


POWEROFF_SIGNAL = signal.SIGRTMIN + 4
"""What systemd takes as a poweroff request (systemd(1): SIGRTMIN+4 starts poweroff.target)."""


def stop(node: Node) -> None:
    """Ask for a clean poweroff (the supervisor passes SIGTERM on to systemd-nspawn)."""
    sup = supervisor(node)
    if sup is not None and sup.alive():
        sup.signal(signal.SIGTERM)
        return
    runner = nspawn(node)  # the supervisor is gone but the node is not
    if runner is not None and runner.alive():
        runner.signal(signal.SIGTERM)
        return
    init = init_process(node)  # systemd-nspawn is gone too: ask the node's systemd itself
    if init is not None:
        init.signal(POWEROFF_SIGNAL)


def kill(node: Node) -> None:
    """SIGKILL the node's init first (that ends every process in the node), then nspawn and supervisor."""
    for ref in (init_process(node), nspawn(node), supervisor(node)):
        if ref is not None:
            ref.signal(signal.SIGKILL)


def power_loss(node: Node) -> None:
    """A hard power-off: the node's whole PID namespace ends at once, with nothing to boot it again.

    The supervisor goes first (it would boot the node again), then the node's PID 1 — the kernel ends
    every other process of a PID namespace when its init dies, so no unit, sshd or container of the node
    gets to run a line more — then systemd-nspawn, and any straggler of the node's cgroups.
    """
    init, runner, sup = init_process(node), nspawn(node), supervisor(node)
    for ref in (sup, init, runner):
        if ref is not None:
            ref.signal(signal.SIGKILL)
    for pid in cgroups.pids(node.machine):
        ref = ProcessRef.of(pid)
        if ref is not None:
            ref.signal(signal.SIGKILL)


def reap(node: Node) -> None:
    sup = supervisor(node)
    if sup is not None:
        sup.reap()


def mounted(node: Node) -> bool:
    return f" {node.root} overlay " in Path("/proc/mounts").read_text()


def remove_cgroups(node: Node) -> list[Path]:
    """Remove the node's cgroups once it is down; returns any that could not be removed."""
    return cgroups.remove(node.machine)


def unmount(node: Node) -> None:
    if not mounted(node):
        return
    if run(["umount", str(node.root)], check=False).returncode != 0:
        run(["umount", "--lazy", str(node.root)])


def ssh_ready(node: Node, timeout: float = 0.5) -> bool:
    """True when the node's sshd answers with its banner."""
    try:
        with socket.create_connection((node.ip, 22), timeout=timeout) as conn:
            conn.settimeout(timeout)
            return conn.recv(8).startswith(b"SSH-")
    except OSError:
        return False


BOOTING_S = 120.0
"""A node whose boot started less than this long ago and whose sshd does not answer yet is booting."""


def state(node: Node) -> str:
    """What the node's processes say, never a recorded flag:

    ``running`` (sshd answers), ``booting`` (its systemd-nspawn started less than :data:`BOOTING_S` ago,
    no sshd yet), ``unreachable`` (processes of the node run, sshd does not answer) or ``stopped``
    (nothing of the node runs).
    """
    if not any_process(node):
        return "stopped"
    if ssh_ready(node):
        return "running"
    runner = nspawn(node)
    if runner is not None and runner.alive() and runner.age() < BOOTING_S:
        return "booting"
    return "unreachable"


def exec_in(
    node: Node, argv: Sequence[str], *, timeout: float | None = 60
) -> subprocess.CompletedProcess[str]:
    """Run a command inside the running node (all its namespaces), without SSH. For tests and debugging."""
    init = init_process(node)
    if init is None:
        raise ProvisionError(f"{node.name} is not running")
    return subprocess.run(
        ["nsenter", f"--target={init.pid}", "--all", "--", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
