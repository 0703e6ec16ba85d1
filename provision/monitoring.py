"""What Prometheus scrapes in a fleet, from the inventory: every NPU node's NPU-Exporter and every vLLM
instance that serves an API (single-node pools, and the head of each multi-node serving group: its workers
run headless and serve no HTTP). Pure functions; the monitoring role writes their result as ``file_sd``
target files and a scrape configuration.

Labels: an exporter target carries ``host`` and ``stack``; an engine target ``host``, ``pool``, ``model``
(the served model name clients ask for), ``profile`` and ``stack``. The exporter's series are per NPU (label
``id``), so the ``pool`` of an NPU series comes from :func:`pool_relabel_configs`: one metric relabelling per
pool that maps (host, id) to the pool's name, applied by the exporter job.

Thresholds that differ per instance (the TTFT SLO of each pool's profile) are series, not labels: PromQL
compares sample values and never a value with a label, so :func:`slo_rules` writes one recording rule per
engine target (``provision:ttft_slo_seconds{host, pool, profile}``, a constant) and the one alert rule of the
collection joins on ``(host, pool)`` -- the usual "thresholds as time series" pattern, which keeps the alert a
static, promtool-tested file whatever the inventory holds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, TypedDict

from provision.inventory.groups import serving_groups_of
from provision.inventory.load import host_var
from provision.inventory.profiles import all_profiles
from provision.inventory.schema import NpuPool
from provision.serving.plan import pool_plans

EXPORTER_JOB = "npu-exporter"
ENGINE_JOB = "vllm"
NODE_JOB = "node"
"""node_exporter's job, by the name its documentation and the common dashboards use."""
TTFT_SLO_RECORD = "provision:ttft_slo_seconds"
"""The recorded series that carries each engine target's TTFT SLO (seconds, as vLLM's histogram)."""
SLO_GROUP = "provision-slo"


class Target(TypedDict):
    """One entry of a Prometheus ``file_sd`` file."""

    targets: list[str]
    labels: dict[str, str]


def _address(hostvars: Any, host: str) -> str:
    return str(host_var(hostvars, host, "ansible_host", host))


def _stack(hostvars: Any, host: str) -> str:
    return str(host_var(hostvars, host, "provision_stack", "") or "")


def exporter_targets(hosts: Iterable[str], hostvars: Any, port: int) -> list[Target]:
    """The NPU-Exporter of every host, at its inventory address."""
    return [
        Target(targets=[f"{_address(hostvars, h)}:{port}"], labels={"host": h, "stack": _stack(hostvars, h)})
        for h in map(str, hosts)
    ]


def _engines(hosts: Iterable[str], hostvars: Any) -> list[tuple[Target, float | None]]:
    """Every engine target with its profile's ``ttft_slo_ms`` (None: the profile sets none)."""
    names = [str(h) for h in hosts]
    heads = {(g.pool, g.head.host) for g in serving_groups_of(names, hostvars)}
    out: list[tuple[Target, float | None]] = []
    for host in names:
        pools = host_var(hostvars, host, "npu_pools_list", []) or []
        profiles = host_var(hostvars, host, "vllm_serve_profiles", {}) or {}
        known = all_profiles(profiles)
        for inst in pool_plans(pools, profiles):
            if inst.nodes > 1 and (inst.pool, host) not in heads:
                continue
            labels = {
                "host": host,
                "pool": inst.pool,
                "model": inst.served_model_name,
                "profile": inst.profile,
                "stack": _stack(hostvars, host),
            }
            target = Target(targets=[f"{_address(hostvars, host)}:{inst.port}"], labels=labels)
            out.append((target, known[inst.profile].ttft_slo_ms))
    return out


def engine_targets(hosts: Iterable[str], hostvars: Any) -> list[Target]:
    """Every vLLM instance that serves an API: one per single-node pool with a profile, one per multi-node
    serving group (at its head)."""
    return [target for target, _ in _engines(hosts, hostvars)]


def slo_rules(hosts: Iterable[str], hostvars: Any, default_ttft_slo_ms: float) -> dict[str, Any]:
    """A Prometheus rule file: per engine target, ``provision:ttft_slo_seconds{host, pool, profile}`` = its
    profile's ``ttft_slo_ms`` (else ``default_ttft_slo_ms``) in seconds."""
    rules = [
        {
            "record": TTFT_SLO_RECORD,
            "expr": f"vector({(slo if slo is not None else default_ttft_slo_ms) / 1000:g})",
            "labels": {key: target["labels"][key] for key in ("host", "pool", "profile")},
        }
        for target, slo in _engines(hosts, hostvars)
    ]
    return {"groups": [{"name": SLO_GROUP, "rules": rules}]}


def pool_relabel_configs(hosts: Iterable[str], hostvars: Any) -> list[dict[str, Any]]:
    """``metric_relabel_configs`` of the exporter job: an NPU series of ``host`` whose ``id`` is a device of a
    pool gets ``pool="<name>"`` (NPUs in no pool get none)."""
    out: list[dict[str, Any]] = []
    for host in map(str, hosts):
        for raw in host_var(hostvars, host, "npu_pools_list", []) or []:
            pool = NpuPool.model_validate(raw)
            ids = "|".join(str(d) for d in sorted(pool.devices))
            out.append(
                {
                    "source_labels": ["host", "id"],
                    "separator": ";",
                    "regex": f"{re.escape(host)};({ids})",
                    "target_label": "pool",
                    "replacement": pool.name,
                }
            )
    return out


def scrape_targets(
    hosts: Iterable[str],
    hostvars: Any,
    exporter_port: int,
    node_exporter_port: int = 9100,
    default_ttft_slo_ms: float = 2000,
) -> dict[str, Any]:
    """``{"npu-exporter": [...], "vllm": [...], "node": [...], "pool_relabel_configs": [...], "slo_rules":
    {...}}`` for ``hosts`` (the NPU nodes, in inventory order). ``node`` lists every host's node_exporter; the
    role writes it only where ``monitoring_node_exporter`` is on."""
    names = [str(h) for h in hosts]
    return {
        EXPORTER_JOB: exporter_targets(names, hostvars, exporter_port),
        ENGINE_JOB: engine_targets(names, hostvars),
        NODE_JOB: exporter_targets(names, hostvars, node_exporter_port),
        "pool_relabel_configs": pool_relabel_configs(names, hostvars),
        "slo_rules": slo_rules(names, hostvars, default_ttft_slo_ms),
    }
