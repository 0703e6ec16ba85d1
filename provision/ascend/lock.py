"""The version lock (``provision/data/versions.yml``): known-good stack combinations."""

from __future__ import annotations

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
    return sorted(load_lock()["stacks"])


def stack(name: str) -> dict[str, Any]:
    entry: dict[str, Any] = dict(load_lock()["stacks"][name])
    entry["name"] = name
    return entry


def default_stack_name() -> str:
    """The stack a host runs when its inventory names none (``provision_stack`` empty)."""
    return str(load_lock()["default"])


def default_stack() -> dict[str, Any]:
    return stack(default_stack_name())
