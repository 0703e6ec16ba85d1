"""The vllm_serve role on a 2-node simulated cluster, serving the REAL vLLM CPU engine (SmolLM2-135M).

Each node sees the engine cache (``provision_sim.serving.vllm_cpu``) at the same path through read-only bind
mounts (``Cluster.up(binds=...)``), so ``vllm-smol.service`` runs the cached venv's Python inside the node
like a production venv. One cluster for the module; the tests run in file order and share it:

1. ``provision plan -p serve`` (dry run: nothing written), then ``provision apply -p serve``: both
   instances ready, a completion answered from the controller; a second apply changes nothing.
2. ``provision apply -p upgrade`` to a broken profile (an unknown flag): node1 fails its gate and is rolled
   back to the previous configuration, ready again; the rollout stops, and node2 answers every request
   sent while it ran.
3. The engine killed on node2: ``provision serve status INVENTORY`` reports it failed, with the journal.

Costs: two engines (~3.6 GB each), 1-1.5 min per cold start of both on 2 cores; the module takes 2.5-5 min.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from provision_sim.cluster import Cluster
from provision_sim.serving import vllm_cpu as engine
from provision_sim.serving.setup import engine_binds, engine_profile_vars, smollm2_profile
from tests.helpers import Run, copy_inventory, journals, provision_cli
from tests.helpers import complete as shared_complete

ClusterFactory = Callable[..., Cluster]  # the sim_cluster_module_factory fixture (tests/conftest.py)

pytestmark = [pytest.mark.cluster, pytest.mark.engine, pytest.mark.slow]

POOL = {"name": "smol", "devices": [0], "port": 8000, "profile": "smollm2-cpu"}
API_KEY = "serve-test-key"
APPLY_TIMEOUT_S = 600
# The upgrade drill's traffic: bounded in count and in time, sent only to the nodes' addresses.
TRAFFIC_MAX_REQUESTS = 1000
TRAFFIC_MAX_S = 420.0
TRAFFIC_PAUSE_S = 1.0


# --------------------------------------------------------------------------------------------- fixtures


@dataclass
class Served:
    cluster: Cluster
    inventory: Path
    runs: Path
    plan: dict[str, object] = field(default_factory=dict)
    unit_after_plan: bool = False
    first_apply: dict[str, object] = field(default_factory=dict)
    first_apply_s: float = 0.0

    def url(self, node: str) -> str:
        return f"http://{self.cluster.node(node).ip}:{POOL['port']}"

    def group_vars(self) -> Path:
        return self.inventory.parent / "group_vars" / "npu_nodes.yml"


def good_settings() -> dict[str, object]:
    settings: dict[str, object] = {
        "npu_pools_list": [POOL],
        # Service mode: the engine from a venv (container mode, the default: test_serve_container.py).
        "vllm_serve_mode": "service",
        "vllm_serve_venv": str(engine.engine_venv()),
        "vllm_serve_api_key": API_KEY,
        # A killed engine stays down (auto-restart) long enough for `serve status` to see it.
        "vllm_serve_restart_sec": 60,
    }
    settings.update(engine_profile_vars())  # the rig's profile, its model in the engine cache
    return settings


@pytest.fixture(scope="module")
def served(
    sim_host: None, sim_cluster_module_factory: ClusterFactory, tmp_path_factory: pytest.TempPathFactory
) -> Served:
    engine.prepare()  # cached: instant after the first time (~3 min)
    cluster = sim_cluster_module_factory(
        "serve", nodes=2, os_list="openeuler-22.03,ubuntu-22.04", binds=engine_binds(), mirror=False
    )
    folder = tmp_path_factory.mktemp("serve")
    inventory = copy_inventory(cluster, folder, good_settings())
    state = Served(cluster, inventory, folder / "runs")
    planned = provision_cli(
        "plan", str(inventory), "-p", "serve", "--json", runs=state.runs, timeout=APPLY_TIMEOUT_S
    )
    assert planned.returncode == 0, planned.stdout + planned.stderr
    state.plan = json.loads(planned.stdout)
    unit = cluster.exec("node1", ["test", "-e", "/etc/systemd/system/vllm-smol.service"])
    state.unit_after_plan = unit.returncode == 0
    started = time.monotonic()
    done = provision_cli(
        "apply", str(inventory), "-p", "serve", "--json", runs=state.runs, timeout=APPLY_TIMEOUT_S
    )
    state.first_apply_s = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr + journals(cluster, "vllm-smol.service")
    state.first_apply = json.loads(done.stdout)
    return state


def complete(url: str, prompt: str = "The capital of France is", timeout: float = 30.0) -> str:
    return shared_complete(url, api_key=API_KEY, prompt=prompt, timeout=timeout)


def status(served: Served) -> subprocess.CompletedProcess[str]:
    return provision_cli("serve", "status", str(served.inventory), runs=served.runs, timeout=120)


# --------------------------------------------------------------------------------------------- tests


def test_plan_then_apply_serves_both_nodes_then_changes_nothing(served: Served) -> None:
    planned = served.plan["changes"]
    assert isinstance(planned, list)
    assert {"vllm_serve : Write the arguments", "vllm_serve : Write the systemd units"} <= {
        change["task"] for change in planned
    }
    assert not served.unit_after_plan, "the dry run wrote nothing"

    hosts = served.first_apply["hosts"]
    assert isinstance(hosts, dict) and sorted(hosts) == ["node1", "node2"]
    assert all(stats["changed"] > 0 and stats["failed"] == 0 for stats in hosts.values())
    for node in ("node1", "node2"):
        assert complete(served.url(node)).strip(), f"{node} answered an empty completion"
        enabled = served.cluster.exec(node, ["systemctl", "is-enabled", "vllm-smol.service"])
        assert enabled.stdout.strip() == "enabled", "the unit survives a reboot"
        args = served.cluster.exec(node, ["cat", "/etc/provision/serve/smol/args"]).stdout.splitlines()
        assert args[:3] == [f"{engine.engine_python()}", "-m", "vllm.entrypoints.openai.api_server"]
        assert args[args.index("--port") + 1] == "8000"
        secret = served.cluster.exec(node, ["stat", "-c", "%a %U", "/etc/provision/serve/smol/secret.env"])
        assert secret.stdout.split() == ["600", "root"]
        processes = served.cluster.exec(node, ["ps", "-eo", "args"]).stdout
        assert API_KEY not in processes and API_KEY not in "\n".join(args), "the key stays off command lines"
    with pytest.raises(urllib.error.HTTPError, match="401"):
        urllib.request.urlopen(
            urllib.request.Request(f"{served.url('node1')}/v1/models"), timeout=10
        )  # no key, no answer

    shown = status(served)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert shown.stdout.splitlines()[-1] == "2/2 ready on 2 host(s)"

    again = provision_cli(
        "apply", str(served.inventory), "-p", "serve", "--json", runs=served.runs, timeout=APPLY_TIMEOUT_S
    )
    assert again.returncode == 0, again.stdout + again.stderr
    summary = json.loads(again.stdout)
    assert {host: stats["changed"] for host, stats in summary["hosts"].items()} == {"node1": 0, "node2": 0}
    # converged: the role read the files and units and went straight to the gate (no configure step ran)
    noop = Run(again.returncode, summary, again.stderr, summary["seconds"])
    assert noop.events("vllm_serve : Write the arguments") == {}, "the converged nodes ran configure.yml"
    assert {e["host"] for e in summary["endpoints"] if e["ready"]} == {"node1", "node2"}, summary["endpoints"]
    print(f"\nfirst apply {served.first_apply_s:.1f} s, second apply {summary['seconds']:.1f} s")

    # drift the early path must not hide: a unit disabled by hand is enabled again (no restart needed)
    served.cluster.exec("node2", ["systemctl", "disable", "vllm-smol.service"])
    repair = provision_cli(
        "apply", str(served.inventory), "-p", "serve", "--json", runs=served.runs, timeout=APPLY_TIMEOUT_S
    )
    assert repair.returncode == 0, repair.stdout + repair.stderr
    repaired = json.loads(repair.stdout)
    changed = {host: stats["changed"] for host, stats in repaired["hosts"].items()}
    assert changed["node1"] == 0 and changed["node2"] >= 1, changed
    enabled = served.cluster.exec("node2", ["systemctl", "is-enabled", "vllm-smol.service"])
    assert enabled.stdout.strip() == "enabled", enabled.stdout + enabled.stderr


class Traffic:
    """Completions sent round-robin to the nodes while an upgrade runs: bounded in count and in time."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.results: list[tuple[str, bool, str]] = []
        self.capped = False  # stopped by its bounds before the upgrade ended
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _run(self) -> None:
        deadline = time.monotonic() + TRAFFIC_MAX_S
        while not self._stop.is_set():
            if len(self.results) >= TRAFFIC_MAX_REQUESTS or time.monotonic() > deadline:
                self.capped = True
                break
            url = self.urls[len(self.results) % len(self.urls)]
            try:
                complete(url, "Hello", timeout=15)
                self.results.append((url, True, "ok"))
            except (OSError, urllib.error.URLError, ValueError, KeyError) as exc:
                self.results.append((url, False, str(exc)))
            self._stop.wait(TRAFFIC_PAUSE_S)

    def of(self, url: str) -> list[tuple[str, bool, str]]:
        return [result for result in self.results if result[0] == url]


