"""The health gate: its pure state machine on tables, then the real HTTP path against a scripted vLLM
look-alike on 127.0.0.1 driven through refusing → 503 → model missing → ready → hung → dead."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from provision.cli.serve import register
from provision.errors import InputError
from provision.serving import health
from provision.serving.health import (
    Endpoint,
    Gate,
    Observation,
    Outcome,
    Reply,
    State,
    Timeouts,
    Verdict,
    check,
    wait_ready,
)
from tests.helpers import cli_app

pytestmark = pytest.mark.unit

FAST = Timeouts(connect_s=1.0, health_s=1.0, models_s=1.0, completion_s=0.5)


# --------------------------------------------------------------------------------------------- pure logic

REFUSED = Reply(Outcome.NO_LISTENER, detail="connection refused")
H200 = Reply(Outcome.ANSWERED, 200)


def models(*names: str, status: int = 200) -> Reply:
    return Reply(
        Outcome.ANSWERED, status, json.dumps({"object": "list", "data": [{"id": n} for n in names]}).encode()
    )


def completion(text: str = " world", status: int = 200) -> Reply:
    return Reply(
        Outcome.ANSWERED, status, json.dumps({"choices": [{"text": text, "index": 0}]}).encode(), seconds=0.05
    )


CASES: list[tuple[str, Observation, State, str]] = [
    (
        "dead beats everything",
        Observation(0, False, H200, models("m"), completion()),
        State.FAILED,
        "not running",
    ),
    ("refused, process alive", Observation(0, True, REFUSED), State.LOADING, "connection refused while"),
    ("refused, liveness unknown", Observation(0, None, REFUSED), State.UNREACHABLE, "loading or down"),
    ("refused, process gone", Observation(0, False, REFUSED), State.FAILED, "not running"),
    (
        "reset by a port forwarder",
        Observation(0, True, Reply(Outcome.NO_LISTENER, detail="connection reset before any reply")),
        State.LOADING,
        "connection reset",
    ),
    (
        "/health hung",
        Observation(0, True, Reply(Outcome.TIMEOUT, detail="no answer")),
        State.FAILED,
        "/health hung",
    ),
    ("/health 503", Observation(0, True, Reply(Outcome.ANSWERED, 503)), State.FAILED, "engine dead"),
    (
        "/health 500 (older vLLM)",
        Observation(0, True, Reply(Outcome.ANSWERED, 500)),
        State.FAILED,
        "engine dead",
    ),
    ("/health 404", Observation(0, True, Reply(Outcome.ANSWERED, 404)), State.FAILED, "unexpected"),
    ("garbage", Observation(0, True, Reply(Outcome.BROKEN, detail="not HTTP")), State.FAILED, "not HTTP"),
    ("200 is not enough", Observation(0, True, H200), State.LOADING, "not asked yet"),
    ("model list empty", Observation(0, True, H200, models()), State.LOADING, "no model yet"),
    ("wrong model", Observation(0, True, H200, models("other")), State.FAILED, "'smollm2' is not served"),
    ("key refused", Observation(0, True, H200, models(status=401)), State.FAILED, "API key refused"),
    (
        "models not JSON",
        Observation(0, True, H200, Reply(Outcome.ANSWERED, 200, b"<html>")),
        State.FAILED,
        "unexpected",
    ),
    (
        "models hung",
        Observation(0, True, H200, Reply(Outcome.TIMEOUT, detail="no answer within 5 s")),
        State.FAILED,
        "no answer",
    ),
    (
        "completion hung",
        Observation(0, True, H200, models("smollm2"), Reply(Outcome.TIMEOUT, detail="no answer within 30 s")),
        State.FAILED,
        "completion hung",
    ),
    (
        "completion 500",
        Observation(0, True, H200, models("smollm2"), completion(status=500)),
        State.FAILED,
        "no completion",
    ),
    (
        "completion without text",
        Observation(0, True, H200, models("smollm2"), Reply(Outcome.ANSWERED, 200, b'{"choices": []}')),
        State.FAILED,
        "no completion",
    ),
    ("all three", Observation(0, True, H200, models("smollm2"), completion()), State.READY, "' world'"),
    (
        "all three, liveness unknown",
        Observation(0, None, H200, models("smollm2"), completion()),
        State.READY,
        "",
    ),
]


@pytest.mark.parametrize(("obs", "state", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_gate_decides(obs: Observation, state: State, reason: str) -> None:
    verdict = Gate("smollm2").step(obs)
    assert verdict.state is state, verdict.reason
    assert reason in verdict.reason


def test_gate_without_model_takes_the_first_listed() -> None:
    verdict = Gate(None).step(Observation(0, True, H200, models("a", "b"), completion()))
    assert (verdict.state, verdict.model) == (State.READY, "a")


def test_empty_model_list_fails_after_settling() -> None:
    gate = Gate("smollm2", settle_s=10)
    assert gate.step(Observation(100, True, H200, models())).state is State.LOADING
    assert gate.step(Observation(109, True, H200, models())).state is State.LOADING
    late = gate.step(Observation(110, True, H200, models()))
    assert late.state is State.FAILED and "still empty after 10 s" in late.reason
    # A restart (refused again) resets the clock.
    assert gate.step(Observation(111, True, REFUSED)).state is State.LOADING
    assert gate.step(Observation(112, True, H200, models())).state is State.LOADING


def test_verdict_message_carries_the_log_tail() -> None:
    verdict = Verdict(State.FAILED, "the engine process is not running", log_tail=("a", "Traceback: boom"))
    assert verdict.message == (
        "the engine process is not running\nlast 2 lines of the engine log:\n  | a\n  | Traceback: boom"
    )
    assert Verdict(State.READY, "ok").message == "ok"


def test_tail_lines(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)) + "\n\n")
    assert health.tail_lines(log, 3) == ["line 97", "line 98", "line 99"]
    assert health.tail_lines(tmp_path / "missing.log") == []
    assert health.read_log(lambda: ["x", "y", "z"], 2) == ("y", "z")


def test_pid_alive_sees_exit_and_zombies() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert health.pid_alive(child.pid)
        child.kill()
        deadline = time.monotonic() + 5
        while health.pid_alive(child.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        # Killed but not reaped yet: a zombie is not a live engine.
        assert not health.pid_alive(child.pid)
        assert Path(f"/proc/{child.pid}").exists()
    finally:
        child.kill()
        child.wait()
    assert not health.pid_alive(child.pid)


# ------------------------------------------------------------------------------------------ scripted server


class FakeVllm:
    """A vLLM look-alike on 127.0.0.1. Starts bound but not listening: connections are refused, as a real
    vLLM's port is while it loads; ``listen()`` opens it, ``die()`` closes it and marks the process dead."""

    def __init__(self, log: Path) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.process_alive = True
        self.health_status = 200
        self.models: list[str] = ["smollm2"]
        self.completion_mode = "ok"  # ok | hang | error
        self.api_key: str | None = None
        self.seen_auth: list[str | None] = []
        self.release = threading.Event()
        self.server: ThreadingHTTPServer | None = None
        self.log = log
        self.log.write_text("INFO loading weights\n")

    def alive(self) -> bool:
        return self.process_alive

    def listen(self) -> None:
        server = ThreadingHTTPServer(("127.0.0.1", self.port), _Handler, bind_and_activate=False)
        server.socket.close()
        server.socket = self.sock
        server.server_activate()
        server.fake = self  # type: ignore[attr-defined]
        server.daemon_threads = True
        self.server = server
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def die(self, last_words: str = "RuntimeError: engine core died") -> None:
        with self.log.open("a") as log:
            log.write(f"ERROR {last_words}\n")
        self.process_alive = False
        self.release.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        else:
            self.sock.close()


