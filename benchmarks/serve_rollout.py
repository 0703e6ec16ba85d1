"""Serving on the simulated cluster, timed: first apply, repeat apply, rolling upgrade, rollback.

On a 2-node simulated cluster whose nodes run the REAL vLLM CPU engine (SmolLM2-135M, FACTS.md §8) as
``vllm-smol.service`` through the vllm_serve role:

1. ``provision apply -p serve`` from bare nodes until both instances pass the gate (a real completion);
2. the same apply again (nothing to change);
3. ``provision apply -p upgrade`` to a good change of the profile (``max_model_len`` 4096 -> 2048), one node
   at a time, while a client thread sends a completion every ``--pause`` seconds, alternating between the
   two nodes' addresses;
4. the same with a broken change (an unknown flag): node1 is rolled back, the rollout stops.

For 3 and 4 it prints how long each node did not answer (its longest run of failed requests, from the
first failure to the next success) and the longest time during which NO node answered (from the request
log: the availability the rolling upgrade is meant to keep; 0 s means a client with both addresses always
had one that answered). Meanwhile a steady load (``--workers`` clients, completions back to back) goes
through HAProxy (Debian's, started here on loopback, stopped by its PID; ``provision_sim.serving.balancer``)
in front of both engines, health-checking each node's readiness endpoint: the role drains an instance before
it restarts, so a client of the balancer should see no failure. Printed: requests sent, failed, p50/p99.

Before the upgrades it times one Ansible task on a node (``ansible node1 -m command -a true``, 3 times) with
the engines idle, under the paced load (each client waits ``--lb-pause`` after each answer) and under the same
clients back to back: on 2 cores the back-to-back load starves the nodes' own control plane, which is why the
drained upgrade once took more than 10 minutes.

    .venv/bin/python benchmarks/serve_rollout.py [--pause 1.0] [--workers 2] [--lb-pause 1.0] [--json]

Needs root and systemd-nspawn (the simulated cluster) and the prepared engine (done here when missing);
about 6-8 minutes on 2 cores, ~7.5 GB of memory while both engines run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from provision_sim.cluster import Cluster
from provision_sim.serving import vllm_cpu as engine
from provision_sim.serving.balancer import HAProxy, Load
from provision_sim.serving.setup import engine_binds, smollm2_profile

PORT = 8000
READY_PORT = 8099  # vllm_serve_ready_port's default
POOL = {"name": "smol", "devices": [0], "port": PORT, "profile": "smollm2-cpu"}
API_KEY = "rollout-bench-key"  # engines beyond loopback need one (docs/security.md, Listeners)
# The balancer's checks, and the role's waits that follow them.
INTER_S, FALL, RISE = 1.0, 2, 2
LB_VARS = {
    "vllm_serve_drain": True,
    "vllm_serve_lb_check_interval_s": INTER_S,
    "vllm_serve_lb_check_fall": FALL,
    "vllm_serve_lb_check_rise": RISE,
}


def profile(**changes: Any) -> dict[str, Any]:
    data = smollm2_profile()
    data.update(changes)
    return data


def provision(inventory: Path, playbook: str, runs: Path) -> tuple[int, float, str]:
    env = {**os.environ, "PROVISION_RUNS_DIR": str(runs), "CI": "1"}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "provision", "apply", str(inventory), "-p", playbook],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )
    return done.returncode, time.monotonic() - started, done.stdout + done.stderr


class Client(threading.Thread):
    """One completion every ``pause`` seconds, alternating between the URLs; records (t, url, ok)."""

    def __init__(self, urls: list[str], pause: float) -> None:
        super().__init__(daemon=True)
        self.urls = urls
        self.pause = pause
        self.log: list[tuple[float, str, bool]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        body = json.dumps({"model": "smollm2", "prompt": "Hello", "max_tokens": 4, "temperature": 0}).encode()
        while not self.stop.is_set() and len(self.log) < 5000:
            url = self.urls[len(self.log) % len(self.urls)]
            headers = {"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"}
            request = urllib.request.Request(f"{url}/v1/completions", data=body, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=15) as response:
                    ok = response.status == 200
            except OSError:
                ok = False
            self.log.append((time.monotonic(), url, ok))
            self.stop.wait(self.pause)


def outages(log: list[tuple[float, str, bool]], urls: list[str]) -> dict[str, float]:
    """Per URL: the longest span from a failed request to that URL's next success. For "any": the longest
    span during which the latest request to EVERY URL had failed (a client that tries both addresses had
    nothing to fall back on)."""
    out: dict[str, float] = {}
    for url in urls:
        longest, down_since = 0.0, None
        entries = [(t, ok) for t, u, ok in log if u == url]
        for t, ok in entries:
            if not ok and down_since is None:
                down_since = t
            elif ok and down_since is not None:
                longest, down_since = max(longest, t - down_since), None
        if down_since is not None:
            longest = max(longest, entries[-1][0] - down_since)
        out[url] = round(longest, 1)
    latest: dict[str, bool] = {}
    longest, all_down_since = 0.0, None
    for t, url, ok in log:
        latest[url] = ok
        all_down = len(latest) == len(urls) and not any(latest.values())
        if all_down and all_down_since is None:
            all_down_since = t
        elif not all_down and all_down_since is not None:
            longest, all_down_since = max(longest, t - all_down_since), None
    if all_down_since is not None and log:
        longest = max(longest, log[-1][0] - all_down_since)
    out["any"] = round(longest, 1)
    return out


def task_seconds(inventory: Path, node: str, times: int = 3) -> list[float]:
    """Wall seconds of one trivial Ansible task on ``node`` (a fresh SSH connection each time)."""
    ansible = Path(sys.executable).with_name("ansible")
    out = []
    for _ in range(times):
        started = time.monotonic()
        subprocess.run(
            [str(ansible), "-i", str(inventory), node, "-m", "ansible.builtin.command", "-a", "true"],
            capture_output=True,
            env={**os.environ, "ANSIBLE_CONFIG": str(Path(__file__).parents[1] / "ansible.cfg")},
            timeout=900,
            check=True,
        )
        out.append(round(time.monotonic() - started, 1))
    return out


def control_plane(inventory: Path, lb: HAProxy, workers: int, lb_pause: float) -> dict[str, Any]:
    """One Ansible task's seconds on node1: engines idle, paced load, back-to-back load (through HAProxy)."""
    out: dict[str, Any] = {"idle": task_seconds(inventory, "node1")}
    for name, pause in (("paced", lb_pause), ("back_to_back", 0.0)):
        with Load(lb.url, workers=workers, pause_s=pause, api_key=API_KEY) as load:
            time.sleep(5)
            out[name] = task_seconds(inventory, "node1")
        out[f"{name}_load"] = load.summary()
    return out


