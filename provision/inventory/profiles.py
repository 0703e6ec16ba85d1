"""Serving profiles as inventory data: the shipped ones, the inventory's own, and whether one fits its pool.

A *profile* (:class:`~provision.inventory.schema.ServingProfile`) ships as data in
``provision/data/profiles/<name>.yml``; ``vllm_serve_profiles`` in the inventory adds or overrides them. This
module is what validation (:mod:`provision.inventory.validate`), the serving groups
(:mod:`provision.inventory.groups`) and serving (:mod:`provision.serving.profiles`, which turns a profile
into vLLM's command line) all read them with. Pure functions, no I/O except reading the shipped profiles.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from provision.errors import InputError
from provision.inventory import rules
from provision.inventory.load import plain
from provision.inventory.schema import NpuPool, ServingProfile
from provision.paths import data_dir

DEFAULT_DP_RPC_PORT = 13389
"""vLLM's ``--data-parallel-rpc-port`` when a profile leaves ``data_parallel_rpc_port`` unset."""


class ProfileError(InputError):
    """A profile that does not exist, does not parse, or does not fit its pool."""


@cache
def _shipped_raw() -> dict[str, Any]:
    folder = data_dir() / "profiles"
    out: dict[str, Any] = {}
    for file in sorted(folder.glob("*.yml")) if folder.is_dir() else []:
        out[file.stem] = yaml.safe_load(file.read_text(encoding="utf-8"))
    return out


def shipped_profiles() -> dict[str, ServingProfile]:
    """The profiles shipped in ``provision/data/profiles/*.yml``, by file name."""
    return {name: ServingProfile.model_validate(raw) for name, raw in _shipped_raw().items()}


def shipped_profile_path(name: str) -> Path:
    return data_dir() / "profiles" / f"{name}.yml"


def all_profiles(user: Mapping[str, Any] | None = None) -> dict[str, ServingProfile]:
    """Shipped profiles, then the inventory's ``vllm_serve_profiles`` (a user profile replaces a shipped
    one of the same name). Raises :class:`ProfileError` naming the first profile that does not parse."""
    profiles = shipped_profiles()
    for name, raw in (user or {}).items():
        problem = rules.name_problem("profile", name)
        if problem is not None:
            raise ProfileError(f"vllm_serve_profiles.{name!r}: {problem}")
        if isinstance(raw, ServingProfile):
            profiles[str(name)] = raw
            continue
        try:
            profiles[str(name)] = ServingProfile.model_validate(plain(raw))
        except ValueError as exc:
            raise ProfileError(f"vllm_serve_profiles.{name}: {exc}") from exc
    return profiles


def required_npus(profile: ServingProfile) -> int:
    """NPUs the profile uses on each node: TP x DP x PP over its nodes."""
    total = profile.tensor_parallel_size * profile.data_parallel_size * profile.pipeline_parallel_size
    return total // profile.nodes


def fit_problem(profile: ServingProfile, pool: NpuPool) -> str | None:
    """Why ``profile`` does not fit ``pool`` (TP x DP x PP must equal the pool's NPUs x nodes), or None."""
    tp, dp, pp = profile.tensor_parallel_size, profile.data_parallel_size, profile.pipeline_parallel_size
    have = len(pool.devices) * profile.nodes
    if tp * dp * pp == have:
        return None
    return (
        f"needs TP x DP x PP = {tp} x {dp} x {pp} = {tp * dp * pp} NPUs, "
        f"the pool gives {len(pool.devices)} x {profile.nodes} node(s) = {have}"
    )


def check_fits(profile: ServingProfile, pool: NpuPool, name: str = "") -> None:
    """Raise :class:`ProfileError` unless ``profile`` fits ``pool`` (:func:`fit_problem`)."""
    problem = fit_problem(profile, pool)
    if problem is not None:
        raise ProfileError(f"pool {pool.name}: profile {name or '?'} {problem}")


def profile_env(profile: ServingProfile, extra: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The environment the inventory asks for an instance of ``profile``: the profile's ``env``, then
    ``extra`` (``vllm_serve_env``), as strings (booleans as ``true``/``false``)."""
    problems = rules.env_problems(dict(extra or {}), owner="vllm_serve_env")
    if problems:
        raise ProfileError("; ".join(f"vllm_serve_env.{path[-1]}: {why}" for path, why in problems))
    env = {key: _env_value(value) for key, value in profile.env.items()}
    env.update({str(key): _env_value(value) for key, value in (extra or {}).items()})
    return env


def _env_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