class _Handler(BaseHTTPRequestHandler):
    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, payload: object) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _authorized(self, fake: FakeVllm) -> bool:
        auth = self.headers.get("Authorization")
        fake.seen_auth.append(auth)
        if fake.api_key and auth != f"Bearer {fake.api_key}":
            self._send(401, {"error": "Unauthorized"})
            return False
        return True

    def do_GET(self) -> None:
        fake: FakeVllm = self.server.fake
        if self.path == "/health":
            self.send_response(fake.health_status)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/v1/models":
            if self._authorized(fake):
                self._send(
                    200, {"object": "list", "data": [{"id": m, "object": "model"} for m in fake.models]}
                )
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        fake: FakeVllm = self.server.fake
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/v1/completions" or not self._authorized(fake):
            return
        if fake.completion_mode == "hang":
            fake.release.wait(10)
            return
        if fake.completion_mode == "error":
            self._send(500, {"error": "EngineDeadError"})
            return
        assert request["model"] in fake.models and request["max_tokens"] >= 1
        self._send(200, {"choices": [{"text": ",", "index": 0, "finish_reason": "length"}]})


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeVllm]:
    server = FakeVllm(tmp_path / "engine.log")
    yield server
    server.release.set()
    if server.process_alive:
        server.die()


def test_gate_follows_an_engine_through_its_life(fake: FakeVllm) -> None:
    endpoint = Endpoint(fake.url, "smollm2")

    def gate() -> Verdict:
        return check(endpoint, alive=fake.alive, log=fake.log, timeouts=FAST)

    loading = gate()
    assert (loading.state, loading.reason) == (State.LOADING, "connection refused while the process lives")
    assert loading.log_tail == ()

    fake.health_status = 503
    fake.listen()
    dead = gate()
    assert dead.state is State.FAILED and "engine dead: /health answered 503" in dead.reason
    assert dead.log_tail == ("INFO loading weights",)

    fake.health_status = 200
    fake.models = []
    assert gate().state is State.LOADING
    fake.models = ["other"]
    missing = gate()
    assert (
        missing.state is State.FAILED and "'smollm2' is not served (/v1/models lists other)" in missing.reason
    )

    fake.models = ["smollm2"]
    ready = gate()
    assert ready.state is State.READY, ready.message
    assert ready.model == "smollm2" and ready.reason.endswith("','")

    fake.completion_mode = "hang"
    started = time.monotonic()
    hung = gate()
    assert hung.state is State.FAILED and hung.reason == "completion hung: no answer within 0.5 s"
    assert time.monotonic() - started < 2
    fake.release.set()

    fake.completion_mode = "error"
    assert gate().state is State.FAILED

    fake.die()
    gone = gate()
    assert (
        gone.state is State.FAILED and gone.reason == "the engine process is not running (exited or killed)"
    )
    assert gone.log_tail[-1] == "ERROR RuntimeError: engine core died"
    assert "RuntimeError: engine core died" in gone.message


