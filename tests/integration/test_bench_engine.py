"""``provision bench`` against the REAL vLLM CPU engine (SmolLM2-135M, FACTS.md §8), started locally: the
whole path (the server's tokenizer for the random prompts, streamed completions, usage counts) on 16
prompts, its JSON keys and sane values. Run alone, serialised with the other engine users:
``flock /tmp/provision-cluster.lock .venv/bin/pytest tests/integration/test_bench_engine.py -x -q``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from provision.serving.health import Endpoint, wait_ready
from provision_sim.serving import vllm_cpu as engine
from provision_sim.serving.vllm_cpu import EngineProcess
from tests import helpers

pytestmark = [pytest.mark.engine, pytest.mark.slow]

PROMPTS = 16


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    engine.prepare()
    log = tmp_path_factory.mktemp("bench-engine") / "engine.log"
    proc = engine.start_engine(log_path=log)
    try:
        verdict = wait_ready(
            Endpoint(proc.url, engine.SERVED_MODEL_NAME), alive=proc.alive, log=log, budget_s=600
        )
        assert verdict.ready, verdict.message
        yield proc
    finally:
        proc.stop()


def test_bench_measures_the_real_engine(
    served: EngineProcess, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    saved = tmp_path / "result.json"
    args = ["bench", served.url, "--num-prompts", str(PROMPTS), "--random-input-len", "64"]
    args += ["--random-output-len", "16", "--max-concurrency", "4", "--ignore-eos", "--num-warmups", "1"]
    code = helpers.run_cli([*args, "--json", "--save-result", str(saved), "--timeout", "900"], monkeypatch)
    out = capsys.readouterr()
    assert code == 0, out.err
    result = json.loads(out.out)
    assert (result["completed"], result["failed"], result["num_prompts"]) == (PROMPTS, 0, PROMPTS)
    assert result["model_id"] == engine.SERVED_MODEL_NAME
    assert result["total_output_tokens"] == PROMPTS * 16  # --ignore-eos: every token, counted by the server
    assert result["requests_without_usage"] == 0
    # the random prompts are built with the server's own tokenizer: within a token or two of the length
    assert abs(result["total_input_tokens"] / PROMPTS - 64) <= 2
    for key in ("median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "median_itl_ms"):
        assert result[key] > 0, key
    assert result["p99_ttft_ms"] >= result["median_ttft_ms"]
    assert result["output_throughput"] > 0 and result["request_throughput"] > 0
    assert result["total_token_throughput"] > result["output_throughput"]
    assert 0 < result["duration"] < 900
    assert result["j_per_output_token"] is None and "--power-from" in result["energy_note"]
    kept = json.loads(saved.read_text())
    assert len(kept["ttfts"]) == PROMPTS and all(len(itl) == 15 for itl in kept["itls"])
