"""Multi-node serving groups: which nodes serve one instance of a multi-node profile, and in which order.

A pool whose profile spans ``nodes`` > 1 (``deepseek-r1-w8a8-2node``) is one engine instance served by
``nodes`` hosts together. The hosts that define a pool of that name with that profile form its *serving
group*, in inventory order (the order of the ``npu_nodes`` group), taken ``nodes`` at a time: four hosts
with a 2-node pool ``ds`` make two groups. The first host of a group is the **head** (rank 0): it runs the
API server and the data-parallel coordinator, and every other member reaches it at its inventory address
(``ansible_host``). The others are **headless workers** (vLLM ``--headless --data-parallel-start-rank``).

The ``hccn_gate`` role computes the groups with :func:`serving_groups`, gates every NPU of every member,
and only then publishes each host's place in its groups (:func:`host_ranks`, the ``hccn_gate_ranks``
fact) for the ``vllm_serve`` role, which starts heads first and workers after. The same grouping serves
``provision validate`` (:func:`grouping_problems`: refused before any host is touched), ``provision serve
status`` (which host is a worker of which head) and the rolling upgrade's batches (:func:`rolling_batches`:
a group's nodes always go in the same batch). Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from provision.inventory.load import plain
from provision.inventory.schema import NpuPool, ServingProfile
from provision.serving.profiles import (
    DEFAULT_DP_RPC_PORT,
    ProfileError,
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


@dataclass(frozen=True)
class GroupingProblem:
    """Why the hosts of a multi-node pool do not form whole serving groups: ``hosts`` are the hosts that
    define the pool (in inventory order), ``field`` the pool entry's field at fault."""

    pool: str
    profile: str
    hosts: tuple[str, ...]
    field: str
    message: str


@dataclass(frozen=True)
class _Entry:
    member: Member
    profile: ServingProfile
    pool: NpuPool


def _entries(hosts: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], list[_Entry]]:
    """The hosts of every multi-node pool, keyed by (pool name, profile name), in inventory order."""
    found: dict[tuple[str, str], list[_Entry]] = {}
    for raw in hosts:
        host = str(raw["host"])
        address = str(raw.get("address") or host)
        profiles = all_profiles(raw.get("profiles") or {})
        for item in plain(raw.get("pools") or []):
            pool = NpuPool.model_validate(item)
            if pool.profile is None:
                continue
            profile = profiles.get(pool.profile)
            if profile is None:
                raise ProfileError(f"{host}: pool {pool.name}: unknown serving profile {pool.profile!r}")
            if profile.nodes < 2:
                continue
            check_fits(profile, pool, pool.profile)
            env = vllm_env(profile, pool, extra=plain(raw.get("env") or {}))
            member = Member(host, address, tuple(pool.devices), env)
            found.setdefault((pool.name, pool.profile), []).append(_Entry(member, profile, pool))
    return found


def _problems(pool_name: str, profile_name: str, entries: Sequence[_Entry]) -> list[GroupingProblem]:
    nodes = entries[0].profile.nodes
    hosts = tuple(entry.member.host for entry in entries)
    problems: list[GroupingProblem] = []
    if len(entries) % nodes:
        problems.append(
            GroupingProblem(
                pool_name,
                profile_name,
                hosts,
                "profile",
                f"pool {pool_name} (profile {profile_name}, {nodes} nodes per instance) is defined on "
                f"{len(entries)} host(s) ({', '.join(hosts)}): not a multiple of {nodes}. Define it on every "
                "node of each serving group, and on no other host.",
            )
        )
    first = entries[0]
    for entry in entries[1:]:
        if entry.profile != first.profile or len(entry.pool.devices) != len(first.pool.devices):
            problems.append(
                GroupingProblem(
                    pool_name,
                    profile_name,
                    (first.member.host, entry.member.host),
                    "profile" if entry.profile != first.profile else "devices",
                    f"pool {pool_name}: {entry.member.host} and {first.member.host} see profile "
                    f"{profile_name} or the pool's NPU count differently; the nodes of a serving group "
                    "must agree (set vllm_serve_profiles and npu_pools_list for the group, not per host)",
                )
            )
    return problems


def grouping_problems(hosts: Iterable[Mapping[str, Any]]) -> list[GroupingProblem]:
    """Every reason the multi-node pools of ``hosts`` (as for :func:`serving_groups`) cannot be split into
    whole serving groups, all at once (``provision validate`` reports them before any host is touched)."""
    problems: list[GroupingProblem] = []
    for (pool_name, profile_name), entries in _entries(hosts).items():
        problems += _problems(pool_name, profile_name, entries)
    return problems


def serving_groups(hosts: Iterable[Mapping[str, Any]]) -> list[ServingGroup]:
    """The serving groups of every multi-node pool, from each host's inventory view, in inventory order.

    ``hosts``: ``{"host", "address", "pools" (npu_pools_list), "profiles" (vllm_serve_profiles),
    "env" (vllm_serve_env)}`` per host of the inventory group (:func:`inventory_view`). Raises
    :class:`ProfileError` when the hosts of a pool cannot be split into whole groups, or when they disagree
    on what the profile is (the first of :func:`grouping_problems`).
    """
    groups: list[ServingGroup] = []
    for (pool_name, profile_name), entries in _entries(hosts).items():
        problems = _problems(pool_name, profile_name, entries)
        if problems:
            raise ProfileError(problems[0].message)
        nodes = entries[0].profile.nodes
        count = len(entries) // nodes
        for number in range(count):
            chunk = entries[number * nodes : (number + 1) * nodes]
            profile = chunk[0].profile
            native = profile.distributed_executor_backend != "ray"
            groups.append(
                ServingGroup(
                    pool=pool_name,
                    profile=profile_name,
                    number=number + 1,
                    count=count,
                    port=chunk[0].pool.port,
                    rpc_port=(profile.data_parallel_rpc_port or DEFAULT_DP_RPC_PORT) if native else None,
                    native_dp=native,
                    members=tuple(entry.member for entry in chunk),
                    load_budget_s=profile.load_budget_s,
                )
            )
    return groups


def inventory_view(hosts: Iterable[str], hostvars: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """What :func:`serving_groups` reads of each host, from Ansible's ``hostvars`` (or any host -> variables
    mapping): ``ansible_host``, ``npu_pools_list``, ``vllm_serve_profiles``, ``vllm_serve_env``."""
    views = []
    for host in hosts:
        try:
            values = hostvars[host]
        except KeyError:
            values = {}

        def get(name: str, default: Any, values: Mapping[str, Any] = values) -> Any:
            value = values.get(name) if hasattr(values, "get") else None
            return default if value is None else value

        views.append(
            {
                "host": str(host),
                "address": get("ansible_host", str(host)),
                "pools": get("npu_pools_list", []),
                "profiles": get("vllm_serve_profiles", {}),
                "env": get("vllm_serve_env", {}),
            }
        )
    return views


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
