"""The simulated cluster's network: namespaces, one bridge, one veth per node, all private to us.

::

    host namespace              controller namespace "psim-<cluster>"   node namespace "psim-<cluster>-node1"
    psim<K> 10.200.K.254/24 ─veth─ uplink ─┐
                                           br0 10.200.K.1/24
                                    node1 ─┘ ─────veth───── eth0 10.200.K.11/24, default via 10.200.K.1

- Ansible runs in the host namespace and reaches nodes through ``psim<K>`` (a directly connected /24:
  nothing else is routed). Services of the controller side (the local mirror) run in the controller
  namespace (``nsenter --net=/run/netns/psim-<cluster>``) on 10.200.K.1, or in the host on 10.200.K.254.
- Nodes reach each other over the bridge. Their default route points at the controller namespace, which
  forwards nothing, so no packet leaves the namespaces we created.
- Each cluster gets its own /24 (``K``), so several clusters (a test session's and a user's) can run at once.

The NPU fabric (RoCE ports of the simulated NPUs, for ``hccn_tool -ping``) is a second, separate network:
a namespace per node (``psim-<cluster>-node1-npu``) holding that node's NPU addresses on ``eth0``, its veth
plugged into bridge ``fabric`` of the controller namespace, which carries the rails' gateway addresses.
The node sees that namespace at ``/run/provision-sim/npu-netns`` (a bind mount, see nodes.py).
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from provision.errors import InputError, ProvisionError
from provision_sim.system import run

NETNS_DIR = Path("/run/netns")
FABRIC_BRIDGE = "fabric"
FIRST_NODE_HOST = 11
MAX_NODES = 200


@dataclass(frozen=True)
class Subnet:
    """``10.200.<index>.0/24``: .1 the controller namespace, .254 the host, .11+ the nodes."""

    index: int

    @property
    def cidr(self) -> str:
        return f"10.200.{self.index}.0/24"

    @property
    def controller_ip(self) -> str:
        return f"10.200.{self.index}.1"

    @property
    def host_ip(self) -> str:
        return f"10.200.{self.index}.254"

    @property
    def host_interface(self) -> str:
        return f"psim{self.index}"

    def node_ip(self, number: int) -> str:
        """Address of node ``number`` (1-based)."""
        if not 1 <= number <= MAX_NODES:
            raise ProvisionError(f"node number {number} outside 1..{MAX_NODES}")
        return f"10.200.{self.index}.{FIRST_NODE_HOST + number - 1}"


def allocate_subnet(reserved: set[int], wanted: int | None = None) -> Subnet:
    """The first 10.200.K.0/24 neither ``reserved`` nor already routed on this host; with ``wanted``, that
    one or an :class:`InputError` saying it is taken."""
    routes = json.loads(run(["ip", "-json", "-4", "route", "show", "table", "all"]).stdout or "[]")
    used = set(reserved)
    for route in routes:
        destination = route.get("dst", "")
        if destination in ("default", ""):
            continue
        network = ipaddress.ip_network(
            destination if "/" in destination else f"{destination}/32", strict=False
        )
        for index in range(256):
            if network.overlaps(ipaddress.ip_network(f"10.200.{index}.0/24")):
                used.add(index)
    if wanted is not None:
        if wanted in used:
            raise InputError(
                f"subnet 10.200.{wanted}.0/24 is in use (another simulated cluster?): a cluster stamped from "
                "a snapshot takes the subnet of the cluster it was taken on; bring that one down first"
            )
        return Subnet(wanted)
    for index in range(256):
        if index not in used:
            return Subnet(index)
    raise ProvisionError("no free 10.200.K.0/24 subnet left for another simulated cluster")


def netns_path(name: str) -> Path:
    return NETNS_DIR / name


def netns_exists(name: str) -> bool:
    return netns_path(name).exists()


def create_controller(netns: str, subnet: Subnet) -> None:
    """The controller namespace with the bridge, and the host's veth into it."""
    run(["ip", "netns", "add", netns])
    run(["ip", "-n", netns, "link", "set", "lo", "up"])
    run(["ip", "-n", netns, "link", "add", "br0", "type", "bridge"])
    run(["ip", "-n", netns, "addr", "add", f"{subnet.controller_ip}/24", "dev", "br0"])
    run(["ip", "-n", netns, "link", "set", "br0", "up"])
    host_if = subnet.host_interface
    run(["ip", "link", "add", host_if, "type", "veth", "peer", "name", "uplink", "netns", netns])
    run(["ip", "-n", netns, "link", "set", "uplink", "master", "br0", "up"])
    run(["ip", "addr", "add", f"{subnet.host_ip}/24", "dev", host_if])
    run(["ip", "link", "set", host_if, "up"])


def create_node_netns(netns: str, controller: str, port: str, ip: str, subnet: Subnet) -> None:
    """A node's namespace: ``eth0`` with ``ip``, its peer ``port`` plugged into the controller's bridge."""
    run(["ip", "netns", "add", netns])
    run(["ip", "-n", netns, "link", "set", "lo", "up"])
    run(["ip", "-n", controller, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", netns])
    run(["ip", "-n", controller, "link", "set", port, "master", "br0", "up"])
    run(["ip", "-n", netns, "addr", "add", f"{ip}/24", "dev", "eth0"])
    run(["ip", "-n", netns, "link", "set", "eth0", "up"])
    run(["ip", "-n", netns, "route", "add", "default", "via", subnet.controller_ip])


def create_fabric(controller: str, gateways: list[str]) -> None:
    """The NPU fabric's bridge in the controller namespace, with every rail's gateway (CIDR) on it."""
    run(["ip", "-n", controller, "link", "add", FABRIC_BRIDGE, "type", "bridge"])
    _add_addresses(controller, FABRIC_BRIDGE, gateways)
    run(["ip", "-n", controller, "link", "set", FABRIC_BRIDGE, "up"])


def create_npu_netns(netns: str, controller: str, port: str, addresses: list[str]) -> None:
    """A node's NPU fabric namespace: ``eth0`` with the node's NPU addresses (CIDR), on the fabric bridge."""
    run(["ip", "netns", "add", netns])
    run(["ip", "-n", netns, "link", "set", "lo", "up"])
    run(["ip", "-n", controller, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", netns])
    run(["ip", "-n", controller, "link", "set", port, "master", FABRIC_BRIDGE, "up"])
    _add_addresses(netns, "eth0", addresses)
    run(["ip", "-n", netns, "link", "set", "eth0", "up"])


def _add_addresses(netns: str, device: str, addresses: list[str]) -> None:
    """All addresses in one ``ip`` call (-batch), as a node has up to 16 NPU ports."""
    if addresses:
        batch = "".join(f"addr add {address} dev {device}\n" for address in addresses)
        result = subprocess.run(
            ["ip", "-n", netns, "-batch", "-"], input=batch, capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise ProvisionError(f"adding {addresses} to {device} in {netns} failed: {result.stderr.strip()}")


def delete_netns(name: str) -> None:
    """Delete a namespace (and the veths in it); a no-op when it is already gone."""
    if netns_exists(name):
        run(["ip", "netns", "delete", name])


def delete_host_interface(subnet: Subnet) -> None:
    if Path(f"/sys/class/net/{subnet.host_interface}").exists():
        run(["ip", "link", "delete", subnet.host_interface], check=False)
