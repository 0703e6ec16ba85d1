"""The bandwidth check of a group's NPU links (provision.ascend.hccl_check) against the simulated hccl_test.

A simulated node (driver installed, booted) in a temporary root; the pair test's real command line
(``mpirun ... all_reduce_test ...``, :func:`pair_argv`) runs the simulated ``mpirun`` and the
``all_reduce_test`` the simulated CANN toolkit installs; its output is read by the one parser
(``parse_hccl_test``) and judged against the A2 line's nominal port speed. Pass, a slowed port refused
with both nodes, NPUs and ports named, a dropped port refused, and passing again once cleared. No cluster;
about 10 s, most of it the driver install of the module fixture.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ansible.plugins.action import ActionBase

from provision.ascend import hardware
from provision.ascend.hccl_check import (
    HCCL_TEST_DIRS,
    LinkRun,
    link_figures,
    link_problems,
    nominal_gbs,
    pair_argv,
)
from provision.ascend.hccn import parse_hccl_test
from provision.errors import InputError
from provision_sim import faults
from provision_sim.hardware.testroot import SimRoot
from tests.helpers import load_module
from tests.unit.test_hccn_gate_checks import (
    POOL,
    ROLE_FILTERS,
    HostVars,
    answered,
    driver_run,
    healthy,
    simulated_node,
)

__all__ = ["driver_run"]  # a fixture

pytestmark = pytest.mark.unit

ROOT = Path(__file__).parents[2]
SAMPLES = ROOT / "tests" / "fixtures" / "samples"
A2_GBPS = hardware.model("a2").npu_port_gbps
THRESHOLD = 0.5


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, driver_run: Path) -> SimRoot:
    root = tmp_path_factory.mktemp("hccl")
    sim = simulated_node(root / "node", driver_run, 1)
    toolkit = sim.run([next(driver_run.parent.glob("Ascend-cann-toolkit_*.run")), "--install", "--quiet"])
    assert toolkit.returncode == 0, toolkit.stdout + toolkit.stderr
    return sim


# ``ssh`` as the launcher meets it here: 192.0.2.11 is the launching node (not this machine's address, so
# rank 0 goes over ssh too), 192.0.2.12 the peer (the simulated root in PEER_ROOT, else the launching
# node's own), 192.0.2.13 a node that refuses the key, with OpenSSH's words and exit code.
FAKE_SSH = """#!/bin/sh
while [ "${1#-}" != "$1" ]; do [ "$1" = "-o" ] && shift; shift; done
host=$1; shift
case $host in
  192.0.2.11) exec sh -c "$*" ;;
  192.0.2.12) [ -n "$PEER_ROOT" ] && export PROVISION_SIM_ROOT="$PEER_ROOT"; exec sh -c "$*" ;;
  *) echo "root@$host: Permission denied (publickey,password)." >&2; exit 255 ;;
