"""Filters of the vllm_serve role: the instances of a node, from provision.serving.profiles (one copy)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

from provision.errors import InputError
from provision.serving.profiles import args_file, env_file, instances

HEADER = "# Managed by provision (vllm_serve role): changes here are overwritten.\n"


def vllm_serve_instances(
    pools: Sequence[Mapping[str, Any]],
    profiles: Mapping[str, Any],
    command: Sequence[str],
    bind_host: str = "0.0.0.0",
    extra_env: Mapping[str, Any] | None = None,
    pool_checksums: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One dict per pool with a profile: pool, unit, port, model, served_model_name, nodes, args, env,
    load_budget_s, plus ``argv`` (command + args) and the bodies of its files: ``args_text`` (one argument
    per line) and ``env_text`` (an EnvironmentFile that also records the pool file's checksum, so that a
    changed pool restarts the instance)."""
    checksums = pool_checksums or {}
    try:
        found = instances(pools or [], profiles or {}, host=bind_host, extra_env=extra_env or {})
        out = []
        for inst in found:
            item = inst.as_dict()
            item["argv"] = [*map(str, command), *inst.args]
            item["args_text"] = args_file(item["argv"])
            pool_sum = checksums.get(inst.pool) or "none"
            about = f"# {inst.unit}: profile {inst.profile}; pool file sha1 {pool_sum}\n"
            item["env_text"] = HEADER + about + env_file(inst.env)
            out.append(item)
    except (InputError, ValueError) as exc:
        raise AnsibleFilterError(f"vllm_serve: {exc}") from exc
    return out


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


def vllm_serve_env_file(env: Mapping[str, Any]) -> str:
    """A systemd EnvironmentFile body (values quoted and escaped)."""
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


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "vllm_serve_instances": vllm_serve_instances,
            "vllm_serve_pending": vllm_serve_pending,
            "vllm_serve_env_file": vllm_serve_env_file,
            "vllm_serve_args_value": vllm_serve_args_value,
        }
