"""The NPU fabric's addressing plan: every node's NPU port addresses, netmask, gateway and detect address.

The inventory gives a fleet-wide plan and, per node, either its own list of addresses or its place in the
plan (the tool expands it):

- ``hccn_config_subnets``: the segments of the fabric, in order; each ``{subnet: A.B.C.D/N, gateway: G}``
  with an optional ``netdetect`` (the detect address; the vendor's guide uses the gateway, the default).
  NPU port ``d`` of a node lives in segment ``d % len(subnets)``: one segment for a whole A2 fleet (its 8
  ports), two for A3 (the two dies of NPU ``j`` are ports ``2j`` and ``2j + 1``, which must be in different
  segments), eight for a per-rail fabric (port ``d`` in rail ``d``);
- ``hccn_config_devices``: NPU ports per node (8 on an A2 server, 16 on an A3);
- ``hccn_config_first_host``: the host part of node 0's first address in each segment;
- per node, ``hccn_config_node_index: k`` (its ports take the k-th block of addresses in each segment) or
  ``hccn_config_addresses: [A0, A1, ...]`` (port d gets A_d, which must lie in port d's segment).

:func:`host_ports` expands a node's plan (for the role, the rank table and ``validate``);
:func:`host_problems` and :func:`fleet_problems` are what ``provision validate`` refuses. Nothing here
touches a node.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Path_ = tuple[str | int, ...]
Problem = tuple[Path_, str]

SUBNETS = "hccn_config_subnets"
DEVICES = "hccn_config_devices"
FIRST_HOST = "hccn_config_first_host"
NODE_INDEX = "hccn_config_node_index"
ADDRESSES = "hccn_config_addresses"
VARIABLES = (SUBNETS, DEVICES, FIRST_HOST, NODE_INDEX, ADDRESSES)

DEFAULT_DEVICES = 8
DEFAULT_FIRST_HOST = 10

# Huawei's hccn_tool refuses a port address in this segment (github.com/hicann/driver, hccn_tool sources):
# it is the NPU's own internal network.
RESERVED = ipaddress.IPv4Network("192.168.1.0/24")


@dataclass(frozen=True, slots=True)
class Port:
    """One NPU port's configuration, as ``hccn_tool -i device -ip/-gateway/-netdetect -s`` sets it."""

    device: int
    address: str
    netmask: str
    gateway: str
    netdetect: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "address": self.address,
            "netmask": self.netmask,
            "gateway": self.gateway,
            "netdetect": self.netdetect,
        }


@dataclass(frozen=True, slots=True)
class _Segment:
    network: ipaddress.IPv4Network
    gateway: ipaddress.IPv4Address
    netdetect: ipaddress.IPv4Address


def has_plan(variables: Mapping[str, Any]) -> bool:
    """Whether the host's NPU addresses are managed (it names its place in the plan or its addresses)."""
    return variables.get(NODE_INDEX) is not None or variables.get(ADDRESSES) is not None


def _int(value: Any, default: int) -> int | None:
    if value is None:
        return default
    if isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _segments(raw: Any) -> tuple[list[_Segment], list[Problem]]:
    """The plan's segments and the problems of ``hccn_config_subnets`` (segments with problems left out)."""
    if not isinstance(raw, Sequence) or isinstance(raw, str) or not raw:
        return [], [((SUBNETS,), "must be a non-empty list of {subnet: A.B.C.D/N, gateway: G}")]
    segments: list[_Segment] = []
    problems: list[Problem] = []
    for index, item in enumerate(raw):
        where: Path_ = (SUBNETS, index)
        if not isinstance(item, Mapping):
            problems.append((where, "must be a mapping {subnet: A.B.C.D/N, gateway: G}"))
            continue
        try:
            network = ipaddress.IPv4Network(str(item.get("subnet", "")), strict=True)
        except ValueError as exc:
            problems.append(
                ((*where, "subnet"), f"not an IPv4 network A.B.C.D/N with no host bits set ({exc})")
            )
            continue
        if network.prefixlen > 30:
            problems.append(((*where, "subnet"), "must hold at least 2 host addresses (/30 or larger)"))
            continue
        if network.overlaps(RESERVED):
            problems.append(
                (
                    (*where, "subnet"),
                    f"overlaps {RESERVED}, which hccn_tool refuses (the NPU's internal network)",
                )
            )
            continue
        clash = next((s for s in segments if s.network.overlaps(network)), None)
        if clash is not None:
            problems.append(((*where, "subnet"), f"overlaps segment {clash.network} of the plan"))
            continue
        gateway = _address(item.get("gateway"))
        if gateway is None:
            problems.append(((*where, "gateway"), "must be an IPv4 address A.B.C.D"))
            continue
        if gateway not in network or gateway in (network.network_address, network.broadcast_address):
            problems.append(((*where, "gateway"), f"outside its subnet {network} (hosts {_hosts(network)})"))
            continue
        detect = gateway if item.get("netdetect") is None else _address(item.get("netdetect"))
        if detect is None:
            problems.append(((*where, "netdetect"), "must be an IPv4 address A.B.C.D"))
            continue
        segments.append(_Segment(network, gateway, detect))
    return segments, problems


