"""The image's HEALTHCHECK script (container/healthcheck.py) against a scripted engine on loopback.

The script runs as Docker runs it (a subprocess, exit code + one line); the engine is a small scripted HTTP
server whose command line looks like vLLM's (``--port``, ``--served-model-name``), switched between the
states of FACTS.md §6: loading (port refused, process alive), ready, dead (503/500, or gone), hung.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from provision_sim import image_bench as testbed
from tests.helpers import load_module

pytestmark = pytest.mark.unit
SCRIPT = Path(__file__).parents[2] / "container" / "healthcheck.py"


hc = load_module("healthcheck", SCRIPT)


@pytest.mark.parametrize(
    ("argv", "env", "url", "models", "key"),
    [
        ([], {}, "http://127.0.0.1:8000", (), None),
        (
            [
                "python3",
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                "/models/ds",
                "--port",
                "9001",
            ],
            {},
            "http://127.0.0.1:9001",
            ("/models/ds",),
            None,
        ),
        (
            [
                "vllm",
                "serve",
                "/models/q",
                "--host",
                "0.0.0.0",
                "--served-model-name",
                "a",
                "b",
                "--api-key=k",
            ],
            {},
            "http://127.0.0.1:8000",
            ("a", "b"),
            "k",
        ),
        (
            ["vllm", "serve", "/models/q", "--host", "10.0.0.5"],
            {"VLLM_API_KEY": "e"},
            "http://10.0.0.5:8000",
            ("/models/q",),
            "e",
        ),
        (["x", "--host", "::1", "--port=8100"], {}, "http://[::1]:8100", (), None),
        (
            ["x", "--port", "1"],
            {"PROVISION_HEALTH_URL": "http://h:2/", "PROVISION_HEALTH_MODEL": "m"},
            "http://h:2",
            ("m",),
            None,
        ),
    ],
)
def test_target_from_the_engine_command_line(
    argv: list[str], env: dict[str, str], url: str, models: tuple[str, ...], key: str | None
) -> None:
    target = hc.target_from_argv(argv, env)
    assert (target.url, target.models, target.api_key) == (url, models, key)


def test_process_alive_tells_zombies_and_gone_processes() -> None:
    assert hc.process_alive(os.getpid())
    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 5
    while hc.process_alive(child.pid) and time.monotonic() < deadline:  # exits, stays a zombie until reaped
        time.sleep(0.02)
    assert not hc.process_alive(child.pid)
    child.wait()
    assert not hc.process_alive(child.pid)


@dataclass
class Engine:
    popen: subprocess.Popen[bytes]
    control: Path
    run_dir: Path
    port: int

    def state(self, name: str) -> None:
        testbed.set_state(self.control, name)

    def wait_listening(self, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.02)
        raise AssertionError("scripted engine did not listen")

    def probe(self, **env: str) -> tuple[int, str]:
        result = subprocess.run(
            [sys.executable, str(SCRIPT)],
            env={**os.environ, "PROVISION_RUN_DIR": str(self.run_dir), **env},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return result.returncode, result.stdout.strip()


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    script = testbed.write_scripted_engine(tmp_path / "engine")
    control, run_dir = tmp_path / "control", tmp_path / "run"
    run_dir.mkdir()
    testbed.set_state(control, "loading")
    port = testbed.free_port()
    popen = subprocess.Popen(
        [
            sys.executable,
            str(script),
            "--port",
            str(port),
            "--served-model-name",
            "smollm2",
            "--control",
            str(control),
        ]
    )
    (run_dir / "engine.pid").write_text(f"{popen.pid}\n")  # as the entrypoint does
    try:
        yield Engine(popen, control, run_dir, port)
    finally:
        popen.kill()
        popen.wait()


def test_loading_then_ready_then_dead(engine: Engine) -> None:
    rc, line = engine.probe()
    assert (rc, line.split(":")[0]) == (1, "loading"), line
    assert f"pid {engine.popen.pid}" in line
    engine.state("ready")
    engine.wait_listening()
    rc, line = engine.probe()
    assert (rc, line) == (0, f"ready: http://127.0.0.1:{engine.port} serves smollm2")
    rc, line = engine.probe(PROVISION_HEALTH_COMPLETION="1")
    assert rc == 0, line
    engine.state("dead")
    rc, line = engine.probe()
    assert (rc, line) == (1, f"dead: http://127.0.0.1:{engine.port}/health answered 503")
    engine.state("dead500")
    assert engine.probe()[1].endswith("answered 500")


def test_model_missing_is_not_ready(engine: Engine) -> None:
    engine.state("empty")
    engine.wait_listening()
    rc, line = engine.probe()
    assert (rc, line.split(":")[0]) == (1, "not-ready")
    assert "smollm2" in line
    rc, line = engine.probe(PROVISION_HEALTH_MODEL="other")
    assert rc == 1


def test_hung_engine_is_unhealthy_within_the_probe_budget(engine: Engine) -> None:
    engine.state("ready")
    engine.wait_listening()
    engine.state("hang")
    started = time.monotonic()
    rc, line = engine.probe(PROVISION_HEALTH_TIMEOUT="1")
    assert (rc, line.split(":")[0]) == (1, "hung"), line
    assert time.monotonic() - started < 10


def test_engine_gone_is_dead(engine: Engine) -> None:
    engine.popen.kill()
    engine.popen.wait()
    rc, line = engine.probe()
    assert (rc, line.split(":")[0]) == (1, "dead"), line
    assert "is gone" in line