esac
"""


def measure(
    sim: SimRoot,
    device: int,
    peer: SimRoot | None = None,
    hosts: tuple[str, str] = ("192.0.2.11", "192.0.2.12"),
) -> LinkRun:
    """One pair test as the check runs it: the simulated mpirun on PATH, the toolkit's all_reduce_test;
    the other rank on ``peer`` (else on ``sim`` too), started over ``ssh`` (:data:`FAKE_SSH`)."""
    bin_dir = sim.root.parent / "bin"
    bin_dir.mkdir(exist_ok=True)
    mpirun = bin_dir / "mpirun"
    engine = sim.path("/usr/lib/provision-sim")
    mpirun.write_text(
        f'#!/bin/sh\nPYTHONPATH={engine} exec {sys.executable} -B -m ascendsim mpirun "$@"\n',
        encoding="utf-8",
    )
    mpirun.chmod(0o755)
    (bin_dir / "ssh").write_text(FAKE_SSH, encoding="utf-8")
    (bin_dir / "ssh").chmod(0o755)
    argv = pair_argv(HCCL_TEST_DIRS[0], hosts, device)
    # the test binary's node path, run through this interpreter (the node's /usr/bin/python3 is not here)
    binary = sim.path(argv[12])
    argv[12:13] = [sys.executable, str(binary)]
    env = sim.env({"PEER_ROOT": str(peer.root)} if peer else None)
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    return LinkRun("atlas-a01", device, "atlas-a02", device, done.returncode, done.stdout + done.stderr)


def test_the_command_line_is_hccl_tests_documented_one() -> None:
    argv = pair_argv("/opt/hccl_test/", ("10.0.0.1", "10.0.0.2"), 3)
    assert argv == [
        "timeout", "150", "mpirun", "-hosts", "10.0.0.1,10.0.0.2", "-ppn", "1", "-n", "2",
        "-genv", "ASCEND_RT_VISIBLE_DEVICES", "3",
        "/opt/hccl_test/bin/all_reduce_test",
        "-b", "8M", "-e", "64M", "-f", "2", "-d", "fp32", "-o", "sum", "-p", "1",
    ]  # fmt: skip


def test_the_tools_unit_is_gib_per_second_as_the_documented_sample_shows() -> None:
    text = (SAMPLES / "hccl_test_outputs.txt").read_text(encoding="utf-8")
    last = parse_hccl_test(text.split("## oam_tools_all_reduce_8p", 1)[1])[-1]
    measured = last.data_size / (last.avg_time_us / 1e6) / 2**30
    assert measured == pytest.approx(last.alg_bandwidth_gbs, rel=1e-4)
    assert A2_GBPS == 200
    assert nominal_gbs(200) == pytest.approx(23.283, abs=1e-3)


def test_a_healthy_port_passes_with_its_figures(node: SimRoot) -> None:
    run = measure(node, 3)
    assert run.rc == 0, run.output
    assert run.output.splitlines()[0] == (
        "the minbytes is 8388608, maxbytes is 67108864, iters is 20, warmup_iters is 5"
    )
    assert [r.data_size for r in parse_hccl_test(run.output)] == [8388608, 16777216, 33554432, 67108864]
    figures = link_figures(run, A2_GBPS, THRESHOLD)
    assert figures["ok"] is True and figures["problem"] is None
    assert figures["data_size"] == 67108864
    assert 0.8 * 23.283 < figures["bandwidth_gbs"] < 23.283  # near the line rate, below it
    assert figures["floor_gbs"] == pytest.approx(11.642, abs=1e-3)


def test_a_slowed_port_is_refused_naming_both_nodes_npus_and_ports(node: SimRoot) -> None:
    node.set_faults(faults.parse(['link_slow={"3": 0.25}']))
    try:
        slow, other = measure(node, 3), measure(node, 2)
    finally:
        node.set_faults({}, replace=True)
    assert slow.rc == 0, slow.output
    figures, problems = link_problems([slow, other], A2_GBPS, THRESHOLD)
    assert [f["ok"] for f in figures] == [False, True]
    assert figures[0]["bandwidth_gbs"] < 0.25 * 23.283
    assert len(problems) == 1
    message = problems[0].message
    assert message.startswith("atlas-a01 NPU 3: link to atlas-a02 NPU 3: ")
    assert "below 50% of the port's nominal 200 Gbit/s (11.64 GB/s)" in message
    assert "atlas-a01 NPU 3 (port eth3) <-> atlas-a02 NPU 3 (port eth3)" in message


def test_a_dropped_port_is_refused_with_hccls_error(node: SimRoot) -> None:
    node.set_faults(faults.parse(["link_down=[5]"]))
    try:
        run = measure(node, 5)
    finally:
        node.set_faults({}, replace=True)
    assert run.rc == 1
    _, problems = link_problems([run], A2_GBPS, THRESHOLD)
    assert len(problems) == 1
    assert "atlas-a01 NPU 5: link to atlas-a02 NPU 5: hccl_test failed (exit 1): [ERROR] ROCE(" in (
        problems[0].message
    )
    assert "hns_roce_lite_handle_error_cqe(630) : error cqe status: 0x15" in problems[0].message
    assert "(port eth5)" in problems[0].message


@pytest.fixture(scope="module")
def peer(tmp_path_factory: pytest.TempPathFactory, driver_run: Path) -> SimRoot:
    return simulated_node(tmp_path_factory.mktemp("hccl-peer") / "node", driver_run, 2)


def test_the_peers_end_counts_a_slow_or_dropped_port_there_is_refused(node: SimRoot, peer: SimRoot) -> None:
    healthy = measure(node, 3, peer)
    assert healthy.rc == 0 and link_figures(healthy, A2_GBPS, THRESHOLD)["ok"] is True, healthy.output
    assert "ascendsim-link-factor" not in healthy.output  # the launcher keeps the ranks' talk to itself
    peer.set_faults(faults.parse(['link_slow={"3": 0.25}']))
    try:
        slow = measure(node, 3, peer)
        other = measure(node, 2, peer)
    finally:
        peer.set_faults({}, replace=True)
    assert slow.rc == 0, slow.output
    figures = [link_figures(run, A2_GBPS, THRESHOLD) for run in (slow, other)]
    assert [f["ok"] for f in figures] == [False, True]
    assert figures[0]["bandwidth_gbs"] < 0.25 * 23.283
    peer.set_faults(faults.parse(["link_down=[3]"]))
    try:
        dropped = measure(node, 3, peer)
    finally:
        peer.set_faults({}, replace=True)
    assert dropped.rc == 1
    assert "hns_roce_lite_handle_error_cqe(630) : error cqe status: 0x15" in dropped.output


def test_a_peer_mpirun_cannot_reach_is_a_launch_failure_not_a_link_fault(node: SimRoot) -> None:
    run = measure(node, 3, hosts=("192.0.2.11", "192.0.2.13"))
    assert run.rc == 255
    figures, problems = link_problems([run], A2_GBPS, THRESHOLD)
    assert figures[0]["launch_failed"] is True
    assert figures[0]["problem"] == (
        "mpirun could not start the rank on atlas-a02 (exit 255): "
        "root@192.0.2.13: Permission denied (publickey,password)."
    )
    assert "passwordless SSH" in problems[0].hint and "cables" not in problems[0].hint


def test_cleared_the_port_passes_again(node: SimRoot) -> None:
    node.set_faults(faults.parse(['link_slow={"4": 0.1}', "link_down=[4]"]))
    assert link_problems([measure(node, 4)], A2_GBPS, THRESHOLD)[1]
    node.set_faults({}, replace=True)
    figures, problems = link_problems([measure(node, 4)], A2_GBPS, THRESHOLD)
    assert problems == [] and figures[0]["ok"] is True


def test_without_a_nominal_speed_only_failures_are_refused(node: SimRoot) -> None:
    node.set_faults(faults.parse(['link_slow={"1": 0.1}']))
    try:
        run = measure(node, 1)
    finally:
        node.set_faults({}, replace=True)
    figures = link_figures(run, hardware.model("a3").npu_port_gbps, THRESHOLD)
    assert figures["ok"] is True and figures["floor_gbs"] is None
    assert figures["bandwidth_gbs"] < 0.1 * 23.283


def test_the_fault_knob_takes_a_share_of_the_speed() -> None:
    assert faults.parse(['link_slow={"3": 0.25}']) == {"link_slow": {"3": 0.25}}
    for bad in ('link_slow={"3": 0}', 'link_slow={"3": 1.5}', 'link_slow={"3": true}', "link_slow=[3]"):
        with pytest.raises(InputError, match="link_slow"):
            faults.parse([bad])


def test_the_gate_measures_from_the_head_and_refuses_the_group_on_a_slow_link(node: SimRoot) -> None:
    hostvars = HostVars(
        node1={"ansible_host": "192.0.2.11", "npu_pools_list": [POOL]},
        node2={"ansible_host": "192.0.2.12", "npu_pools_list": [POOL]},
    )
    groups = ROLE_FILTERS.hccn_gate_groups(["node1", "node2"], hostvars)
    assert ROLE_FILTERS.hccn_gate_links(groups, "node2") == []  # workers launch nothing
    plan = ROLE_FILTERS.hccn_gate_links(groups, "node1")
    assert plan == [
        {"device": n, "peer": "node2", "peer_device": n, "hosts": ["192.0.2.11", "192.0.2.12"]}
        for n in range(8)
    ]
    assert ROLE_FILTERS.hccn_gate_port_gbps("910b") == 200
    assert ROLE_FILTERS.hccn_gate_port_gbps("a3") is None
    for name, index in (("node1", 1), ("node2", 2)):
        hostvars[name]["__hccn_gate_local"] = {"changed": False, "probe": healthy(index)}
    for name in ("node1", "node2"):
        hostvars[name]["__hccn_gate_pings"] = {
            "probe": answered(ROLE_FILTERS.hccn_gate_pings(groups, name, hostvars))
        }

    def gate(runs: list[LinkRun]) -> dict[str, object]:
        figures = [link_figures(run, 200, THRESHOLD) for run in runs]
        hostvars["node1"]["__hccn_gate_links"] = {"changed": False, "links": figures, "links_skipped": None}
        return dict(ROLE_FILTERS.hccn_gate_verdict(groups, "node2", hostvars, ["node1", "node2"]))

    def on_pair(device: int) -> LinkRun:
        run = measure(node, device)
        return LinkRun("node1", device, "node2", device, run.rc, run.output)

    assert gate([on_pair(n) for n in (0, 6)])["ok"] is True
    node.set_faults(faults.parse(['link_slow={"6": 0.3}']))
    try:
        refused = gate([on_pair(n) for n in (0, 6)])
    finally:
        node.set_faults({}, replace=True)
    assert refused["ok"] is False
    lines = str(refused["message"]).splitlines()
    assert lines[0].endswith("nothing of it is started. 1 problem(s):")
    assert lines[1].startswith("  - node1 NPU 6: link to node2 NPU 6: ")
    assert "(all_reduce_test between node1 NPU 6 (port eth6) <-> node2 NPU 6 (port eth6))" in lines[1]
    assert gate([on_pair(6)])["ok"] is True  # cleared


PROBE = load_module("provision_action_hccn_probe_links", ROOT / "plugins/action/hccn_probe.py")


def run_links(
    monkeypatch: pytest.MonkeyPatch, sim: SimRoot, args: dict[str, Any], path: str
) -> dict[str, Any]:
    """The action's ``links`` mode, its commands run here in the node root's environment."""
    commands: list[str] = []

    def execute(command: str, sudoable: bool = True) -> dict[str, Any]:
        commands.append(command)
        env = sim.env()
        env["PATH"] = path
        done = subprocess.run(command, shell=True, env=env, capture_output=True, text=True, check=False)
        return {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}

    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    action = PROBE.ActionModule.__new__(PROBE.ActionModule)
    action._task = SimpleNamespace(args=args, check_mode=False)
    action._low_level_execute_command = execute
    result: dict[str, Any] = action.run(task_vars={"inventory_hostname": "node1"})
    result["commands"] = commands
    return result


def test_the_action_runs_the_pairs_one_at_a_time_and_skips_without_mpi(
    monkeypatch: pytest.MonkeyPatch, node: SimRoot
) -> None:
    measure(node, 0)  # writes the mpirun wrapper
    bin_dir = node.root.parent / "bin"
    folder = str(node.path(HCCL_TEST_DIRS[0]))
    args: dict[str, Any] = {
        "links": [
            {"device": d, "peer": "node2", "peer_device": d, "hosts": ["192.0.2.11", "192.0.2.12"]}
            for d in (2, 3)
        ],
        "link_port_gbps": 200,
        "link_threshold": 0.5,
        "hccl_test_dirs": ["/nonexistent/hccl_test", folder],
    }
    node.set_faults(faults.parse(['link_slow={"3": 0.25}']))
    try:
        result = run_links(monkeypatch, node, args, f"{bin_dir}:/usr/bin:/bin")
    finally:
        node.set_faults({}, replace=True)
    assert result["links_skipped"] is None
    assert [(f["host"], f["device"], f["peer"], f["ok"]) for f in result["links"]] == [
        ("node1", 2, "node2", True),
        ("node1", 3, "node2", False),
    ]
    assert "below 50% of the port's nominal 200 Gbit/s" in result["links"][1]["problem"]
    assert result["commands"][1].startswith(
        "timeout 150 mpirun -hosts 192.0.2.11,192.0.2.12 -ppn 1 -n 2 -genv ASCEND_RT_VISIBLE_DEVICES 2 "
        f"{folder}/bin/all_reduce_test -b 8M"
    )

    no_mpi = run_links(monkeypatch, node, args, "/nonexistent")
    assert no_mpi["links"] == [] and no_mpi["links_skipped"] == "mpirun (MPICH) is not installed"
    assert len(no_mpi["commands"]) == 1  # only the look-up
    args["hccl_test_dirs"] = ["/nonexistent/hccl_test"]
    unbuilt = run_links(monkeypatch, node, args, f"{bin_dir}:/usr/bin:/bin")
    assert unbuilt["links_skipped"] == (
        "hccl_test is not built (no bin/all_reduce_test in /nonexistent/hccl_test)"
    )
