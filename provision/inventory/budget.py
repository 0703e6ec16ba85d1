"""One load budget for every layer that can kill, or give up on, an engine that is still loading.

A profile's ``load_budget_s`` (else ``vllm_serve_load_budget_s``, default 3600 s) is how long its engine
may take from start to its first answered completion: 30-60 min for DeepSeek-R1 across two nodes
(FACTS.md §6). Five layers hold a deadline of their own during that time, and each one must be at least
the budget, or it ends a load that would have succeeded:

- vLLM: ``VLLM_ENGINE_READY_TIMEOUT_S``, how long the API server waits for every engine core's ready
  message (``vllm/envs.py``: ``int(os.environ.get("VLLM_ENGINE_READY_TIMEOUT_S", "600"))``, read by
  ``vllm/v1/engine/core_client.py``, which raises ``TimeoutError: Timed out waiting for engine core
  processes to start`` after it; vLLM 0.32.0 here, vllm-project/vllm #35547 and vllm-ascend PR #7098 for a
  load killed at the 600 s default). Which start-up waits it bounds depends on the version
  (vllm-project/vllm #48031, PR #50039); set high enough, it bounds none too early;
- HCCL, on instances that span several nodes (CANN environment variable reference, "HCCL_CONNECT_TIMEOUT"
  and "HCCL_EXEC_TIMEOUT", hiascend.com canncommercial 8.5.0/9.0.0, maintenref/envvar envref_07_0149 and
  envref_07_0078): ``HCCL_CONNECT_TIMEOUT``, how long ranks wait for each other to build their links
  (integer seconds in [120, 7200], default 120); ``HCCL_EXEC_TIMEOUT``, how long a device waits for its
  peers inside a collective (A2/A3: [0, 2147483647] s, 0 = never, default 1836; with
  ``HCCL_OP_EXPANSION_MODE=AIV`` [0, 1091] and anything above 1091, or 0, counts as 1091). Ranks on the
  faster node reach their first collective while the other node still loads. Where the budget is beyond
  the documented maximum, the value is that maximum and the layer says so;
- systemd: the unit's ``TimeoutStartSec``. The units are ``Type=simple``, so systemd counts the start as
  done once ``ExecStartPre`` ran and the launcher was forked: the load itself is not under this clock, but
  a unit changed to wait for readiness would be, and ``ExecStartPre`` is;
- docker (container mode): ``--health-start-period``, during which a failing HEALTHCHECK keeps the
  container ``starting`` instead of ``unhealthy`` (what an orchestrator or an autoheal restarts);
- our health gate (``vllm_health``'s ``budget_s``).

:func:`load_budget` computes them all from the budget; the engine's environment takes the environment
layers unless the inventory sets them itself. A value the inventory sets that is shorter than the budget
(or than the documented maximum, where that is lower) is refused: :func:`short_overrides` for
``provision validate``, :class:`BudgetError` where the instances are computed. Pure functions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from provision.inventory.profiles import ProfileError
from provision.inventory.schema import ServingProfile

DEFAULT_LOAD_BUDGET_S = 3600
"""The role's ``vllm_serve_load_budget_s`` (DeepSeek across two nodes), for profiles that set none."""

ENGINE_READY = "VLLM_ENGINE_READY_TIMEOUT_S"
ENGINE_READY_DEFAULT_S = 600
"""vLLM's own default for it (``vllm/envs.py``)."""
HCCL_CONNECT = "HCCL_CONNECT_TIMEOUT"
HCCL_CONNECT_RANGE = (120, 7200)
HCCL_EXEC = "HCCL_EXEC_TIMEOUT"
HCCL_EXEC_MAX = 2147483647
HCCL_EXEC_AIV_MAX = 1091
"""``HCCL_EXEC_TIMEOUT``'s ceiling when ``HCCL_OP_EXPANSION_MODE=AIV`` (values above, and 0, count as it)."""
EXPANSION_MODE = "HCCL_OP_EXPANSION_MODE"

UNIT_START = "TimeoutStartSec"
HEALTH_START = "--health-start-period"
GATE = "budget_s"

# Where a value comes from, as explain shows it.
FROM_BUDGET, FROM_DEFAULT, FROM_OVERRIDE = "budget", "default", "override"


class BudgetError(ProfileError):
    """A timeout the inventory sets is shorter than the load budget it must hold."""


