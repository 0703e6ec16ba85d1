"""A real load balancer in front of the simulated nodes, and a steady load through it.

:class:`HAProxy` runs Debian's ``haproxy`` (2.6) in the foreground from a configuration it writes (never the
package's service): one backend of the nodes' engines, health-checked on each node's readiness endpoint
(the vllm_serve role's ``vllm-serve-ready``, ``GET /ready/<pool>``, 200 in rotation, 503 drained or not
ready), no retries on another server (``option redispatch`` off), so a request sent to an engine that is
restarting fails instead of being hidden. Its log (stdout, ISO timestamps) records each server's state
changes with the check's reason, e.g. (captured from this HAProxy)::

    2026-12-01T20:48:49.361178+00:00 Server smol/node1 is UP, reason: Layer7 check passed, code: 200, ...
    2026-12-01T20:48:43.344566+00:00 Server smol/node1 is DOWN, reason: Layer7 wrong status, code: 503,
        info: "Drained", ...  (one line)

:class:`Load` sends completions through it from a few threads, back to back, and keeps each one's start,
latency and outcome (sent, failed, p50/p99).
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import statistics
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

STATE_CHANGE = re.compile(r"^(\S+) Server (\S+)/(\S+) is (UP|DOWN), reason: (.*)$")


@dataclass(frozen=True)
class StateChange:
    at: float  # epoch seconds
    server: str
    state: str  # UP or DOWN
    reason: str


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
    return port


class HAProxy:
    """``haproxy -db`` with ``servers`` (name -> engine address:port) behind ``bind``, each checked on
    ``ready_port`` at ``/ready/<pool>`` every ``inter_s`` (``fall`` failures out, ``rise`` passes back)."""

    def __init__(
        self,
        folder: Path,
        servers: dict[str, str],
        *,
        pool: str,
        ready_port: int,
        inter_s: float = 1.0,
        fall: int = 2,
        rise: int = 2,
        bind: str = "127.0.0.1",
    ) -> None:
        self.folder = folder
        self.servers, self.pool, self.ready_port = servers, pool, ready_port
        self.inter_s, self.fall, self.rise = inter_s, fall, rise
        self.bind = bind
        self.port = 0
        self.config = folder / "haproxy.cfg"
        self.log = folder / "haproxy.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.bind}:{self.port}"

    def render(self) -> str:
        inter_ms = int(self.inter_s * 1000)
        lines = [
            "global",
            "    log stdout format iso local0",
            "defaults",
            "    mode http",
            "    log global",
            "    option httplog",
            "    timeout connect 5s",
            "    timeout client 120s",
            "    timeout server 120s",
            # Without it a check must finish within `inter` (HAProxy's rule when `timeout check` is unset):
            # at 200 ms a loaded machine's slow readiness answer read as a failed check, and a server flapped.
            "    timeout check 2s",
            "    retries 0",
            "frontend serve",
            f"    bind {self.bind}:{self.port}",
            f"    default_backend {self.pool}",
            f"backend {self.pool}",
            "    balance roundrobin",
            "    option httpchk",
            f"    http-check send meth GET uri /ready/{self.pool}",
            "    http-check expect status 200",
            f"    default-server inter {inter_ms}ms fall {self.fall} rise {self.rise}",
        ]
        lines += [
            f"    server {name} {address} check port {self.ready_port}"
            for name, address in self.servers.items()
        ]
        return "\n".join(lines) + "\n"

    def start(self, timeout_s: float = 30.0) -> HAProxy:
        binary = shutil.which("haproxy")
        if binary is None:
            raise RuntimeError("haproxy is not installed (Debian package haproxy, see .ci/apt-packages.txt)")
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port(self.bind)
        self.config.write_text(self.render())
        checked = subprocess.run([binary, "-c", "-f", str(self.config)], capture_output=True, text=True)
        if checked.returncode != 0:
            raise RuntimeError(f"haproxy refused {self.config}: {checked.stdout}{checked.stderr}")
        with self.log.open("wb") as out:
            self._process = subprocess.Popen(
                [binary, "-db", "-f", str(self.config)], stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with socket.create_connection((self.bind, self.port), timeout=1):
                    return self
            except OSError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"haproxy did not listen on {self.url}: {self.log.read_text()}"
                    ) from None
                time.sleep(0.2)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=10)
        self._process = None

    def __enter__(self) -> HAProxy:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def changes(self) -> list[StateChange]:
        """The servers' state changes in its log, in order."""
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            found = STATE_CHANGE.match(line)
            if found:
                stamp, _backend, server, state, reason = found.groups()
                out.append(StateChange(datetime.fromisoformat(stamp).timestamp(), server, state, reason))
        return out

    def wait_up(self, servers: list[str], timeout_s: float = 60.0) -> None:
        """Until each of ``servers`` was last seen UP (every server starts UP and goes DOWN on failed
        checks), after one full round of checks (``rise`` x ``inter``)."""
        deadline = time.monotonic() + timeout_s
        time.sleep(self.inter_s * (self.rise + 1))
        while True:
            last = {change.server: change.state for change in self.changes()}
            if all(last.get(server, "UP") == "UP" for server in servers):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"haproxy servers not UP after {timeout_s:.0f} s: {last}")
            time.sleep(self.inter_s)