def test_rolling_upgrade_to_a_broken_profile_rolls_back_while_node2_answers(served: Served) -> None:
    good = served.group_vars().read_text()
    broken = yaml.safe_load(good)
    profile = smollm2_profile()
    profile.update(broken.get("vllm_serve_profiles", {}).get("smollm2-cpu", {}))
    profile["extra_args"] = ["--no-such-flag"]  # vLLM exits at once: unrecognized arguments
    broken["vllm_serve_profiles"] = {"smollm2-cpu": profile}
    node1, node2 = served.url("node1"), served.url("node2")
    before = served.cluster.exec("node2", ["cat", "/etc/provision/serve/smol/args"]).stdout
    served.group_vars().write_text(yaml.safe_dump(broken))
    try:
        with Traffic([node1, node2]) as traffic:
            started = time.monotonic()
            done = provision_cli(
                "apply", str(served.inventory), "-p", "upgrade", runs=served.runs, timeout=APPLY_TIMEOUT_S
            )
            took = time.monotonic() - started
    finally:
        served.group_vars().write_text(good)

    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "FAILED node1: vllm_serve : Fail the host, naming both verdicts" in out
    assert "vllm-smol.service on node1 failed its health gate with the new configuration" in out
    assert "was rolled back to the previous one, which is ready again" in out
    assert "unrecognized arguments: --no-such-flag" in out, "the journal tail names the cause"
    assert "node2" not in re.findall(r"FAILED (\S+):", out), "the rollout stopped before node2"

    to_node2 = traffic.of(node2)
    assert not traffic.capped, "requests ran during the whole upgrade"
    assert len(to_node2) >= 5, traffic.results
    assert all(ok for _, ok, _ in to_node2), [r for r in to_node2 if not r[1]]
    assert served.cluster.exec("node2", ["cat", "/etc/provision/serve/smol/args"]).stdout == before

    assert complete(node1).strip(), "node1 serves again on the previous configuration"
    args = served.cluster.exec("node1", ["cat", "/etc/provision/serve/smol/args"]).stdout
    assert "--no-such-flag" not in args and args == before
    failed_on_node1 = sum(not ok for _, ok, _ in traffic.of(node1))
    print(
        f"\nupgrade + rollback {took:.1f} s; requests: node2 {len(to_node2)} all answered, "
        f"node1 {len(traffic.of(node1))} ({failed_on_node1} failed while it restarted)"
    )


