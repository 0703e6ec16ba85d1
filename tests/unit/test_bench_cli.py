"""``provision bench`` end to end against a stub OpenAI-compatible server on 127.0.0.1 (streamed
completions, vLLM's /tokenize and /detokenize with one token per character): what the user sees, the exit
codes, the JSON keys, the refusals of bad input (exit 2, the option named, no traceback)."""

from __future__ import annotations

import contextlib
import json
import math
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from provision.bench import power
from provision.bench.client import Target
from provision.bench.datasets import fixed_requests
from provision.bench.run import Workload, sweep
from provision.cli import bench as bench_cli
from tests import helpers

pytestmark = pytest.mark.unit


@dataclass
class Stub:
    url: str
    bodies: list[dict[str, Any]] = field(default_factory=list)
    token_delay_s: float = 0.0
    api_key: str | None = None
    headers: list[dict[str, str]] = field(default_factory=list)
    hits: int = 0
    """Every HTTP request the stub answered (models, tokenizer, completions)."""


def _handler(stub: Stub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args: object) -> None:
            pass

        def _json(self, status: int, data: Any) -> None:
            body = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _authorised(self) -> bool:
            if stub.api_key and self.headers.get("Authorization") != f"Bearer {stub.api_key}":
                self._json(401, {"error": "Unauthorized"})
                return False
            return True

        def do_GET(self) -> None:
            stub.hits += 1
            if self._authorised():
                self._json(200, {"object": "list", "data": [{"id": "stub", "object": "model"}]})

        def do_POST(self) -> None:
            stub.hits += 1
            if not self._authorised():
                return
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/tokenize":
                self._json(
                    200, {"tokens": [ord(c) for c in body["prompt"]], "count": 0, "max_model_len": 4096}
                )
                return
            if self.path == "/detokenize":
                self._json(200, {"prompt": "".join(chr(i) for i in body["tokens"])})
                return
            stub.bodies.append(body)
            stub.headers.append(dict(self.headers))
            chat = self.path == "/v1/chat/completions"
            prompt = body["messages"][0]["content"] if chat else body["prompt"]
            if "FAIL" in prompt:
                self._json(500, {"error": "boom"})
                return
            wanted = body["max_completion_tokens"] if chat else body["max_tokens"]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for _ in range(wanted):
                time.sleep(stub.token_delay_s)
                choice = {"index": 0, "delta": {"content": "x"}} if chat else {"index": 0, "text": "x"}
                self.wfile.write(f"data: {json.dumps({'choices': [choice]})}\n\n".encode())
                self.wfile.flush()
            usage = {"prompt_tokens": len(prompt), "completion_tokens": wanted}
            self.wfile.write(
                f"data: {json.dumps({'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n".encode()
            )

    return Handler


