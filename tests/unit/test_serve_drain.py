"""Drained rolling upgrades: the refusal of a batch that holds every ready instance of a model
(provision.serving.rollout, its filters, and the vllm_serve role's replicas.yml run for real with local
connections against readiness endpoints on loopback), and the readiness endpoint the role installs
(roles/vllm_serve/files/vllm-serve-ready: 200 ready, 503 drained or not ready, 404, and --wait-idle)."""

from __future__ import annotations

import http.server
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from provision.runner.run import ansible_env
from provision.serving.rollout import last_replicas, replicas
from tests.helpers import load_module

pytestmark = pytest.mark.unit

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "roles" / "vllm_serve" / "files" / "vllm-serve-ready"
PROFILE = {"model": "/models/smol", "served_model_name": "smol-chat"}
provision_serve_last_replicas = load_module(
    "provision_filter_serving", ROOT / "plugins/filter/serving.py"
).provision_serve_last_replicas


def _known(*rows: tuple[str, str, str]) -> list[dict[str, Any]]:
    return [{"host": h, "pool": p, "model": m, "address": h, "port": 8000} for h, p, m in rows]


# ------------------------------------------------------------------------------- the decision


@pytest.mark.parametrize(
    ("ready", "restarting", "refused"),
    [
        # one of two replicas restarts, the other is ready: the batch goes
        ({("a", "s"), ("b", "s")}, {("a", "s")}, []),
        # both restart: refused, naming both
        ({("a", "s"), ("b", "s")}, {("a", "s"), ("b", "s")}, ["(a/s, b/s) and it has no other instance"]),
        # the other replica is drained or down: restarting the last ready one is refused
        ({("a", "s")}, {("a", "s")}, ["(a/s) and its other instances (b/s) are not ready"]),
        # restarting the replica that is not ready takes nothing away
        ({("a", "s")}, {("b", "s")}, []),
        # nothing ready at all: nothing to lose
        (set(), {("a", "s"), ("b", "s")}, []),
        # nothing restarts
        ({("a", "s"), ("b", "s")}, set(), []),
    ],
)
def test_last_replicas(
    ready: set[tuple[str, str]], restarting: set[tuple[str, str]], refused: list[str]
) -> None:
    messages = last_replicas(_known(("a", "s", "m"), ("b", "s", "m")), ready, restarting)
    assert messages == [
        f"model m: this batch would restart every ready instance of it {why}" for why in refused
    ]


def test_last_replicas_counts_each_model_apart() -> None:
    known = _known(("a", "chat", "m1"), ("a", "code", "m2"), ("b", "chat", "m1"))
    both = {("a", "chat"), ("a", "code"), ("b", "chat")}
    # a restarts: m1 keeps b/chat, m2 has only a/code
    assert last_replicas(known, both, {("a", "chat"), ("a", "code")}) == [
        "model m2: this batch would restart every ready instance of it (a/code) and it has no other instance"
    ]


def test_replicas_come_from_each_hosts_pools_and_profiles() -> None:
    hostvars: dict[str, dict[str, Any]] = {
        "a": {
            "npu_pools_list": [
                {"name": "chat", "devices": [0], "port": 8000, "profile": "p"},
                {"name": "idle", "devices": [1], "port": 8001},
            ],
            "vllm_serve_profiles": {"p": PROFILE},
            "ansible_host": "10.0.0.1",
        },
        "b": {
            "npu_pools_list": [{"name": "chat", "devices": [0], "port": 8001, "profile": "p"}],
            "vllm_serve_profiles": {"p": PROFILE},
            "vllm_serve_health_host": "192.0.2.2",
            "ansible_host": "10.0.0.2",
        },
        "c": {},
    }
    found = replicas(["a", "b", "c"], lambda host, name: hostvars[host].get(name))
    assert found == [
        {"host": "a", "pool": "chat", "model": "smol-chat", "address": "10.0.0.1", "port": 8000},
        {"host": "b", "pool": "chat", "model": "smol-chat", "address": "192.0.2.2", "port": 8001},
    ]


def test_the_filter_reads_the_probes_and_the_batch() -> None:
    known = _known(("a", "s", "m"), ("b", "s", "m"))
    probes = [
        {"item": known[0], "status": 200},
        {"item": known[1], "status": -1},  # no readiness endpoint on b yet
    ]
    hostvars = {"a": {"__vllm_serve_snapshot": ["s"]}, "b": {"__vllm_serve_snapshot": []}}
    # b's engine answers /health: it counts as ready, so a may restart
    assert (
        provision_serve_last_replicas(known, probes, [{"item": known[1], "status": 200}], ["a"], hostvars)
        == []
    )
    # b's engine does not answer either: a is the last ready instance
    (why,) = provision_serve_last_replicas(known, probes, [{"item": known[1], "status": -1}], ["a"], hostvars)
    assert why.endswith("(a/s) and its other instances (b/s) are not ready")
    # a skipped fallback (no probe needed) counts as nothing
    assert provision_serve_last_replicas(
        known, probes, [{"item": known[1], "skipped": True}], ["a"], hostvars
    )


