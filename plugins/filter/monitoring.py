"""Filters of the monitoring role: what Prometheus scrapes, from the inventory (provision.monitoring).

The import happens inside the filter: Ansible loads every filter file in each task's worker, and
provision.monitoring pulls in pydantic (~0.25 s).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def provision_monitoring_targets(
    hosts: Sequence[str],
    hostvars: Any,
    exporter_port: int = 8082,
    node_exporter_port: int = 9100,
    default_ttft_slo_ms: float = 2000,
) -> dict[str, Any]:
    """``{"npu-exporter": [...], "vllm": [...], "node": [...], "pool_relabel_configs": [...], "slo_rules":
    {...}}`` for ``hosts`` (the NPU nodes, in inventory order): ``file_sd`` entries of every exporter, of
    every vLLM instance that serves an API (the head of a multi-node serving group) and of every
    node_exporter, the exporter job's pool relabelling and the rule file of each instance's TTFT SLO
    (:func:`provision.monitoring.scrape_targets`)."""
    from ansible.errors import AnsibleFilterError

    from provision.errors import InputError
    from provision.monitoring import scrape_targets

    try:
        return scrape_targets(
            [str(h) for h in hosts],
            hostvars,
            int(exporter_port),
            int(node_exporter_port),
            float(default_ttft_slo_ms),
        )
    except (InputError, ValueError) as exc:
        raise AnsibleFilterError(f"provision_monitoring_targets: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"provision_monitoring_targets": provision_monitoring_targets}
