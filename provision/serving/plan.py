"""The serving plan: what every served pool of every host runs, worked out once.

A :class:`ServingPlan` holds a :class:`HostPlan` per host of ``npu_nodes``, which holds a :class:`PoolPlan`
per pool that names a serving profile: the unit, the port, the devices, the command line (the vLLM
arguments, the command before them, and ``docker run`` around both in container mode), the environment, the
multi-node place, the load budget with every timeout derived from it, and what "ready" means for it.

:func:`pool_plans` is the one assembly of "pool + profile -> vLLM arguments, environment, load budget" (the
pieces come from :mod:`provision.serving.profiles`, :mod:`provision.inventory.budget` and
:mod:`provision.serving.container`). Every reader goes through it: the ``vllm_serve`` role's filters (with
what the node tells them: its HCCN rank, its default runtime, its device group), ``provision serve
explain`` and ``provision bundle`` (through :func:`serving_plan` / :func:`host_plan`, from the inventory
alone), the health and bench plugins, monitoring targets and the rolling-restart rule.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import cache
from typing import Any

import yaml

from provision.ascend import fabric
from provision.errors import InputError
from provision.inventory.budget import check_overrides, load_budget
from provision.inventory.groups import serving_groups_of
from provision.inventory.listen import management_address
from provision.inventory.load import Inventory, plain
from provision.inventory.profiles import ProfileError, all_profiles, check_fits
from provision.inventory.roles import role_value
from provision.inventory.schema import HOST_GROUP, NpuPool
from provision.paths import ansible_root
from provision.serving.container import (
    API_SERVER_COMMAND,
    DRIVER_MOUNTS,
    ContainerSettings,
    container_name,
    image_command,
    run_argv,
)
from provision.serving.multinode import group_dict, host_ranks
from provision.serving.profiles import (
    DEFAULT_BIND_HOST,
    NodeRank,
    served_name,
    unit_name,
    vllm_args,
    vllm_env,
)

DEFAULT_ARCH = "aarch64"
"""The Kunpeng nodes' ``ansible_architecture``, for the default image tag (the role reads the node's)."""

READINESS = {
    "single": "ready when /health answers 200, /v1/models lists the served model and a completion returns "
    "text (the health gate)",
    "head": "ready when /health answers 200 and /v1/models lists the served model once every data-parallel "
    "rank of the group has joined (the health gate, through the head)",
    "worker": "serves no API: ready with its group, which is gated through its head",
}


@dataclass(frozen=True)
class Multinode:
    """This node's place in a multi-node serving group (``index`` 0 is the head, which serves the API):
    :func:`provision.serving.multinode.host_ranks`, typed."""

    index: int
    role: str
    group: str
    profile: str
    head: str
    head_address: str
    rpc_port: int | None
    native_dp: bool
    hosts: list[str]
    workers: list[str]
    node_ip: str | None = None
    ifname: str | None = None


@dataclass(frozen=True)
class ContainerPlan:
    """Container mode: the container an instance runs in and the settings ``docker run`` came from."""

    name: str
    image: str
    engine: str
    devices: str
    settings: ContainerSettings


@dataclass(frozen=True)
class PoolPlan:
    """One engine instance: a pool of one node served with one profile."""

    pool: str
    profile: str
    unit: str
    port: int
    devices: list[int]
    model: str
    served_model_name: str
    nodes: int
    args: list[str]
    """The vLLM arguments alone."""
    env: dict[str, str]
    load_budget_s: float | None
    description: str = ""
    notes: list[str] = field(default_factory=list)
    # Where the role fetches the weights when ``model`` is not on the node yet ('' = they must be there).
    model_url: str = ""
    model_sha256: str = ""
    # The load budget every layer's deadline comes from (provision.inventory.budget), and those deadlines.
    budget_s: int = 0
    timeouts: list[dict[str, Any]] = field(default_factory=list)
    start: str = "single"
    """``single``, ``head`` or ``worker``."""
    multinode: Multinode | None = None
    command: list[str] = field(default_factory=list)
    """What runs before the vLLM arguments (inside the container in container mode)."""
    argv: list[str] = field(default_factory=list)
    """The whole command line the unit runs."""
    container: ContainerPlan | None = None
    rank_table: dict[str, Any] | None = None
    """A multi-node group's HCCL rank table as the HCCN gate writes it (``path``; ``table`` from the
    inventory's NPU addressing plan, None when a member has none: the gate writes it from what it reads)."""

    @property
    def readiness(self) -> str:
        return READINESS[self.start]

    @property
    def mounts(self) -> list[str]:
        return _after(self.argv, "-v") if self.container else []

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def contained(self, settings: ContainerSettings, command: Sequence[str]) -> PoolPlan:
        """This instance in its container: ``argv`` becomes ``docker run ... IMAGE [command] <args>``.
        ``command``: what the container runs before the vLLM arguments when the instance has none of its
        own (a headless worker brings ``vllm serve``)."""
        inner, argv = contain(self.as_dict(), settings, command)
        return replace(
            self,
            command=inner,
            argv=argv,
            container=ContainerPlan(
                container_name(self.pool), settings.image, settings.engine, settings.devices, settings
            ),
        )


