"""Filters of the vllm_serve role: the instances of a node, from the serving plan (provision.serving.plan)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

from provision.errors import InputError

# provision.serving.profiles, the lock and the image spec (pydantic, yaml) are imported inside the filters
# that use them: Ansible imports every filter file of the search path in each task's worker process, and
# these imports cost ~0.2 s there. Only the tasks that call those filters should pay it.

HEADER = "# Managed by provision (vllm_serve role): changes here are overwritten.\n"


def vllm_serve_instances(
    pools: Sequence[Mapping[str, Any]],
    profiles: Mapping[str, Any],
    command: Sequence[str],
    bind_host: str = "0.0.0.0",
    extra_env: Mapping[str, Any] | None = None,
    pool_checksums: Mapping[str, Any] | None = None,
    ranks: Mapping[str, Any] | None = None,
    headless_command: Sequence[str] | None = None,
    load_budget_s: float | None = None,
    mode: str = "container",
    pool_files: Sequence[Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The node's serving plan (:func:`provision.serving.plan.pool_plans`), one dict per pool with a
    profile: pool, unit, port, model, served_model_name, nodes, args, env, load_budget_s, budget_s and
    timeouts (every layer's deadline from the load budget: the profile's, else ``load_budget_s``; ``mode``
    container adds docker's health start period), ``command`` and ``argv`` (command + args), plus the
    bodies of its files: ``args_text`` (one argument per line) and ``env_text`` (an EnvironmentFile that
    also records the pool file's checksum, so that a changed pool restarts the instance). The checksums:
    ``pool_files`` (the registered ``stat`` of each pool file, looped over the pools) or ``pool_checksums``
    (pool -> sha1).

    Multi-node: ``ranks`` is ``hccn_gate_ranks``, this node's place in the serving groups that
    passed the HCCN gate (pool -> index, role, head_address, node_ip, ifname ...). ``multinode`` is that
    entry (None: not gated yet, or a single-node pool), ``start`` is ``single``, ``head`` or ``worker``;
    a worker runs ``headless_command`` (``vllm serve``: only the CLI honours ``--headless``)."""
    from provision.serving.plan import pool_plans

    checksums = dict(pool_checksums or {})
    for result in pool_files or []:
        checksums[str(result["item"]["name"])] = (result.get("stat") or {}).get("checksum") or ""
    try:
        plans = pool_plans(
            list(pools or []),
            profiles or {},
            host=bind_host,
            extra_env=extra_env or {},
            ranks=ranks or {},
            default_budget_s=float(load_budget_s) if load_budget_s else None,
            container=mode == "container",
            command=[str(word) for word in command],
            headless_command=headless_command,
        )
        return [_role_item(plan.as_dict(), checksums) for plan in plans]
    except (InputError, ValueError) as exc:
        raise AnsibleFilterError(f"vllm_serve: {exc}") from exc


def _role_item(item: dict[str, Any], checksums: Mapping[str, Any]) -> dict[str, Any]:
    """A plan's pool with the bodies of the files the role writes."""
    from provision.serving.profiles import args_file, env_file

    if item.get("container") is None:  # service mode, or not wrapped yet: vllm_serve_containerize adds it
        item.pop("container", None)
    item["args_text"] = args_file(item["argv"])
    pool_sum = checksums.get(item["pool"]) or "none"
    about = f"# {item['unit']}: profile {item['profile']}; pool file sha1 {pool_sum}\n"
    item["env_text"] = HEADER + about + env_file(item["env"])
    return item


