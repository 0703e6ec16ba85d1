"""Multi-node serving groups: which nodes serve one instance of a multi-node profile, and in which order.

A pool whose profile spans ``nodes`` > 1 (``deepseek-r1-w8a8-2node``) is one engine instance served by
``nodes`` hosts together. The hosts that define a pool of that name with that profile form its *serving
group*, in inventory order (the order of the ``npu_nodes`` group), taken ``nodes`` at a time: four hosts
with a 2-node pool ``ds`` make two groups. The first host of a group is the **head** (rank 0): it runs the
API server and the data-parallel coordinator, and every other member reaches it at its inventory address
(``ansible_host``). The others are **headless workers** (vLLM ``--headless --data-parallel-start-rank``).

The ``hccn_gate`` role computes the groups with :func:`serving_groups`, gates every NPU of every member,
and only then publishes each host's place in its groups (:func:`host_ranks`, the ``hccn_gate_ranks``
fact) for the ``vllm_serve`` role, which starts heads first and workers after. Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from provision.inventory.schema import NpuPool, ServingProfile
from provision.serving.profiles import (
    DEFAULT_DP_RPC_PORT,
    ProfileError,
    _plain,
    all_profiles,
    check_fits,
    unit_name,
    vllm_env,
)

HCCL_IF_BASE_PORT = 60000
"""HCCL's first host port when ``HCCL_IF_BASE_PORT`` is unset (CANN docs, environment variables)."""
HCCL_IF_PORT_COUNT = 32
"""Ports HCCL takes from its base port: 16 in CANN <= 8.2, 32 from CANN 8.3 (A2 and A3)."""


@dataclass(frozen=True)
class Member:
    """One host of a serving group: ``address`` is the inventory address the others reach it at."""

    host: str
    address: str
    devices: tuple[int, ...]
    env: Mapping[str, str]
    """The instance's environment on this host (profile ``env`` + ``vllm_serve_env``), for its HCCL ports."""


@dataclass(frozen=True)
class ServingGroup:
    """The hosts serving one instance of a multi-node profile, head first."""

    pool: str
    profile: str
    number: int
    """1, 2 ... when several groups serve pools of the same name; 1 otherwise."""
    count: int
    port: int
    rpc_port: int | None
    """The head's ``--data-parallel-rpc-port`` (None with ``distributed_executor_backend: ray``)."""
    native_dp: bool
    members: tuple[Member, ...]
    load_budget_s: float | None = None

    @property
    def head(self) -> Member:
        return self.members[0]

    @property
    def name(self) -> str:
        """``ds`` or, with several groups of the same pool, ``ds #2``."""
        return self.pool if self.count == 1 else f"{self.pool} #{self.number}"

    @property
    def hosts(self) -> list[str]:
        return [member.host for member in self.members]

    @property
    def unit(self) -> str:
        return unit_name(self.pool)

    def index(self, host: str) -> int:
        return self.hosts.index(host)

    def describe(self) -> str:
        """``serving group ds (profile deepseek-r1-w8a8-2node: head node1, worker node2)``."""
        workers = ", ".join(self.hosts[1:])
        return f"serving group {self.name} (profile {self.profile}: head {self.head.host}, workers {workers})"

    def hccl_ports(self, member: Member) -> list[int]:
        """The host ports HCCL takes on ``member``: ``HCCL_IF_BASE_PORT`` (default 60000) + 32, and the
        range of ``HCCL_HOST_SOCKET_PORT_RANGE`` when it is set to ``A-B`` (``auto`` leaves it to the OS)."""
        return hccl_host_ports(member.env)

    def required_ports(self, member: Member) -> dict[int, str]:
        """Port -> what needs it, on ``member``: the head's API port and DP RPC port, HCCL's host ports."""
        ports: dict[int, str] = {}
        for port in self.hccl_ports(member):
            ports[port] = "an HCCL host port (HCCL_IF_BASE_PORT)"
        if member.host == self.head.host:
            ports[self.port] = f"the API port of pool {self.pool}"
            if self.rpc_port is not None:
                ports[self.rpc_port] = "the data-parallel RPC port (--data-parallel-rpc-port)"
        return ports

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "pool": self.pool,
            "profile": self.profile,
            "unit": self.unit,
            "port": self.port,
            "rpc_port": self.rpc_port,
            "native_dp": self.native_dp,
            "head": self.head.host,
            "head_address": self.head.address,
            "hosts": self.hosts,
            "description": self.describe(),
            "members": [
                {
                    "host": m.host,
                    "address": m.address,
                    "devices": list(m.devices),
                    "ports": {str(port): why for port, why in sorted(self.required_ports(m).items())},
                }
                for m in self.members
            ],
        }


