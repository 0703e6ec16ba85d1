"""``provision bench`` end to end against a stub OpenAI-compatible server on 127.0.0.1 (streamed
completions, vLLM's /tokenize and /detokenize with one token per character): what the user sees, the exit
codes, the JSON keys, the refusals of bad input (exit 2, the option named, no traceback)."""

from __future__ import annotations

import json
import math
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
            if self._authorised():
                self._json(200, {"object": "list", "data": [{"id": "stub", "object": "model"}]})

        def do_POST(self) -> None:
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


@pytest.fixture
def stub() -> Iterator[Stub]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    server.daemon_threads = True
    server.block_on_close = False
    server.handle_error = lambda *_args: None  # type: ignore[method-assign]  # a client that left: its business
    state = Stub(f"http://127.0.0.1:{server.server_address[1]}")
    server.RequestHandlerClass = _handler(state)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


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
    code, out, _ = run([*args, "--endpoint-type", "chat", "--save-result", str(saved)], monkeypatch, capsys)
    assert code == 0
    assert stub.bodies[0]["messages"][0]["role"] == "user" and stub.bodies[0]["max_completion_tokens"] == 4
    assert "provision bench" in out and "J/token" in out and stub.url in out
    assert f"{stub.url} (conc -, rate inf): energy n/a: {bench_cli.NO_POWER_FOR_URL}" in out
    data = json.loads(saved.read_text())
    assert data["endpoint_type"] == "chat" and data["total_output_tokens"] == 12
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
        (["--dataset-name", "nope"], "--dataset-name nope: one of random, sharegpt, fixed"),
        (
            ["--dataset-name", "sharegpt", "--dataset-path", "/nonexistent/d.json"],
            "--dataset-path /nonexistent/d.json: no such file",
        ),
        (["--dataset-name", "sharegpt"], "--dataset-name sharegpt needs --dataset-path FILE"),
        (["--dataset-path", "x.json"], "--dataset-path applies to --dataset-name sharegpt, not random"),
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
            ["--save-result", "/nonexistent/dir/r.json"],
            "--save-result /nonexistent/dir/r.json: no such folder /nonexistent/dir",
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