def _hosts(network: ipaddress.IPv4Network) -> str:
    return f"{network.network_address + 1}-{network.broadcast_address - 1}"


def _address(value: Any) -> ipaddress.IPv4Address | None:
    if not isinstance(value, str):
        return None
    try:
        return ipaddress.IPv4Address(value)
    except ValueError:
        return None


def host_ports(variables: Mapping[str, Any]) -> tuple[list[Port], list[Problem]]:
    """The NPU ports of one host as its plan sets them, and the problems of the host's plan (a problem
    leaves the port out). No plan (neither ``hccn_config_node_index`` nor ``hccn_config_addresses``): none."""
    if not has_plan(variables):
        return [], []
    segments, problems = _segments(variables.get(SUBNETS))
    devices = _int(variables.get(DEVICES), DEFAULT_DEVICES)
    first = _int(variables.get(FIRST_HOST), DEFAULT_FIRST_HOST)
    if devices is None or devices < 1:
        problems.append(((DEVICES,), "must be a whole number of NPU ports per node (8 on A2, 16 on A3)"))
    if first is None or first < 1:
        problems.append(((FIRST_HOST,), "must be a whole number, at least 1"))
    if problems or not segments or devices is None or first is None:
        if not problems:
            problems.append(((SUBNETS,), "no usable segment"))
        return [], problems
    if variables.get(ADDRESSES) is not None:
        addresses, found = _listed(variables.get(ADDRESSES), devices)
    else:
        addresses, found = _expanded(variables.get(NODE_INDEX), segments, devices, first)
    problems += found
    ports: list[Port] = []
    seen: dict[ipaddress.IPv4Address, int] = {}
    for device, address in enumerate(addresses):
        if address is None:
            continue
        where: Path_ = (ADDRESSES, device) if variables.get(ADDRESSES) is not None else (NODE_INDEX,)
        segment = segments[device % len(segments)]
        net = segment.network
        if address not in net or address in (net.network_address, net.broadcast_address):
            problems.append(
                (where, f"NPU {device}: {address} is outside its subnet {net} (hosts {_hosts(net)})")
            )
            continue
        if address == segment.gateway:
            problems.append((where, f"NPU {device}: {address} is the gateway of {net}"))
            continue
        if address in seen:
            problems.append((where, f"NPU {device}: {address} is also NPU {seen[address]}'s address"))
            continue
        seen[address] = device
        ports.append(
            Port(device, str(address), str(net.netmask), str(segment.gateway), str(segment.netdetect))
        )
    if devices == 16 and len(segments) == 1:
        # Port d is in segment d % n: with two segments or more the dies of NPU j (ports 2j, 2j + 1) are
        # always apart; with one they share it, which an A3 does not allow.
        problems.append(
            ((SUBNETS,), "16 ports (A3): the two dies of each NPU must be in different segments; give two")
        )
    return ports, problems


