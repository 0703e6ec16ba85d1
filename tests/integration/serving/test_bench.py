"""``provision bench INVENTORY`` on the shared serving cluster (container mode: the simulated driver's
npu-smi and the real vLLM CPU engine on both nodes): every ready instance benchmarked, its pool's NPUs
sampled with ``npu-smi info -t power`` over ansible-runner while it runs, J/token from their integral."""

from __future__ import annotations

import json

import pytest

from provision.ascend.npu_smi import parse_npu_smi_power
from tests.helpers import provision_cli
from tests.integration.serving.cluster import POOL_NAME, Served

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.engine,
    pytest.mark.slow,
    pytest.mark.parametrize("served", ["container"], indirect=True),
]


def test_bench_an_inventory_measures_each_instance_and_its_npus_energy(served: Served) -> None:
    args = ["bench", str(served.inventory), "--pool", POOL_NAME, "--dataset-name", "fixed"]
    # --ignore-eos: every request gets its 8 tokens (SmolLM2 may end a fixed prompt's answer sooner)
    args += ["--fixed-output-len", "8", "--ignore-eos", "--num-prompts", "6", "--max-concurrency", "2"]
    done = provision_cli(*args, "--power-interval", "0.5", "--json", runs=served.runs, timeout=900)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    runs = json.loads(done.stdout)
    nodes = [node.name for node in served.cluster.nodes]
    assert {r["base_url"] for r in runs} == {served.url(node) for node in nodes}
    pool = next(p for p in served.settings()["npu_pools_list"] if p["name"] == POOL_NAME)
    for run in runs:
        node = next(n for n in nodes if served.url(n) == run["base_url"])
        assert (run["completed"], run["failed"], run["total_output_tokens"]) == (6, 0, 48)
        assert run["power_npus"] == len(pool["devices"]) and run["power_coverage"] >= 0.9
        assert run["power_source"].startswith(f"npu-smi info -t power ({node} NPU ")
        watts = sum(
            parse_npu_smi_power(served.sh(node, "npu-smi", "info", "-t", "power", "-i", str(d))).power_w
            or 0.0
            for d in pool["devices"]
        )
        # the simulated NPUs draw a steady power: the integral is that power over the run
        assert run["energy_j"] == pytest.approx(watts * run["duration"], rel=0.05)
        assert run["j_per_output_token"] == pytest.approx(run["energy_j"] / 48)
