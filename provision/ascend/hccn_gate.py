"""The HCCN gate of a multi-node serving group: probe each node's NPU network ports, decide on the controller.

Before the nodes of a multi-node profile start (``provision.serving.multinode``), every NPU of every member
must be fit for HCCL (FACTS.md §5, vllm-ascend's multi-node checklist):

* ``hccn_tool -i N -link -g`` says ``UP``;
* ``hccn_tool -i N -net_health -g`` says ``Success`` (the port reaches its detection address);
* ``hccn_tool -i N -ip -g`` shows an address, and no two NPUs of the group share one;
* ``hccn_tool -i N -tls -g`` shows the same TLS switch on every NPU of the group (TLS-enabled and
  TLS-disabled ports cannot link);
* every NPU reaches the NPU at the same position of every other member (the same "rail"):
  ``hccn_tool -i N -ping -g address PEER`` answers with ``0.00% packet loss``;
* the host ports the instance needs are free, or held by the instance itself (``vllm-<pool>.service``):
  HCCL's host ports (``HCCL_IF_BASE_PORT``, default 60000, 32 ports), and on the head the API port and the
  data-parallel RPC port.

One read-only shell probe per node and phase (:data:`PROBE_SCRIPT`) collects the tool outputs in ONE SSH
round trip; :func:`parse_probe` turns them into plain data with the parsers of :mod:`provision.ascend.hccn`
(the one copy of each parser); :func:`gate_problems` decides. Two phases, because a node can only ping its
peers once their addresses are known: phase 1 (``dev=N``, ``ports``) on every node, then phase 2
(``ping=N,ADDR``) with the addresses phase 1 found (:func:`ping_plan`).
"""

from __future__ import annotations

import ipaddress
import re
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from provision.ascend.facts import MARK, sections
from provision.ascend.hccn import (
    parse_hccn_gateway,
    parse_hccn_ip,
    parse_hccn_link,
    parse_hccn_net_health,
    parse_hccn_netdetect,
    parse_hccn_ping,
    parse_hccn_tls,
)
from provision.ascend.npu_smi import ParseError, parse_npu_smi_spod_info
from provision.scripts import node_script

__all__ = [
    "DEFAULT_TOOL",
    "MARK",
    "PROBE_SCRIPT",
    "Problem",
    "gate_problems",
    "parse_probe",
    "parse_ss_listeners",
    "ping_plan",
    "probe_argv",
    "refusal_message",
    "unit_of_cgroup",
]

DEFAULT_TOOL = "/usr/local/Ascend/driver/tools/hccn_tool"
LOCAL_COMMANDS = ("link", "net_health", "ip", "tls")

# Arguments after the script: the tool's path, then any of
#   dev=N          link, net_health, ip and tls of NPU N
#   conf=N         ip, gateway and netdetect of NPU N (the hccn_config role), one command at a time
#   ping=N,ADDR    ping ADDR from NPU N (pkt=K packets each, default 3)
#   ports          listening TCP sockets (ss -tlnp) and the cgroup of every process holding one
#   addr           the node's IPv4 addresses (ip -o -4 addr show)
#   resolve=NAME   NAME's IPv4 address as the node resolves it (getent ahostsv4)
# The NPUs are probed in parallel (one background job per NPU; its commands in turn). Read-only.
PROBE_SCRIPT = node_script("hccn_probe.sh")


def probe_argv(
    tool: str,
    *,
    devices: Iterable[int] = (),
    configs: Iterable[int] = (),
    pings: Iterable[tuple[int, str]] = (),
    pkt: int = 3,
    ports: bool = False,
    addresses: bool = False,
    resolve: Iterable[str] = (),
    super_pods: bool = False,
) -> list[str]:
    """The positional arguments of :data:`PROBE_SCRIPT` (after ``sh -c SCRIPT NAME``). ``super_pods``:
    read each of ``devices``' super pod ids too (``npu-smi info -t spod-info``; an A3's chips only)."""
    argv = [tool]
    argv += [f"dev={int(d)}" for d in devices]
    argv += [f"conf={int(d)}" for d in configs]
    for device, address in pings:
        if not _is_ipv4(address):  # nothing but an address reaches the shell
            raise ValueError(f"not an IPv4 address: {address!r}")
        argv.append(f"ping={int(device)},{address}")
    if pings:
        argv.append(f"pkt={int(pkt)}")
    if ports:
        argv.append("ports")
    if addresses:
        argv.append("addr")
    for name in resolve:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.-]*", name):
            raise ValueError(f"not a host name: {name!r}")
        argv.append(f"resolve={name}")
    if super_pods:
        argv.append("spod")
    return argv