def test_refused_without_liveness_is_unreachable(fake: FakeVllm) -> None:
    verdict = check(Endpoint(fake.url), timeouts=FAST)
    assert verdict.state is State.UNREACHABLE and "loading or down" in verdict.reason


def test_wait_ready_detects_readiness_quickly_and_never_early(fake: FakeVllm) -> None:
    seen: list[Verdict] = []
    opened: list[float] = []

    def open_later() -> None:
        time.sleep(0.8)
        # Stamped before it listens: the gate may see it ready before listen() returns to this thread.
        opened.append(time.monotonic())
        fake.listen()

    opener = threading.Thread(target=open_later, daemon=True)
    opener.start()
    verdict = wait_ready(
        Endpoint(fake.url, "smollm2"),
        alive=fake.alive,
        log=fake.log,
        budget_s=10,
        timeouts=FAST,
        on_verdict=seen.append,
    )
    assert verdict.state is State.READY, verdict.message
    assert [v.state for v in seen] == [State.LOADING, State.READY]
    opener.join(timeout=5)
    lag = verdict.at - opened[0]
    assert 0 <= lag <= 0.5, f"detection lag {lag:.3f} s"
    assert 0.8 <= verdict.seconds < 2


def test_wait_ready_fails_when_the_process_dies_during_load(fake: FakeVllm) -> None:
    threading.Timer(0.3, fake.die, kwargs={"last_words": "torch.OutOfMemoryError: NPU out of memory"}).start()
    verdict = wait_ready(Endpoint(fake.url), alive=fake.alive, log=fake.log, budget_s=10, timeouts=FAST)
    assert verdict.state is State.FAILED and "not running" in verdict.reason
    assert "torch.OutOfMemoryError: NPU out of memory" in verdict.message
    assert verdict.seconds < 1