@dataclass(frozen=True)
class Timeout:
    """One layer's deadline during a load."""

    layer: str
    """What holds it: ``vllm``, ``hccl``, ``systemd``, ``docker``, ``gate``."""
    setting: str
    """Its name where it is set: an environment variable, ``TimeoutStartSec``, ``--health-start-period``."""
    value: int | float
    kind: str
    """``budget`` (from the profile's load_budget_s), ``default`` (vllm_serve_load_budget_s), ``override``
    (the inventory's own setting)."""
    source: str
    """Where the value was written, in words (``load_budget_s of profile X``, ``vllm_serve_env`` ...)."""
    limit: str = ""
    """Why the value is below the budget when it is: a documented maximum."""
    env: bool = False
    """Set through the engine's environment."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LoadBudget:
    """The budget of one instance and every layer's deadline computed from it."""

    seconds: int
    kind: str
    source: str
    timeouts: tuple[Timeout, ...]

    def env(self) -> dict[str, str]:
        """The environment layers, as the engine's environment gets them."""
        return {t.setting: _text(t.value) for t in self.timeouts if t.env}

    def value(self, setting: str) -> int | float:
        return next(t.value for t in self.timeouts if t.setting == setting)

    def as_dict(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "kind": self.kind,
            "source": self.source,
            "timeouts": [t.as_dict() for t in self.timeouts],
        }


@dataclass(frozen=True)
class ShortOverride:
    """A timeout the inventory sets below what the budget needs."""

    setting: str
    value: str
    source: str
    """``profile`` (the profile's ``env``) or ``vllm_serve_env``."""
    message: str


def budget_of(
    profile: ServingProfile,
    name: str,
    default_s: float | None = None,
    default_source: str = "",
) -> tuple[int, str, str]:
    """(seconds, kind, source) of a profile's load budget: its ``load_budget_s``, else ``default_s``
    (``vllm_serve_load_budget_s``), else :data:`DEFAULT_LOAD_BUDGET_S`. Whole seconds, rounded up."""
    if profile.load_budget_s:
        return math.ceil(profile.load_budget_s), FROM_BUDGET, f"load_budget_s of profile {name}"
    if default_s:
        return math.ceil(float(default_s)), FROM_DEFAULT, default_source or "vllm_serve_load_budget_s"
    return (
        DEFAULT_LOAD_BUDGET_S,
        FROM_DEFAULT,
        f"vllm_serve_load_budget_s (default {DEFAULT_LOAD_BUDGET_S} s)",
    )


def load_budget(
    profile: ServingProfile,
    name: str,
    *,
    extra_env: Mapping[str, Any] | None = None,
    default_s: float | None = None,
    default_source: str = "",
    container: bool = True,
) -> LoadBudget:
    """Every layer's deadline for an instance of ``profile`` (named ``name``). An environment layer that
    the profile's ``env`` or ``extra_env`` (the role's ``vllm_serve_env``, which wins, as in the engine's
    environment) sets is that value (an override, checked by :func:`short_overrides`); every other layer
    takes the budget. ``container``: include docker's health start period (container mode)."""
    seconds, kind, source = budget_of(profile, name, default_s, default_source)
    aiv = _aiv(profile, extra_env)

    def from_env(setting: str, layer: str, computed: int, limit: str = "") -> Timeout:
        given = _given(setting, profile.env, extra_env, name)
        if given is not None:
            raw, where = given
            return Timeout(layer, setting, _number(raw), FROM_OVERRIDE, where, env=True)
        return Timeout(layer, setting, computed, kind, source, limit if computed < seconds else "", env=True)

    timeouts = [from_env(ENGINE_READY, "vllm", seconds)]
    if profile.nodes > 1:
        low, high = HCCL_CONNECT_RANGE
        timeouts.append(
            from_env(
                HCCL_CONNECT,
                "hccl",
                min(max(seconds, low), high),
                f"CANN documents {HCCL_CONNECT} up to {high} s",
            )
        )
        exec_max = HCCL_EXEC_AIV_MAX if aiv else HCCL_EXEC_MAX
        why = (
            f"CANN caps {HCCL_EXEC} at {HCCL_EXEC_AIV_MAX} s with {EXPANSION_MODE}=AIV"
            if aiv
            else f"CANN documents {HCCL_EXEC} up to {HCCL_EXEC_MAX} s"
        )
        timeouts.append(from_env(HCCL_EXEC, "hccl", min(seconds, exec_max), why))
    timeouts.append(Timeout("systemd", UNIT_START, seconds, kind, source))
    if container:
        timeouts.append(Timeout("docker", HEALTH_START, seconds, kind, source))
    timeouts.append(Timeout("gate", GATE, seconds, kind, source))
    return LoadBudget(seconds, kind, source, tuple(timeouts))


