"""Multi-node serving groups: which hosts serve one instance of a multi-node profile, and in which order.

A pool whose profile spans ``nodes`` > 1 (``deepseek-r1-w8a8-2node``) is one engine instance served by
``nodes`` hosts together. The hosts that define a pool of that name with that profile form its *serving
group*, in inventory order (the order of the ``npu_nodes`` group), taken ``nodes`` at a time: four hosts
with a 2-node pool ``ds`` make two groups. The first host of a group is the **head** (rank 0): it runs the
API server and the data-parallel coordinator, and every other member reaches it at its inventory address
(``ansible_host``). The others are **headless workers**.

This module is the one definition of the groups, formed from a plain view of each host
(:class:`HostView`): :func:`serving_groups`, and :func:`grouping_problems` for ``provision validate``,
which refuses before any host is touched what the run would refuse. :func:`serving_groups_of` forms them
from a set of host variables, Ansible's ``hostvars`` inside a play or :attr:`Inventory.hosts
<provision.inventory.load.Inventory.hosts>` on the controller. What running a group takes (HCCL ports,
ranks, rollout batches) is :mod:`provision.serving.multinode`. Pure functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from provision.inventory.load import host_var, plain
from provision.inventory.profiles import (
    DEFAULT_DP_RPC_PORT,
    ProfileError,
    all_profiles,
    check_fits,
    profile_env,
)
from provision.inventory.schema import NpuPool, ServingProfile


class HostView(TypedDict):
    """What the grouping reads of one host (:func:`inventory_view`)."""

    host: str
    address: str
    """``ansible_host``, else the host's name."""
    pools: list[Any]
    """``npu_pools_list``"""
    profiles: dict[str, Any]
    """``vllm_serve_profiles``"""
    env: dict[str, Any]
    """``vllm_serve_env``"""


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

    def index(self, host: str) -> int:
        return self.hosts.index(host)

    def describe(self) -> str:
        """``serving group ds (profile deepseek-r1-w8a8-2node: head node1, worker node2)``."""
        workers = ", ".join(self.hosts[1:])
        return f"serving group {self.name} (profile {self.profile}: head {self.head.host}, workers {workers})"


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
            env = profile_env(profile, extra=plain(raw.get("env") or {}))
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
    """The serving groups of every multi-node pool, from each host's view (:class:`HostView`, in
    inventory order). Raises :class:`ProfileError` when the hosts of a pool cannot be split into whole
    groups, or when they disagree on what the profile is (the first of :func:`grouping_problems`)."""
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


def inventory_view(hosts: Iterable[str], hostvars: Any) -> list[HostView]:
    """The :class:`HostView` of each of ``hosts``, read with :func:`~provision.inventory.load.host_var`
    from ``hostvars`` (Ansible's, or any host -> variables mapping): ``ansible_host``, ``npu_pools_list``,
    ``vllm_serve_profiles``, ``vllm_serve_env``."""
    return [
        HostView(
            host=str(host),
            address=str(host_var(hostvars, host, "ansible_host", str(host))),
            pools=host_var(hostvars, host, "npu_pools_list", []),
            profiles=host_var(hostvars, host, "vllm_serve_profiles", {}),
            env=host_var(hostvars, host, "vllm_serve_env", {}),
        )
        for host in hosts
    ]


def serving_groups_of(hosts: Iterable[str], hostvars: Any) -> list[ServingGroup]:
    """The serving groups of ``hosts`` (an inventory group, in its order) as ``hostvars`` defines them:
    Ansible's ``hostvars`` inside a play, :attr:`Inventory.hosts <provision.inventory.load.Inventory.hosts>`
    on the controller. Raises :class:`ProfileError` (an InputError) or ValueError as
    :func:`serving_groups`."""
    return serving_groups(inventory_view(hosts, hostvars))