def contain(
    item: Mapping[str, Any], settings: ContainerSettings, command: Sequence[str]
) -> tuple[list[str], list[str]]:
    """(the in-container command, ``docker run ... IMAGE command <args>``) for a pool (a
    :meth:`PoolPlan.as_dict`, whose ``argv`` is its command + its vLLM ``args``): its own command, else
    ``command``."""
    argv, args = list(item["argv"]), list(item["args"])
    inner = argv[: len(argv) - len(args)] or [str(word) for word in command]
    return inner, run_argv(item, settings, inner)


@dataclass(frozen=True)
class Addresses:
    """Where a plan's node-specific addresses come from when it runs in a pod rather than on the node: the
    address the API binds, the node's own address (``HCCL_IF_IP``) and its group head's
    (``--data-parallel-address``). Values may be Kubernetes ``$(VAR)`` references, which the kubelet
    expands in a container's args and env."""

    bind_host: str
    node_ip: str
    head_address: str


@dataclass(frozen=True)
class HostPlan:
    host: str
    mode: str
    pools: list[PoolPlan]


@dataclass(frozen=True)
class ServingPlan:
    source: str
    hosts: list[HostPlan]

    def pools(self) -> list[tuple[HostPlan, PoolPlan]]:
        return [(host, pool) for host in self.hosts for pool in host.pools]


# --------------------------------------------------------------------------------------------- assembly


def pool_plans(
    pools: Iterable[Mapping[str, Any] | NpuPool],
    user_profiles: Mapping[str, Any] | None = None,
    *,
    host: str = DEFAULT_BIND_HOST,
    node_ip: str | None = None,
    ifname: str | None = None,
    extra_env: Mapping[str, Any] | None = None,
    rank: NodeRank | None = None,
    ranks: Mapping[str, Mapping[str, Any]] | None = None,
    default_budget_s: float | None = None,
    container: bool = True,
    default_budget_source: str = "",
    command: Sequence[str] = (),
    headless_command: Sequence[str] | None = None,
) -> list[PoolPlan]:
    """A :class:`PoolPlan` for every pool that names a profile (pools without one are not served).

    Its environment also holds the load budget's environment layers (:mod:`provision.inventory.budget`)
    that the profile's ``env`` and ``extra_env`` do not set; a setting of theirs shorter than the budget
    raises :class:`~provision.inventory.budget.BudgetError`. ``default_budget_s``: the budget of profiles
    without ``load_budget_s`` (``vllm_serve_load_budget_s``); ``container``: container mode (docker's
    health start period is one of the layers).

    Multi-node: ``ranks`` maps a pool to this node's place in its serving group (``index``, ``role``,
    ``head_address``, ``node_ip``, ``ifname``, ``hosts``, ``name``, ``head`` ...: the HCCN gate's
    ``hccn_gate_ranks``, or the inventory's groups for ``explain``); ``rank`` is one rank for every pool.
    ``command`` runs before the vLLM arguments, ``headless_command`` instead of it on a worker."""
    profiles = all_profiles(user_profiles)
    gated = ranks or {}
    out = []
    for raw in pools:
        pool = raw if isinstance(raw, NpuPool) else NpuPool.model_validate(plain(raw))
        if pool.profile is None:
            continue
        profile = profiles.get(pool.profile)
        if profile is None:
            known = ", ".join(sorted(profiles))
            raise ProfileError(
                f"pool {pool.name}: unknown serving profile {pool.profile!r}; defined: {known}"
            )
        check_fits(profile, pool, pool.profile)
        notes = []
        place = gated.get(pool.name)
        node_rank = rank
        pool_ip, pool_ifname = node_ip, ifname
        if place:
            node_rank = NodeRank(int(place["index"]), str(place["head_address"]))
            pool_ip = place.get("node_ip") or node_ip
            pool_ifname = place.get("ifname") or ifname
        if profile.nodes > 1 and profile.distributed_executor_backend != "ray" and node_rank is None:
            # The multi-node start (HCCN gate, head then workers) decides the rank; describe the head here.
            node_rank = NodeRank(0, pool_ip or "127.0.0.1")
            notes.append("multi-node profile: arguments shown for the head node")
        check_overrides(
            profile, pool.profile, pool=pool.name, extra_env=extra_env, default_s=default_budget_s
        )
        budget = load_budget(
            profile,
            pool.profile,
            extra_env=extra_env,
            default_s=default_budget_s,
            default_source=default_budget_source,
            container=container,
        )
        env = vllm_env(profile, pool, node_ip=pool_ip, ifname=pool_ifname, extra=extra_env)
        for key, value in budget.env().items():
            env.setdefault(key, value)  # the inventory's own setting (checked above) wins
        multinode = _multinode(place) if place and profile.nodes > 1 else None
        start = multinode.role if multinode else "single"
        run = headless_command if start == "worker" and headless_command else command
        args = vllm_args(profile, pool, host=host, rank=node_rank)
        out.append(
            PoolPlan(
                pool=pool.name,
                profile=pool.profile,
                unit=unit_name(pool.name),
                port=pool.port,
                devices=list(pool.devices),
                model=profile.model,
                served_model_name=served_name(profile),
                nodes=profile.nodes,
                args=args,
                env=env,
                load_budget_s=profile.load_budget_s,
                description=profile.description or "",
                notes=notes,
                model_url=profile.model_url or "",
                model_sha256=(profile.model_sha256 or "").lower(),
                budget_s=budget.seconds,
                timeouts=[timeout.as_dict() for timeout in budget.timeouts],
                start=start,
                multinode=multinode,
                command=[str(word) for word in run],
                argv=[*map(str, run), *args],
            )
        )
    return out