def test_killed_engine_reads_failed_with_the_journal(served: Served) -> None:
    killed = served.cluster.exec("node2", ["systemctl", "kill", "--signal=SIGKILL", "vllm-smol.service"])
    assert killed.returncode == 0, killed.stderr
    shown = status(served)
    assert shown.returncode == 1, shown.stdout + shown.stderr
    lines = shown.stdout.splitlines()
    node1 = next(line for line in lines if line.startswith("node1 "))
    node2 = next(line for line in lines if line.startswith("node2 "))
    assert node1.split()[:4] == ["node1", "smol", served.url("node1"), "ready"]
    assert node2.split()[:4] == ["node2", "smol", served.url("node2"), "failed"]
    # After SIGKILL of the main process systemd first stops the unit's other processes (the engine core
    # children: deactivating/stop-sigterm), then waits RestartSec (activating/auto-restart): either is right.
    assert "the engine process is not running" in node2
    assert re.search(r"vllm-smol\.service: (deactivating/stop-sig(term|kill)|activating/auto-restart)", node2)
    assert any("Main process exited, code=killed, status=9/KILL" in line for line in lines if "| " in line)
    assert lines[-1] == "1/2 ready on 2 host(s)"

    as_json = provision_cli("serve", "status", str(served.inventory), "--json", runs=served.runs, timeout=120)
    report = json.loads(as_json.stdout)
    assert report["ready"] is False
    states = {(row["host"], row["pool"]): row["state"] for row in report["endpoints"]}
    assert states == {("node1", "smol"): "ready", ("node2", "smol"): "failed"}