def hccl_host_ports(env: Mapping[str, str]) -> list[int]:
    """HCCL's host ports for an instance environment (see :meth:`ServingGroup.hccl_ports`)."""
    raw = str(env.get("HCCL_IF_BASE_PORT", "")).strip()
    base = int(raw) if raw.isdigit() else HCCL_IF_BASE_PORT
    ports = set(range(base, min(base + HCCL_IF_PORT_COUNT, 65536)))
    spread = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", str(env.get("HCCL_HOST_SOCKET_PORT_RANGE", "")))
    if spread and int(spread.group(1)) <= int(spread.group(2)) <= 65535:
        ports |= set(range(int(spread.group(1)), int(spread.group(2)) + 1))
    return sorted(ports)


def serving_groups(hosts: Iterable[Mapping[str, Any]]) -> list[ServingGroup]:
    """The serving groups of every multi-node pool, from each host's inventory view, in inventory order.

    ``hosts``: ``{"host", "address", "pools" (npu_pools_list), "profiles" (vllm_serve_profiles),
    "env" (vllm_serve_env)}`` per host of the inventory group. Raises :class:`ProfileError` when the hosts
    of a pool cannot be split into whole groups, or when they disagree on what the profile is.
    """
    found: dict[tuple[str, str], list[tuple[Member, ServingProfile, NpuPool]]] = {}
    for raw in hosts:
        host = str(raw["host"])
        address = str(raw.get("address") or host)
        profiles = all_profiles(raw.get("profiles") or {})
        for item in _plain(raw.get("pools") or []):
            pool = NpuPool.model_validate(item)
            if pool.profile is None:
                continue
            profile = profiles.get(pool.profile)
            if profile is None:
                raise ProfileError(f"{host}: pool {pool.name}: unknown serving profile {pool.profile!r}")
            if profile.nodes < 2:
                continue
            check_fits(profile, pool, pool.profile)
            env = vllm_env(profile, pool, extra=_plain(raw.get("env") or {}))
            member = Member(host, address, tuple(pool.devices), env)
            found.setdefault((pool.name, pool.profile), []).append((member, profile, pool))

    groups: list[ServingGroup] = []
    for (pool_name, profile_name), entries in found.items():
        nodes = entries[0][1].nodes
        names = ", ".join(member.host for member, _, _ in entries)
        if len(entries) % nodes:
            raise ProfileError(
                f"pool {pool_name} (profile {profile_name}, {nodes} nodes per instance) is defined on "
                f"{len(entries)} host(s) ({names}): not a multiple of {nodes}. Define it on every node of "
                "each serving group, and on no other host."
            )
        for member, profile, pool in entries[1:]:
            first_member, first_profile, first_pool = entries[0]
            if profile != first_profile or len(pool.devices) != len(first_pool.devices):
                raise ProfileError(
                    f"pool {pool_name}: {member.host} and {first_member.host} see profile {profile_name} "
                    "or the pool's NPU count differently; the nodes of a serving group must agree "
                    "(set vllm_serve_profiles and npu_pools_list for the group, not per host)"
                )
        count = len(entries) // nodes
        for number in range(count):
            chunk = entries[number * nodes : (number + 1) * nodes]
            profile = chunk[0][1]
            native = profile.distributed_executor_backend != "ray"
            groups.append(
                ServingGroup(
                    pool=pool_name,
                    profile=profile_name,
                    number=number + 1,
                    count=count,
                    port=chunk[0][2].port,
                    rpc_port=(profile.data_parallel_rpc_port or DEFAULT_DP_RPC_PORT) if native else None,
                    native_dp=native,
                    members=tuple(member for member, _, _ in chunk),
                    load_budget_s=profile.load_budget_s,
                )
            )
    return groups


def host_ranks(
    groups: Sequence[Mapping[str, Any]],
    host: str,
    *,
    node_ip: str | None = None,
    ifname: str | None = None,
) -> dict[str, dict[str, Any]]:
    """``host``'s place in each of its groups (:meth:`ServingGroup.as_dict` form), by pool: what the
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