def _multinode(place: Mapping[str, Any]) -> Multinode:
    rpc_port = place.get("rpc_port")
    return Multinode(
        index=int(place["index"]),
        role=str(place["role"]),
        group=str(place.get("group") or ""),
        profile=str(place.get("profile") or ""),
        head=str(place.get("head") or ""),
        head_address=str(place["head_address"]),
        rpc_port=int(rpc_port) if rpc_port is not None else None,
        native_dp=bool(place.get("native_dp")),
        hosts=[str(h) for h in place.get("hosts") or []],
        workers=[str(h) for h in place.get("workers") or []],
        node_ip=place.get("node_ip"),
        ifname=place.get("ifname"),
    )


def container_settings(
    settings: Mapping[str, Any], *, driver_mounts: Iterable[str] | None = None
) -> ContainerSettings:
    """The role's container variables (``_vllm_serve_container`` and what the node said) as settings."""
    mounts = settings.get("driver_mounts") if driver_mounts is None else driver_mounts
    return ContainerSettings(
        image=str(settings.get("image") or ""),
        devices=str(settings.get("devices") or "runtime"),
        engine=str(settings.get("engine") or "docker"),
        shm_size=str(settings.get("shm_size") or "1g"),
        volumes=[str(v) for v in settings.get("volumes") or []],
        # sorted: the list comes through set-like filters, and the args file must not change order
        driver_mounts=sorted({str(v) for v in mounts or []}),
        extra_args=[str(v) for v in settings.get("extra_args") or []],
        group_add=[str(v) for v in settings.get("group_add") or []],
    )


# ---------------------------------------------------------------------------------- from the inventory


@cache
def _role_file(name: str) -> dict[str, Any]:
    path = ansible_root() / "roles" / "vllm_serve" / name
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return dict(data)


