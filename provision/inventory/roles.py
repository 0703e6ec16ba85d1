"""The collection's roles as data: their defaults, and a host's value of a role variable read without Ansible
(commands that decide from the inventory alone: ``serve explain``, ``bundle``)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

import yaml

from provision.inventory.load import plain
from provision.paths import ansible_root


@cache
def role_defaults(role: str) -> dict[str, Any]:
    """``roles/<role>/defaults/main.yml`` of the collection."""
    path = ansible_root() / "roles" / role / "defaults" / "main.yml"
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return data


def templated(value: Any) -> bool:
    """A Jinja template (``{{ ... }}``): only Ansible knows its value."""
    return isinstance(value, str) and "{{" in value


def role_value(host_vars: Mapping[str, Any], name: str, role: str) -> Any:
    """The host's value of ``role``'s variable ``name`` as plain data, else the role's default; None when the
    one that applies is a template (the caller derives it, as the role's default does)."""
    value = host_vars.get(name)
    if value is None or templated(value):
        value = role_defaults(role).get(name)
    return None if templated(value) else plain(value)


@cache
def role_os_vars(role: str, distribution: str, version: str) -> dict[str, Any]:
    """The OS constants a role loads (``include_vars`` of the first of ``vars/<distribution>-<version>.yml``,
    ``vars/<distribution>.yml``, ``vars/main.yml``, as its tasks/main.yml does), over ``vars/main.yml``.

    ``include_vars`` outranks the inventory: these values are the role's, whatever the inventory says.
    """
    folder = ansible_root() / "roles" / role / "vars"
    data: dict[str, Any] = yaml.safe_load((folder / "main.yml").read_text(encoding="utf-8")) or {}
    for name in (f"{distribution}-{version}.yml", f"{distribution}.yml"):
        path = folder / name
        if path.is_file():
            data.update(yaml.safe_load(path.read_text(encoding="utf-8")) or {})
            break
    return data
