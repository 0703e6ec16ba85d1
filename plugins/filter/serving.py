"""Filters for multi-node serving, thin wrappers over provision.inventory.groups (which hosts form a serving
group) and provision.serving.multinode (running them).

Imports happen inside the filters: Ansible loads every filter file in each task's worker, and both modules
pull in pydantic (~0.25 s).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

GROUP_PREFIX = "provision_serving_group_"
"""In-memory inventory groups playbooks/upgrade.yml makes of the nodes of each multi-node serving group."""


def provision_serve_group_members(hosts: Sequence[str], hostvars: Any) -> list[list[Any]]:
    """``[[1, "node1"], [1, "node2"], [2, "node3"], ...]``: each multi-node serving group of ``hosts`` (the
    inventory group, in order; :func:`provision.inventory.groups.serving_groups_of`) numbered from 1, with
    its hosts, for ``add_host`` into the groups ``provision_serving_group_<n>``."""
    from ansible.errors import AnsibleFilterError

    from provision.errors import InputError
    from provision.inventory.groups import serving_groups_of

    names = [str(h) for h in hosts]
    try:
        found = serving_groups_of(names, hostvars)
    except (InputError, ValueError) as exc:
        raise AnsibleFilterError(f"provision_serve_group_members: {exc}") from exc
    return [[number, host] for number, group in enumerate(found, start=1) for host in group.hosts]


def provision_serve_batches(
    hosts: Sequence[str], play_hosts: Sequence[str], groups: Mapping[str, Sequence[str]], batch: Any = 1
) -> list[int]:
    """The ``serial`` of a rolling play over ``hosts`` (the inventory group, in order) restricted to
    ``play_hosts`` (``--limit``): ``batch`` nodes at a time (or ``N%``), each batch grown to hold whole
    serving groups, read from the inventory groups ``provision_serving_group_<n>``
    (:func:`provision.serving.multinode.rolling_batches`)."""
    from ansible.errors import AnsibleFilterError

    from provision.errors import InputError
    from provision.serving.multinode import rolling_batches

    allowed = {str(h) for h in play_hosts}
    ordered = [str(h) for h in hosts if str(h) in allowed]
    members = [list(map(str, names)) for name, names in groups.items() if str(name).startswith(GROUP_PREFIX)]
    try:
        return rolling_batches(ordered, members, batch)
    except (InputError, ValueError) as exc:
        raise AnsibleFilterError(f"provision_serve_batches: {exc}") from exc


def provision_serve_group_outcomes(
    instances: Sequence[Mapping[str, Any]], hostvars: Any, rollback: bool = True
) -> dict[str, dict[str, Any]]:
    """The multi-node pools of this node whose group failed its head's gate, and whether the group goes back
    (:func:`provision.serving.multinode.group_outcomes`)."""
    from provision.inventory.load import host_var
    from provision.serving.multinode import group_outcomes

    return group_outcomes(instances, partial(host_var, hostvars), rollback=bool(rollback))


def provision_serve_replicas(hosts: Sequence[str], hostvars: Any) -> list[dict[str, Any]]:
    """The single-node instances of ``hosts`` (host, pool, model, address, port) from their inventory
    variables (:func:`provision.serving.rollout.replicas`), for the readiness probes of a rolling batch."""
    from ansible.errors import AnsibleFilterError

    from provision.errors import InputError
    from provision.inventory.load import host_var
    from provision.serving.rollout import replicas

    try:
        return replicas([str(h) for h in hosts], partial(host_var, hostvars))
    except (InputError, ValueError) as exc:
        raise AnsibleFilterError(f"provision_serve_replicas: {exc}") from exc


def provision_serve_last_replicas(
    known: Sequence[Mapping[str, Any]],
    probes: Sequence[Mapping[str, Any]],
    fallback: Sequence[Mapping[str, Any]],
    batch: Sequence[str],
    hostvars: Any,
) -> list[str]:
    """Why this batch must not start (:func:`provision.serving.rollout.last_replicas`); empty: it may.
    ``probes``: the ``uri`` results of each replica's readiness endpoint (200 = in rotation); ``fallback``:
    those of the engines' ``/health`` for the replicas whose readiness endpoint did not answer (a node the
    role has not reached since it installs one). Restarting: each batch host's ``__vllm_serve_snapshot``."""
    from provision.inventory.load import host_var
    from provision.serving.rollout import last_replicas

    ready = {
        (str(r["item"]["host"]), str(r["item"]["pool"]))
        for r in [*probes, *fallback]
        if not r.get("skipped") and r.get("status") == 200
    }
    restarting = {
        (str(host), str(pool))
        for host in batch
        for pool in host_var(hostvars, str(host), "__vllm_serve_snapshot") or []
    }
    return last_replicas(known, ready, restarting)


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "provision_serve_group_members": provision_serve_group_members,
            "provision_serve_batches": provision_serve_batches,
            "provision_serve_group_outcomes": provision_serve_group_outcomes,
            "provision_serve_replicas": provision_serve_replicas,
            "provision_serve_last_replicas": provision_serve_last_replicas,
        }