@contextlib.contextmanager
def serving_stub() -> Iterator[Stub]:
    """The stub server on a free port of 127.0.0.1, for the ``with`` block."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    server.daemon_threads = True
    server.block_on_close = False
    server.handle_error = lambda *_args: None  # type: ignore[method-assign]  # a client that left: its business
    state = Stub(f"http://127.0.0.1:{server.server_address[1]}")
    server.RequestHandlerClass = _handler(state)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def stub() -> Iterator[Stub]:
    with serving_stub() as state:
        yield state


def run(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    code = helpers.run_cli(["bench", *args], monkeypatch)
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    return code, out.out, out.err


SMALL = ["--num-prompts", "6", "--random-input-len", "16", "--random-output-len", "5"]


def test_a_run_reports_vllms_keys_with_the_servers_token_counts(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        [stub.url, *SMALL, "--max-concurrency", "2", "--ignore-eos", "--json"], monkeypatch, capsys
    )
    assert code == 0
    result = json.loads(out)
    for key in (
        "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "median_itl_ms",
        "p90_e2el_ms", "output_throughput", "request_throughput", "total_token_throughput",
        "completed", "failed", "duration",
    ):  # fmt: skip
        assert key in result, key
    assert (result["completed"], result["failed"], result["num_prompts"]) == (6, 0, 6)
    assert result["total_input_tokens"] == 6 * 16  # usage.prompt_tokens: the random prompts are exact
    assert result["total_output_tokens"] == 6 * 5
    assert result["model_id"] == "stub" and result["max_concurrency"] == 2
    assert result["median_ttft_ms"] > 0 and result["output_throughput"] > 0
    assert result["j_per_output_token"] is None
    assert result["energy_note"] == bench_cli.NO_POWER_FOR_URL
    assert all(
        b["ignore_eos"] is True and b["stream_options"] == {"include_usage": True} for b in stub.bodies
    )
    assert all(b["stream"] is True and b["max_tokens"] == 5 and b["model"] == "stub" for b in stub.bodies)


def test_warmups_are_sent_first_and_not_counted(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run([stub.url, *SMALL, "--num-warmups", "3", "--json"], monkeypatch, capsys)
    assert code == 0
    assert len(stub.bodies) == 9 and json.loads(out)["completed"] == 6


def test_chat_the_table_and_the_saved_per_request_timings(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    saved = tmp_path / "result.json"
    args = [stub.url, "--dataset-name", "fixed", "--fixed-output-len", "4", "--num-prompts", "3"]
    args += ["--endpoint-type", "chat", "--save-result", "--save-detailed", "--result-filename", str(saved)]
    code, out, _ = run(args, monkeypatch, capsys)
    assert code == 0
    assert stub.bodies[0]["messages"][0]["role"] == "user" and stub.bodies[0]["max_completion_tokens"] == 4
    assert "provision bench" in out and "J/token" in out and stub.url in out
    assert f"{stub.url} (conc -, rate inf): energy n/a: {bench_cli.NO_POWER_FOR_URL}" in out
    assert f"result: {saved}" in out
    data = json.loads(saved.read_text())
    # vLLM writes its --backend under endpoint_type too
    assert data["endpoint_type"] == data["backend"] == "openai-chat" and data["total_output_tokens"] == 12
    assert len(data["ttfts"]) == 3 and [len(itl) for itl in data["itls"]] == [3, 3, 3]
    assert data["errors"] == ["", "", ""]


def test_a_sweep_runs_each_concurrency(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run([stub.url, *SMALL, "--sweep-concurrency", "1,3", "--json"], monkeypatch, capsys)
    assert code == 0
    runs = json.loads(out)
    assert [r["max_concurrency"] for r in runs] == [1, 3]
    assert [r["completed"] for r in runs] == [6, 6]


def test_slo_goodput_is_reported(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run([stub.url, *SMALL, "--slo", "ttft=60000,tpot=60000", "--json"], monkeypatch, capsys)
    assert code == 0
    result = json.loads(out)
    assert result["request_goodput"] == pytest.approx(result["request_throughput"])


def test_failed_requests_are_counted_and_exit_1(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [stub.url, "--dataset-name", "fixed", "--fixed-prompt", "FAIL please", "--num-prompts", "2"]
    code, out, _ = run(args, monkeypatch, capsys)
    assert code == 1
    assert "0/2" in out
    assert f"{stub.url}: failed: HTTP 500: " in out


def test_every_run_stops_at_its_timeout(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stub.token_delay_s = 0.2
    started = time.monotonic()
    code, out, _ = run(
        [
            stub.url,
            *SMALL[:2],
            "--dataset-name",
            "fixed",
            "--fixed-output-len",
            "50",
            "--timeout",
            "0.5",
            "--json",
        ],
        monkeypatch,
        capsys,
    )
    assert code == 1
    assert time.monotonic() - started < 8
    result = json.loads(out)
    assert (result["completed"], result["failed"]) == (0, 6)


def test_warmups_stop_at_the_timeout_too(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stub.token_delay_s = 0.2
    started = time.monotonic()
    args = [stub.url, "--dataset-name", "fixed", "--fixed-output-len", "50", "--num-warmups", "1"]
    code, _, err = run([*args, "--timeout", "0.5"], monkeypatch, capsys)
    assert code == 1 and time.monotonic() - started < 8
    assert f"error: {stub.url}: the warm-up requests did not finish within --timeout 0.5 s" in err


def test_the_api_key_is_sent(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stub.api_key = "sekrit"
    code, _, err = run([stub.url, *SMALL], monkeypatch, capsys)
    assert (
        code == 1
        and f"error: {stub.url}: the API key was refused (/v1/models answered 401); give --api-key" in err
    )
    monkeypatch.setenv("PROVISION_API_KEY", "sekrit")
    code, _, _ = run([stub.url, *SMALL, "--json"], monkeypatch, capsys)
    assert code == 0


def test_the_api_key_is_read_from_api_key_file_without_a_warning(
    stub: Stub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stub.api_key = "sekrit-from-file"
    key_file = tmp_path / "key"
    key_file.write_text("sekrit-from-file\n")
    key_file.chmod(0o600)
    monkeypatch.setenv("PROVISION_API_KEY", "a-stale-one")  # the option beats the environment
    code, out, err = run([stub.url, *SMALL, "--json", "--api-key-file", str(key_file)], monkeypatch, capsys)
    assert code == 0, err
    assert json.loads(out)["completed"] == 6
    assert "warning" not in err


def test_an_api_key_on_the_command_line_still_works_and_warns_that_ps_shows_it(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stub.api_key = "sekrit"
    code, _, err = run([stub.url, *SMALL, "--json", "--api-key", "sekrit"], monkeypatch, capsys)
    assert code == 0, err
    assert err.startswith(
        "warning: --api-key puts the key on the command line, which every user of this machine can read "
        "(ps, /proc/PID/cmdline); give --api-key-file FILE or $PROVISION_API_KEY instead\n"
    )
    monkeypatch.setenv("PROVISION_API_KEY", "sekrit")
    code, _, err = run([stub.url, *SMALL, "--json"], monkeypatch, capsys)
    assert code == 0 and "warning" not in err  # from the environment: no warning


def test_a_url_takes_openai_api_key_as_vllm_bench_serve_does(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stub.api_key = "sk-openai-style"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-style")
    code, _, err = run([stub.url, *SMALL, "--json"], monkeypatch, capsys)
    assert code == 0, err
    monkeypatch.setenv("PROVISION_API_KEY", "provision-s-own")  # provision's variable comes first
    code, _, err = run([stub.url, *SMALL, "--json"], monkeypatch, capsys)
    assert code == 1 and "the API key was refused" in err


def test_api_key_and_api_key_file_together_exit_2(
    stub: Stub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("k\n")
    code, _, err = run(
        [stub.url, *SMALL, "--api-key", "k", "--api-key-file", str(key_file)], monkeypatch, capsys
    )
    assert code == 2
    assert "error: --api-key and --api-key-file: give one of them" in err
    assert stub.bodies == []


def test_an_unreachable_url_exits_1_with_the_cause(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from provision_sim.serving.vllm_cpu import free_port

    url = f"http://127.0.0.1:{free_port()}"
    code, _, err = run([url, *SMALL], monkeypatch, capsys)
    assert code == 1
    assert err.startswith(f"error: {url}: unreachable: cannot connect")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--slo", "ttft=soon"], "--slo ttft=soon: ttft='soon' is not a number of milliseconds"),
        (["--dataset-name", "nope"], "--dataset-name nope: one of random, sharegpt, custom, fixed"),
        (
            ["--dataset-name", "sharegpt", "--dataset-path", "/nonexistent/d.json"],
            "--dataset-path /nonexistent/d.json: no such file",
        ),
        (["--dataset-name", "sharegpt"], "--dataset-name sharegpt needs --dataset-path FILE"),
        (
            ["--dataset-path", "x.json"],
            "--dataset-path applies to --dataset-name sharegpt or custom, not random",
        ),
        (["--endpoint-type", "embeddings"], "--endpoint-type embeddings: one of completions, chat"),
        (["--limit", "node1"], "--limit applies to an inventory, not to a URL"),
        (["--pool", "chat"], "--pool applies to an inventory, not to a URL"),
        (
            ["--sweep-concurrency", "1,x"],
            "--sweep-concurrency 1,x: 'x' is not one of whole numbers of requests above 0",
        ),
        (
            ["--sweep-concurrency", "1,4", "--max-concurrency", "2"],
            "--sweep-concurrency replaces --max-concurrency",
        ),
        (["--sweep-rate", "1,0"], "--sweep-rate 1,0: '0' is not one of requests/s above 0 (or inf)"),
        (
            ["--sweep-rate", "1", "--sweep-concurrency", "2"],
            "--sweep-concurrency and --sweep-rate: give one of them",
        ),
        (["--burstiness", "0"], "--burstiness 0: must be above 0"),
        (["--request-rate", "-1"], "--request-rate -1: must be above 0"),
        (["--random-range-ratio", "1.5"], "--random-range-ratio 1.5: must be in [0, 1)"),
        (
            ["--power-from", "/nonexistent/inv.ini"],
            "--power-from /nonexistent/inv.ini: no such inventory file",
        ),
        (
            ["--save-result", "--result-filename", "/nonexistent/dir/r.json"],
            "--result-filename /nonexistent/dir/r.json: no such folder /nonexistent/dir",
        ),
        (["--model", "other"], "--model other: http://127.0.0.1:"),
    ],
)
def test_bad_input_exits_2_naming_the_option(
    args: list[str],
    message: str,
    stub: Stub,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run([stub.url, *SMALL, *args], monkeypatch, capsys)
    assert code == 2, out + err
    assert err.startswith(f"error: {message}"), err
    assert stub.bodies == []  # refused before any request


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("ftp://host:1", "ftp://host:1: not an http(s) URL"),
        ("http://host:0", "port 0 is not a port"),
        ("site.ini", "site.ini: no such inventory file (nor a URL)"),
    ],
)
def test_a_target_that_is_no_url_nor_inventory_exits_2(
    target: str, message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run([target], monkeypatch, capsys)
    assert code == 2 and message in err


# ------------------------------------------------------------------------------------------ energy


def test_energy_integrates_the_samplers_trace_over_each_runs_window(stub: Stub) -> None:
    now = time.time()
    sampler = power.ScriptedSampler(
        {"node1 NPU 0": [(now - 100 + t * 0.5, 200.0) for t in range(800)]}, source="scripted"
    )
    target = Target(stub.url, "stub")
    workload = Workload(requests=fixed_requests(4, "hello", 3, None), max_concurrency=2)
    points = [Workload(requests=workload.requests, max_concurrency=c) for c in (1, 4)]
    results = sweep(target, workload, points, sampler=sampler, why_no_power="-")
    assert sampler.started
    for result in results:
        s = result.summary
        window = result.window[1] - result.window[0]
        assert s["energy_j"] == pytest.approx(200.0 * window)
        assert s["j_per_output_token"] == pytest.approx(200.0 * window / 12)
        assert s["power_sample_interval_s"] == pytest.approx(0.5)
        assert s["power_source"] == "scripted" and s["power_coverage"] == 1.0


def test_an_inventory_target_samples_its_instances_npus(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inventory = tmp_path / "inventory.ini"
    inventory.write_text("[npu_nodes]\nnode1\n")
    seen: dict[str, Any] = {}

    def instances(path: Path, **kwargs: Any) -> tuple[list[bench_cli.Instance], list[str]]:
        seen.update(kwargs, path=path)
        return [bench_cli.Instance("node1/chat", Target(stub.url, "stub"), {"node1": [0, 1]})], [
            "node2/chat: loading: refused"
        ]

    def sampler(
        inst: bench_cli.Instance, inv: Path, interval: float, timeout: float, points: int
    ) -> power.ScriptedSampler:
        seen["devices"] = inst.devices
        now = time.time()
        trace = {f"node1 NPU {n}": [(now - 50 + t, 100.0) for t in range(200)] for n in (0, 1)}
        return power.ScriptedSampler(trace, source="npu-smi info -t power (node1 NPU 0,1)")

    monkeypatch.setattr(bench_cli, "_instances_of", instances)
    monkeypatch.setattr(bench_cli, "_sampler", sampler)
    code, out, err = run([str(inventory), *SMALL, "--pool", "chat", "--json"], monkeypatch, capsys)
    assert code == 0, err
    assert seen["pool"] == "chat" and seen["devices"] == {"node1": [0, 1]} and seen["path"] == inventory
    assert "skipped node2/chat: loading: refused" in err
    result = json.loads(out)
    assert result["power_npus"] == 2 and result["power_source"] == "npu-smi info -t power (node1 NPU 0,1)"
    assert result["j_per_output_token"] == pytest.approx(result["energy_j"] / 30)
    assert math.isfinite(result["energy_j"]) and result["energy_j"] > 0


# ------------------------------------------------------------------------------------------ the gate


def _baseline(path: Path, runs: list[dict[str, Any]], **scale: float) -> Path:
    """``runs`` (a --json output) with each metric in ``scale`` multiplied, written to ``path``."""
    for result in runs:
        for key, factor in scale.items():
            result[key] *= factor
    path.write_text(json.dumps(runs[0] if len(runs) == 1 else runs))
    return path


def test_a_run_within_the_bound_of_its_baseline_passes(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = run([stub.url, *SMALL, "--sweep-concurrency", "1,2", "--json"], monkeypatch, capsys)
    assert code == 0
    # a baseline a hundred times slower than that run (this machine's load varies a stub's figures by 10x)
    previous = _baseline(
        tmp_path / "prev.json",
        json.loads(out),
        output_throughput=0.01,
        request_throughput=0.01,
        p99_ttft_ms=100,
    )
    code, out, _ = run(
        [stub.url, *SMALL, "--sweep-concurrency", "1,2", "--baseline", str(previous)], monkeypatch, capsys
    )
    assert code == 0, out
    assert f"against the baseline {previous}" in out
    assert out.count(" ok") >= 6 and "REGRESSED" not in out
    assert f"no regression beyond 10% of {previous} (6 compared)" in out


def test_a_baseline_faster_than_the_bound_fails_the_gate_with_exit_1(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # 5 tokens 10 ms apart, 2 at a time: no run does more than 40 req/s (200 tok/s), whatever the
    # machine's load, so a baseline of twice that is beyond reach
    stub.token_delay_s = 0.01
    steady = [*SMALL, "--max-concurrency", "2"]
    code, out, _ = run([stub.url, *steady, "--json"], monkeypatch, capsys)
    assert code == 0
    faster = tmp_path / "prev.json"
    faster.write_text(json.dumps(json.loads(out) | {"output_throughput": 400.0, "request_throughput": 80.0}))
    code, out, err = run(
        [stub.url, *steady, "--baseline", str(faster), "--max-regression", "10%"],
        monkeypatch,
        capsys,
    )
    assert code == 1, out + err
    table = out[out.index("against the baseline") :]
    assert "output tok/s" in table and "req/s" in table and "p99 TTFT ms" in table
    assert table.count("REGRESSED") >= 2
    verdict = out.splitlines()[-1]
    assert verdict.startswith(f"regression beyond 10% of {faster}: output tok/s, "), verdict
    assert verdict.endswith("req/s (3 of 3 compared)") or verdict.endswith("req/s (2 of 3 compared)")
    # --json keeps stdout to the JSON: the comparison goes to stderr
    code, out, err = run([stub.url, *steady, "--baseline", str(faster), "--json"], monkeypatch, capsys)
    assert code == 1 and json.loads(out)["completed"] == 6
    assert f"regression beyond 10% of {faster}" in err


def test_a_p99_ttft_that_rose_beyond_the_bound_fails_the_gate(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = run([stub.url, *SMALL, "--json"], monkeypatch, capsys)
    result = json.loads(out)
    result["output_throughput"] = result["request_throughput"] = 1e-9  # throughput can only be better
    result["p99_ttft_ms"] = 1e-6  # and TTFT only worse
    previous = tmp_path / "prev.json"
    previous.write_text(json.dumps(result))
    code, out, _ = run(
        [stub.url, *SMALL, "--baseline", str(previous), "--max-regression", "50"], monkeypatch, capsys
    )
    assert code == 1
    assert f"regression beyond 50% of {previous}: p99 TTFT ms (1 of 3 compared)" in out


@pytest.mark.parametrize(
    ("content", "extra", "message"),
    [
        (None, [], "--baseline {path}: no such file"),
        ("{not json", [], "--baseline {path}: not JSON (line 1, column 2: "),
        ("[]", [], "--baseline {path}: not a provision bench --json or --save-result output"),
        ('"text"', [], "--baseline {path}: not a provision bench --json or --save-result output"),
        (
            "{run}",
            [],
            "--baseline {path}: no run of {url} at --max-concurrency 2, --request-rate inf (it has: ",
        ),
        ("[{run}, {run}]", [], "--baseline {path}: run 2: a second run of {url} at --max-concurrency 3"),
        ("{nourl}", [], "--baseline {path}: base_url is missing, not a URL"),
        ("{badttft}", [], '--baseline {path}: p99_ttft_ms is "fast", not a number'),
        ("[{run}, {badrate}]", [], "--baseline {path}: run 2: request_rate is 0, not a rate"),
        ("{run3}", ["--max-regression", "ten"], "--max-regression ten: not a percentage from 0 to below 100"),
        ("{run3}", ["--max-regression", "100%"], "--max-regression 100%: not a percentage"),
        ("{run3}", ["--max-regression", "-5%"], "--max-regression -5%: not a percentage"),
    ],
)
def test_a_bad_baseline_exits_2_before_any_request(
    content: str | None,
    extra: list[str],
    message: str,
    stub: Stub,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    path = tmp_path / "prev.json"
    good = {
        "base_url": stub.url,
        "max_concurrency": 3,
        "request_rate": "inf",
        "output_throughput": 10.0,
        "request_throughput": 1.0,
        "p99_ttft_ms": 5.0,
    }
    runs = {
        "{run}": good,
        "{run3}": good,
        "{nourl}": {k: v for k, v in good.items() if k != "base_url"},
        "{badttft}": good | {"p99_ttft_ms": "fast"},
        "{badrate}": good | {"request_rate": 0},
    }
    if content is not None:
        for name, run_ in runs.items():
            content = content.replace(name, json.dumps(run_))
        path.write_text(content)
    concurrency = "3" if "{run3}" in message or extra else "2"
    args = [stub.url, *SMALL, "--max-concurrency", concurrency, "--baseline", str(path), *extra]
    code, out, err = run(args, monkeypatch, capsys)
    assert code == 2, out + err
    assert err.startswith("error: " + message.format(path=path, url=stub.url)), err
    assert stub.bodies == []


def test_max_regression_needs_a_baseline(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run([stub.url, *SMALL, "--max-regression", "10%"], monkeypatch, capsys)
    assert code == 2 and err.startswith("error: --max-regression applies with --baseline FILE")
    assert stub.bodies == []


# ------------------------------------------------------------------------------------------ the report


def _is_png(path: Path) -> bool:
    from PIL import Image

    with Image.open(path) as image:
        image.verify()
        return image.format == "PNG" and image.size[0] > 100


def _is_svg(path: Path) -> bool:
    import xml.etree.ElementTree as ET

    root = ET.parse(path).getroot()
    return root.tag == "{http://www.w3.org/2000/svg}svg" and len(list(root.iter())) > 50


def test_a_sweep_writes_the_report_folder(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = tmp_path / "report"
    code, out, _ = run(
        [stub.url, *SMALL, "--sweep-concurrency", "1,3", "--report", str(folder)], monkeypatch, capsys
    )
    assert code == 0
    assert f"report: {folder}" in out
    result = json.loads((folder / "result.json").read_text())
    assert [r["max_concurrency"] for r in result] == [1, 3] and "ttfts" not in result[0]
    timings = json.loads((folder / "requests.json").read_text())
    assert [len(r["ttfts"]) for r in timings] == [6, 6] and all(len(i) == 4 for i in timings[0]["itls"])
    stems = ["latency_cdf_1", "latency_cdf_2", "sweep_throughput", "sweep_ttft"]
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["result.json", "requests.json", *(f"{s}.{f}" for s in stems for f in ("png", "svg"))]
    )  # no energy measured: no sweep_energy
    for stem in stems:
        assert _is_png(folder / f"{stem}.png") and _is_svg(folder / f"{stem}.svg"), stem
    svg = (folder / "latency_cdf_1.svg").read_text()
    assert "TTFT (6 samples)" in svg and "ITL (24 samples)" in svg and "E2E latency" in svg


def test_the_report_plots_energy_when_it_was_measured(stub: Stub, tmp_path: Path) -> None:
    from provision.bench import report

    now = time.time()
    sampler = power.ScriptedSampler({"node1 NPU 0": [(now - 100 + t * 0.5, 200.0) for t in range(800)]})
    workload = Workload(requests=fixed_requests(4, "hello", 3, None))
    points = [Workload(requests=workload.requests, max_concurrency=c) for c in (1, 4)]
    results = sweep(Target(stub.url, "stub"), workload, points, sampler=sampler, why_no_power="-")
    files = report.write(tmp_path, [("node1/chat", r) for r in results])
    assert tmp_path / "sweep_energy.png" in files and _is_png(tmp_path / "sweep_energy.png")
    assert "J / output token" in (tmp_path / "sweep_energy.svg").read_text()


def test_report_without_matplotlib_says_what_to_install(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    code, _, err = run([stub.url, *SMALL, "--report", str(tmp_path / "r")], monkeypatch, capsys)
    assert code == 2
    assert err.startswith(
        f"error: --report {tmp_path / 'r'}: the plots need matplotlib: pip install 'provision[report]'"
    )
    assert stub.bodies == [] and not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("where", "message"),
    [("file", "--report {path}: not a folder"), ("nested", "--report {path}: no such folder")],
)
def test_a_bad_report_folder_exits_2(
    where: str,
    message: str,
    stub: Stub,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    path = tmp_path / "taken"
    if where == "file":
        path.write_text("")
    else:
        path = tmp_path / "no" / "report"
    code, _, err = run([stub.url, *SMALL, "--report", str(path)], monkeypatch, capsys)
    assert code == 2 and err.startswith(f"error: {message.format(path=path)}"), err
    assert stub.bodies == []


# ------------------------------------------------------------------------------------------ labels


def test_the_inventorys_power_label_is_shown_beside_every_energy_figure(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``provision_power_label`` of the serving host (what `provision sim up` sets to ``simulated``) goes
    with the J/token it gave: the table, the energy line, --json and the report's energy plot."""
    import shutil

    from provision.cli import _endpoints

    site = tmp_path / "site"
    shutil.copytree(
        Path(__file__).parents[2] / "examples", site, ignore=shutil.ignore_patterns("deepseek-r1-2node")
    )
    inventory = site / "inventory.ini"
    text = inventory.read_text()
    inventory.write_text(
        text.replace(
            "atlas-a01 ansible_host=192.0.2.11",
            "atlas-a01 ansible_host=192.0.2.11 provision_power_label=simulated",
        )
    )
    row = {"host": "atlas-a01", "pool": "chat", "role": "single", "state": "ready", "url": stub.url,
           "model": "stub", "reason": "ok"}  # fmt: skip
    monkeypatch.setattr(_endpoints, "probe_inventory", lambda *_a, **_k: [row])
    made: list[dict[str, Any]] = []

    def sampler(path: Path, devices: dict[str, list[int]], **options: Any) -> power.ScriptedSampler:
        made.append({"devices": devices, **options})
        now = time.time()
        trace = {
            f"atlas-a01 NPU {n}": [(now - 50 + t, 100.0) for t in range(200)] for n in devices["atlas-a01"]
        }
        return power.ScriptedSampler(trace, source="npu-smi", label=options.get("label"))

    monkeypatch.setattr(bench_cli.power, "NpuSmiSampler", sampler)
    report = tmp_path / "report"
    args = [str(inventory), *SMALL, "--pool", "chat", "--sweep-concurrency", "1,2", "--report", str(report)]
    code, out, err = run(args, monkeypatch, capsys)
    assert code == 0, err
    assert [(m["devices"], m["label"]) for m in made] == [({"atlas-a01": [0, 1, 2, 3]}, "simulated")]
    lines = [line for line in out.splitlines() if line.startswith("atlas-a01/chat (conc ")]
    assert len(lines) == 2 and all(" J (simulated): 4 NPU(s)" in line for line in lines), out
    assert out.count("(simulated)") == 4  # the two J/token cells of the table and the two energy lines
    result = json.loads((report / "result.json").read_text())
    assert [r["power_label"] for r in result] == ["simulated", "simulated"]
    assert "J/token (simulated)" in (report / "sweep_energy.svg").read_text()

    # without the label: no word added, and --json says null
    inventory.write_text(text)
    code, out, err = run([str(inventory), *SMALL, "--pool", "chat", "--json"], monkeypatch, capsys)
    assert code == 0, err
    assert json.loads(out)["power_label"] is None and made[-1]["label"] is None
