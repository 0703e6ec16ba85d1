"""What ``provision serve explain`` shows: each served pool's exact command line, environment, devices,
mounts and every timeout with where it came from, read from the inventory alone (no host is contacted).

The instances are computed as the ``vllm_serve`` role computes them (:func:`provision.serving.profiles.
instances` for the vLLM arguments, the environment and the load budget's layers, :func:`provision.serving.
container.run_argv` for ``docker run``), from the host's inventory variables over the role's defaults.
What only the node knows is named in each instance's ``notes``: docker's default runtime when
``vllm_serve_container_devices`` is ``auto``, the gid of ``HwHiAiUser``, which driver files exist, the
interface holding ``HCCL_IF_IP``, the image's architecture when ``vllm_serve_image`` is the default.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import yaml

from provision.errors import InputError
from provision.inventory.budget import Timeout, describe
from provision.inventory.groups import serving_groups_of
from provision.inventory.load import Inventory, plain
from provision.inventory.roles import role_value
from provision.inventory.schema import HOST_GROUP
from provision.paths import ansible_root
from provision.serving.container import (
    API_SERVER_COMMAND,
    DRIVER_MOUNTS,
    ContainerSettings,
    image_command,
    run_argv,
)
from provision.serving.profiles import NodeRank, instances

DEFAULT_ARCH = "aarch64"
"""The Kunpeng nodes' ``ansible_architecture``, for the default image tag (the role reads the node's)."""


@cache
def _role_file(name: str) -> dict[str, Any]:
    path = ansible_root() / "roles" / "vllm_serve" / name
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return dict(data)


def explain(inventory: Inventory, target: str | None = None) -> list[dict[str, Any]]:
    """One record per served pool of the hosts of ``npu_nodes`` (``target``: ``HOST`` or ``HOST/POOL``)."""
    hosts = inventory.group_hosts(HOST_GROUP)
    host_name, _, pool_name = (target or "").partition("/")
    if host_name and host_name not in hosts:
        raise InputError(f"{inventory.source}: no host {host_name} in group {HOST_GROUP}")
    groups = serving_groups_of(hosts, inventory.hosts)
    records: list[dict[str, Any]] = []
    for host in hosts:
        if host_name and host != host_name:
            continue
        found = _host_records(host, inventory.hosts.get(host, {}), groups)
        if pool_name:
            found = [r for r in found if r["pool"] == pool_name]
            if not found:
                served = [r["pool"] for r in _host_records(host, inventory.hosts.get(host, {}), groups)]
                raise InputError(
                    f"{inventory.source}: host {host} serves no pool {pool_name}; "
                    f"served: {', '.join(served) or 'none'}"
                )
        records += found
    return records


def _host_records(host: str, variables: Mapping[str, Any], groups: Sequence[Any]) -> list[dict[str, Any]]:
    def var(name: str) -> Any:
        return role_value(variables, name, "vllm_serve")

    mode = str(var("vllm_serve_mode") or "container")
    budget_default = var("vllm_serve_load_budget_s")
    address = str(variables.get("ansible_host") or host)
    out: list[dict[str, Any]] = []
    for pool in plain(variables.get("npu_pools_list") or []):
        if not isinstance(pool, Mapping) or not pool.get("profile"):
            continue
        rank: NodeRank | None = None
        place: dict[str, Any] = {"role": "single"}
        node_ip = None
        for group in groups:
            if group.pool == pool.get("name") and host in group.hosts:
                index = group.index(host)
                rank = NodeRank(index, group.head.address)
                node_ip = address
                place = {
                    "role": "head" if index == 0 else "worker",
                    "group": group.name,
                    "hosts": group.hosts,
                    "head": group.head.host,
                }
        [inst] = instances(
            [pool],
            var("vllm_serve_profiles") or {},
            host=str(var("vllm_serve_bind_host") or "0.0.0.0"),
            node_ip=node_ip,
            extra_env=var("vllm_serve_env") or {},
            rank=rank,
            default_budget_s=float(budget_default) if budget_default else None,
            container=mode == "container",
            default_budget_source="vllm_serve_load_budget_s"
            + ("" if "vllm_serve_load_budget_s" in variables else " (the role's default)"),
        )
        item = inst.as_dict()
        item_notes = list(inst.notes) if rank is None else []
        if inst.nodes > 1:
            item_notes.append(
                f"HCCL_IF_IP={address} (this node's inventory address) and GLOO_SOCKET_IFNAME, "
                "TP_SOCKET_IFNAME, HCCL_SOCKET_IFNAME (the interface holding it) are set on the node by "
                "the HCCN gate"
            )
        command = _command(mode, place["role"], var)
        if mode == "container":
            settings, container_notes = _container(var)
            item_notes += container_notes
            if not command:  # an API server: the image's entrypoint, or the command the role supplies
                setting = var("vllm_serve_image_command") or []
                if setting:
                    command = image_command(setting, None)
                elif var("vllm_serve_image"):
                    item_notes.append(
                        "vllm_serve_image_command []: shown for an image with our entrypoint, which serves "
                        "the vLLM arguments; the role reads the image's entrypoint on the node, and an image "
                        "without it (the official quay.io/ascend/vllm-ascend) gets "
                        f"`{' '.join(API_SERVER_COMMAND)}` before them"
                    )
            argv = run_argv(item, settings, command)
        else:
            argv = [*command, *inst.args]
        out.append(
            {
                "host": host,
                "pool": inst.pool,
                "profile": inst.profile,
                "mode": mode,
                **place,
                "unit": inst.unit,
                "port": inst.port,
                "argv": argv,
                "command": shlex.join(argv),
                "env": dict(sorted(item["env"].items())),
                "devices": _devices(mode, argv, inst.devices),
                "mounts": _after(argv, "-v") if mode == "container" else [],
                "budget_s": inst.budget_s,
                "timeouts": inst.timeouts,
                "notes": item_notes,
            }
        )
    return out


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
        image = f"{var('vllm_serve_image_repository') or 'vllm-ascend'}:{_image_tag(var)}"
        notes.append(
            f"vllm_serve_image: the default tag for an {DEFAULT_ARCH} node (the role reads the node's "
            "architecture)"
        )
    if devices == "device":
        notes.append("driver files: those of the list that exist on the node are mounted")
    group = var("vllm_serve_container_device_group") or "HwHiAiUser"
    notes.append(f"--group-add <gid of {group}> is added when the node has that group")
    settings = ContainerSettings(
        image=str(image),
        devices=devices,
        engine=str(var("vllm_serve_container_engine") or "docker"),
        shm_size=str(var("vllm_serve_container_shm_size") or "1g"),
        volumes=[str(v) for v in var("vllm_serve_container_volumes") or []],
        driver_mounts=sorted(DRIVER_MOUNTS),
        extra_args=[str(v) for v in var("vllm_serve_container_args") or []],
    )
    return settings, notes


def _image_tag(var: Any) -> str:
    from provision.ascend import lock
    from provision.image.spec import DEFAULT_OS, DEFAULT_SOC, Target

    stack = lock.resolve_stack(var(lock.STACK_VARIABLE)).name
    os_variant = str(var("vllm_serve_image_os") or DEFAULT_OS)
    soc = str(var("vllm_serve_image_soc") or DEFAULT_SOC)
    return Target(stack, os_variant=os_variant, soc=soc, arch=DEFAULT_ARCH).tag


def _after(argv: Sequence[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == flag]


def _devices(mode: str, argv: Sequence[str], devices: Sequence[int]) -> list[str]:
    ids = ",".join(map(str, devices))
    if mode != "container":
        return [f"ASCEND_RT_VISIBLE_DEVICES={ids} (the pool file)"]
    given = [word for word in _after(argv, "-e") if word.startswith("ASCEND_VISIBLE_DEVICES=")]
    if given:
        return [f"{given[0]} (the Ascend Docker Runtime adds those /dev/davinciN and the manager devices)"]
    return _after(argv, "--device")


def render(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The text of ``provision serve explain``."""
    if not records:
        return ["no pool with a serving profile in the inventory"]
    lines: list[str] = []
    for record in records:
        place = ""
        if record["role"] != "single":
            place = f", {record['role']} of serving group {record['group']} ({', '.join(record['hosts'])})"
        lines.append(
            f"{record['host']}/{record['pool']}: profile {record['profile']}, {record['mode']} mode, "
            f"{record['unit']}, port {record['port']}{place}"
        )
        lines.append("  command:")
        lines.append(f"    {record['command']}")
        lines.append("  environment:")
        lines += [f"    {key}={value}" for key, value in record["env"].items()]
        lines.append("  devices:")
        lines += [f"    {device}" for device in record["devices"]]
        lines.append("  mounts:")
        lines += [f"    {mount}" for mount in record["mounts"]] or ["    (none: the engine runs on the node)"]
        timeouts = [Timeout(**t) for t in record["timeouts"]]
        lines.append(f"  timeouts (load budget {record['budget_s']} s):")
        lines += [f"    {line}" for line in describe(timeouts)]
        if record["notes"]:
            lines.append("  notes:")
            lines += [f"    - {note}" for note in record["notes"]]
        lines.append("")
    return lines[:-1]
