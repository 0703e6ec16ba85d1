"""Filters of the hccn_gate role: serving groups (provision.inventory.groups, as plain data by
provision.serving.multinode) and the gate's verdict (provision.ascend.hccn_gate), one copy each, called with
plain data from hostvars (provision.inventory.load.host_var)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

from provision.errors import InputError

# provision.inventory.groups (pydantic) and provision.ascend.hccn_gate are imported inside the filters:
# Ansible imports every filter file of the search path in each task's worker process, and only the tasks
# that call these filters should pay for those imports.

# Registered results of the role's two probes, read from every member's hostvars.
LOCAL = "__hccn_gate_local"
PINGS = "__hccn_gate_pings"
LINKS = "__hccn_gate_links"


def hccn_gate_groups(hosts: Sequence[str], hostvars: Any) -> list[dict[str, Any]]:
    """Every multi-node serving group of ``hosts`` (the inventory group, in order), as plain dicts."""
    from provision.inventory.load import host_var

    pools = [pool for host in hosts for pool in host_var(hostvars, host, "npu_pools_list", []) or []]
    if not any(isinstance(pool, Mapping) and pool.get("profile") for pool in pools):
        return []  # nothing is served: no group (and no need to load the profiles)
    from provision.inventory.groups import serving_groups_of
    from provision.serving.multinode import group_dict

    try:
        return [group_dict(group) for group in serving_groups_of(hosts, hostvars)]
    except (InputError, ValueError) as exc:
        raise AnsibleFilterError(f"hccn_gate: {exc}") from exc


def hccn_gate_mine(groups: Sequence[Mapping[str, Any]], host: str) -> list[Mapping[str, Any]]:
    """The groups ``host`` belongs to."""
    return [group for group in groups if host in group["hosts"]]


def hccn_gate_devices(groups: Sequence[Mapping[str, Any]], host: str) -> list[int]:
    """The NPUs of ``host`` that its groups use (the pools' devices)."""
    devices: set[int] = set()
    for group in hccn_gate_mine(groups, host):
        for member in group["members"]:
            if member["host"] == host:
                devices.update(int(d) for d in member["devices"])
    return sorted(devices)


def hccn_gate_resolve(address: str) -> list[str]:
    """``[address]`` when it is a host name the node must resolve (for HCCL_IF_IP), else ``[]``."""
    parts = str(address).split(".")
    is_ip = len(parts) == 4 and all(p.isdigit() for p in parts)
    return [] if is_ip else [str(address)]


def _devices(group: Mapping[str, Any]) -> dict[str, list[int]]:
    return {str(m["host"]): [int(d) for d in m["devices"]] for m in group["members"]}


def _probe(hostvars: Any, host: str, name: str) -> dict[str, Any] | None:
    from provision.inventory.load import host_var

    result = host_var(hostvars, host, name)
    if not isinstance(result, Mapping) or result.get("failed") or result.get("skipped"):
        return None
    probe = result.get("probe")
    return dict(probe) if isinstance(probe, Mapping) else None


def hccn_gate_pings(groups: Sequence[Mapping[str, Any]], host: str, hostvars: Any) -> list[dict[str, Any]]:
    """The pings ``host`` sends: to the NPU at the same position of every other member of its groups."""
    from provision.ascend.hccn_gate import ping_plan

    plan: list[dict[str, Any]] = []
    for group in hccn_gate_mine(groups, host):
        probes = {h: _probe(hostvars, h, LOCAL) for h in group["hosts"]}
        for target in ping_plan(_devices(group), probes, host):
            if target not in plan:
                plan.append(target)
    return plan


def hccn_gate_links(groups: Sequence[Mapping[str, Any]], host: str) -> list[dict[str, Any]]:
    """The hccl_test pair tests ``host`` launches: those of the groups it heads (none elsewhere)."""
    from provision.ascend.hccl_check import link_plan

    plan: list[dict[str, Any]] = []
    for group in hccn_gate_mine(groups, host):
        if group["hosts"][0] == host:
            plan += [link for link in link_plan(group) if link not in plan]
    return plan


def hccn_gate_port_gbps(line: str) -> float | None:
    """The nominal speed of one NPU port of the NPU line ``line`` (``910b``, ``a3``, ``310p``)."""
    from provision.ascend.hardware import model_for_line

    model = model_for_line(str(line))
    return None if model is None else model.npu_port_gbps


def _link_figures(hostvars: Any, head: str) -> list[dict[str, Any]]:
    from provision.inventory.load import host_var

    result = host_var(hostvars, head, LINKS)
    if not isinstance(result, Mapping) or result.get("failed") or result.get("skipped"):
        return []
    return [dict(f) for f in result.get("links") or [] if isinstance(f, Mapping)]


def hccn_gate_verdict(
    groups: Sequence[Mapping[str, Any]],
    host: str,
    hostvars: Any,
    play_hosts: Sequence[str],
    check_ports: bool = True,
) -> dict[str, Any]:
    """``{"ok", "message", "groups": [{"name", "ok", "problems"}]}`` for the groups of ``host``: the same
    verdict on every member, from every member's probes and the head's pair tests (hccl_test)."""
    from provision.ascend.hccl_check import figure_problems
    from provision.ascend.hccn_gate import gate_problems, refusal_message

    verdicts = []
    for group in hccn_gate_mine(groups, host):
        hosts = [str(h) for h in group["hosts"]]
        ports = {
            str(m["host"]): ({int(p): str(why) for p, why in m["ports"].items()} if check_ports else {})
            for m in group["members"]
        }
        problems = gate_problems(
            hosts,
            _devices(group),
            {h: _probe(hostvars, h, LOCAL) for h in hosts},
            {h: _probe(hostvars, h, PINGS) for h in hosts},
            ports,
            unit=str(group["unit"]),
            in_play=list(play_hosts),
        )
        peers = set(hosts[1:])
        problems += figure_problems(f for f in _link_figures(hostvars, hosts[0]) if f.get("peer") in peers)
        verdicts.append(
            {
                "name": group["name"],
                "ok": not problems,
                "problems": [p.message for p in problems],
                "message": refusal_message(str(group["description"]), problems) if problems else "",
            }
        )
    failed = [v for v in verdicts if not v["ok"]]
    return {
        "ok": not failed,
        "groups": verdicts,
        "message": "\n".join(v["message"] for v in failed),
    }


def hccn_gate_ranks(
    groups: Sequence[Mapping[str, Any]], host: str, local: Mapping[str, Any] | None, address: str
) -> dict[str, dict[str, Any]]:
    """``host``'s place in its groups (for vllm_serve), with its address and interface for HCCL_IF_IP."""
    from provision.ascend.hccn_gate import node_address
    from provision.serving.multinode import host_ranks

    probe = local.get("probe") if isinstance(local, Mapping) else None
    ip, ifname = node_address(probe or {}, str(address))
    return host_ranks(hccn_gate_mine(groups, host), host, node_ip=ip, ifname=ifname)


def hccn_gate_rank_tables(
    groups: Sequence[Mapping[str, Any]], host: str, hostvars: Any
) -> list[dict[str, Any]]:
    """The rank table of each multi-node group of ``host`` (``{"pool", "path", "table"}``), from the
    addresses the members' probes read (the configured NPU addresses) and, on A3, their chips' super pod
    ids, in HCCL's format."""
    from provision.ascend.fabric import rank_table, rank_table_path

    out = []
    for group in hccn_gate_mine(groups, host):
        addresses: dict[str, dict[int, str]] = {}
        pods: dict[str, dict[int, dict[str, Any]]] = {}
        for member in group["hosts"]:
            probe = _probe(hostvars, str(member), LOCAL) or {}
            npus = probe.get("npus") or {}
            addresses[str(member)] = {int(d): str(v["ip"]) for d, v in npus.items() if v.get("ip")}
            pods[str(member)] = {int(d): dict(v["super_pod"]) for d, v in npus.items() if v.get("super_pod")}
        try:
            table = rank_table(group, addresses, pods)
        except ValueError as exc:
            raise AnsibleFilterError(f"hccn_gate: rank table of {group['name']}: {exc}") from exc
        out.append({"pool": group["pool"], "path": rank_table_path(str(group["pool"])), "table": table})
    return out


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "hccn_gate_groups": hccn_gate_groups,
            "hccn_gate_mine": hccn_gate_mine,
            "hccn_gate_devices": hccn_gate_devices,
            "hccn_gate_resolve": hccn_gate_resolve,
            "hccn_gate_pings": hccn_gate_pings,
            "hccn_gate_verdict": hccn_gate_verdict,
            "hccn_gate_links": hccn_gate_links,
            "hccn_gate_port_gbps": hccn_gate_port_gbps,
            "hccn_gate_ranks": hccn_gate_ranks,
            "hccn_gate_rank_tables": hccn_gate_rank_tables,
        }
