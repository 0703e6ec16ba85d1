"""Filters of the hccn_config role: the node's ports from the addressing plan and the hccn_tool set commands
that bring them there (provision.ascend.fabric, the one copy of both)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError


def hccn_config_ports(variables: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The node's NPU ports as its plan sets them (``[]``: no plan, leave the ports as they are)."""
    from provision.ascend import fabric
    from provision.inventory.load import plain

    ports, problems = fabric.host_ports(plain(dict(variables)))
    if problems:
        text = "; ".join(f"{'.'.join(str(p) for p in path)}: {message}" for path, message in problems)
        raise AnsibleFilterError(f"hccn_config: the NPU addressing plan is invalid: {text}")
    return [port.as_dict() for port in ports]


def hccn_config_steps(ports: Sequence[Mapping[str, Any]], probe: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The hccn_tool set commands for what differs, in the order the tool needs."""
    from provision.ascend import fabric
    from provision.inventory.load import plain

    return fabric.config_steps(plain(list(ports)), plain(dict(probe)))


def hccn_config_mismatches(ports: Sequence[Mapping[str, Any]], probe: Mapping[str, Any]) -> list[str]:
    """What still differs from the plan, one line per port and field."""
    from provision.ascend import fabric
    from provision.inventory.load import plain

    return fabric.config_mismatches(plain(list(ports)), plain(dict(probe)))


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "hccn_config_ports": hccn_config_ports,
            "hccn_config_steps": hccn_config_steps,
            "hccn_config_mismatches": hccn_config_mismatches,
        }
