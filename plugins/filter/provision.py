"""Filters that let the roles reuse provision's Python checks (one implementation, not a copy in YAML)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


def provision_inventory_issues(hostvars: Mapping[str, Any]) -> list[str]:
    """Problems in provision's variables as one host sees them (``hostvars[inventory_hostname]``)."""
    # Imported here: Ansible loads every filter file in each task's worker, and pydantic costs ~0.25 s there.
    from provision.inventory.validate import host_issues, owned_variable_names

    names = owned_variable_names(list(hostvars.keys()))
    variables = {name: hostvars[name] for name in names}
    host = str(hostvars.get("inventory_hostname", "this host"))
    return host_issues(host, variables)


def provision_inventory_issues_of(hostvars: Mapping[str, Any], hosts: list[str]) -> dict[str, list[str]]:
    """``provision_inventory_issues`` of each of ``hosts`` (e.g. ``ansible_play_batch``), host -> problems:
    one task for the whole play instead of one per host, each loading the validator."""
    return {str(host): provision_inventory_issues(hostvars[host]) for host in hosts}


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "provision_inventory_issues": provision_inventory_issues,
            "provision_inventory_issues_of": provision_inventory_issues_of,
        }
