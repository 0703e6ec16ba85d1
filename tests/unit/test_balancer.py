"""The rig's load balancer (provision_sim.serving.balancer): Debian's HAProxy in front of two engine
look-alikes on loopback (127.0.0.1, 127.0.0.2), health-checking the vllm_serve role's REAL readiness endpoint
(roles/vllm_serve/files/vllm-serve-ready) of each. A drain mark takes a server out (its log says
``info: "Drained"``) while a steady load through HAProxy loses no request, and removing it puts it back."""

from __future__ import annotations

import http.server
import json
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest

from provision_sim.serving.balancer import HAProxy, Load, StateChange, free_port

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(
        shutil.which("haproxy") is None, reason="haproxy not installed (.ci/apt-packages.txt)"
    ),
]

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "roles" / "vllm_serve" / "files" / "vllm-serve-ready"
HOSTS = {"n1": "127.0.0.1", "n2": "127.0.0.2"}


class Engine(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._reply(200 if self.path == "/health" else 404, b"")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        time.sleep(0.05)  # a short generation
        self._reply(200, json.dumps({"choices": [{"text": "-"}]}).encode())

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[tuple[int, int, Path]]:
    """An engine look-alike and a readiness endpoint on each loopback address: (engine port, readiness port,
    drain folder of n1)."""
    engine_port, ready_port = free_port(), free_port()
    servers = []
    readiness = []
    for name, address in HOSTS.items():
        server = http.server.ThreadingHTTPServer((address, engine_port), Engine)
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        drain = tmp_path / name / "drain"
        drain.mkdir(parents=True)
        config = tmp_path / name / "ready.json"
        health = f"http://{address}:{engine_port}/health"
        config.write_text(json.dumps({"drain_dir": str(drain), "timeout_s": 2, "pools": {"smol": health}}))
        argv = [sys.executable, str(SCRIPT), str(config), address, str(ready_port)]
        readiness.append(subprocess.Popen(argv))
    # HAProxy's first checks must find the readiness endpoints listening: on a loaded host the script's
    # start took longer than fall x inter, a server went DOWN and UP before the drill began, and those
    # changes hid the drill's own DOWN and UP.
    for address in HOSTS.values():
        url = f"http://{address}:{ready_port}/ready/smol"
        _until(lambda url=url: _answers(url), lambda url=url: f"{url} to answer 200")
    yield engine_port, ready_port, tmp_path / "n1" / "drain"
    for process in readiness:
        process.terminate()
        process.wait(timeout=10)
    for server in servers:
        server.shutdown()
        server.server_close()


def _until(check: Callable[[], bool], what: Callable[[], str], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what()}"
        time.sleep(0.1)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def test_a_drained_server_leaves_and_rejoins_without_a_failed_request(
    tmp_path: Path, nodes: tuple[int, int, Path]
) -> None:
    engine_port, ready_port, drain = nodes
    servers = {name: f"{address}:{engine_port}" for name, address in HOSTS.items()}
    with HAProxy(
        tmp_path / "lb", servers, pool="smol", ready_port=ready_port, inter_s=0.2, fall=2, rise=2
    ) as lb:
        lb.wait_up(list(HOSTS))
        before = len(lb.changes())

        def changes() -> list[StateChange]:
            return lb.changes()[before:]

        with Load(lb.url, workers=2, pause_s=0.02) as load:
            time.sleep(1)
            (drain / "smol.drained").write_text("")
            _until(lambda: any(c.state == "DOWN" for c in changes()), lambda: f"a DOWN in {changes()}")
            out_at = time.time()
            time.sleep(1)
            (drain / "smol.drained").unlink()
            _until(lambda: [c.state for c in changes()] == ["DOWN", "UP"], lambda: f"DOWN, UP in {changes()}")
            time.sleep(1)
        log = lb.log.read_text()
    down, up = changes()
    assert (down.server, down.state, up.server, up.state) == ("n1", "DOWN", "n1", "UP")
    assert 'Layer7 wrong status, code: 503, info: "Drained"' in down.reason, down.reason
    assert "Layer7 check passed, code: 200" in up.reason
    summary = load.summary()
    assert summary["failed"] == 0 and summary["sent"] > 50, summary
    assert 0 < summary["p50_s"] <= summary["p99_s"]
    # while it was out HAProxy sent n1 nothing: its log has one line per request, stamped when it ended and
    # naming the server (a request in flight when n1 went DOWN ends within its 50 ms)
    ended = [
        (datetime.fromisoformat(stamp).timestamp(), server)
        for stamp, server in re.findall(r"^(\S+) \S+ \[[^]]+\] serve smol/(n\d) ", log, re.MULTILINE)
    ]
    assert {server for _, server in ended} == {"n1", "n2"}
    assert up.at - down.at > 1 and down.at < out_at
    assert not [at for at, server in ended if server == "n1" and down.at + 0.5 < at < up.at]
    assert [at for at, server in ended if server == "n2" and down.at + 0.5 < at < up.at], (
        "n2 served meanwhile"
    )