# --------------------------------------------------------------------------------------------- parsing


def _last_line(text: str, rc: int) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else f"exit code {rc}, no output"


_SS_USER = re.compile(r'\("([^"]*)",pid=(\d+),fd=\d+\)')


def parse_ss_listeners(text: str) -> list[dict[str, Any]]:
    """``ss -Htlnp`` lines -> ``[{"address", "port", "processes": [{"name", "pid"}]}]``.

    A line: ``LISTEN 0 4096 0.0.0.0:8000 0.0.0.0:* users:(("python",pid=12,fd=5))``; the local address
    may be ``*:22``, ``[::]:22`` or ``127.0.0.1%lo:53``. Lines that are not sockets are skipped.
    """
    listeners: list[dict[str, Any]] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4 or not fields[1].isdigit():
            continue
        local = fields[3]
        host, sep, port = local.rpartition(":")
        if not sep or not port.isdigit():
            continue
        processes = [{"name": name, "pid": int(pid)} for name, pid in _SS_USER.findall(line)]
        listeners.append({"address": host.strip("[]"), "port": int(port), "processes": processes})
    return listeners


_UNIT = re.compile(r"/([^/]+\.(?:service|scope))(?=/|$)")


def unit_of_cgroup(text: str) -> str | None:
    """The systemd unit of a process from ``/proc/PID/cgroup`` (v2 ``0::/system.slice/x.service`` or the
    v1 ``name=systemd`` line): the innermost ``.service``/``.scope`` component."""
    lines = text.splitlines()
    preferred = [line for line in lines if line.startswith("0::") or ":name=systemd:" in line] or lines
    for line in preferred:
        units = _UNIT.findall(line.split(":", 2)[-1])
        if units:
            return str(units[-1])
    return None


def parse_probe(text: str) -> dict[str, Any]:
    """The probe's output as plain data (JSON-able, for Ansible facts)::

    {"tool": path | None, "tool_missing": path | None,
     "npus": {"5": {"link": "DOWN", "net_health": "Fault", "ip": "10.0.5.2", "netmask": ...,
                    "tls": 0 | 1 | None, "errors": ["hccn_tool -i 5 -ip -g: exit 1: ..."],
                    "super_pod": {"sdid": 16777216, "super_pod_id": 0}  # spod: an A3 chip's}},
     "pings": [{"device": 5, "address": "10.0.5.3", "success": False, "loss_pct": 100.0,
                "transmitted": 3, "received": 0, "error": None}],
     "listeners": [...] | None, "ports_error": str | None,
     "addresses": [{"ifname": "eth0", "address": "10.0.0.2", "prefix": 24}] | None,
     "resolved": {"name": "10.0.0.2" | None}}
    """
    facts: dict[str, Any] = {
        "tool": None,
        "tool_missing": None,
        "npus": {},
        "pings": [],
        "listeners": None,
        "ports_error": None,
        "addresses": None,
        "resolved": {},
    }
    units: dict[int, str | None] = {}
    for label, body in sections(text):
        words = label.split()
        kind = words[0]
        if kind == "tool":
            facts["tool"] = label.removeprefix("tool ").strip()
        elif kind == "tool-missing":
            facts["tool_missing"] = label.removeprefix("tool-missing").strip()
        elif kind == "hccn" and len(words) == 4:
            _local(
                facts["npus"].setdefault(words[1], _empty_npu()), int(words[1]), words[2], int(words[3]), body
            )
        elif kind == "ping" and len(words) == 4:
            facts["pings"].append(_ping(int(words[1]), words[2], int(words[3]), body))
        elif kind == "ss" and len(words) == 2:
            if words[1] == "0":
                facts["listeners"] = parse_ss_listeners(body)
            else:
                facts["ports_error"] = f"ss -tlnp failed: {_last_line(body, int(words[1]))}"
        elif kind == "ss-missing":
            facts["ports_error"] = "ss (iproute2) is not installed: the ports in use cannot be listed"
        elif kind == "cgroup" and len(words) == 2:
            units[int(words[1])] = unit_of_cgroup(body)
        elif kind == "addr":
            facts["addresses"] = _addresses(body)
        elif kind == "spod" and len(words) == 3:
            _super_pod(facts["npus"].setdefault(words[1], _empty_npu()), int(words[1]), int(words[2]), body)
        elif kind == "resolve" and len(words) == 2:
            first = body.split()[0] if body.split() else None
            facts["resolved"][words[1]] = first if first and _is_ipv4(first) else None
    for listener in facts["listeners"] or []:
        for process in listener["processes"]:
            process["unit"] = units.get(process["pid"])
    return facts


