"""The bench gate of ``playbooks/upgrade.yml`` (``vllm_serve_bench_gate``): the controller-side decision of
the ``vllm_bench_gate`` action plugin on tables, then the plugin itself through ``ansible`` against the stub
OpenAI-compatible server of test_bench_cli.py: a baseline faster than the bound fails naming the metrics, a
slower one passes, and a baseline without the instance's run fails before any request is sent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from provision.bench import baseline as gate
from provision.runner.run import ansible_env
from tests.helpers import load_module
from tests.unit.test_bench_cli import Stub, stub  # noqa: F401  # the stub server fixture

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = load_module("provision_action_vllm_bench_gate", ROOT / "plugins/action/vllm_bench_gate.py")
URL = "http://10.0.0.5:8000"


def _run(**metrics: float) -> dict[str, Any]:
    values = {"output_throughput": 100.0, "request_throughput": 2.0, "p99_ttft_ms": 500.0} | metrics
    return {"base_url": URL, "max_concurrency": 2, "request_rate": "inf", "num_prompts": 8, **values}


def _baseline(tmp_path: Path, *runs: dict[str, Any]) -> gate.Baseline:
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(list(runs)))
    return gate.load(path)


def test_a_run_20_percent_slower_than_its_baseline_fails_naming_the_metrics(tmp_path: Path) -> None:
    previous = _baseline(tmp_path, _run(output_throughput=125.0, request_throughput=2.5, p99_ttft_ms=400.0))
    passed, message, rows = PLUGIN.decide(previous, _run(), [], 0.10, "vllm-chat.service")
    assert not passed
    lines = message.splitlines()
    assert lines[0] == (
        f"bench gate of vllm-chat.service: regression beyond 10% of {previous.path}: "
        "output tok/s, p99 TTFT ms, req/s (3 of 3 compared)"
    )
    assert "  output tok/s 125.00 -> 100.00 (-20.0%) REGRESSED" in lines
    assert "  p99 TTFT ms 400.00 -> 500.00 (+25.0%) REGRESSED" in lines
    assert [row.metric for row in gate.regressed(rows)] == [
        "output_throughput",
        "request_throughput",
        "p99_ttft_ms",
    ]


def test_a_run_within_the_bound_passes_and_a_failed_request_does_not(tmp_path: Path) -> None:
    previous = _baseline(tmp_path, _run(output_throughput=105.0))
    passed, message, _ = PLUGIN.decide(previous, _run(), [], 0.10, "vllm-chat.service")
    assert passed
    assert message.splitlines()[0].endswith(f"no regression beyond 10% of {previous.path} (3 compared)")
    assert "  output tok/s 105.00 -> 100.00 (-4.8%) ok" in message.splitlines()
    passed, message, _ = PLUGIN.decide(previous, _run(), ["HTTP 500: boom\nmore"], 0.10, "vllm-chat.service")
    assert not passed and message.splitlines()[-1] == "  1 of 8 requests failed: HTTP 500: boom"


def test_the_gate_matches_the_baseline_by_url_and_concurrency(tmp_path: Path) -> None:
    previous = _baseline(tmp_path, _run())
    assert previous.run_for(PLUGIN.point(URL, {"max_concurrency": 2}))["base_url"] == URL
    with pytest.raises(gate.InputError, match=r"no run of http://10.0.0.5:8000 at --max-concurrency 4"):
        previous.run_for(PLUGIN.point(URL, {"max_concurrency": 4}))


# ------------------------------------------------------------------------------------------ through ansible


def _ansible(tmp_path: Path, port: int, args: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """``ansible localhost -m provision.ascend.vllm_bench_gate`` with one pool ``chat`` on ``port``."""
    variables = {
        "ansible_host": "127.0.0.1",
        "npu_pools_list": [{"name": "chat", "devices": [0], "port": port, "profile": "stubbed"}],
        "vllm_serve_profiles": {
            "stubbed": {"model": "/models/stub", "served_model_name": "stub", "tensor_parallel_size": 1}
        },
    }
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    return subprocess.run(
        [
            # the interpreter's own ansible (a CI variant runs in a venv of its own)
            *(str(Path(sys.executable).with_name("ansible")), "localhost", "-i", "localhost,", "-c", "local"),
            *("-m", "provision.ascend.vllm_bench_gate", "-a", json.dumps(args)),
            *("-e", f"@{tmp_path / 'vars.json'}"),
        ],
        capture_output=True,
        text=True,
        env=ansible_env(),
        timeout=120,
        check=False,
    )


def test_the_plugin_benches_the_instance_and_fails_on_a_regression(
    stub: Stub,  # noqa: F811
    tmp_path: Path,
) -> None:
    port = int(stub.url.rsplit(":", 1)[1])
    url = f"http://127.0.0.1:{port}"
    slow = {"output_throughput": 0.001, "request_throughput": 0.001, "p99_ttft_ms": 1e9}
    fast = {"output_throughput": 1e9, "request_throughput": 1e9, "p99_ttft_ms": 0.001}
    for name, values in (("slow", slow), ("fast", fast)):
        run = {"base_url": url, "max_concurrency": 2, "request_rate": "inf", **values}
        (tmp_path / f"{name}.json").write_text(json.dumps(run))
    args = {"baseline": str(tmp_path / "slow.json"), "num_prompts": 4, "fixed_output_len": 3}
    done = _ansible(tmp_path, port, args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"no regression beyond 10% of {tmp_path / 'slow.json'} (3 compared)" in done.stdout
    assert len(stub.bodies) == 5  # one warm-up, then the 4 requests
    assert all(b["max_tokens"] == 3 and b["ignore_eos"] and b["model"] == "stub" for b in stub.bodies)

    done = _ansible(
        tmp_path, port, {**args, "baseline": str(tmp_path / "fast.json"), "max_regression": "20%"}
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        f"bench gate of vllm-chat.service: regression beyond 20% of {tmp_path / 'fast.json'}: "
        "output tok/s, p99 TTFT ms, req/s (3 of 3 compared)"
    ) in done.stdout

    # a baseline without this instance's run: refused before any request
    sent = len(stub.bodies)
    done = _ansible(tmp_path, port, {**args, "max_concurrency": 4})
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        f"vllm_serve_bench_gate: --baseline {tmp_path / 'slow.json'}: no run of {url} at --max-concurrency 4"
        in (done.stdout)
    )
    assert len(stub.bodies) == sent
