"""What ``provision serve explain`` shows: each served pool's exact command line, environment, devices,
mounts and every timeout with where it came from, read from the inventory alone (no host is contacted).

The records are the serving plan (:func:`provision.serving.plan.serving_plan`), the one the ``vllm_serve``
role's filters compute on the node, from the host's inventory variables over the role's defaults.
What only the node knows is named in each instance's ``notes``: docker's default runtime when
``vllm_serve_container_devices`` is ``auto``, the gid of ``HwHiAiUser``, which driver files exist, the
interface holding ``HCCL_IF_IP``, the image's architecture when ``vllm_serve_image`` is the default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from provision.inventory.budget import Timeout, describe
from provision.inventory.load import Inventory
from provision.serving import plan


def explain(inventory: Inventory, target: str | None = None) -> list[dict[str, Any]]:
    """One record per served pool of the hosts of ``npu_nodes`` (``target``: ``HOST`` or ``HOST/POOL``)."""
    return [plan.record(host, pool) for host, pool in plan.serving_plan(inventory, target).pools()]


def render(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The text of ``provision serve explain``."""
    if not records:
        return ["no pool with a serving profile in the inventory"]
    lines: list[str] = []
    for record in records:
        place = ""
        if record["role"] != "single":
            place = f", {record['role']} of serving group {record['group']} ({', '.join(record['hosts'])})"
        lines.append(
            f"{record['host']}/{record['pool']}: profile {record['profile']}, {record['mode']} mode, "
            f"{record['unit']}, port {record['port']}{place}"
        )
        lines.append("  command:")
        lines.append(f"    {record['command']}")
        lines.append("  environment:")
        lines += [f"    {key}={value}" for key, value in record["env"].items()]
        lines.append("  devices:")
        lines += [f"    {device}" for device in record["devices"]]
        lines.append("  mounts:")
        lines += [f"    {mount}" for mount in record["mounts"]] or ["    (none: the engine runs on the node)"]
        timeouts = [Timeout(**t) for t in record["timeouts"]]
        lines.append(f"  timeouts (load budget {record['budget_s']} s):")
        lines += [f"    {line}" for line in describe(timeouts)]
        lines += _rank_table(record.get("rank_table"))
        if record["notes"]:
            lines.append("  notes:")
            lines += [f"    - {note}" for note in record["notes"]]
        lines.append("")
    return lines[:-1]


def _rank_table(found: Mapping[str, Any] | None) -> list[str]:
    if not found:
        return []
    table = found.get("table")
    if table is None:
        return [
            f"  rank table: {found['path']} (written by the HCCN gate from the NPU addresses it reads; "
            "not every member has an addressing plan, so it is not shown here)"
        ]
    lines = [f"  rank table: {found['path']} (HCCL version {table['version']}, written by the HCCN gate):"]
    for server in table["server_list"]:
        ranks = ", ".join(
            f"NPU {d['device_id']} {d['device_ip']} rank {d['rank_id']}" for d in server["device"]
        )
        lines.append(f"    {server['server_id']} ({server['host_ip']}): {ranks}")
    return lines