def _empty_npu() -> dict[str, Any]:
    return {
        "link": None,
        "net_health": None,
        "ip": None,
        "netmask": None,
        "tls": None,
        "errors": [],
    }


def _super_pod(npu: dict[str, Any], device: int, rc: int, body: str) -> None:
    """An A3 chip's ``npu-smi info -t spod-info`` into ``npu["super_pod"]``: ``{"sdid", "super_pod_id"}``;
    None, with why in ``npu["super_pod_error"]``, when the read failed. Not a reason to refuse the group:
    without it the rank table is the AI-server variant, which HCCL also takes."""
    npu["super_pod"] = None
    shown = f"npu-smi info -t spod-info (device {device})"
    if rc != 0:
        npu["super_pod_error"] = f"{shown}: exit {rc}: {_last_line(body, rc)}"
        return
    try:
        found = parse_npu_smi_spod_info(body)
    except ParseError as exc:
        npu["super_pod_error"] = f"{shown}: {exc}"
        return
    npu["super_pod"] = {"sdid": found.sdid, "super_pod_id": found.super_pod_id}


def _local(npu: dict[str, Any], device: int, command: str, rc: int, body: str) -> None:
    """One ``-g`` read into ``npu``; ``gateway`` and ``netdetect`` (read for ``conf=N`` only) are keys
    of their own, None when the read failed."""
    shown = f"hccn_tool -i {device} -{command} -g"
    if command in ("gateway", "netdetect"):
        npu[command] = None
    if rc != 0:
        npu["errors"].append(f"{shown}: exit {rc}: {_last_line(body, rc)}")
        return
    try:
        if command == "link":
            npu["link"] = parse_hccn_link(body)
        elif command == "net_health":
            npu["net_health"] = parse_hccn_net_health(body).status
        elif command == "ip":
            ip = parse_hccn_ip(body)
            npu["ip"], npu["netmask"] = ip.ipaddr, ip.netmask
        elif command == "tls":
            npu["tls"] = 1 if parse_hccn_tls(body).enabled else 0
        elif command == "gateway":
            npu["gateway"] = parse_hccn_gateway(body).gateway
        elif command == "netdetect":
            npu["netdetect"] = parse_hccn_netdetect(body)
    except ParseError as exc:
        npu["errors"].append(f"{shown}: unreadable output: {exc}")


def _ping(device: int, address: str, rc: int, body: str) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "device": device,
        "address": address,
        "success": False,
        "loss_pct": None,
        "transmitted": None,
        "received": None,
        "error": None,
    }
    try:
        ping = parse_hccn_ping(body)
    except ParseError:
        entry["error"] = f"exit {rc}: {_last_line(body, rc)}"
        return entry
    entry.update(
        success=ping.success and rc == 0,
        loss_pct=ping.loss_pct,
        transmitted=ping.transmitted,
        received=ping.received,
    )
    if rc != 0 and ping.success:
        entry["error"] = f"exit {rc}"
    return entry


def _addresses(body: str) -> list[dict[str, Any]]:
    found = []
    for line in body.splitlines():
        m = re.match(r"^\s*\d+:\s+(\S+)\s+inet\s+(\d+\.\d+\.\d+\.\d+)/(\d+)", line)
        if m:
            found.append({"ifname": m.group(1), "address": m.group(2), "prefix": int(m.group(3))})
    return found