def test_wait_ready_gives_up_after_the_budget(fake: FakeVllm) -> None:
    verdict = wait_ready(Endpoint(fake.url), alive=fake.alive, log=fake.log, budget_s=0.3, timeouts=FAST)
    assert verdict.state is State.FAILED
    assert verdict.reason.startswith(
        "not ready after the load budget of 0.3 s (last: loading, connection refused"
    )
    assert verdict.log_tail == ("INFO loading weights",)


def test_wait_ready_does_not_call_a_hung_engine_ready(fake: FakeVllm) -> None:
    fake.completion_mode = "hang"
    fake.listen()
    verdict = wait_ready(Endpoint(fake.url, "smollm2"), alive=fake.alive, budget_s=10, timeouts=FAST)
    assert verdict.state is State.FAILED and "completion hung" in verdict.reason


def test_wait_ready_without_liveness_keeps_waiting(fake: FakeVllm) -> None:
    threading.Timer(0.3, fake.listen).start()
    verdict = wait_ready(Endpoint(fake.url), budget_s=5, timeouts=FAST)
    assert verdict.state is State.READY and verdict.model == "smollm2"


def test_api_key_is_sent_as_bearer(fake: FakeVllm) -> None:
    fake.api_key = "s3cret"
    fake.listen()
    refused = check(Endpoint(fake.url, "smollm2"), alive=fake.alive, timeouts=FAST)
    assert refused.state is State.FAILED and "API key refused: /v1/models answered 401" in refused.reason
    ready = check(Endpoint(fake.url, "smollm2", api_key="s3cret"), alive=fake.alive, timeouts=FAST)
    assert ready.state is State.READY, ready.message
    assert fake.seen_auth[-2:] == ["Bearer s3cret", "Bearer s3cret"]


def test_a_port_forwarder_that_drops_connections_reads_as_loading() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def accept_and_drop() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            conn.close()

    threading.Thread(target=accept_and_drop, daemon=True).start()
    try:
        verdict = check(Endpoint(f"http://127.0.0.1:{port}"), alive=lambda: True, timeouts=FAST)
    finally:
        listener.close()
    assert verdict.state is State.LOADING, verdict.reason


# --------------------------------------------------------------------------------------------- CLI


def test_cli_status_ready_and_not(fake: FakeVllm) -> None:
    fake.listen()
    runner = CliRunner()
    result = runner.invoke(cli_app(register), ["serve", "status", fake.url, "--model", "smollm2"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["ENDPOINT", "STATE", "MODEL", "DETAIL"]
    assert lines[1].split()[:3] == [fake.url, "ready", "smollm2"]
    assert lines[-1] == "1/1 ready"

    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        down = f"127.0.0.1:{spare.getsockname()[1]}"
        result = runner.invoke(cli_app(register), ["serve", "status", fake.url, down, "--json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.output)
    assert report["ready"] is False
    assert [(e["url"], e["state"]) for e in report["endpoints"]] == [
        (fake.url, "ready"),
        (f"http://{down}", "unreachable"),
    ]


def test_cli_status_api_key_from_env(fake: FakeVllm) -> None:
    fake.api_key = "k"
    fake.listen()
    result = CliRunner().invoke(
        cli_app(register), ["serve", "status", fake.url], env={"PROVISION_API_KEY": "k"}
    )
    assert result.exit_code == 0, result.output
    assert "Bearer k" in fake.seen_auth


def test_cli_status_api_key_from_a_file(fake: FakeVllm, tmp_path: Path) -> None:
    fake.api_key = "k-from-file"
    fake.listen()
    key_file = tmp_path / "key"
    key_file.write_text("k-from-file\n")
    result = CliRunner().invoke(
        cli_app(register),
        ["serve", "status", fake.url, "--api-key-file", str(key_file)],
        env={"PROVISION_API_KEY": "stale"},
    )
    assert result.exit_code == 0, result.output
    assert fake.seen_auth and set(fake.seen_auth) == {"Bearer k-from-file"}


def test_cli_rejects_a_non_http_url() -> None:
    result = CliRunner().invoke(cli_app(register), ["serve", "status", "ftp://x"])
    assert isinstance(result.exception, InputError)  # `provision` turns it into exit code 2
    assert str(result.exception) == "ftp://x: not an http(s) URL"