def serving_plan(
    inventory: Inventory, target: str | None = None, addresses: Addresses | None = None
) -> ServingPlan:
    """The plan of the hosts of ``npu_nodes`` (``target``: ``HOST`` or ``HOST/POOL``), from the inventory
    alone: what only the node knows is named in each pool's ``notes``. ``addresses``: the pod's, in place
    of the node's (``provision k8s render``)."""
    hosts = inventory.group_hosts(HOST_GROUP)
    host_name, _, pool_name = (target or "").partition("/")
    if host_name and host_name not in hosts:
        raise InputError(f"{inventory.source}: no host {host_name} in group {HOST_GROUP}")
    groups = serving_groups_of(hosts, inventory.hosts)
    tables = _rank_tables(inventory, groups)
    out = []
    for host in hosts:
        if host_name and host != host_name:
            continue
        found = host_plan(host, inventory.hosts.get(host, {}), groups, addresses)
        found = replace(
            found,
            pools=[
                replace(pool, rank_table=tables.get(pool.multinode.group)) if pool.multinode else pool
                for pool in found.pools
            ],
        )
        if pool_name:
            kept = [pool for pool in found.pools if pool.pool == pool_name]
            if not kept:
                served = ", ".join(pool.pool for pool in found.pools) or "none"
                raise InputError(
                    f"{inventory.source}: host {host} serves no pool {pool_name}; served: {served}"
                )
            found = replace(found, pools=kept)
        out.append(found)
    return ServingPlan(str(inventory.source), out)


