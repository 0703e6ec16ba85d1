"""Serving profiles -> the vLLM command line and environment of each engine instance.

A *profile* (:class:`~provision.inventory.schema.ServingProfile`) holds the vLLM knobs of a deployment:
model, parallelism, quantization, scheduler limits, environment. Profiles ship as data in
``provision/data/profiles/<name>.yml``; ``vllm_serve_profiles`` in the inventory adds or overrides them
(both read by :mod:`provision.inventory.profiles`). A *pool* (``npu_pools_list``) names the NPUs and the
port; a pool with a ``profile`` gets one engine instance on its node. This module is the one place that
turns (profile, pool) into:

- :func:`vllm_args`: the arguments after ``python -m vllm.entrypoints.openai.api_server`` (or ``vllm
  serve``), every flag from a profile field (:data:`~provision.inventory.schema.PROFILE_FLAGS`), then the
  profile's ``extra_args``;
- :func:`vllm_env`: the environment (the profile's, plus per-node HCCL settings for multi-node profiles).

:func:`provision.serving.plan.pool_plans` puts both together, with the load budget, for every served pool
(the serving plan every reader uses).

The API key never appears here: vLLM reads it from ``VLLM_API_KEY`` (same as ``--api-key``), which the role
writes to a root-only environment file, so it stays out of ``ps``, the journal and the args file.
Pure functions.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.inventory.profiles import DEFAULT_DP_RPC_PORT, ProfileError, profile_env
from provision.inventory.rules import control_problem, name_problem
from provision.inventory.schema import PROFILE_FLAGS, NpuPool, ServingProfile

# The OpenAI-compatible server, started as a module: works for vllm (``vllm serve`` is the same server)
# and for the CPU build used in tests, whose ``vllm`` console script does not run (FACTS.md §8).
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
DEFAULT_BIND_HOST = "0.0.0.0"
# Variables that tell HCCL, gloo and torch which host interface carries inter-node traffic (FACTS.md §5).
IFNAME_VARIABLES = ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME")


@dataclass(frozen=True)
class NodeRank:
    """Where this node stands in a multi-node profile: ``index`` 0 is the head (it serves the API)."""

    index: int
    head_address: str


def served_name(profile: ServingProfile) -> str:
    """The model name clients ask for: ``served_model_name``, else the model folder's name."""
    return profile.served_model_name or Path(profile.model.rstrip("/")).name or profile.model


# --------------------------------------------------------------------------------------------- argv / env


def vllm_args(
    profile: ServingProfile,
    pool: NpuPool,
    *,
    host: str = DEFAULT_BIND_HOST,
    rank: NodeRank | None = None,
) -> list[str]:
    """The server's arguments for ``pool`` (``--port`` from the pool), in a stable order.

    Every set profile field becomes its flag (booleans only when true, ``additional_config`` as compact
    JSON); ``extra_args`` come last. A multi-node profile with native data parallelism needs ``rank``:
    every node gets ``--data-parallel-address <head> --data-parallel-rpc-port P``, the others also
    ``--headless --data-parallel-start-rank``.
    """
    argv: list[str] = [PROFILE_FLAGS["model"], profile.model]
    argv += [PROFILE_FLAGS["served_model_name"], served_name(profile)]
    argv += ["--host", host, "--port", str(pool.port)]
    multi_dp = profile.nodes > 1 and profile.distributed_executor_backend != "ray"
    for name, flag in PROFILE_FLAGS.items():
        if name in ("model", "served_model_name", "data_parallel_rpc_port"):
            continue
        value = getattr(profile, name)
        if name == "data_parallel_size_local" and value is None and multi_dp:
            value = profile.data_parallel_size // profile.nodes
        if name in ("tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size") and value == 1:
            continue
        if value is None or value is False or value == {}:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, dict):
            argv += [flag, json.dumps(value, separators=(",", ":"), sort_keys=True)]
        else:
            argv += [flag, str(value)]
    if multi_dp:
        if rank is None:
            raise ProfileError(
                f"pool {pool.name}: a {profile.nodes}-node profile needs the node's rank and the head's "
                "address"
            )
        local = profile.data_parallel_size_local or profile.data_parallel_size // profile.nodes
        argv += [
            "--data-parallel-address",
            rank.head_address,
            "--data-parallel-rpc-port",
            str(profile.data_parallel_rpc_port or DEFAULT_DP_RPC_PORT),
        ]
        if rank.index > 0:
            argv += ["--headless", "--data-parallel-start-rank", str(rank.index * local)]
    elif profile.data_parallel_rpc_port is not None:
        argv += ["--data-parallel-rpc-port", str(profile.data_parallel_rpc_port)]
    return [*argv, *profile.extra_args]


def vllm_env(
    profile: ServingProfile,
    pool: NpuPool,
    *,
    node_ip: str | None = None,
    ifname: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """The instance's environment: ``ASCEND_RT_VISIBLE_DEVICES`` from the pool, then the profile's env,
    then ``extra`` (the role's ``vllm_serve_env``). A multi-node profile also gets ``HCCL_IF_IP`` (this
    node's address) and the ``*_SOCKET_IFNAME`` variables (the interface that carries it)."""
    env = {"ASCEND_RT_VISIBLE_DEVICES": ",".join(str(device) for device in pool.devices)}
    env.update(profile_env(profile, extra))
    if profile.nodes > 1:  # the inventory's own setting of these wins
        if node_ip:
            env.setdefault("HCCL_IF_IP", node_ip)
        if ifname:
            for key in IFNAME_VARIABLES:
                env.setdefault(key, ifname)
    return env


def unit_name(pool: str) -> str:
    """The systemd unit of a pool's engine: ``vllm-<pool>.service``."""
    return f"vllm-{pool}.service"


def args_file(argv: Iterable[str]) -> str:
    """The args file the role writes: one argument per line (read back by the launcher, no shell)."""
    lines = []
    for arg in argv:
        problem = control_problem(arg)
        if problem is not None:
            raise ProfileError(f"argument {arg!r} {problem}")
        lines.append(arg)
    return "\n".join(lines) + "\n"


def env_file(env: Mapping[str, str]) -> str:
    """A systemd ``EnvironmentFile`` body: ``KEY="value"``, with double quotes, backslashes, backticks
    and dollars escaped (systemd's parser unescapes exactly these inside double quotes)."""
    lines = []
    for key, value in sorted(env.items()):
        problem = name_problem("env", key) or control_problem(value)
        if problem is not None:
            raise ProfileError(f"environment variable {key!r}: {problem}")
        escaped = "".join(f"\\{char}" if char in '"\\`$' else char for char in value)
        lines.append(f'{key}="{escaped}"')
    return "\n".join(lines) + ("\n" if lines else "")