def short_overrides(
    profile: ServingProfile,
    name: str,
    *,
    pool: str,
    extra_env: Mapping[str, Any] | None = None,
    default_s: float | None = None,
    default_source: str = "",
) -> list[ShortOverride]:
    """The timeouts the inventory sets (the profile's ``env``, ``vllm_serve_env``) for an instance of
    ``profile`` on ``pool`` that would end its load before the budget, or that the tool does not accept."""
    budget = load_budget(
        profile, name, extra_env=extra_env, default_s=default_s, default_source=default_source
    )
    aiv = _aiv(profile, extra_env)
    found: list[ShortOverride] = []
    for timeout in budget.timeouts:
        given = _given(timeout.setting, profile.env, extra_env, name)
        if timeout.kind != FROM_OVERRIDE or given is None:
            continue
        raw = _text(given[0])
        where = "vllm_serve_env" if timeout.source == "vllm_serve_env" else "profile"
        problem = _problem(timeout.setting, raw, budget.seconds, aiv)
        if problem:
            found.append(
                ShortOverride(
                    timeout.setting,
                    raw,
                    where,
                    f"pool {pool}, load budget {budget.seconds} s ({budget.source}): {problem}. Leave it "
                    "unset (provision derives it from the budget) or raise it",
                )
            )
    return found


def check_overrides(
    profile: ServingProfile,
    name: str,
    *,
    pool: str,
    extra_env: Mapping[str, Any] | None = None,
    default_s: float | None = None,
) -> None:
    """Raise :class:`BudgetError` naming the first of :func:`short_overrides`."""
    found = short_overrides(profile, name, pool=pool, extra_env=extra_env, default_s=default_s)
    if found:
        first = found[0]
        where = "vllm_serve_env" if first.source == "vllm_serve_env" else f"env of profile {name}"
        raise BudgetError(f"{where}: {first.setting}={first.value}: {first.message}")


def _problem(setting: str, raw: str, budget: int, aiv: bool) -> str:
    """Why the inventory's ``setting=raw`` cannot hold a load of ``budget`` seconds ('' when it can)."""
    try:
        value = float(raw)
    except ValueError:
        return f"{setting} must be a number of seconds"
    if setting in (ENGINE_READY, HCCL_CONNECT) and not value.is_integer():
        return f"{setting} must be a whole number of seconds"  # both are read as integers
    if setting == HCCL_CONNECT:
        low, high = HCCL_CONNECT_RANGE
        if not low <= value <= high:
            return f"{setting} must be within [{low}, {high}] s (CANN's documented range)"
        needed = min(max(budget, low), high)
    elif setting == HCCL_EXEC:
        if value == 0:
            return ""  # never times out (with AIV: the 1091 s ceiling, the longest there is)
        needed = min(budget, HCCL_EXEC_AIV_MAX) if aiv else budget
    else:
        needed = budget
    if value < needed:
        cap = (
            f"; CANN caps it at {HCCL_EXEC_AIV_MAX} s with {EXPANSION_MODE}=AIV"
            if setting == HCCL_EXEC and aiv
            else ""
        )
        consequence = _CONSEQUENCE[setting]
        return f"{setting}={raw} is shorter than the load budget: {consequence} (at least {needed} s{cap})"
    return ""


_CONSEQUENCE = {
    ENGINE_READY: "vLLM would stop waiting for its engine cores while they still load",
    HCCL_CONNECT: "HCCL would stop waiting for the other nodes' ranks to connect while they still load",
    HCCL_EXEC: "HCCL would fail a collective whose peers on another node still load",
}


def _aiv(profile: ServingProfile, extra: Mapping[str, Any] | None) -> bool:
    """Whether the instance runs HCCL_OP_EXPANSION_MODE=AIV, where CANN caps the exec timeout lower."""
    merged = {**profile.env, **dict(extra or {})}
    return str(merged.get(EXPANSION_MODE, "")).strip().upper() == "AIV"


def _given(
    setting: str, env: Mapping[str, Any] | None, extra: Mapping[str, Any] | None, name: str
) -> tuple[Any, str] | None:
    """The inventory's own value of ``setting`` and where it was written; ``vllm_serve_env`` wins."""
    if extra and setting in extra:
        return extra[setting], "vllm_serve_env"
    if env and setting in env:
        return env[setting], f"env of profile {name}"
    return None


def _number(raw: Any) -> int | float:
    try:
        value = float(str(raw))
    except ValueError:
        return 0
    return int(value) if value.is_integer() else value


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def describe(timeouts: Sequence[Timeout]) -> list[str]:
    """One line per layer: ``VLLM_ENGINE_READY_TIMEOUT_S=3600  (vllm; budget: load_budget_s of ...)``."""
    width = max((len(t.setting) + 1 + len(_text(t.value)) for t in timeouts), default=0)
    lines = []
    for t in timeouts:
        head = f"{t.setting}={_text(t.value)}"
        tail = f"{t.layer}; {t.kind}: {t.source}" + (f"; {t.limit}" if t.limit else "")
        lines.append(f"{head:<{width}}  ({tail})")
    return lines
