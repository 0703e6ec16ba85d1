"""Running multi-node serving groups: the ports a group needs, each node's rank, the rollout batches.

The groups themselves (which hosts serve one instance of a multi-node profile, head first) are
:mod:`provision.inventory.groups`. The ``hccn_gate`` role forms them, gates every NPU of every member on the
ports :func:`required_ports` names (:func:`group_dict`: a group as plain data for the roles), and only then
publishes each host's place in its groups (:func:`host_ranks`, the ``hccn_gate_ranks`` fact) for the
``vllm_serve`` role, which starts heads first and workers after (vLLM ``--headless
--data-parallel-start-rank`` on the workers). ``provision serve status`` reads the same places, and the
rolling upgrade's batches (:func:`rolling_batches`) keep a group's nodes in one batch. Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from provision.inventory.groups import Member, ServingGroup
from provision.inventory.profiles import ProfileError
from provision.serving.profiles import unit_name

HCCL_IF_BASE_PORT = 60000
"""HCCL's first host port when ``HCCL_IF_BASE_PORT`` is unset (CANN docs, environment variables)."""
HCCL_IF_PORT_COUNT = 32
"""Ports HCCL takes from its base port: 16 in CANN <= 8.2, 32 from CANN 8.3 (A2 and A3)."""


def hccl_host_ports(env: Mapping[str, str]) -> list[int]:
    """The host ports HCCL takes with an instance environment (a :class:`Member`'s ``env``):
    ``HCCL_IF_BASE_PORT`` (default 60000) + 32, and the range of ``HCCL_HOST_SOCKET_PORT_RANGE`` when it is
    set to ``A-B`` (``auto`` leaves it to the OS)."""
    raw = str(env.get("HCCL_IF_BASE_PORT", "")).strip()
    base = int(raw) if raw.isdigit() else HCCL_IF_BASE_PORT
    ports = set(range(base, min(base + HCCL_IF_PORT_COUNT, 65536)))
    spread = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", str(env.get("HCCL_HOST_SOCKET_PORT_RANGE", "")))
    if spread and int(spread.group(1)) <= int(spread.group(2)) <= 65535:
        ports |= set(range(int(spread.group(1)), int(spread.group(2)) + 1))
    return sorted(ports)


def required_ports(group: ServingGroup, member: Member) -> dict[int, str]:
    """Port -> what needs it, on ``member`` of ``group``: the head's API port and DP RPC port, HCCL's host
    ports (:func:`hccl_host_ports`)."""
    ports: dict[int, str] = {}
    for port in hccl_host_ports(member.env):
        ports[port] = "an HCCL host port (HCCL_IF_BASE_PORT)"
    if member.host == group.head.host:
        ports[group.port] = f"the API port of pool {group.pool}"
        if group.rpc_port is not None:
            ports[group.rpc_port] = "the data-parallel RPC port (--data-parallel-rpc-port)"
    return ports


def group_dict(group: ServingGroup) -> dict[str, Any]:
    """``group`` as plain data for the roles (``hccn_gate_groups``), with each member's required ports."""
    return {
        "name": group.name,
        "pool": group.pool,
        "profile": group.profile,
        "unit": unit_name(group.pool),
        "port": group.port,
        "rpc_port": group.rpc_port,
        "native_dp": group.native_dp,
        "head": group.head.host,
        "head_address": group.head.address,
        "hosts": group.hosts,
        "description": group.describe(),
        "members": [
            {
                "host": m.host,
                "address": m.address,
                "devices": list(m.devices),
                "ports": {str(port): why for port, why in sorted(required_ports(group, m).items())},
            }
            for m in group.members
        ],
    }


def rolling_batches(hosts: Sequence[str], groups: Iterable[Sequence[str]], batch: int | str) -> list[int]:
    """Sizes of consecutive batches of ``hosts`` (a play's hosts, in order) for a rolling run (the play's
    ``serial`` as a list): ``batch`` hosts at a time (a number or ``N%`` of the hosts, at least 1), except
    that a batch grows until it holds every member of each serving group it starts, so that a multi-node
    group is restarted, gated and rolled back as a unit. ``groups``: the hosts of each serving group.
    Members outside ``hosts`` (``--limit``) are ignored here: the HCCN gate refuses such a group."""
    size = batch_size(batch, len(hosts))
    index = {str(host): i for i, host in enumerate(hosts)}
    last = list(range(len(hosts)))  # host i -> the last play index of any group it belongs to
    for group in groups:
        spots = [index[str(h)] for h in group if str(h) in index]
        for spot in spots:
            last[spot] = max(last[spot], *spots)
    sizes: list[int] = []
    start = 0
    while start < len(hosts):
        end = min(start + size, len(hosts))
        spot = start
        while spot < end:
            end = max(end, last[spot] + 1)
            spot += 1
        sizes.append(end - start)
        start = end
    return sizes or [size]


