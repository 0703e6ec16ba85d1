"""Filters of the monitoring role: what Prometheus scrapes, from the inventory (provision.monitoring).

The import happens inside the filter: Ansible loads every filter file in each task's worker, and
provision.monitoring pulls in pydantic (~0.25 s).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def provision_monitoring_targets(
    hosts: Sequence[str], hostvars: Any, exporter_port: int = 8082
) -> dict[str, Any]:
    """``{"npu-exporter": [...], "vllm": [...], "pool_relabel_configs": [...]}`` for ``hosts`` (the NPU
    nodes, in inventory order): ``file_sd`` entries of every exporter and of every vLLM instance that serves
    an API (the head of a multi-node serving group), and the exporter job's pool relabelling
    (:func:`provision.monitoring.scrape_targets`)."""
    from ansible.errors import AnsibleFilterError

    from provision.errors import InputError
    from provision.monitoring import scrape_targets

    try:
        return scrape_targets([str(h) for h in hosts], hostvars, int(exporter_port))
    except (InputError, ValueError) as exc:
        raise AnsibleFilterError(f"provision_monitoring_targets: {exc}") from exc


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"provision_monitoring_targets": provision_monitoring_targets}