@dataclass(frozen=True)
class Sent:
    at: float  # epoch seconds when it was sent
    latency_s: float
    ok: bool
    error: str


class Load:
    """``workers`` threads sending completions to ``url`` (``with Load(...) as load:``), each waiting
    ``pause_s`` after each answer, at most ``max_s`` and ``max_requests`` in all (:attr:`capped` says
    whether a bound stopped it before the block ended); each request's start, latency and outcome in
    :attr:`sent`. Back to back (``pause_s`` 0), two clients keep the CPU engine busy on every core of a
    2-core host, which starves the nodes' own control plane (an Ansible task then takes minutes)."""

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        model: str = "smollm2",
        workers: int = 2,
        pause_s: float = 1.0,
        max_tokens: int = 8,
        timeout_s: float = 60.0,
        max_s: float = 1200.0,
        max_requests: int = 100_000,
    ) -> None:
        self.url, self.api_key, self.model = url, api_key, model
        self.max_requests = max_requests
        self.capped = False
        self.max_tokens, self.timeout_s, self.max_s, self.pause_s = max_tokens, timeout_s, max_s, pause_s
        self.sent: list[Sent] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(workers)]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self.timeout_s + 5)

    def _one(self) -> Sent:
        payload = {"model": self.model, "prompt": "Hello", "max_tokens": self.max_tokens, "temperature": 0}
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(
            f"{self.url}/v1/completions", data=json.dumps(payload).encode(), headers=headers
        )
        at, begun = time.time(), time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
                _ = json.load(reply)["choices"][0]["text"]  # a completion, not just a 200
            return Sent(at, time.monotonic() - begun, True, "")
        except urllib.error.HTTPError as exc:
            return Sent(at, time.monotonic() - begun, False, f"HTTP {exc.code}")
        except (OSError, ValueError, KeyError, IndexError) as exc:
            return Sent(at, time.monotonic() - begun, False, str(exc))

    def _run(self) -> None:
        deadline = time.monotonic() + self.max_s
        while not self._stop.is_set():
            with self._lock:
                if time.monotonic() > deadline or len(self.sent) >= self.max_requests:
                    self.capped = True
                    return
            done = self._one()
            with self._lock:
                self.sent.append(done)
            # a failing backend must not turn into a busy loop either
            self._stop.wait(self.pause_s if done.ok else max(self.pause_s, 0.2))

    def summary(self) -> dict[str, float | int]:
        """sent, failed, p50 and p99 latency (s, of every request, failed ones included)."""
        latencies = sorted(s.latency_s for s in self.sent)
        cuts = (
            statistics.quantiles(latencies, n=100, method="inclusive")
            if len(latencies) > 1
            else latencies * 99
        )
        return {
            "sent": len(self.sent),
            "failed": sum(not s.ok for s in self.sent),
            "p50_s": round(cuts[49], 3) if cuts else 0.0,
            "p99_s": round(cuts[98], 3) if cuts else 0.0,
        }