def _is_ipv4(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True


def node_address(facts: Mapping[str, Any], address: str) -> tuple[str | None, str | None]:
    """(IPv4 address, interface) of the node's inventory ``address`` as the node holds it, else Nones."""
    ip = address if _is_ipv4(address) else (facts.get("resolved") or {}).get(address)
    held = facts.get("addresses")
    if held is None:  # the node's addresses were not read: trust the inventory
        return ip, None
    for entry in held:
        if ip and entry.get("address") == ip:
            return ip, str(entry.get("ifname")) or None
    return None, None  # not an address of this node (NAT, a proxy): leave HCCL_IF_IP to HCCL


# --------------------------------------------------------------------------------------------- deciding


@dataclass(frozen=True)
class Problem:
    """One reason to refuse a serving group, with where it is and what to do."""

    host: str
    what: str
    npu: int | None = None
    command: str | None = None
    hint: str = ""

    @property
    def message(self) -> str:
        where = f"{self.host} NPU {self.npu}" if self.npu is not None else self.host
        text = f"{where}: {self.what}"
        if self.command:
            text += f" ({self.command})"
        if self.hint:
            text += f" — {self.hint}"
        return text


def _member_npus(member_devices: Sequence[int]) -> list[int]:
    return [int(d) for d in member_devices]


def ping_plan(
    devices: Mapping[str, Sequence[int]],
    probes: Mapping[str, Mapping[str, Any] | None],
    host: str,
) -> list[dict[str, Any]]:
    """The pings ``host`` sends: from each of its group NPUs to the NPU at the same position of every other
    member (the same rail), to the address that member's phase-1 probe found. ``devices``: member ->
    its pool's devices, in group order. A peer NPU without an address is left out (reported already)."""
    mine = _member_npus(devices[host])
    plan = []
    for peer, peer_devices in devices.items():
        if peer == host:
            continue
        probe = probes.get(peer) or {}
        npus = probe.get("npus") or {}
        for position, device in enumerate(mine):
            if position >= len(peer_devices):
                continue
            peer_device = int(peer_devices[position])
            address = (npus.get(str(peer_device)) or {}).get("ip")
            if address and _is_ipv4(str(address)):
                plan.append(
                    {"device": device, "address": str(address), "peer": peer, "peer_device": peer_device}
                )
    return plan


_HEALTH_HINTS = {
    "Init": "no detection address is set, so the port was never checked: set one on every NPU, e.g. the "
    "gateway of its NPU network (hccn_tool -i {n} -netdetect -s address <gateway>)",
    "Detect ip set": "the detection address was just set and is not checked yet: run the apply again in a "
    "few seconds",
}


def gate_problems(
    group_hosts: Sequence[str],
    devices: Mapping[str, Sequence[int]],
    probes: Mapping[str, Mapping[str, Any] | None],
    pings: Mapping[str, Mapping[str, Any] | None],
    ports: Mapping[str, Mapping[int, str]],
    *,
    unit: str,
    in_play: Collection[str] | None = None,
) -> list[Problem]:
    """Every reason to refuse the group ``group_hosts`` (head first), in node and NPU order.

    ``devices``: member -> its pool's NPUs; ``probes``: member -> phase-1 facts (:func:`parse_probe`) or
    None when the member has none (failed or unreachable earlier, or not in this run); ``pings``: member
    -> phase-2 facts; ``ports``: member -> {port: what needs it}; ``unit``: the instance's systemd unit
    (ports it holds are ours).
    """
    problems: list[Problem] = []
    for host in group_hosts:
        if in_play is not None and host not in in_play:
            problems.append(
                Problem(
                    host,
                    "is not in this run (excluded by --limit, or it failed or was unreachable earlier)",
                    hint="a serving group starts with all its nodes or not at all: run on every node of it",
                )
            )
            continue
        probe = probes.get(host)
        if not probe:
            problems.append(Problem(host, "has no HCCN probe result (the probe failed on it)"))
            continue
        problems += _local_problems(host, devices[host], probe)
        problems += _port_problems(host, probe, ports.get(host) or {}, unit)
    problems += _tls_problems(group_hosts, devices, probes)
    problems += _duplicate_problems(group_hosts, devices, probes)
    problems += _ping_problems(group_hosts, devices, probes, pings)
    return problems


def _local_problems(host: str, devices: Sequence[int], probe: Mapping[str, Any]) -> list[Problem]:
    if probe.get("tool_missing") is not None or not probe.get("tool"):
        path = probe.get("tool_missing") or DEFAULT_TOOL
        return [
            Problem(
                host,
                f"hccn_tool not found ({path})",
                hint="install the NPU driver (playbooks/driver.yml), or set hccn_gate_tool to its path",
            )
        ]
    problems: list[Problem] = []
    npus = probe.get("npus") or {}
    for n in _member_npus(devices):
        npu = npus.get(str(n))
        if npu is None:
            problems.append(Problem(host, "was not probed", n))
            continue
        errors = [str(e) for e in npu.get("errors") or []]
        for error in errors:
            if f"-i {n} -ip -g" in error:
                continue  # reported as the missing address below, with the tool's words
            problems.append(
                Problem(host, error, n, hint="the driver must be loaded and the NPU present (npu-smi info)")
            )
        link = npu.get("link")
        if link is not None and link != "UP":
            problems.append(
                Problem(
                    host,
                    f"link {link}",
                    n,
                    f"hccn_tool -i {n} -link -g",
                    "check the optical module and cable of this NPU's port and the switch port it plugs "
                    f"into (hccn_tool -i {n} -optical -g, -link_stat -g), then run the apply again",
                )
            )
        health = npu.get("net_health")
        if health is not None and health.lower() != "success" and link in (None, "UP"):
            hint = _HEALTH_HINTS.get(
                health,
                f"the port cannot reach its detection address (hccn_tool -i {n} -netdetect -g): check the "
                f"address, the gateway (hccn_tool -i {n} -gateway -g) and the switch",
            ).format(n=n)
            problems.append(
                Problem(host, f"net health {health}", n, f"hccn_tool -i {n} -net_health -g", hint)
            )
        if npu.get("ip") is None:
            said = next((re.sub(r"^.*?: exit \d+: ", "", e) for e in errors if f"-i {n} -ip -g" in e), None)
            problems.append(
                Problem(
                    host,
                    "no NPU address" + (f" ({said})" if said else ""),
                    n,
                    f"hccn_tool -i {n} -ip -g",
                    f"set one: hccn_tool -i {n} -ip -s address A.B.C.D netmask M.M.M.M (or address_{n}/"
                    f"netmask_{n} in /etc/hccn.conf)",
                )
            )
    return problems


def _port_problems(
    host: str, probe: Mapping[str, Any], needed: Mapping[int, str], unit: str
) -> list[Problem]:
    if not needed:
        return []
    if probe.get("ports_error"):
        return [Problem(host, str(probe["ports_error"]), hint="install iproute2 (ss)")]
    problems: list[Problem] = []
    listeners = probe.get("listeners") or []
    for port in sorted(needed):
        holders = [lst for lst in listeners if int(lst["port"]) == int(port)]
        strangers = []
        for listener in holders:
            processes = listener.get("processes") or []
            if not processes:
                strangers.append(f"an unknown process on {listener['address']}")
            for process in processes:
                if process.get("unit") != unit:
                    owner = process.get("unit") or "no systemd unit"
                    strangers.append(f"{process.get('name')} (pid {process.get('pid')}, {owner})")
        if strangers:
            problems.append(
                Problem(
                    host,
                    f"port {port}, {needed[port]}, is held by {', '.join(sorted(set(strangers)))}",
                    command="ss -tlnp",
                    hint=_port_hint(needed[port]),
                )
            )
    return problems


def _port_hint(why: str) -> str:
    if "HCCL" in why:
        return (
            "stop that process, or give this instance other HCCL ports (HCCL_IF_BASE_PORT in the profile's "
            "env; two instances on one host need different bases)"
        )
    if "RPC" in why:
        return "stop that process, or set another data_parallel_rpc_port in the profile"
    return "stop that process, or give the pool another port"


def _tls_problems(
    hosts: Sequence[str], devices: Mapping[str, Sequence[int]], probes: Mapping[str, Mapping[str, Any] | None]
) -> list[Problem]:
    seen: dict[tuple[str, int], int] = {}
    for host in hosts:
        npus = (probes.get(host) or {}).get("npus") or {}
        for n in _member_npus(devices.get(host, [])):
            value = (npus.get(str(n)) or {}).get("tls")
            if value is not None:
                seen[(host, n)] = int(value)
    values = set(seen.values())
    if len(values) < 2:
        return []
    count = {v: sum(1 for x in seen.values() if x == v) for v in values}
    majority = max(sorted(values), key=lambda v: count[v])
    word = {0: "disabled", 1: "enabled"}
    return [
        Problem(
            host,
            f"TLS {word.get(value, value)} while {count[majority]} other NPU(s) of the group have it "
            f"{word.get(majority, majority)}",
            n,
            f"hccn_tool -i {n} -tls -g",
            "TLS-enabled and TLS-disabled ports cannot link: set every NPU of every node alike, e.g. "
            "for i in 0 1 2 3 4 5 6 7; do hccn_tool -i $i -tls -s enable 0; done",
        )
        for (host, n), value in seen.items()
        if value != majority
    ]


def _duplicate_problems(
    hosts: Sequence[str], devices: Mapping[str, Sequence[int]], probes: Mapping[str, Mapping[str, Any] | None]
) -> list[Problem]:
    owners: dict[str, list[tuple[str, int]]] = {}
    for host in hosts:
        npus = (probes.get(host) or {}).get("npus") or {}
        for n in _member_npus(devices.get(host, [])):
            ip = (npus.get(str(n)) or {}).get("ip")
            if ip:
                owners.setdefault(str(ip), []).append((host, n))
    problems = []
    for ip, places in owners.items():
        if len(places) > 1:
            others = ", ".join(f"{h} NPU {n}" for h, n in places[1:])
            host, n = places[0]
            problems.append(
                Problem(
                    host,
                    f"NPU address {ip} is also used by {others}",
                    n,
                    f"hccn_tool -i {n} -ip -g",
                    "every NPU port needs its own address (hccn_tool -i N -ip -s address A netmask M)",
                )
            )
    return problems


def _ping_problems(
    hosts: Sequence[str],
    devices: Mapping[str, Sequence[int]],
    probes: Mapping[str, Mapping[str, Any] | None],
    pings: Mapping[str, Mapping[str, Any] | None],
) -> list[Problem]:
    problems: list[Problem] = []
    ordered = {h: devices[h] for h in hosts if h in devices}
    for host in hosts:
        if not probes.get(host) or not (probes.get(host) or {}).get("tool"):
            continue
        expected = ping_plan(ordered, probes, host)
        sent = (pings.get(host) or {}).get("pings")
        if sent is None:
            if expected:
                problems.append(Problem(host, "did not run its ping matrix (the ping probe failed on it)"))
            continue
        results = {(int(p["device"]), str(p["address"])): p for p in sent}
        for target in expected:
            n, address = int(target["device"]), str(target["address"])
            result = results.get((n, address))
            peer = f"{target['peer']} NPU {target['peer_device']} ({address})"
            command = f"hccn_tool -i {n} -ping -g address {address}"
            if result is None:
                problems.append(Problem(host, f"no ping result to {peer}", n, command))
            elif not result.get("success"):
                if result.get("error"):
                    got = str(result["error"])
                elif result.get("loss_pct") is not None:
                    got = f"{float(result['loss_pct']):.2f}% packet loss"
                else:
                    got = "no answer"
                problems.append(
                    Problem(
                        host,
                        f"cannot reach {peer}: {got}",
                        n,
                        command,
                        "check that both ports are UP, their addresses and netmasks, the gateway "
                        f"(hccn_tool -i {n} -gateway -g) and the switch between {host} and {target['peer']}",
                    )
                )
    return problems


def refusal_message(description: str, problems: Sequence[Problem]) -> str:
    """The failure message of every member of a refused group."""
    lines = [f"HCCN gate: {description} refused; nothing of it is started. {len(problems)} problem(s):"]
    lines += [f"  - {p.message}" for p in problems]
    return "\n".join(lines)


def elapsed(start: float) -> float:
    return round(time.monotonic() - start, 3)