def upgrade(
    cluster: Cluster,
    inventory: Path,
    runs: Path,
    settings: dict[str, Any],
    pause: float,
    lb: HAProxy,
    workers: int,
    lb_pause: float,
) -> dict[str, Any]:
    (inventory.parent / "group_vars" / "npu_nodes.yml").write_text(yaml.safe_dump(settings))
    urls = [f"http://{node.ip}:{PORT}" for node in cluster.nodes]
    lb.wait_up([node.name for node in cluster.nodes])
    client = Client(urls, pause)
    client.start()
    with Load(lb.url, workers=workers, pause_s=lb_pause, api_key=API_KEY) as load:
        rc, seconds, output = provision(inventory, "upgrade", runs)
    client.stop.set()
    client.join(30)
    down = outages(client.log, urls)
    return {
        "through_haproxy": load.summary(),
        "rc": rc,
        "seconds": round(seconds, 1),
        "requests": len(client.log),
        "failed": {
            node.name: sum(1 for _, u, ok in client.log if u == url and not ok)
            for node, url in zip(cluster.nodes, urls, strict=True)
        },
        "longest_down_s": {node.name: down[url] for node, url in zip(cluster.nodes, urls, strict=True)},
        "no_node_answering_s": down["any"],
        "rolled_back": "rolled back to the previous one, which is ready again" in output,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between two client requests")
    parser.add_argument("--workers", type=int, default=2, help="clients sending through HAProxy")
    parser.add_argument(
        "--lb-pause", type=float, default=1.0, help="seconds each HAProxy client waits after an answer"
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    engine.prepare(progress=lambda text: print(text, file=sys.stderr))
    name = f"bench-serve-{os.getpid()}"[:24]
    cluster = Cluster.up(
        name, nodes=2, os_list="openeuler-22.03,ubuntu-22.04", binds=engine_binds(), mirror=False
    )
    results: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="serve-bench-") as folder:
            inventory = Path(folder) / "inventory.ini"
            inventory.write_text(cluster.inventory_path.read_text())
            (Path(folder) / "group_vars").mkdir()
            runs = Path(folder) / "runs"
            base = {
                "npu_pools_list": [POOL],
                "vllm_serve_mode": "service",  # the engine from its venv, as measured in docs/serving.md
                "vllm_serve_venv": str(engine.engine_venv()),
                "vllm_serve_profiles": {"smollm2-cpu": profile()},
                "vllm_serve_api_key": API_KEY,  # the engines listen on the nodes' addresses
                **LB_VARS,
            }
            (Path(folder) / "group_vars" / "npu_nodes.yml").write_text(yaml.safe_dump(base))
            for step in ("first_apply", "repeat_apply"):
                rc, seconds, output = provision(inventory, "serve", runs)
                if rc != 0:
                    print(output, file=sys.stderr)
                    return 1
                results[step] = {"rc": rc, "seconds": round(seconds, 1)}
            servers = {node.name: f"{node.ip}:{PORT}" for node in cluster.nodes}
            balancer = HAProxy(
                Path(folder) / "lb",
                servers,
                pool="smol",
                ready_port=READY_PORT,
                inter_s=INTER_S,
                fall=FALL,
                rise=RISE,
            )
            with balancer as lb:
                lb.wait_up([node.name for node in cluster.nodes])
                results["control_plane"] = control_plane(inventory, lb, args.workers, args.lb_pause)
                good = {**base, "vllm_serve_profiles": {"smollm2-cpu": profile(max_model_len=2048)}}
                results["good_upgrade"] = upgrade(
                    cluster, inventory, runs, good, args.pause, lb, args.workers, args.lb_pause
                )
                broken = {
                    **good,
                    "vllm_serve_profiles": {"smollm2-cpu": profile(extra_args=["--no-such-flag"])},
                }
                results["broken_upgrade"] = upgrade(
                    cluster, inventory, runs, broken, args.pause, lb, args.workers, args.lb_pause
                )
    finally:
        cluster.down()
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"first apply (bare nodes -> 2 ready instances): {results['first_apply']['seconds']} s")
    print(f"repeat apply (nothing to change):              {results['repeat_apply']['seconds']} s")
    plane = results["control_plane"]
    print(
        f"one Ansible task on node1 (s): idle {plane['idle']}, paced load {plane['paced']} "
        f"({plane['paced_load']['sent']} requests), back to back {plane['back_to_back']} "
        f"({plane['back_to_back_load']['sent']} requests)"
    )
    for step in ("good_upgrade", "broken_upgrade"):
        r = results[step]
        print(
            f"{step.replace('_', ' ')}: rc {r['rc']}, {r['seconds']} s, {r['requests']} requests, "
            f"failed {r['failed']}, longest down {r['longest_down_s']}, "
            f"no node answering {r['no_node_answering_s']} s" + (", rolled back" if r["rolled_back"] else "")
        )
        lb = r["through_haproxy"]
        print(
            f"  through HAProxy ({args.workers} clients, {args.lb_pause} s pause): sent {lb['sent']}, "
            f"failed {lb['failed']}, "
            f"p50 {lb['p50_s'] * 1000:.0f} ms, p99 {lb['p99_s'] * 1000:.0f} ms"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