def _rank_tables(inventory: Inventory, groups: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """Each multi-node group's rank table (by group name) from the members' NPU addressing plans."""
    out: dict[str, dict[str, Any]] = {}
    for group in groups:
        data = group_dict(group)
        addresses: dict[str, dict[int, str]] = {}
        for host in data["hosts"]:
            ports, problems = fabric.host_ports(plain(dict(inventory.hosts.get(host) or {})))
            if ports and not problems:
                addresses[str(host)] = fabric.plan_addresses(ports)
        table: dict[str, Any] | None
        try:
            table = fabric.rank_table(data, addresses)
        except ValueError:
            table = None
        out[str(data["name"])] = {"path": fabric.rank_table_path(str(data["pool"])), "table": table}
    return out


def host_plan(
    host: str, variables: Mapping[str, Any], groups: Sequence[Any] = (), addresses: Addresses | None = None
) -> HostPlan:
    """One host's plan from its inventory variables over the role's defaults (``groups``: the
    inventory's serving groups, :func:`provision.inventory.groups.serving_groups_of`; ``addresses``: a
    pod's, see :class:`Addresses`)."""

    def var(name: str) -> Any:
        return role_value(variables, name, "vllm_serve")

    mode = str(var("vllm_serve_mode") or "container")
    budget_default = var("vllm_serve_load_budget_s")
    address = str(variables.get("ansible_host") or host)
    bind_host = str(var("vllm_serve_bind_host") or management_address(address))  # the role's default
    if addresses is not None:
        address, bind_host = addresses.node_ip, addresses.bind_host
    # The same places the HCCN gate hands the role (hccn_gate_ranks), without the interface it finds.
    ranks = host_ranks([group_dict(group) for group in groups], host, node_ip=address)
    if addresses is not None:
        ranks = {pool: {**place, "head_address": addresses.head_address} for pool, place in ranks.items()}
    found = pool_plans(
        [p for p in plain(variables.get("npu_pools_list") or []) if isinstance(p, Mapping)],
        var("vllm_serve_profiles") or {},
        host=bind_host,
        extra_env=var("vllm_serve_env") or {},
        ranks=ranks,
        default_budget_s=float(budget_default) if budget_default else None,
        container=mode == "container",
        default_budget_source="vllm_serve_load_budget_s"
        + ("" if "vllm_serve_load_budget_s" in variables else " (the role's default)"),
        command=_command(mode, "single", var),
        headless_command=_command(mode, "worker", var),
    )
    pools = []
    for pool in found:
        notes = list(pool.notes) if pool.multinode is None else []
        if pool.nodes > 1:
            notes.append(
                f"HCCL_IF_IP={address} (this node's inventory address) and GLOO_SOCKET_IFNAME, "
                "TP_SOCKET_IFNAME, HCCL_SOCKET_IFNAME (the interface holding it) are set on the node by "
                "the HCCN gate"
            )
        pool = replace(pool, notes=notes)
        if mode == "container":
            settings, container_notes = _container(var)
            notes += container_notes
            command: list[str] = []
            if not pool.command:  # an API server: the image's entrypoint, or the command the role supplies
                setting = var("vllm_serve_image_command") or []
                if setting:
                    command = image_command(setting, None)
                elif var("vllm_serve_image"):
                    notes.append(
                        "vllm_serve_image_command []: shown for an image with our entrypoint, which serves "
                        "the vLLM arguments; the role reads the image's entrypoint on the node, and an image "
                        "without it (the official quay.io/ascend/vllm-ascend) gets "
                        f"`{' '.join(API_SERVER_COMMAND)}` before them"
                    )
            pool = pool.contained(settings, command)
        pools.append(pool)
    return HostPlan(host, mode, pools)


def _command(mode: str, role: str, var: Any) -> list[str]:
    """The command before the vLLM arguments (the role's ``vars/main.yml``): a headless worker runs
    ``vllm serve``, the others the API server module."""
    table = _role_file("vars/main.yml")
    key = "_vllm_serve_headless_commands" if role == "worker" else "_vllm_serve_commands"
    venv = str(var("vllm_serve_venv") or "")
    # The only template in these commands is the venv's path.
    return [str(word).replace("{{ vllm_serve_venv }}", venv) for word in table[key][mode]]


def _container(var: Any) -> tuple[ContainerSettings, list[str]]:
    notes: list[str] = []
    devices = str(var("vllm_serve_container_devices") or "auto")
    if devices == "auto":
        devices = "runtime"
        notes.append(
            "vllm_serve_container_devices auto: shown as runtime (the node's docker has the Ascend Docker "
            "Runtime as its default runtime); any other default runtime gives --device per NPU instead"
        )
    image = var("vllm_serve_image")
    if not image:
        image = image_reference(var, None, DEFAULT_ARCH)
        notes.append(
            f"vllm_serve_image: the default tag for an {DEFAULT_ARCH} node (the role reads the node's "
            "architecture)"
        )
    if devices == "device":
        notes.append("driver files: those of the list that exist on the node are mounted")
    group = var("vllm_serve_container_device_group") or "HwHiAiUser"
    notes.append(f"--group-add <gid of {group}> is added when the node has that group")
    settings = container_settings(
        {
            "image": image,
            "devices": devices,
            "engine": var("vllm_serve_container_engine"),
            "shm_size": var("vllm_serve_container_shm_size"),
            "volumes": var("vllm_serve_container_volumes"),
            "extra_args": var("vllm_serve_container_args"),
        },
        driver_mounts=DRIVER_MOUNTS,
    )
    return settings, notes


def image_reference(var: Any, stack: str | None, arch: str) -> str:
    """The serving image a node runs: ``vllm_serve_image``, else the repository with the tag
    ``provision image build`` gives the node's stack (``stack``; None: the inventory's, else the lock's
    default) for ``arch``. ``var(name)`` reads the host's variable over the role's defaults."""
    from provision.ascend import lock
    from provision.image.spec import DEFAULT_OS, DEFAULT_SOC, Target

    given = var("vllm_serve_image")
    if given:
        return str(given).strip()
    name = stack or lock.resolve_stack(var(lock.STACK_VARIABLE)).name
    os_variant = str(var("vllm_serve_image_os") or DEFAULT_OS)
    soc = str(var("vllm_serve_image_soc") or DEFAULT_SOC)
    tag = Target(name, os_variant=os_variant, soc=soc, arch=arch).tag
    return f"{var('vllm_serve_image_repository') or 'vllm-ascend'}:{tag}"


def _after(argv: Sequence[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == flag]


# -------------------------------------------------------------------------------------------- records


def record(host: HostPlan, pool: PoolPlan) -> dict[str, Any]:
    """One pool of the plan as ``provision serve explain --json`` shows it."""
    place: dict[str, Any] = {"role": pool.start}
    if pool.multinode is not None:
        place.update(group=pool.multinode.group, hosts=pool.multinode.hosts, head=pool.multinode.head)
    return {
        "host": host.host,
        "pool": pool.pool,
        "profile": pool.profile,
        "mode": host.mode,
        **place,
        "unit": pool.unit,
        "port": pool.port,
        "argv": pool.argv,
        "command": shlex.join(pool.argv),
        "env": dict(sorted(pool.env.items())),
        "devices": _devices(host.mode, pool.argv, pool.devices),
        "mounts": pool.mounts,
        "budget_s": pool.budget_s,
        "timeouts": pool.timeouts,
        "readiness": pool.readiness,
        "notes": pool.notes,
        **({"rank_table": pool.rank_table} if pool.rank_table is not None else {}),
    }


def _devices(mode: str, argv: Sequence[str], devices: Sequence[int]) -> list[str]:
    ids = ",".join(map(str, devices))
    if mode != "container":
        return [f"ASCEND_RT_VISIBLE_DEVICES={ids} (the pool file)"]
    given = [word for word in _after(argv, "-e") if word.startswith("ASCEND_VISIBLE_DEVICES=")]
    if given:
        return [f"{given[0]} (the Ascend Docker Runtime adds those /dev/davinciN and the manager devices)"]
    return _after(argv, "--device")
