"""A rolling upgrade keeps every served model up: the replicas of each model across the nodes, and the
refusal of a batch that would restart all of a model's ready ones.

``playbooks/upgrade.yml`` restarts ``vllm_serve_upgrade_batch`` nodes at a time. Before a batch writes
anything, the ``vllm_serve`` role lists the single-node instances of every node (:func:`replicas`), asks each
one's readiness endpoint from the controller whether it is in rotation, and refuses the batch when it would
restart every ready instance of a model (:func:`last_replicas`). A model with no ready instance at all is
not refused: restarting it takes nothing away. Multi-node instances (one engine across several nodes) are
not counted: their nodes roll as one batch anyway. Pure functions, but :func:`replicas`, which reads the
inventory's profiles.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from provision.serving.plan import pool_plans

Replica = Mapping[str, Any]
"""``{"host", "pool", "model", "address", "port"}``: one single-node instance of a node."""


def replicas(hosts: Sequence[str], var: Callable[[str, str], Any]) -> list[dict[str, Any]]:
    """The single-node instances of ``hosts`` (in order): host, pool, served model name, the address the
    controller reaches the node on (``vllm_serve_health_host``, else ``ansible_host``, else the name) and the
    engine's port. ``var(host, name)`` reads a host's variable (None when unset)."""
    out: list[dict[str, Any]] = []
    for host in hosts:
        pools = var(host, "npu_pools_list") or []
        address = str(var(host, "vllm_serve_health_host") or var(host, "ansible_host") or host)
        for inst in pool_plans(pools, var(host, "vllm_serve_profiles") or {}):
            if inst.nodes == 1:
                out.append(
                    {
                        "host": host,
                        "pool": inst.pool,
                        "model": inst.served_model_name,
                        "address": address,
                        "port": inst.port,
                    }
                )
    return out


def last_replicas(
    known: Iterable[Replica], ready: Collection[tuple[str, str]], restarting: Collection[tuple[str, str]]
) -> list[str]:
    """One message per model whose ready instances (``ready``: (host, pool)) would all restart in this batch
    (``restarting``: (host, pool)); empty when the batch may go. A model none of whose instances is ready
    is left alone (nothing is lost), and so is one that keeps a ready instance outside the batch."""
    by_model: dict[str, list[tuple[str, str]]] = {}
    for item in known:
        by_model.setdefault(str(item["model"]), []).append((str(item["host"]), str(item["pool"])))
    messages = []
    for model, members in by_model.items():
        up = [m for m in members if m in ready]
        going = [m for m in members if m in restarting]
        if up and going and all(m in restarting for m in up):
            staying = ", ".join(f"{h}/{p}" for h, p in members if (h, p) not in restarting)
            rest = f"its other instances ({staying}) are not ready" if staying else "it has no other instance"
            messages.append(
                f"model {model}: this batch would restart every ready instance of it "
                f"({', '.join(f'{h}/{p}' for h, p in up)}) and {rest}"
            )
    return messages