# --------------------------------------------------------------------- the readiness endpoint


def _load_script() -> ModuleType:
    # no .py suffix (an installed executable): load_module's spec_from_file_location needs one
    loader = importlib.machinery.SourceFileLoader("vllm_serve_ready", str(SCRIPT))
    spec = importlib.util.spec_from_loader("vllm_serve_ready", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _engine(answers: dict[str, tuple[int, str]]) -> type[http.server.BaseHTTPRequestHandler]:
    """An engine look-alike: each path answers (status, body) from ``answers`` (changed by the test)."""

    class Engine(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = answers.get(self.path, (404, ""))
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Engine


@pytest.fixture
def serve() -> Iterator[Callable[[type[http.server.BaseHTTPRequestHandler], str], int]]:
    """Start an HTTP server with a handler class on an address; returns its port. Stopped afterwards."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(handler: type[http.server.BaseHTTPRequestHandler], host: str = "127.0.0.1") -> int:
        server = http.server.ThreadingHTTPServer((host, 0), handler)
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port: int = server.server_address[1]
        return port

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, reply.reason, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.reason, exc.read().decode()


def test_readiness_endpoint_answers_ready_drained_not_ready_and_unknown(
    tmp_path: Path, serve: Callable[..., int]
) -> None:
    module = _load_script()
    health = {"/health": (200, "")}
    engine_port = serve(_engine(health))
    drain = tmp_path / "drain"
    drain.mkdir()
    config = tmp_path / "ready.json"
    pools = {"smol": f"http://127.0.0.1:{engine_port}/health", "gone": "http://127.0.0.1:1/health"}
    config.write_text(json.dumps({"drain_dir": str(drain), "timeout_s": 2, "pools": pools}))
    handler = type("Ready", (module.Handler,), {"config_path": str(config)})
    port = serve(handler)
    base = f"http://127.0.0.1:{port}/ready"

    assert _get(f"{base}/smol") == (200, "Ready", "smol: ready\n")
    (drain / "smol.drained").write_text("")
    assert _get(f"{base}/smol") == (503, "Drained", "smol: drained (about to restart)\n")
    (drain / "smol.drained").unlink()
    health["/health"] = (503, "")  # the engine died
    assert _get(f"{base}/smol")[:2] == (503, "Not ready")
    assert f"engine answered http://127.0.0.1:{engine_port}/health with 503" in _get(f"{base}/smol")[2]
    status, reason, body = _get(f"{base}/gone")
    assert (status, reason) == (503, "Not ready") and "engine not answering" in body
    assert _get(f"{base}/other") == (404, "Not Found", "no served pool other on this node\n")
    assert _get(f"http://127.0.0.1:{port}/")[0] == 404
    config.write_text("{not json")
    assert _get(f"{base}/smol")[:2] == (503, "Not ready")


def test_wait_idle_waits_for_the_engines_requests_bounded(serve: Callable[..., int]) -> None:
    # vLLM's /metrics, one series per engine core (FACTS.md section 6)
    busy = (
        'vllm:num_requests_running{engine="0",model_name="smollm2"} 1.0\n'
        'vllm:num_requests_running{engine="1",model_name="smollm2"} 0.0\n'
        'vllm:num_requests_waiting{engine="0",model_name="smollm2"} 2.0\n'
        'vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 5.0\n'
    )
    metrics = {"/metrics": (200, busy)}
    port = serve(_engine(metrics))
    url = f"http://127.0.0.1:{port}/metrics"

    def run(timeout_s: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, str(SCRIPT), "--wait-idle", url, timeout_s, "0.1"]
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)

    done = run("0.5")
    assert done.returncode == 0 and done.stdout.startswith(
        "timed out: 3 requests still in flight after 0."
    ), done
    metrics["/metrics"] = (200, busy.replace(" 1.0", " 0.0").replace(" 2.0", " 0.0"))
    assert run("5").stdout.startswith("idle after 0.")
    gone = [sys.executable, str(SCRIPT), "--wait-idle", "http://127.0.0.1:1/metrics", "5", "0.1"]
    assert "idle: the engine does not answer" in subprocess.run(gone, capture_output=True, text=True).stdout


# ------------------------------------------------------------ the role's refusal, run for real


def _ready_stub(status_of: dict[str, int]) -> type[http.server.BaseHTTPRequestHandler]:
    class Ready(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status = status_of.get(self.connection.getsockname()[0], 404)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Ready


def _replicas_play(
    tmp_path: Path, ready_port: int, engine_port: int, snapshots: dict[str, list[str]], batch: int
) -> subprocess.CompletedProcess[str]:
    """replicas.yml of the vllm_serve role on hosts a (127.0.0.1) and b (127.0.0.2), local connections,
    ``batch`` hosts per batch, each host's pools about to change given as ``__vllm_serve_snapshot``."""
    pools = [{"name": "smol", "devices": [0], "port": engine_port, "profile": "p"}]
    (tmp_path / "inventory.ini").write_text(
        "[npu_nodes]\na ansible_host=127.0.0.1\nb ansible_host=127.0.0.2\n"
        f"[npu_nodes:vars]\nansible_connection=local\nansible_python_interpreter={sys.executable}\n"
    )
    (tmp_path / "group_vars").mkdir(exist_ok=True)
    (tmp_path / "group_vars" / "npu_nodes.yml").write_text(
        yaml.safe_dump({"npu_pools_list": pools, "vllm_serve_profiles": {"p": PROFILE}})
    )
    play = [
        {
            "hosts": "npu_nodes",
            "gather_facts": False,
            "serial": batch,
            "vars": {"vllm_serve_ready_port": ready_port, "vllm_serve_keep_ready_replica": True},
            "tasks": [
                {
                    "ansible.builtin.set_fact": {
                        "__vllm_serve_snapshot": "{{ snapshots[inventory_hostname] }}"
                    }
                },
                {
                    "ansible.builtin.include_role": {
                        "name": "provision.ascend.vllm_serve",
                        "tasks_from": "replicas.yml",
                    }
                },
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    argv = [
        str(Path(sys.executable).with_name("ansible-playbook")),
        "-i",
        str(tmp_path / "inventory.ini"),
        str(tmp_path / "play.yml"),
        "-e",
        yaml.safe_dump({"snapshots": snapshots}, default_flow_style=True).strip(),
    ]
    env = {**os.environ, **ansible_env()}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)


REFUSED = "Refusing this batch (a, b) of the rolling upgrade before anything was written: model smol-chat"


def test_the_role_refuses_a_batch_holding_every_ready_instance(
    tmp_path: Path, serve: Callable[..., int]
) -> None:
    ready_port = serve(_ready_stub({"127.0.0.1": 200, "127.0.0.2": 200}), "0.0.0.0")
    engine_port = serve(_engine({"/health": (200, "")}), "0.0.0.0")
    both = {"a": ["smol"], "b": ["smol"]}

    done = _replicas_play(tmp_path, ready_port, engine_port, both, batch=2)
    assert done.returncode == 2, done.stdout + done.stderr
    assert REFUSED in done.stdout, done.stdout
    assert "this batch would restart every ready instance of it (a/smol, b/smol)" in done.stdout

    # one node at a time: the other stays ready
    done = _replicas_play(tmp_path, ready_port, engine_port, both, batch=1)
    assert done.returncode == 0, done.stdout + done.stderr

    # nothing about to change: nothing asked, nothing refused
    done = _replicas_play(tmp_path, ready_port, engine_port, {"a": [], "b": []}, batch=2)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Refusing" not in done.stdout and "-> localhost]" not in done.stdout, done.stdout


def test_the_role_refuses_restarting_the_last_ready_instance(
    tmp_path: Path, serve: Callable[..., int]
) -> None:
    # b is drained (503): restarting a alone would leave no ready instance
    ready_port = serve(_ready_stub({"127.0.0.1": 200, "127.0.0.2": 503}), "0.0.0.0")
    engine_port = serve(_engine({"/health": (200, "")}), "0.0.0.0")
    done = _replicas_play(tmp_path, ready_port, engine_port, {"a": ["smol"], "b": []}, batch=1)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "(a/smol) and its other instances (b/smol) are not ready" in done.stdout


def test_a_node_without_readiness_endpoint_counts_by_its_engine(
    tmp_path: Path, serve: Callable[..., int]
) -> None:
    # the readiness endpoint listens on 127.0.0.1 only: b's (127.0.0.2) refuses, its engine answers /health
    ready_port = serve(_ready_stub({"127.0.0.1": 200}), "127.0.0.1")
    health = {"/health": (200, "")}
    engine_port = serve(_engine(health), "0.0.0.0")
    done = _replicas_play(tmp_path, ready_port, engine_port, {"a": ["smol"], "b": []}, batch=1)
    assert done.returncode == 0, done.stdout + done.stderr
    health["/health"] = (503, "")
    done = _replicas_play(tmp_path, ready_port, engine_port, {"a": ["smol"], "b": []}, batch=1)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "(a/smol) and its other instances (b/smol) are not ready" in done.stdout
