"""Filters that let the roles reuse provision's Python checks (one implementation, not a copy in YAML)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


def provision_inventory_issues(hostvars: Mapping[str, Any]) -> list[str]:
    """Problems in provision's variables as one host sees them (``hostvars[inventory_hostname]``)."""
    # Imported here: Ansible loads every filter file in each task's worker, and pydantic costs ~0.25 s there.
    from provision.inventory.validate import host_issues, owned_variable_names

    names = owned_variable_names(list(hostvars.keys()))
    # ansible_host: the management address vllm_serve_bind_host's default binds to (the open-engine rule)
    variables = {name: hostvars[name] for name in [*names, "ansible_host"] if name in hostvars}
    host = str(hostvars.get("inventory_hostname", "this host"))
    return host_issues(host, variables)


def provision_listen_address(address: Any, fallback: str = "0.0.0.0") -> str:
    """The default bind address of a node's listeners: ``address`` (``ansible_host``, else the inventory
    name) when it is an IP literal, else ``fallback`` (provision.inventory.listen.management_address)."""
    from provision.inventory.listen import management_address

    return management_address(None if address is None else str(address), str(fallback))


def provision_local_address(bind: Any) -> str:
    """Where the node itself reaches a listener bound to ``bind`` (a wildcard: 127.0.0.1)."""
    from provision.inventory.listen import local_address

    return local_address(bind)


def provision_inventory_issues_of(hostvars: Mapping[str, Any], hosts: list[str]) -> dict[str, list[str]]:
    """``provision_inventory_issues`` of each of ``hosts`` (e.g. ``ansible_play_batch``), host -> problems:
    one task for the whole play instead of one per host, each loading the validator."""
    return {str(host): provision_inventory_issues(hostvars[host]) for host in hosts}


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "provision_inventory_issues": provision_inventory_issues,
            "provision_inventory_issues_of": provision_inventory_issues_of,
            "provision_listen_address": provision_listen_address,
            "provision_local_address": provision_local_address,
        }
