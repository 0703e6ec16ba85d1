"""The version lock (``provision/data/versions.yml``): known-good stack combinations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from types import MappingProxyType
from typing import Any

import yaml

from provision.paths import data_dir


@cache
def load_lock() -> dict[str, Any]:
    with (data_dir() / "versions.yml").open(encoding="utf-8") as fh:
        data: dict[str, Any] = yaml.safe_load(fh)
    return data


def stack_names() -> list[str]:
    """The lock's stacks, oldest release first (``0.13.0`` before ``0.23.0`` before ``0.25.1rc1``)."""
    return sorted(load_lock()["stacks"], key=_release_key)


def stack(name: str) -> dict[str, Any]:
    entry: dict[str, Any] = dict(load_lock()["stacks"][name])
    entry["name"] = name
    return entry


def default_stack_name() -> str:
    """The stack a host runs when its inventory names none (``provision_stack`` empty)."""
    return str(load_lock()["default"])


def default_stack() -> dict[str, Any]:
    return stack(default_stack_name())


STACK_VARIABLE = "provision_stack"
"""The inventory variable naming a host's stack of the lock."""


@dataclass(frozen=True)
class HostStack:
    """The stack a host runs and the versions the lock pins for it."""

    name: str
    chosen: bool
    """Named by the host's ``provision_stack``; False: the lock's default."""
    versions: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    """The lock's entry (driver, firmware, hdk, cann, nnal, vllm, base_images ...); empty when ``name`` is
    not in the lock."""

    @property
    def known(self) -> bool:
        return bool(self.versions)

    def expected(self, key: str) -> str | None:
        """The lock's ``key`` (``driver``, ``cann`` ...) as text; None for an unknown stack or key."""
        value = self.versions.get(key)
        return None if value is None else str(value)


def resolve_stack(name: object) -> HostStack:
    """The one rule for "which stack": ``name`` (a host's ``provision_stack``) when given, else the lock's
    default. Empty and unrendered (``{{ ... }}``) values are not given: validation leaves templates to the
    play, and the roles' filters receive them rendered."""
    given = str(name) if name else ""
    if "{{" in given:
        given = ""
    chosen = given or default_stack_name()
    entry = stack(chosen) if chosen in load_lock()["stacks"] else {}
    return HostStack(chosen, bool(given), MappingProxyType(entry))


def host_stack(variables: Mapping[str, Any]) -> HostStack:
    """The stack a host's inventory variables select (:func:`resolve_stack` of ``provision_stack``)."""
    return resolve_stack(variables.get(STACK_VARIABLE))


def base_image(name: str, line: str, os_variant: str) -> str:
    """The CANN base image vllm-ascend's Dockerfile for hardware ``line`` (``910b``, ``a3``, ``310p``) and
    ``os_variant`` builds on at stack ``name``'s tag; KeyError when the lock has none."""
    return str(stack(name)["base_images"][line][os_variant])


def hdk_matches(version: str, lines: Sequence[str]) -> bool:
    """Whether driver ``version`` belongs to one of the HDK ``lines`` as the vendor writes them: ``25.5.X``
    is every 25.5 release (``25.5.1``, ``25.5.RC1``), ``26.0.RC1`` that release alone (case-insensitive)."""
    have = version.strip().lower().split(".")
    for line in lines:
        want = str(line).strip().lower().split(".")
        if want[-1] == "x":
            if have[: len(want) - 1] == want[:-1] and len(have) >= len(want):
                return True
        elif have == want:
            return True
    return False


def _release_key(name: str) -> tuple[tuple[int, ...], int, int]:
    """PEP 440's order for vllm-ascend's tags: ``0.25.1rc1`` sorts after ``0.23.0``, before ``0.25.1``."""
    base, _, rc = name.partition("rc")
    numbers = tuple(int(n) for n in base.split(".") if n.isdigit())
    return numbers, 0 if rc else 1, int(rc) if rc.isdigit() else 0
