"""The version lock (``provision/data/versions.yml``): known-good stack combinations."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
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