def batch_size(batch: int | str, count: int) -> int:
    """``2`` or ``"25%"`` (of ``count`` hosts, rounded down) as a number of hosts, at least 1."""
    text = str(batch).strip()
    try:
        if text.endswith("%"):
            return max(1, int(float(text[:-1]) * count / 100))
        value = int(text)
    except ValueError:
        raise ProfileError(
            f"vllm_serve_upgrade_batch must be a number of nodes or a percentage (2, 25%), not {batch!r}"
        ) from None
    if value < 1:
        raise ProfileError(f"vllm_serve_upgrade_batch must be at least 1, not {batch!r}")
    return value


def host_ranks(
    groups: Sequence[Mapping[str, Any]],
    host: str,
    *,
    node_ip: str | None = None,
    ifname: str | None = None,
) -> dict[str, dict[str, Any]]:
    """``host``'s place in each of its groups (:func:`group_dict` form), by pool: what the
    ``vllm_serve`` role needs to start it.

    ``{"index": 0, "role": "head" | "worker", "group": "ds", "head": "node1", "head_address": "10.0.0.1",
    "rpc_port": 13389, "hosts": [...], "workers": [...], "node_ip": ..., "ifname": ...}``; ``node_ip`` and
    ``ifname`` (this host's address and the interface holding it) become ``HCCL_IF_IP`` and the
    ``*_SOCKET_IFNAME`` variables.
    """
    ranks: dict[str, dict[str, Any]] = {}
    for group in groups:
        hosts = [str(h) for h in group["hosts"]]
        if host not in hosts:
            continue
        index = hosts.index(host)
        ranks[str(group["pool"])] = {
            "index": index,
            "role": "head" if index == 0 else "worker",
            "group": group["name"],
            "profile": group["profile"],
            "head": hosts[0],
            "head_address": group["head_address"],
            "rpc_port": group["rpc_port"],
            "native_dp": group["native_dp"],
            "hosts": hosts,
            "workers": hosts[1:],
            "node_ip": node_ip,
            "ifname": ifname,
        }
    return ranks


def group_outcomes(
    instances: Sequence[Mapping[str, Any]],
    facts: Callable[[str, str], Any],
    *,
    rollback: bool,
) -> dict[str, dict[str, Any]]:
    """After the heads' health gate: the multi-node pools of this node whose group failed it, by pool.

    ``instances``: this node's ``vllm_serve`` instances (``multinode`` = its place in the group, from
    :func:`host_ranks`); ``facts(host, name)``: a fact of a member (``hostvars``). The role's facts read:
    ``__vllm_serve_head_verdicts`` (the head: pool -> its endpoint verdict), ``__vllm_serve_group_restart``
    (pools restarted in this run), ``__vllm_serve_snapshot`` (pools whose running configuration was kept as
    ``previous/`` on that member) and ``__vllm_serve_new`` (pools installed for the first time there).

    A failed group goes back as a unit when ``rollback`` is on, it was restarted for a change in this run,
    at least one member kept a previous configuration and no member is new (one node alone cannot go
    back). Each outcome: ``verdict`` (the head's), ``rollback`` (bool), ``why_not`` (when not), ``group``,
    ``head``, ``hosts``, ``workers``, ``restore`` (this node keeps a ``previous/`` to restore)."""

    def listed(host: str, name: str) -> list[str]:
        value = facts(host, name)
        return [str(v) for v in value] if isinstance(value, list | tuple) else []

    out: dict[str, dict[str, Any]] = {}
    for item in instances:
        group = item.get("multinode")
        if not group:
            continue
        pool = str(item["pool"])
        head = str(group["head"])
        verdicts = facts(head, "__vllm_serve_head_verdicts")
        verdict = verdicts.get(pool) if isinstance(verdicts, Mapping) else None
        if not isinstance(verdict, Mapping) or verdict.get("ready"):
            continue
        hosts = [str(h) for h in group.get("hosts") or []]
        me = hosts[int(group.get("index", 0))] if hosts else head
        restarted = any(pool in listed(h, "__vllm_serve_group_restart") for h in hosts)
        kept = [h for h in hosts if pool in listed(h, "__vllm_serve_snapshot")]
        new = [h for h in hosts if pool in listed(h, "__vllm_serve_new")]
        why_not = ""
        if not rollback:
            why_not = "vllm_serve_rollback is off"
        elif not restarted or not kept:
            why_not = "no previous configuration to go back to (its arguments and environment did not change)"
        elif new:
            why_not = f"no previous configuration on {', '.join(new)} (new there): the group cannot go back"
        out[pool] = {
            "verdict": dict(verdict),
            "rollback": not why_not,
            "why_not": why_not,
            "group": str(group.get("group", pool)),
            "head": head,
            "hosts": hosts,
            "workers": hosts[1:],
            "restore": pool in listed(me, "__vllm_serve_snapshot"),
        }
    return out
