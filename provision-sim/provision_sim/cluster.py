"""A simulated cluster: N nodes on one private network, plus what Ansible needs to reach them.

``Cluster.up()`` builds it, ``Cluster.load(name)`` finds a running one, ``cluster.down()`` removes every
trace. The cluster folder (``/var/lib/provision-sim/<name>``; the parent folder can be changed with
``$PROVISION_SIM_DIR``) holds::

    cluster.json    nodes, subnet and base rootfs: all that `status` and `down` need
    id_ed25519      the controller's SSH key, authorized for root on every node
    known_hosts     each node's host key, generated and recorded at `up`: host key checking stays on
    inventory.ini   the nodes in group ``npu_nodes``, ready for ``provision apply`` / ``ansible-playbook``
    group_vars/npu_nodes.yml  the local mirror's URLs for the roles (see :mod:`provision_sim.mirror.repos`)
    mirror.pid, mirror.json, mirror.log   the local mirror's HTTP server in the controller namespace
    cp/             this cluster's SSH ControlMaster sockets (closed at `down`)
    nodes/<name>/   one folder per node (see :mod:`provision_sim.nodes`)
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.errors import InputError, ProvisionError
from provision_sim import flavours, network, nodes, rootfs, snapshot
from provision_sim.mirror import repos
from provision_sim.network import Subnet
from provision_sim.nodes import Node
from provision_sim.system import locked, pids_in_netns, require_host

DEFAULT_NAME = "default"
DEFAULT_STATE_ROOT = Path("/var/lib/provision-sim")
GROUP = "npu_nodes"
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,23}$")
MAX_NPUS = 16
# Held while choosing a subnet and creating the controller namespace, across all clusters on the host.
NETWORK_LOCK = Path("/run/lock/provision-sim.lock")
STOP_GRACE_S = 10.0
KILL_WAIT_S = 3.0
POWER_OFF_TIMEOUT_S = 90.0
"""A clean power-off of one node (its units stop in order: docker and its containers take a while)."""
POWER_ACTIONS = ("off", "on", "cycle")
BOOT_TIMEOUT_S = 120.0
# Unix socket paths are limited to 107 bytes: "<control dir>/<ip>" plus the 17 characters ssh appends
# to name the socket while it creates it.
MAX_CONTROL_DIR_LENGTH = 107 - 17 - len("/255.255.255.255")

Progress = Callable[[str], None]


def state_root() -> Path:
    return Path(os.environ.get("PROVISION_SIM_DIR") or DEFAULT_STATE_ROOT)


def check_name(name: str) -> str:
    if not NAME_PATTERN.match(name):
        raise InputError(
            f"cluster name {name!r}: use 1-24 lowercase letters, digits and '-' "
            "(starting with a letter or digit)"
        )
    return name


@dataclass(frozen=True)
class NodeStatus:
    name: str
    flavour: str
    ip: str
    state: str
    """``running`` (sshd answers), ``booting``, ``unreachable`` or ``stopped``: see :func:`nodes.state`."""
    boots: int


@dataclass
class Cluster:
    name: str
    dir: Path
    subnet: Subnet
    base: Path
    nodes: list[Node]
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds spent in the phases of the last :meth:`up`: base, network, start, boot, total."""
    binds: tuple[str, ...] = ()
    """Read-only bind mounts into every node (``SRC:DST``), e.g. the cached engine at the same paths."""

    # -- where things are -------------------------------------------------------------------------------

    @property
    def cluster_file(self) -> Path:
        return self.dir / "cluster.json"

    @property
    def private_key(self) -> Path:
        return self.dir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def inventory_path(self) -> Path:
        return self.dir / "inventory.ini"

    @property
    def group_vars_path(self) -> Path:
        """The mirror variables beside the inventory (Ansible reads ``group_vars/`` next to it)."""
        return self.dir / "group_vars" / f"{GROUP}.yml"

    @property
    def mirror_url(self) -> str | None:
        """Base URL of the local mirror (``/openeuler``, ``/ubuntu``, ``/ascend`` below it), if served."""
        served = repos.served(self.dir)
        return None if served is None else served.url

    @property
    def control_dir(self) -> Path:
        return self.dir / "cp"

    @property
    def controller_netns(self) -> str:
        """Name of the controller namespace (holds the bridge); enter it with ``nsenter --net=<path>``."""
        return f"psim-{self.name}"

    @property
    def controller_netns_path(self) -> Path:
        return network.netns_path(self.controller_netns)

    @property
    def controller_ip(self) -> str:
        """The controller namespace's address on the cluster network (for services such as the mirror)."""
        return self.subnet.controller_ip

    @property
    def host_ip(self) -> str:
        """The host namespace's address on the cluster network (where Ansible's connections come from)."""
        return self.subnet.host_ip

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise InputError(f"cluster {self.name} has no node {name!r}")

    # -- state on disk ----------------------------------------------------------------------------------

    def save(self) -> None:
        data = {
            "name": self.name,
            "subnet": self.subnet.index,
            "base": str(self.base),
            "nodes": [node.to_dict() for node in self.nodes],
            "binds": list(self.binds),
        }
        self.cluster_file.write_text(json.dumps(data, indent=2) + "\n")

    @classmethod
    def load(cls, name: str = DEFAULT_NAME, root: Path | None = None) -> Cluster | None:
        """The cluster recorded under ``root`` (default :func:`state_root`), or ``None``."""
        folder = (root or state_root()) / check_name(name)
        try:
            data: dict[str, Any] = json.loads((folder / "cluster.json").read_text())
        except FileNotFoundError:
            return None
        return cls(
            name=name,
            dir=folder,
            subnet=Subnet(int(data["subnet"])),
            base=Path(data["base"]),
            nodes=[Node.from_dict(name, folder, item) for item in data["nodes"]],
            binds=tuple(str(bind) for bind in data.get("binds", [])),
        )

    # -- up ---------------------------------------------------------------------------------------------

    @classmethod
    def up(
        cls,
        name: str = DEFAULT_NAME,
        *,
        nodes: int = 3,
        os_list: str = flavours.DEFAULT_FLAVOUR,
        npus: int = 8,
        root: Path | None = None,
        cache: Path | None = None,
        boot_timeout: float = BOOT_TIMEOUT_S,
        progress: Progress | None = None,
        mirror: bool = True,
        binds: Sequence[str] = (),
        model_list: str = "910B3",
        snapshots: Sequence[snapshot.Snapshot] = (),
    ) -> Cluster:
        """Build the base if needed, then create, boot and wait for ``nodes`` nodes (sshd answering).

        ``os_list`` is one flavour or a comma list used in turn (see :func:`flavours.parse_os_list`).
        With ``mirror`` the local mirror (built once, cached) is served to the nodes and its URLs are
        written to ``group_vars/npu_nodes.yml``. ``binds`` (``SRC`` or ``SRC:DST``, see :func:`check_bind`)
        are mounted read-only into every node. With ``snapshots`` (:mod:`provision_sim.snapshot`, used in
        turn) every node starts as the converged node a snapshot was taken of, with its own identity; its
        flavour, NPU model and chip count and the cluster's subnet are the snapshot's, not ``os_list``,
        ``model_list`` and ``npus``. On any failure everything created so far is removed again.
        """
        check_name(name)
        if not 1 <= nodes <= network.MAX_NODES:
            raise InputError(f"--nodes must be between 1 and {network.MAX_NODES}, not {nodes}")
        stamps = [snapshots[i % len(snapshots)] for i in range(nodes)] if snapshots else []
        if stamps:
            npus = stamps[0].npus
            node_flavours = [flavours.FLAVOURS[stamp.flavour] for stamp in stamps]
            node_models = [stamp.model for stamp in stamps]
        if not 1 <= npus <= MAX_NPUS:
            raise InputError(f"--npus must be between 1 and {MAX_NPUS}, not {npus}")
        if not stamps:
            node_flavours = flavours.parse_os_list(os_list, nodes)
            node_models = _parse_models(model_list, nodes, npus)
        bind_mounts = tuple(check_bind(bind) for bind in binds)
        require_host()
        folder = (root or state_root()) / name
        if (folder / "cluster.json").exists():
            raise InputError(
                f"cluster {name!r} is already up ({folder}): `provision sim down --name {name}` first"
            )

        started = time.monotonic()
        base = rootfs.ensure_base(cache, progress)
        snapshot.check_base(list(snapshots), base)
        mirror_root = repos.ensure_mirror(cache, progress) if mirror else None
        timings = {"base": time.monotonic() - started}

        mark = time.monotonic()
        with locked(NETWORK_LOCK):
            wanted = snapshots[0].subnet if snapshots else None
            subnet = network.allocate_subnet(_subnets_in_use(folder.parent), wanted)
            cluster = cls(
                name=name,
                dir=folder,
                subnet=subnet,
                base=base,
                nodes=[
                    Node(
                        cluster=name,
                        name=f"node{number}",
                        number=number,
                        flavour=flavour.key,
                        ip=subnet.node_ip(number),
                        npus=npus,
                        dir=folder / "nodes" / f"node{number}",
                        model=node_models[number - 1],
                        layers=(str(stamps[number - 1].layer),) if stamps else (),
                    )
                    for number, flavour in enumerate(node_flavours, start=1)
                ],
                binds=bind_mounts,
            )
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o700)
            cluster.save()  # from here on `down` can clean up whatever exists
            try:
                network.create_controller(cluster.controller_netns, subnet)
            except BaseException:
                cluster.down()
                raise
        try:
            for node in cluster.nodes:
                network.create_node_netns(
                    node.netns, cluster.controller_netns, node.bridge_port, node.ip, subnet
                )
            cluster._create_npu_fabric(npus)
            if mirror_root is not None:
                cluster._serve_mirror(mirror_root)
            timings["network"] = time.monotonic() - mark

            mark = time.monotonic()
            for node, stamp in zip(cluster.nodes, stamps, strict=False):
                snapshot.stamp_disks(stamp, node.dir / "disks")
            cluster._create_nodes()
            timings["start"] = time.monotonic() - mark

            mark = time.monotonic()
            cluster.wait_ready(boot_timeout)
            timings["boot"] = time.monotonic() - mark
        except BaseException:
            cluster.down()
            raise
        timings["total"] = time.monotonic() - started
        cluster.timings = timings
        return cluster

    def _create_npu_fabric(self, npus: int) -> None:
        """The simulated NPUs' RoCE network, with the addresses the hardware simulator gives them."""
        hardware = nodes.hardware_module()
        gateways: Callable[[int], list[str]] | None = getattr(hardware, "npu_fabric_gateways", None)
        addresses: Callable[[int, int], list[str]] | None = getattr(hardware, "npu_fabric_addresses", None)
        if gateways is None or addresses is None:
            return
        network.create_fabric(self.controller_netns, gateways(npus))
        for node in self.nodes:
            network.create_npu_netns(
                node.npu_netns, self.controller_netns, node.npu_port, addresses(node.number, npus)
            )

    def _serve_mirror(self, root: Path) -> None:
        """The local mirror's HTTP server on the bridge address, and its URLs for the roles."""
        served = repos.start_server(self.dir, self.controller_netns_path, self.controller_ip, root)
        self.group_vars_path.parent.mkdir(exist_ok=True)
        self.group_vars_path.write_text(repos.group_vars(served.url, root))

    def _create_nodes(self) -> None:
        """Keys, known_hosts, node layers and mounts, supervisors, inventory."""
        controller_key = nodes.new_key_pair(f"provision-sim@{self.name}")
        self.private_key.write_text(controller_key.private_openssh)
        self.private_key.chmod(0o600)
        self.private_key.with_suffix(".pub").write_text(controller_key.public_line + "\n")
        hosts = _hosts_file(self)
        known_hosts = []
        for node in self.nodes:
            host_key = nodes.new_key_pair(f"root@{node.name}")
            known_hosts.append(f"{node.ip} {host_key.public_line}\n")
            nodes.prepare(
                node, self.base, host_key=host_key, authorized_key=controller_key.public_line, hosts=hosts
            )
        self.known_hosts.write_text("".join(known_hosts))
        self.control_dir.mkdir(mode=0o700, exist_ok=True)
        self.inventory_path.write_text(self.inventory())
        for node in self.nodes:
            nodes.start(node, self.binds)

    def install_mpi(self) -> list[str]:
        """What a site prepares before hccl_test (``provision sim mpi``): MPICH's ``mpirun`` on every node
        (the hardware simulator's, which starts the other ranks over ssh as MPICH's Hydra does) and
        passwordless root SSH between the nodes: one key pair for the cluster (kept in its folder, so a
        second call changes nothing), every node's host key known. Returns the nodes prepared."""
        hardware = nodes.hardware_module()
        script: Callable[[], str] | None = getattr(hardware, "mpirun_script", None)
        where: str | None = getattr(hardware, "MPIRUN", None)
        if script is None or where is None:
            raise ProvisionError("this cluster's hardware simulator has no mpirun")
        key_file = self.dir / "mpi_ed25519"
        if not key_file.exists():
            pair = nodes.new_key_pair(f"root@{self.name}-mpi")
            key_file.write_text(pair.private_openssh)
            key_file.chmod(0o600)
            key_file.with_suffix(".pub").write_text(pair.public_line + "\n")
        private = key_file.read_text()
        public = key_file.with_suffix(".pub").read_text().strip()
        known = self.known_hosts.read_text()
        done = []
        for node in self.nodes:
            ssh = node.root / "root/.ssh"
            ssh.mkdir(mode=0o700, parents=True, exist_ok=True)
            for name, text, mode in (
                ("id_ed25519", private, 0o600),
                ("id_ed25519.pub", public + "\n", 0o644),
                ("known_hosts", known, 0o644),
            ):
                (ssh / name).write_text(text)
                (ssh / name).chmod(mode)
            authorized = ssh / "authorized_keys"
            lines = authorized.read_text().splitlines() if authorized.exists() else []
            if public not in lines:
                authorized.write_text("".join(f"{line}\n" for line in [*lines, public]))
            authorized.chmod(0o600)
            target = node.root / where.lstrip("/")
            target.write_text(script())
            target.chmod(0o755)
            done.append(node.name)
        return done

    def boots(self) -> dict[str, int]:
        """How many times each node has booted: pass it to :meth:`wait_ready` after asking for a reboot."""
        return {node.name: node.boots for node in self.nodes}

    def wait_ready(
        self,
        timeout: float = BOOT_TIMEOUT_S,
        *,
        rebooted: Mapping[str, int] | None = None,
        only: Sequence[str] = (),
    ) -> None:
        """Wait until every node's sshd answers (or only those named); a node whose container died fails
        at once.

        ``rebooted`` (:meth:`boots` taken before the reboot was asked for) makes a node count only once it
        booted again: until its old systemd has shut down, the old sshd still answers.
        """
        deadline = time.monotonic() + timeout
        before = dict(rebooted or {})
        waiting = [self.node(name) for name in only] if only else list(self.nodes)
        while waiting:
            waiting = [
                node
                for node in waiting
                if node.boots <= before.get(node.name, 0) or not nodes.ssh_ready(node, timeout=0.2)
            ]
            for node in waiting:
                runner = nodes.supervisor(node)
                if runner is None or not runner.alive():
                    raise ProvisionError(f"{node.name} did not boot:\n{_tail(node.console_log)}")
            if waiting and time.monotonic() > deadline:
                names = ", ".join(node.name for node in waiting)
                raise ProvisionError(
                    f"no SSH on {names} after {timeout:.0f} s:\n{_tail(waiting[0].console_log)}"
                )
            if waiting:
                time.sleep(0.05)

    # -- power ------------------------------------------------------------------------------------------

    def power_off(self, name: str, *, hard: bool = False, timeout: float = POWER_OFF_TIMEOUT_S) -> None:
        """Power a node off: a clean shutdown (its systemd stops every unit), or with ``hard`` a power loss
        (:func:`nodes.power_loss`: its whole PID namespace ends at once). Its disk stays as it was."""
        node = self.node(name)
        if not nodes.any_process(node):
            raise ProvisionError(f"{name} is already stopped")
        if hard:
            nodes.power_loss(node)
            timeout = KILL_WAIT_S
        else:
            nodes.stop(node)
        if not self._wait_gone(node, timeout):
            how = "after SIGKILL" if hard else f"{timeout:.0f} s after the poweroff request"
            hint = "" if hard else f" (`provision sim power {name} off --hard`)"
            raise ProvisionError(f"{name} still runs {how}{hint}")
        (node.dir / "nspawn.pid").unlink(missing_ok=True)

    def power_on(self, name: str, *, timeout: float = BOOT_TIMEOUT_S) -> None:
        """Boot a stopped node again, its disk as it was; returns once its sshd answers."""
        from provision_sim import faults

        node = self.node(name)
        if nodes.any_process(node):
            raise ProvisionError(f"{name} is {nodes.state(node)}: power it off first")
        if not nodes.mounted(node):
            nodes.mount(node, self.base)
        faults.forget_lost_at_boot(node)
        boots = node.boots
        nodes.start(node, self.binds)
        self.wait_ready(timeout, rebooted={name: boots}, only=[name])

    def power(self, name: str, action: str, *, hard: bool = False) -> None:
        """``off``, ``on`` or ``cycle`` (off, then on) one node."""
        if action not in POWER_ACTIONS:
            raise InputError(f"power {action!r}: use one of {', '.join(POWER_ACTIONS)}")
        self.node(name)
        if hard and action == "on":
            raise InputError("--hard is for off and cycle (how the node loses power)")
        if action in ("off", "cycle"):
            self.power_off(name, hard=hard)
        if action in ("on", "cycle"):
            self.power_on(name)

    def _wait_gone(self, node: Node, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while True:
            nodes.reap(node)
            if not nodes.any_process(node):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)

    def snapshot(self, name: str, dest: Path) -> snapshot.Snapshot:
        """Keep node ``name`` as it is now in ``dest`` (:mod:`provision_sim.snapshot`): it is powered off
        cleanly for the copy, so no file is caught half-written, and booted again."""
        node = self.node(name)
        if node.layers:
            raise InputError(
                f"{name} was itself stamped from a snapshot: take the snapshot of a converged node"
            )
        if dest.exists():
            raise InputError(f"snapshot folder {dest} already exists: remove it or choose another")
        meta = snapshot.Snapshot(
            path=dest,
            base=self.base,
            subnet=self.subnet.index,
            flavour=node.flavour,
            model=node.model,
            npus=node.npus,
            source=f"{self.name}/{node.name}",
            taken_at=snapshot.now(),
        )
        self.power_off(name)
        try:
            nodes.unmount(node)  # the upper layer is read while no overlayfs holds it
            return snapshot.take(node_upper=node.upper, node_disks=node.dir / "disks", dest=dest, meta=meta)
        finally:
            self.power_on(name)

    # -- what users see ---------------------------------------------------------------------------------

    def status(self) -> list[NodeStatus]:
        return [NodeStatus(n.name, n.flavour, n.ip, nodes.state(n), n.boots) for n in self.nodes]

    def _host_vars(self, node: Node) -> dict[str, str | int]:
        """How Ansible reaches a node: SSH as root with the cluster key, host keys checked; how many NPU chips
        it shows (``ascend_npu_count``, as ``provision bootstrap`` records it: preflight and the pools' checks
        read it, so every ``--npus`` converges); and that its NPUs are simulated (``provision bench`` prints
        this label next to the J/token they give)."""
        common = f"-o UserKnownHostsFile={self.known_hosts}"
        if len(str(self.control_dir)) <= MAX_CONTROL_DIR_LENGTH:
            # Masters of this cluster only: a later cluster reusing the addresses never meets a stale one.
            common += f" -o ControlPath={self.control_dir}/%h"
        return {
            "ansible_host": node.ip,
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(self.private_key),
            "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_ssh_common_args": common,
            "ascend_npu_count": node.npus,
            "provision_power_label": "simulated",
        }

    def inventory(self) -> str:
        """The INI inventory written beside ``group_vars/`` (which Ansible reads next to it)."""
        lines = [
            f"# Simulated cluster {self.name!r}, written by `provision sim up`.",
            f"# Node host keys were recorded at `up` in {self.known_hosts}: host key checking stays on.",
            f"[{GROUP}]",
        ]
        for node in self.nodes:
            settings = self._host_vars(node)
            common = settings.pop("ansible_ssh_common_args")
            words = " ".join(f"{key}={value}" for key, value in settings.items())
            lines.append(f"{node.name} {words} ansible_ssh_common_args='{common}'")
        return "\n".join(lines) + "\n"

    def complete_inventory(self) -> str:
        """A YAML inventory complete on its own: the nodes and the variables of ``group_vars/`` (mirror URLs,
        pools), so that a copy saved anywhere converges the same as :attr:`inventory_path`."""
        import yaml

        def group_vars(group: str) -> dict[str, Any]:
            """``<group>.yml``, and the files of a ``<group>/`` folder (the API key of ``sim up --serve``)."""
            path = self.group_vars_path.with_name(f"{group}.yml")
            out: dict[str, Any] = {}
            for each in [path, *sorted(path.with_suffix("").glob("*.yml"))]:
                values = yaml.safe_load(each.read_text(encoding="utf-8")) if each.is_file() else None
                out.update(values if isinstance(values, dict) else {})
            return out

        nodes_group: dict[str, Any] = {"hosts": {n.name: self._host_vars(n) for n in self.nodes}}
        if own := group_vars(GROUP):
            nodes_group["vars"] = own
        top: dict[str, Any] = {"children": {GROUP: nodes_group}}
        if common := group_vars("all"):
            top["vars"] = common
        header = (
            f"# Simulated cluster {self.name!r} (`provision sim inventory`): its nodes and the variables of\n"
            f"# {self.group_vars_path.parent}/, complete on its own. Host keys: {self.known_hosts}.\n"
        )
        return header + yaml.safe_dump({"all": top}, sort_keys=False, width=110)

    def exec(
        self, node: str, argv: Sequence[str], *, timeout: float | None = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside a node without SSH (tests, debugging)."""
        return nodes.exec_in(self.node(node), argv, timeout=timeout)

    # -- down -------------------------------------------------------------------------------------------

    def down(self) -> list[str]:
        """Stop every node and remove namespaces, mounts and the cluster folder. Safe to call twice.

        Returns warnings (processes we did not start found in our namespaces); raises when a process we
        started survives SIGKILL, keeping the folder so ``down`` can be tried again.
        """
        self._close_ssh_masters()
        repos.stop_server(self.dir)
        for node in self.nodes:
            nodes.stop(node)
        survivors = self._wait_stopped(STOP_GRACE_S)
        warnings = []
        for node in survivors:
            warnings.append(f"{node.name} did not power off within {STOP_GRACE_S:.0f} s: killed")
            nodes.kill(node)
        survivors = self._wait_stopped(KILL_WAIT_S)

        for node in self.nodes:
            nodes.unmount(node)
            if not nodes.processes(node):
                warnings += [f"cgroup {path} not removed" for path in nodes.remove_cgroups(node)]
        namespaces = [netns for node in self.nodes for netns in (node.netns, node.npu_netns)]
        for netns in [*namespaces, self.controller_netns]:
            strangers = pids_in_netns(network.netns_path(netns))
            if strangers:
                warnings.append(f"processes not started by provision sim still use {netns}: {strangers}")
            network.delete_netns(netns)
        network.delete_host_interface(self.subnet)
        if survivors:
            raise ProvisionError(
                "still running after SIGKILL: "
                + ", ".join(f"{node.name} {[ref.pid for ref in nodes.processes(node)]}" for node in survivors)
            )
        shutil.rmtree(self.dir, ignore_errors=True)
        return warnings

    def _wait_stopped(self, seconds: float) -> list[Node]:
        deadline = time.monotonic() + seconds
        while True:
            for node in self.nodes:
                nodes.reap(node)
            running = [node for node in self.nodes if nodes.processes(node)]
            if not running or time.monotonic() > deadline:
                return running
            time.sleep(0.05)

    def _close_ssh_masters(self) -> None:
        """Ask SSH masters of this cluster to exit (they would linger for ControlPersist otherwise)."""
        if not self.control_dir.is_dir() or shutil.which("ssh") is None:
            return
        for socket_path in self.control_dir.iterdir():
            with contextlib.suppress(subprocess.TimeoutExpired):
                subprocess.run(
                    ["ssh", "-o", f"ControlPath={socket_path}", "-O", "exit", "provision-sim-node"],
                    capture_output=True,
                    timeout=5,
                    check=False,
                )


def _parse_models(model_list: str, count: int, npus: int) -> list[str]:
    """``--model 910b3,910_93,310p3`` → the npu-smi model of each of ``count`` nodes (the list in turn)."""
    from provision.ascend.hardware import model_for_chip

    resolve: Callable[[str], str] | None = getattr(nodes.hardware_module(), "resolve_model", None)
    names: list[str] = []
    for name in (m.strip() for m in model_list.split(",")):
        if not name:
            continue
        try:
            names.append(resolve(name) if resolve else name)
        except ProvisionError as exc:
            raise InputError(f"--model: {exc}") from None
        spec = model_for_chip(names[-1])
        if spec is not None and npus % spec.chips_per_npu:
            raise InputError(
                f"--npus {npus}: an {spec.product} node has {spec.chips_per_npu} chips per NPU, "
                f"so --npus (chips per node) must be a multiple of {spec.chips_per_npu}"
            )
    names = names or ["910B3"]
    return [names[i % len(names)] for i in range(count)]


def check_bind(bind: str) -> str:
    """``SRC`` or ``SRC:DST`` (absolute paths, SRC existing) as systemd-nspawn's ``SRC:DST``."""
    source, _, target = bind.partition(":")
    target = target or source
    if not (source.startswith("/") and target.startswith("/")) or ":" in target:
        raise InputError(f"bind mount {bind!r}: use SRC or SRC:DST with absolute paths (no other ':')")
    if not Path(source).exists():
        raise InputError(f"bind mount {bind!r}: {source} does not exist")
    return f"{source}:{target}"


def _subnets_in_use(root: Path) -> set[int]:
    """Subnets recorded by the other clusters under ``root``."""
    used = set()
    for path in root.glob("*/cluster.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            used.add(int(json.loads(path.read_text())["subnet"]))
    return used


def _hosts_file(cluster: Cluster) -> str:
    """/etc/hosts of every node: the nodes know each other (and the controller) by name."""
    lines = [
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        f"{cluster.controller_ip}\tsim-controller",
    ]
    lines += [f"{node.ip}\t{node.name}" for node in cluster.nodes]
    return "\n".join(lines) + "\n"


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return f"(no {path})"