def vllm_serve_pending(
    instances: Sequence[Mapping[str, Any]], stats: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Pools whose installed args or env file (``stat`` results looped over instances x [args, env])
    differ from the wanted body: the running configuration that a write is about to replace."""
    wanted = {item["pool"]: item for item in instances}
    pending: list[str] = []
    for result in stats:
        instance, kind = result["item"]
        stat = result.get("stat") or {}
        if not stat.get("exists"):
            continue
        body = str(wanted[instance["pool"]][f"{kind}_text"]).encode()
        if stat.get("checksum") != hashlib.sha1(body).hexdigest() and instance["pool"] not in pending:
            pending.append(instance["pool"])
    return pending


def vllm_serve_group_restart(instances: Sequence[Mapping[str, Any]], hostvars: Any) -> list[str]:
    """Multi-node pools of this node to restart: a configuration change on ANY node of the serving group
    restarts the whole group (a head does not take a restarted worker back, nor a worker a new head).
    Each member's changed pools are its ``__vllm_serve_changed`` fact."""
    from provision.inventory.load import host_var

    restart = []
    for item in instances:
        group = item.get("multinode")
        if not group:
            continue
        for host in group.get("hosts") or []:
            changed = host_var(hostvars, host, "__vllm_serve_changed") or []
            if item["pool"] in changed and item["pool"] not in restart:
                restart.append(item["pool"])
    return restart


def vllm_serve_containerize(
    instances: Sequence[Mapping[str, Any]],
    settings: Mapping[str, Any] | None,
    path_stats: Sequence[Mapping[str, Any]] | None = None,
    group: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Container mode: each instance's ``argv`` wrapped in ``docker run`` (:func:`provision.serving.plan.
    contain`), its ``args_text`` rewritten, and ``container`` (``vllm-<pool>``) added.
    ``settings["command"]``: what the container runs before the vLLM arguments of an instance that has no
    command of its own (an API server; a headless worker brings ``vllm serve``); empty: the image's
    entrypoint serves them. ``settings`` None or empty: the instances unchanged (service mode).

    What the node said, as registered: ``path_stats`` (the ``stat`` of each device node and driver file,
    :func:`vllm_serve_container_paths`; the driver files that exist are mounted) and ``group`` (the
    ``getent`` result of the device group, whose gid the container joins)."""
    if not settings:
        return [dict(item) for item in instances]
    from provision.serving.container import DRIVER_MOUNTS, container_name
    from provision.serving.plan import contain, container_settings
    from provision.serving.profiles import args_file

    given = dict(settings)
    if path_stats is not None:
        found = [str(result["item"]) for result in path_stats if (result.get("stat") or {}).get("exists")]
        given["driver_mounts"] = [path for path in found if path in DRIVER_MOUNTS]
    if group is not None:
        given["group_add"] = _gid(group, str(settings.get("device_group") or ""))
    try:
        options = container_settings(given)
        out = []
        for item in instances:
            wrapped = dict(item)
            wrapped["command"], wrapped["argv"] = contain(item, options, settings.get("command") or [])
            wrapped["args_text"] = args_file(wrapped["argv"])
            wrapped["container"] = container_name(str(item["pool"]))
            out.append(wrapped)
    except (InputError, ValueError) as exc:
        raise AnsibleFilterError(f"vllm_serve: {exc}") from exc
    return out


def _gid(result: Mapping[str, Any], name: str) -> list[str]:
    """The gid of group ``name`` from a registered ``getent`` (none: the node lacks the group)."""
    entries = (result.get("ansible_facts") or {}).get("getent_group") or {}
    entry = entries.get(name) or []
    gid = entry[1] if len(entry) > 1 else None
    return [str(gid)] if gid not in (None, "") else []


def vllm_serve_ready_pools(instances: Sequence[Mapping[str, Any]], host: str) -> dict[str, str]:
    """The readiness endpoint's pools: each instance that serves an API (not a headless worker) -> its
    engine's ``/health`` on ``host`` (where the node reaches its engines)."""
    return {
        str(item["pool"]): f"http://{host}:{item['port']}/health"
        for item in instances
        if item.get("start") != "worker"
    }


def vllm_serve_image_command(setting: Any, inspected: Mapping[str, Any] | None = None) -> list[str]:
    """``vllm_serve_image_command`` (empty: read from the image) resolved
    (``provision.serving.container.image_command``) with the
    registered result of ``docker image inspect --format '{{json .Config.Entrypoint}}' IMAGE``
    (``inspected``; skipped, failed or absent: the node lacks the image)."""
    import json

    from provision.serving.container import image_command

    entrypoint: list[str] | None = None
    if inspected and inspected.get("rc") == 0:
        try:
            found = json.loads(str(inspected.get("stdout") or "null"))
        except ValueError:
            found = None
        entrypoint = [str(word) for word in found] if isinstance(found, list) else []
    try:
        return image_command(setting, entrypoint)
    except InputError as exc:
        raise AnsibleFilterError(f"vllm_serve: {exc}") from exc


def vllm_serve_container_paths(
    instances: Sequence[Mapping[str, Any]], devices_only: bool = False
) -> list[str]:
    """Device mode: the device nodes the node's instances need (their ``/dev/davinciN`` and the manager
    devices), then, unless ``devices_only``, the driver files a container gets when they exist."""
    from provision.serving.container import DRIVER_MOUNTS, MANAGER_DEVICES, NPU_DEVICE

    paths = sorted({NPU_DEVICE.format(int(d)) for item in instances for d in item["devices"]})
    paths += list(MANAGER_DEVICES) if paths else []
    return paths if devices_only or not paths else [*paths, *DRIVER_MOUNTS]


def vllm_serve_image_tag(
    stack: str | None, arch: str = "aarch64", os_variant: str | None = None, soc: str | None = None
) -> str:
    """The serving image's tag for a stack of the version lock (the lock's default when empty), as
    ``provision image build`` tags it: ``0.23.0-cann9.1.0-openeuler24.03-arm64``. ``os_variant`` and
    ``soc`` default to the image spec's defaults."""
    from provision.ascend import lock
    from provision.image.spec import DEFAULT_OS, DEFAULT_SOC, Target

    try:
        name = lock.resolve_stack(stack).name
        return Target(name, os_variant=os_variant or DEFAULT_OS, soc=soc or DEFAULT_SOC, arch=arch).tag
    except (InputError, ValueError) as exc:
        raise AnsibleFilterError(f"vllm_serve: {exc}") from exc


def vllm_serve_env_file(env: Mapping[str, Any]) -> str:
    """A systemd EnvironmentFile body (values quoted and escaped)."""
    from provision.serving.profiles import env_file

    try:
        return env_file({str(key): str(value) for key, value in (env or {}).items()})
    except (InputError, ValueError) as exc:
        raise AnsibleFilterError(f"vllm_serve: {exc}") from exc


def vllm_serve_args_value(args_text: str, flag: str, default: Any = None) -> Any:
    """The value after ``flag`` in an args file body (one argument per line), else ``default``."""
    argv = args_text.splitlines()
    for index, arg in enumerate(argv):
        if arg == flag and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return default


def vllm_serve_image_stack(
    image: str,
    labels: Mapping[str, Any] | None,
    host: str = "",
    driver: str | None = None,
    line: str | None = None,
) -> dict[str, Any]:
    """``{problems, checked}``: whether the serving image's stack labels fit the node's driver and NPU line
    (:mod:`provision.serving.image_stack`)."""
    from provision.serving.image_stack import verdict

    found = verdict(str(image), labels, host=str(host), driver=driver or None, line=line or None)
    return {"problems": found.problems, "checked": found.checked}


def vllm_serve_open_engine(bind_host: Any, has_key: Any, allow_unauthenticated: Any = False) -> str:
    """Why engines bound to ``bind_host`` are refused ('' when they are not): beyond loopback without an API
    key, unless the inventory accepts the risk. ``provision validate`` applies the same rule
    (provision.inventory.listen) to the values it can read before templating."""
    from ansible.module_utils.parsing.convert_bool import boolean

    from provision.inventory.listen import engine_problem

    try:
        allow = boolean(allow_unauthenticated, strict=True)
    except TypeError as exc:
        raise AnsibleFilterError(f"vllm_serve_allow_unauthenticated: {exc}") from None
    problem = engine_problem(str(bind_host), boolean(has_key, strict=False), allow)
    return problem or ""


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "vllm_serve_open_engine": vllm_serve_open_engine,
            "vllm_serve_image_command": vllm_serve_image_command,
            "vllm_serve_image_stack": vllm_serve_image_stack,
            "vllm_serve_instances": vllm_serve_instances,
            "vllm_serve_pending": vllm_serve_pending,
            "vllm_serve_group_restart": vllm_serve_group_restart,
            "vllm_serve_containerize": vllm_serve_containerize,
            "vllm_serve_ready_pools": vllm_serve_ready_pools,
            "vllm_serve_image_tag": vllm_serve_image_tag,
            "vllm_serve_container_paths": vllm_serve_container_paths,
            "vllm_serve_env_file": vllm_serve_env_file,
            "vllm_serve_args_value": vllm_serve_args_value,
        }
