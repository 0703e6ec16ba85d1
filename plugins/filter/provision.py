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


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"provision_inventory_issues": provision_inventory_issues}