def _listed(raw: Any, devices: int) -> tuple[list[ipaddress.IPv4Address | None], list[Problem]]:
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        return [], [((ADDRESSES,), "must be a list of IPv4 addresses, NPU port 0 first")]
    problems: list[Problem] = []
    if len(raw) != devices:
        problems.append(
            ((ADDRESSES,), f"lists {len(raw)} address(es); {DEVICES} is {devices}: one per NPU port")
        )
    out: list[ipaddress.IPv4Address | None] = []
    for device, value in enumerate(raw[:devices]):
        address = _address(value)
        if address is None:
            problems.append(((ADDRESSES, device), "must be an IPv4 address A.B.C.D"))
        out.append(address)
    return out, problems


def _expanded(
    raw: Any, segments: Sequence[_Segment], devices: int, first: int
) -> tuple[list[ipaddress.IPv4Address | None], list[Problem]]:
    index = _int(raw, 0)
    if index is None or index < 0:
        return [], [((NODE_INDEX,), "must be a whole number, at least 0 (the node's place in the plan)")]
    per = -(-devices // len(segments))  # a node's block of addresses in each segment
    out: list[ipaddress.IPv4Address | None] = []
    for device in range(devices):
        network = segments[device % len(segments)].network
        offset = first + index * per + device // len(segments)
        if offset >= network.num_addresses:
            out.append(None)
            return out, [
                (
                    (NODE_INDEX,),
                    f"NPU {device} would take host {offset} of {network}, which has "
                    f"{network.num_addresses - 2} hosts: a larger subnet or a smaller {FIRST_HOST}",
                )
            ]
        out.append(network.network_address + offset)
    return out, []


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A device address two ports of the fleet would share."""

    host: str
    device: int
    address: str
    other_host: str
    other_device: int


def fleet_duplicates(plans: Mapping[str, Sequence[Port]]) -> list[Duplicate]:
    """Every port whose address an earlier port of the fleet (inventory order) already has."""
    seen: dict[str, tuple[str, int]] = {}
    out: list[Duplicate] = []
    for host, ports in plans.items():
        for port in ports:
            other = seen.get(port.address)
            if other is not None and other[0] != host:
                out.append(Duplicate(host, port.device, port.address, other[0], other[1]))
            else:
                seen.setdefault(port.address, (host, port.device))
    return out


# --------------------------------------------------------------------------------------------- configure

_UNSET = ("", "0.0.0.0")


def config_steps(wanted: Sequence[Mapping[str, Any]], probe: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``hccn_tool`` set commands (arguments after the tool) that bring each port of ``wanted``
    (:meth:`Port.as_dict`) to its plan, from what the probe read (``conf=N``,
    :mod:`provision.ascend.hccn_gate`): only what differs, and per port in the order the tool needs: the
    address and netmask first (the gateway is checked against them), then the gateway, then the detect
    address."""
    npus = probe.get("npus") or {}
    steps: list[dict[str, Any]] = []
    for port in wanted:
        device = int(port["device"])
        now = npus.get(str(device)) or {}
        d = str(device)
        if (now.get("ip"), now.get("netmask")) != (port["address"], port["netmask"]):
            steps.append(
                _step(
                    device,
                    "address",
                    now.get("ip"),
                    f"{port['address']}/{port['netmask']}",
                    ["-i", d, "-ip", "-s", "address", port["address"], "netmask", port["netmask"]],
                )
            )
        if now.get("gateway") != port["gateway"]:
            steps.append(
                _step(
                    device,
                    "gateway",
                    now.get("gateway"),
                    port["gateway"],
                    ["-i", d, "-gateway", "-s", "gateway", port["gateway"]],
                )
            )
        if now.get("netdetect") != port["netdetect"]:
            steps.append(
                _step(
                    device,
                    "netdetect",
                    now.get("netdetect"),
                    port["netdetect"],
                    ["-i", d, "-netdetect", "-s", "address", port["netdetect"]],
                )
            )
    return steps


def _step(device: int, field: str, was: Any, wanted: str, args: list[str]) -> dict[str, Any]:
    shown = "unset" if was is None or was in _UNSET else str(was)
    return {
        "device": device,
        "field": field,
        "was": None if shown == "unset" else shown,
        "wanted": wanted,
        "args": args,
        "label": f"NPU {device} {field}: {shown} -> {wanted}",
    }


def config_mismatches(wanted: Sequence[Mapping[str, Any]], probe: Mapping[str, Any]) -> list[str]:
    """What still differs from the plan after the sets (empty: every port is as planned), one line per
    field, with the read errors of that port."""
    npus = probe.get("npus") or {}
    out = []
    for step in config_steps(wanted, probe):
        errors = (npus.get(str(step["device"])) or {}).get("errors") or []
        why = f" ({'; '.join(errors)})" if errors else ""
        out.append(
            f"NPU {step['device']} {step['field']} reads {step['was'] or 'unset'}, not {step['wanted']}{why}"
        )
    return out


# --------------------------------------------------------------------------------------------- rank table

RANK_TABLE_DIR = "/etc/provision/fabric"
"""Where the HCCN gate writes each multi-node group's rank table (``<pool>.ranktable.json``), on every
member; engines that read one are pointed at it by their environment (docs/fabric.md)."""


def rank_table_path(pool: str, folder: str = RANK_TABLE_DIR) -> str:
    return f"{folder.rstrip('/')}/{pool}.ranktable.json"


def rank_table(
    group: Mapping[str, Any],
    addresses: Mapping[str, Mapping[int, str]],
    super_pods: Mapping[str, Mapping[int, Mapping[str, Any]]] | None = None,
) -> dict[str, Any]:
    """The rank table of a multi-node serving group (``group_dict``: members in order, head first, each with
    its pool's devices) in HCCL's documented format (github.com/hicann/hccl,
    docs/en/user_guide/cluster_info_config/rank_table_config_a2.md and rank_table_config_a3.md): every
    value a string, ranks consecutive per server (HCCL does not support interleaving them across servers),
    ``device_ip`` the NPU port's configured address.

    ``addresses``: per member host, NPU id -> configured address. A device without an address raises
    ValueError (a multi-node table needs every ``device_ip``). ``super_pods``: per member host, NPU id ->
    ``{"sdid", "super_pod_id"}`` as an A3 chip's ``npu-smi info -t spod-info`` reads them. When every
    device of the group has them the table is the super-pod variant (version "1.2": each device's
    ``super_device_id``, and ``super_pod_list`` naming the servers of each super pod, in group order);
    otherwise the AI-server variant (version "1.0"), which HCCL takes on A3 too."""
    pods = super_pods or {}
    every = all(
        int(device) in (pods.get(str(member["host"])) or {})
        for member in group["members"]
        for device in member["devices"]
    )
    servers = []
    pod_of: dict[str, list[str]] = {}
    rank = 0
    for member in group["members"]:
        host = str(member["host"])
        found = addresses.get(host) or {}
        devices = []
        member_pods = set()
        for device in member["devices"]:
            ip = found.get(int(device))
            if not ip:
                raise ValueError(f"{host} NPU {device}: no configured address for the rank table")
            entry = {"device_id": str(device)}
            if every:
                place = pods[host][int(device)]
                entry["super_device_id"] = str(int(place["sdid"]))
                member_pods.add(str(int(place["super_pod_id"])))
            devices.append({**entry, "device_ip": str(ip), "rank_id": str(rank)})
            rank += 1
        if len(member_pods) > 1:
            raise ValueError(
                f"{host}: its NPUs read different super pods ({', '.join(sorted(member_pods))}) "
                "in npu-smi info -t spod-info"
            )
        for pod in member_pods:
            pod_of.setdefault(pod, []).append(host)
        servers.append({"server_id": host, "host_ip": str(member["address"]), "device": devices})
    table: dict[str, Any] = {
        "status": "completed",
        "version": "1.2" if every else "1.0",
        "server_count": str(len(servers)),
        "server_list": servers,
    }
    if every:
        table["super_pod_list"] = [
            {"super_pod_id": pod, "server_list": [{"server_id": host} for host in hosts]}
            for pod, hosts in pod_of.items()
        ]
    return table


def plan_addresses(ports: Sequence[Port]) -> dict[int, str]:
    """NPU id -> address of a host's planned ports (for ``serve explain``'s rank table)."""
    return {port.device: port.address for port in ports}
