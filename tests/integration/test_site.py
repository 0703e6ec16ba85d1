"""Issue #4 "Done when", end to end: ``playbooks/site.yml`` on a mixed simulated cluster, and the drills.

Where each "Done when" item of #4 is tested
-------------------------------------------
* A mixed cluster: plan -> apply -> apply again = 0 changed -> the nodes asserted. HERE: one cluster for the
  module (``site`` fixture: openEuler 22.03, Ubuntu 22.04, openEuler 24.03; one of each hardware model, an
  Atlas 800 A2, an Atlas 800 A3 and an Atlas 300I Duo server, 16 chips each (the README's mixed example,
  its inventory as the simulator writes it: no NPU count added by the test), each fetching its own line's
  driver, firmware and operator package; the real vLLM CPU engine bound in, node1 (the A2, openEuler) and
  node2 (the A3, Ubuntu) serve smollm2-cpu), ``test_plan_*``, ``test_apply_*``, ``test_node_*``
  (``test_node_of_each_hardware_model_*``: the tools' outputs of each model parse to its configuration),
  ``test_serving_*``, ``test_stack_report_*``. daemon.json: the "container runtime" section below
  (``test_container_runtime_*``). Each stage alone, in more depth: test_repos.py (mirror, stray sources),
  test_driver.py::test_fresh_install_reboots_passes_the_gate_and_reapplies_nothing, test_cann.py (both
  package layouts), test_npu_pools_local.py, serving/test_serve.py (container mode: rolling upgrade,
  rollback). The serving here is service mode's check: ``test_serving_*``, the engines untouched by the
  ``--full`` and verified applies, a unit disabled by hand in the drift test, and last, a killed engine
  (``test_serve_status_*``).
* An upgrade of driver/firmware and CANN uses the upgrade order, reboots in batches, passes the gate:
  test_driver.py::test_stack_upgrade_0_18_to_0_23_goes_firmware_driver_cann_image_one_node_at_a_time (the
  v0.18.0 stack on an A2 and an A3 node -> the default v0.23.0; firmware, driver, CANN in each node's install
  log; ``ascend_driver_serial=1``: each node's reboot and post-reboot gate end before the next node reboots;
  the new stack's image refused on the old driver, fitting after; re-apply 0 changed, the stack report on the
  lock) and test_cann.py::test_both_layouts_then_upgrade (CANN ``--upgrade`` over the <= 8.3 layout).
* Plain ``ansible-playbook -i inventory.ini provision.ascend.site``: HERE,
  ``test_faulty_nodes_stop_before_any_change_while_plain_ansible_playbook_converges_the_healthy_one``
  (from an empty project directory outside the checkout with the user's own minimal ansible.cfg, the
  collection installed with ansible-galaxy: a fresh node converged through the whole site.yml, then a
  second run changes nothing). Stage playbooks
  alone: test_repos.py::test_plain_ansible_playbook_then_plan_other_settings (repos.yml), the
  test_driver.py upgrade test (driver.yml + cann.yml).
* A checksum mismatch, an unhealthy NPU, a missing prerequisite stop their node before any change, with
  what and how to fix; the other nodes converge: HERE, same test (site.yml, three faulty nodes and a healthy
  one); driver.yml alone, with the DKMS-residue fix and the force past the gate:
  test_driver.py::test_checksum_health_and_prerequisite_failures_stop_only_their_node.
* The benchmark: benchmarks/converge.py (a script, not a test).

The air gap (``provision bundle``'s "Done when", docs/bundle.md): the cluster converges from an offline
bundle, not from the simulator's mirror. Before anything runs, ``provision bundle build --sign-repos``
gathers from the simulator's mirror what the site inventory's nodes need, ``provision bundle serve`` serves
it on the host's address on the cluster network (where Ansible's connections come from too), the group_vars
point at it (its printed lines), and every node's routes are cut to that one address: the simulator's
mirror (the controller namespace) and everything else are unreachable from the nodes
(``test_air_gap_*``). Every apply of the module, from bare to serving endpoints on the openEuler and the
Ubuntu node, and the second that changes nothing, runs behind that cut.

The power drill (``provision doctor``'s last "Done when"): the first apply of the mixed cluster is also a
power loss. node3 loses power (``sim power off --hard``) while its driver .run is in its 40 % stage; that
apply names it unreachable and converges node1 and node2; the power back, the next apply installs the
half-done driver again and converges node3, and ``provision doctor --limit node3`` says OK:
``test_a_node_losing_power_in_its_driver_install_is_unreachable_then_converged_and_doctor_says_ok``. The
tests of "the first apply" read, for node3, the apply after its power came back (``Site.converging``).
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.ascend import (
    lock,
    parse_cann_install_info,
    parse_driver_version_info,
    parse_firmware_version_info,
    parse_npu_smi_board,
    parse_npu_smi_info,
    parse_npu_smi_usages,
)
from provision.ascend.facts import PROBE_SCRIPT, facts_from_probe
from provision.ascend.hardware import HardwareModel, model_for_chip
from provision_sim import faults, hardware
from provision_sim.cluster import Cluster
from provision_sim.mirror import repos
from provision_sim.serving import vllm_cpu as engine
from provision_sim.serving.setup import engine_binds, engine_profile_vars
from tests.helpers import (
    PROVISION,
    Run,
    assert_status_reads_node2_killed,
    cluster_vars,
    complete,
    copy_inventory,
    host_vars,
    plain_ansible_playbook,
    provision,
    provision_cli,
    sh,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

ClusterFactory = Callable[..., Cluster]
LOCK = lock.default_stack()
STACK = str(LOCK["name"])
DRIVER, FIRMWARE, CANN, NNAL = (str(LOCK[key]) for key in ("driver", "firmware", "cann", "nnal"))
REPORT = f"stack {STACK}: driver {DRIVER}, firmware {FIRMWARE}, CANN {CANN}, NNAL {NNAL}; matches the lock"
REPORT_TASK = "Report the stack against the version lock"
REBOOT = "ascend_driver : Reboot to load the new driver and firmware"
PACKAGES_TASK = "openeuler_repos : Packages to install once the sources are in place"

SITE_OS = "openeuler-22.03,ubuntu-22.04,openeuler-24.03"
# One server of each hardware model vllm-ascend runs on: an Atlas 800 A2 (node1, which serves), an Atlas 800
# A3 (node2: 8 chips = 4 NPUs x 2 dies here) and an Atlas 300I Duo server (node3: 4 cards x 2 chips).
SITE_MODELS = "910B3,910_93,310P3"
# chips per node: one /dev/davinciN, one pool device id, one PCI function each. 16 with SITE_MODELS: the
# README's mixed example as written (`provision sim up --nodes 3 --model 910b3,910_93,310p3 --npus 16`).
NPUS = 16
API_KEY = "site-test-key"
# Every node: two pools that serve nothing (files only). node1 (openEuler) and node2 (Ubuntu): a pool serving
# smollm2-cpu on port 8000.
POOLS = [
    {"name": "chat", "devices": [0, 1, 2, 3], "port": 8000},
    {"name": "batch", "devices": [4, 5, 6, 7], "port": 8001},
]
SERVING = ["node1", "node2"]
ENGINE_UNIT = "vllm-smol.service"
ENGINE_ARGS = "/etc/provision/serve/smol/args"
SERVING_POOLS = [
    {"name": "smol", "devices": [0], "port": 8000, "profile": "smollm2-cpu"},
    {"name": "batch", "devices": [4, 5, 6, 7], "port": 8001},
]
# What plan must leave absent on a fresh node (and apply creates).
CREATED_BY_APPLY = (
    "/usr/local/Ascend",
    "/etc/ansible/facts.d",
    "/etc/provision/pools",
    "/etc/profile.d/ascend.sh",
    "/etc/systemd/system/vllm-smol.service",
    "/var/cache/provision",
    "/dev/davinci0",
)
# The power drill of the first apply: DRILL_NODE loses power while its driver .run is in its 40 % stage
# (DKMS module built, libraries copied; no npu-smi, no version.info yet), each stage slowed to STAGE_S.
DRILL_NODE = "node3"
STAGE_S = 20
INSTALL_LOG = "/var/log/ascend_seclog/ascend_install.log"
DRIVER_RUN_TASK = "ascend_driver : Run "
NO_RECORD = ["no record of a converged apply on this node"]
DRILL_OLD: dict[str, Any] = {
    "ascend_driver_version": "25.0.rc1.1",
    "ascend_driver_firmware_version": "7.7.0.1.231",
    "provision_allow_unlocked_versions": True,
}


# -- running provision and ansible-playbook ------------------------------------------------------------------


@dataclass
class PlainRun:
    """``ansible-playbook`` run as a user without provision's CLI would: its stdout, read back."""

    rc: int
    stdout: str
    seconds: float

    def recap(self) -> dict[str, dict[str, int]]:
        """host -> PLAY RECAP counts (ok, changed, unreachable, failed, ...)."""
        lines = self.stdout[self.stdout.rindex("PLAY RECAP") :].splitlines()[1:]
        recap = {}
        for line in lines:
            if " : " not in line:
                continue
            host, counts = line.split(" : ", 1)
            recap[host.strip()] = {k: int(v) for k, v in (item.split("=") for item in counts.split())}
        return recap

    def results(self, status: str, task: str | None = None) -> dict[str, dict[str, Any]]:
        """host -> the JSON result printed after ``ok: [host] =>`` (``status`` "ok") or after
        ``fatal: [host]: FAILED! =>`` / ``failed: [host] (item=...) =>`` ("failed"): the last one, in the
        whole output or under ``TASK [task]`` only."""
        text = self.stdout
        if task is not None:
            start = text.index(f"\nTASK [{task}]")
            end = min(i for i in (text.find("\nTASK [", start + 1), text.find("\nPLAY", start + 1)) if i > 0)
            text = text[start:end]
        decoder = json.JSONDecoder()
        prefixes = ("fatal: [", "failed: [") if status == "failed" else (f"{status}: [",)
        found: dict[str, tuple[int, dict[str, Any]]] = {}
        for prefix in prefixes:
            for start in _find_all(text, f"\n{prefix}"):
                host = text[start + 1 + len(prefix) : text.index("]", start)]
                line_end = text.find("\n", start + 1)
                arrow = text.find(" => ", start, line_end if line_end > 0 else None)
                if arrow < 0 or not text.startswith("{", arrow + 4):
                    continue  # a loop item line: "ok: [node1] => (item=...)"
                result, _ = decoder.raw_decode(text, arrow + 4)
                if start >= found.get(host, (-1, {}))[0]:
                    found[host] = (start, result)
        return {host: result for host, (_, result) in found.items()}

    def changed_tasks(self, host: str) -> list[str]:
        """The tasks that reported ``changed`` on ``host``, in order."""
        tasks = []
        for section in self.stdout.split("\nTASK [")[1:]:
            if f"\nchanged: [{host}]" in section:
                tasks.append(section[: section.index("]")])
        return tasks

    def tail(self) -> str:
        return self.stdout[-6000:]


def _find_all(text: str, needle: str) -> Iterator[int]:
    position = text.find(needle)
    while position >= 0:
        yield position
        position = text.find(needle, position + 1)


def ansible_playbook(inventory: Path, *args: str, home: Path) -> PlainRun:
    """``ansible-playbook -i INVENTORY provision.ascend.site`` as a user who installed the collection with
    ansible-galaxy runs it: from an empty project directory outside the checkout with their own minimal
    ansible.cfg (``plain_ansible_playbook``), no provision CLI and no ANSIBLE_* variables of ours."""
    started = time.monotonic()
    done = plain_ansible_playbook(inventory, "provision.ascend.site", *args, home=home)
    return PlainRun(done.returncode, done.stdout + done.stderr, time.monotonic() - started)


# -- looking at nodes ----------------------------------------------------------------------------------------


def node_json(cluster: Cluster, node: str, path: str) -> Any:
    """A JSON file on a node (local facts, daemon.json ...)."""
    return json.loads(sh(cluster, node, f"cat {path}"))


def entered(cluster: Cluster, node: str) -> str:
    """When the engine's unit last became active on ``node`` (changes with every start)."""
    return sh(cluster, node, f"systemctl show -P ActiveEnterTimestamp {ENGINE_UNIT}").strip()


def env_file(cluster: Cluster, node: str, path: str) -> dict[str, str]:
    lines = sh(cluster, node, f"cat {path}").splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


def untouched_state(cluster: Cluster, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """What a plan (or a stopped node) must not change: paths apply creates, sources, packages, users."""
    paths = " ".join(path for path in CREATED_BY_APPLY if path not in skip)
    trees = " ".join(
        path
        for path in ("/usr/local/Ascend", "/etc/ansible", "/etc/provision", "/var/cache/provision")
        if path not in skip
    )
    script = (
        f"for p in {paths}; do test -e $p && echo present $p || echo absent $p; done;"
        " ls -la --time-style=full-iso /etc/yum.repos.d /etc/apt/sources.list.d /etc/apt/keyrings"
        " 2>/dev/null;"
        " cat /etc/dnf/dnf.conf 2>/dev/null; getent passwd HwHiAiUser || echo no HwHiAiUser;"
        " (rpm -qa 2>/dev/null; dpkg-query -W 2>/dev/null) | sort; apt-mark showhold 2>/dev/null;"
        f" ls -lR --time-style=full-iso {trees} 2>/dev/null; true"
    )
    return {node.name: sh(cluster, node.name, script) for node in cluster.nodes}


# -- the air gap: the nodes reach nothing but the bundle's server -------------------------------------------

BUNDLE_PORT = 8080
CUT_TABLE = 100


@dataclass
class AirGap:
    bundle: Path
    url: str
    """The bundle's server, as the nodes reach it (the host's address on the cluster network)."""
    sim_mirror: str
    """The simulator's own mirror, which the nodes no longer reach."""
    server: subprocess.Popen[bytes]
    log: Path
    sim_log: Path
    sim_log_offset: int
    """The simulator's mirror's request log, and its size when the nodes were cut off."""
    build_s: float
    serve_s: float
    files: int
    archive_bytes: int
    group_vars: dict[str, Any]


def air_gap(cluster: Cluster, inventory: Path, arch: str) -> AirGap:
    """Build the site's bundle from the simulator's mirror, serve it on the host's address, point the
    group_vars at it and cut every node's routes to that address alone."""
    served = repos.served(cluster.dir)
    assert served is not None, "the cluster serves no mirror"
    sim_mirror, root = served.url, served.root
    bundle = inventory.parent / "site.tar"
    started = time.monotonic()
    built = subprocess.run(
        [
            *PROVISION,
            "bundle",
            "build",
            str(inventory),
            "-o",
            str(bundle),
            "--from-mirror",
            str(root),
            *(f"--os={node.name}={node.flavour}" for node in cluster.nodes),
            f"--arch={arch}",
            "--sign-repos",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    build_s = time.monotonic() - started
    assert built.returncode == 0, built.stdout + built.stderr
    manifest = json.loads(
        subprocess.run(["tar", "-xOf", str(bundle), "manifest.json"], capture_output=True, check=True).stdout
    )
    log = inventory.parent / "bundle-serve.log"
    started = time.monotonic()
    with log.open("wb") as out:
        server = subprocess.Popen(
            [
                *PROVISION,
                "bundle",
                "serve",
                str(bundle),
                # the simulator's site bundle is unsigned: signing is tested in tests/unit/test_bundle.py
                "--allow-unsigned",
                "--bind",
                cluster.host_ip,
                "--port",
                str(BUNDLE_PORT),
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )
    url = f"http://{cluster.host_ip}:{BUNDLE_PORT}"
    deadline = time.monotonic() + 300
    while "openeuler_repos_disable_other_sources" not in log.read_text(errors="replace"):
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.fail(f"bundle serve did not start:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)
    serve_s = time.monotonic() - started
    printed = log.read_text().split("put these in group_vars/npu_nodes.yml", 1)[1].split("\n", 1)[1]
    lines = yaml.safe_load(printed.split("\n\n", 1)[0])
    assert lines["provision_mirror_url"] == f"{url}/ascend", printed
    # The simulator's mirror variables, every one replaced by the lines the bundle's server printed.
    group_vars = yaml.safe_load((inventory.parent / "group_vars" / "npu_nodes.yml").read_text()) | lines
    assert sim_mirror not in json.dumps(group_vars), group_vars
    (inventory.parent / "group_vars" / "npu_nodes.yml").write_text(yaml.safe_dump(group_vars))
    sim_log = cluster.dir / "mirror.log"
    sim_log_offset = sim_log.stat().st_size
    for node in cluster.nodes:
        cut_off(node.netns, cluster.host_ip)
    return AirGap(
        bundle=bundle,
        url=url,
        sim_mirror=sim_mirror,
        server=server,
        log=log,
        sim_log=sim_log,
        sim_log_offset=sim_log_offset,
        build_s=build_s,
        serve_s=serve_s,
        files=len(manifest["files"]),
        archive_bytes=bundle.stat().st_size,
        group_vars=group_vars,
    )


def cut_off(netns: str, only: str) -> None:
    """Every destination but ``only`` (and the node's own addresses) unreachable from namespace ``netns``.

    Policy rules, not deleted routes: the kernel puts a link's prefix route back when the link comes up
    again (a node's reboot), never a rule. The local table (rule 0) keeps loopback and the node's own
    addresses; ``only`` is looked up in the main table; everything else in a table whose one route is
    ``unreachable``: a connection fails at once (EHOSTUNREACH), nothing leaves the node.
    """
    for argv in (
        ["route", "add", "unreachable", "default", "table", str(CUT_TABLE)],
        ["rule", "add", "to", f"{only}/32", "lookup", "main", "pref", "100"],
        ["rule", "add", "lookup", str(CUT_TABLE), "pref", "101"],
    ):
        subprocess.run(["ip", "-n", netns, *argv], check=True, capture_output=True)


def stop_air_gap(gap: AirGap) -> None:
    """Stop the bundle's server (SIGTERM: it removes its unpacked copy), the process this module started."""
    if gap.server.poll() is None:
        gap.server.terminate()
        try:
            gap.server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            gap.server.kill()
            gap.server.wait(timeout=10)


# -- the mixed cluster, converged once for the module --------------------------------------------------------


@dataclass
class Site:
    cluster: Cluster
    inventory: Path
    arch: str
    before_plan: dict[str, str] = field(default_factory=dict)
    after_plan: dict[str, str] = field(default_factory=dict)
    boots_before: dict[str, int] = field(default_factory=dict)
    boots_after_plan: dict[str, int] = field(default_factory=dict)
    boots_after: dict[str, int] = field(default_factory=dict)
    plan: Run | None = None
    first: Run | None = None
    lost_power_after_s: float | None = None
    cut_short: str = ""
    recovered: Run | None = None
    doctor: subprocess.CompletedProcess[str] | None = None
    again: Run | None = None
    verified: Run | None = None
    air_gap: AirGap | None = None
    # when each serving node's engine unit last became active: before the --full apply, after the verified
    entered_before_full: dict[str, str] = field(default_factory=dict)
    entered_after: dict[str, str] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [node.name for node in self.cluster.nodes]

    def flavour(self, node: str) -> str:
        return self.cluster.node(node).flavour

    def model(self, node: str) -> HardwareModel:
        """The node's hardware model (provision/data/hardware.yml), from the sim's npu-smi Name."""
        found = model_for_chip(self.cluster.node(node).model)
        assert found is not None, node
        return found

    def sh(self, node: str, script: str) -> str:
        return sh(self.cluster, node, script)

    def converged(self) -> tuple[Run, Run]:
        """The first apply (DRILL_NODE lost power in it, the others converged) and the second (--full);
        fails the calling test unless the first converged the others and the apply after the power came
        back converged DRILL_NODE."""
        assert self.first is not None and self.recovered is not None and self.again is not None
        healthy = [h for h, s in self.first.summary["hosts"].items() if s["failed"] == s["unreachable"] == 0]
        assert sorted(healthy) == [n for n in self.names if n != DRILL_NODE], self.first.explain()
        assert self.recovered.rc == 0, self.recovered.explain()
        return self.first, self.again

    def converging(self, node: str) -> Run:
        """The apply whose site.yml converged ``node`` from fresh: the first, or for DRILL_NODE the one after
        its power came back."""
        run = self.recovered if node == DRILL_NODE else self.first
        assert run is not None
        return run

    def planned(self) -> Run:
        assert self.plan is not None
        return self.plan


def serving_settings() -> dict[str, Any]:
    settings: dict[str, Any] = {
        "npu_pools_list": POOLS,
        # The engine from its venv, as the service mode of serving/test_serve.py (container: the default).
        "vllm_serve_mode": "service",
        "vllm_serve_venv": str(engine.engine_venv()),
        "vllm_serve_api_key": API_KEY,
        # A killed engine stays down (auto-restart) long enough for `serve status` to see it.
        "vllm_serve_restart_sec": 60,
    }
    settings.update(engine_profile_vars())  # the rig's profile, its model in the engine cache
    return settings


@pytest.fixture(scope="module")
def site(
    request: pytest.FixtureRequest,
    sim_host: None,
    sim_cluster_module_factory: ClusterFactory,
    tmp_path_factory: pytest.TempPathFactory,
) -> Site:
    """The mixed cluster: plan, apply (DRILL_NODE loses power in it), apply once its power is back, doctor on
    it, apply again with --full, apply (verified); site.yml, ``provision --json``, timed and recorded."""
    engine.prepare()  # cached: instant after the first time
    started = time.monotonic()
    cluster = sim_cluster_module_factory(
        "site", nodes=3, os_list=SITE_OS, npus=NPUS, binds=engine_binds(), model_list=SITE_MODELS
    )
    up_s = time.monotonic() - started
    inventory = copy_inventory(
        cluster, tmp_path_factory.mktemp("site"), cluster_vars(cluster, **serving_settings())
    )
    for name in SERVING:
        host_vars(inventory, name, {"npu_pools_list": SERVING_POOLS})
    state = Site(cluster, inventory, sh(cluster, "node1", "uname -m").strip())
    state.air_gap = gap = air_gap(cluster, inventory, state.arch)
    request.addfinalizer(lambda: stop_air_gap(gap))  # before the cluster's teardown (registered earlier)
    # and at exit: pytest runs no finalizer of a fixture whose setup a SIGTERM (KeyboardInterrupt) cut short,
    # and the server, in its own session, would keep the port for the next run
    atexit.register(stop_air_gap, gap)

    state.before_plan, state.boots_before = untouched_state(cluster), cluster.boots()
    state.plan = provision("plan", inventory)
    state.after_plan, state.boots_after_plan = untouched_state(cluster), cluster.boots()
    # The first apply is also the power drill: DRILL_NODE loses power in the middle of its driver install.
    drill = cluster.node(DRILL_NODE)
    faults.plant(drill, {"installer_slow": {"driver": STAGE_S}})
    state.first, state.lost_power_after_s = apply_losing_power(cluster, inventory, DRILL_NODE)
    faults.clear(drill, ["installer_slow"])
    cluster.power(DRILL_NODE, "on")
    state.cut_short = what_the_cut_left(cluster, DRILL_NODE)
    state.recovered = provision("apply", inventory)  # converges DRILL_NODE, verifies the others
    state.doctor = provision_cli(
        "doctor", str(inventory), "--limit", DRILL_NODE, runs=inventory.parent / "runs"
    )
    # --full: every node runs all of site.yml again, the roles' own idempotence (no record skips a node).
    state.entered_before_full = {name: entered(cluster, name) for name in SERVING}
    state.again = provision("apply", inventory, "--full")
    state.verified = provision("apply", inventory)  # every node as its record says: site.yml runs nowhere
    state.entered_after = {name: entered(cluster, name) for name in SERVING}
    state.boots_after = cluster.boots()
    print(
        f"\nsite: sim up {up_s:.1f} s, bundle build {gap.build_s:.1f} s ({gap.files} files,"
        f" {gap.archive_bytes / 2**20:.1f} MiB), bundle serve ready {gap.serve_s:.1f} s,"
        f" plan {state.plan.seconds:.1f} s,"
        f" first apply {state.first.seconds:.1f} s ({DRILL_NODE} lost power {state.lost_power_after_s:.1f} s"
        f" into it), apply after power on {state.recovered.seconds:.1f} s,"
        f" second apply (--full) {state.again.seconds:.1f} s,"
        f" third apply (verified) {state.verified.seconds:.1f} s"
    )
    return state


def apply_losing_power(cluster: Cluster, inventory: Path, node: str) -> tuple[Run, float]:
    """``provision apply INVENTORY --json`` during which ``node`` loses power (``provision sim power NODE
    off --hard``) once its driver installer runs, in its 40 % stage; the run, and how far into it that was."""
    runs = inventory.parent / "runs"
    env = {**os.environ, "CI": "1", "PROVISION_RUNS_DIR": str(runs)}
    out, err = inventory.parent / "drill.stdout", inventory.parent / "drill.stderr"
    # its log at 40 % and the installer's process alive (python3 -m ascendsim install PACKAGE FLAGS; the
    # brackets keep this probe's own command line out)
    probe = (
        f"grep -qs 'upgradePercentage:40%' {INSTALL_LOG} && for p in /proc/[0-9]*;"
        " do { tr '\\0' ' ' < $p/cmdline; } 2>/dev/null; echo; done | grep -q 'ascends[i]m install'"
    )
    started = time.monotonic()
    with out.open("w") as stdout, err.open("w") as stderr:
        apply = subprocess.Popen(
            [*PROVISION, "apply", str(inventory), "--json"], stdout=stdout, stderr=stderr, text=True, env=env
        )
        try:
            while cluster.exec(node, ["sh", "-c", probe], timeout=30).returncode != 0:
                if apply.poll() is not None or time.monotonic() - started > 1200:
                    pytest.fail(
                        f"{node}'s driver installer never reached its 40 % stage (apply rc {apply.poll()}):\n"
                        + err.read_text()[-3000:]
                    )
                time.sleep(1)
            lost = time.monotonic() - started
            cluster.power(node, "off", hard=True)
            apply.wait(timeout=1800)
        finally:
            if apply.poll() is None:
                apply.kill()
                apply.wait()
    try:
        summary = json.loads(out.read_text())
    except ValueError:
        pytest.fail(f"provision apply printed no JSON (rc {apply.returncode}):\n{err.read_text()[-5000:]}")
    return Run(apply.returncode, summary, err.read_text(), time.monotonic() - started), lost


def what_the_cut_left(cluster: Cluster, node: str) -> str:
    """What a half-done driver install left on ``node`` (read once its power is back)."""
    return sh(
        cluster,
        node,
        "test -d /usr/local/Ascend/driver/lib64 && echo driver files present;"
        " test -e /usr/local/Ascend/driver/version.info && echo version.info present || echo no version.info;"
        " grep -h '^Driver_Install_Status=' /etc/ascend_install.info 2>/dev/null"
        " || echo no Driver_Install_Status;"
        f" grep -o 'upgradePercentage:[0-9]*%' {INSTALL_LOG} | tail -n 1;"
        f" grep -c 'Driver package installed successfully' {INSTALL_LOG} || true",
    )


# -- plan ----------------------------------------------------------------------------------------------------


def test_plan_shows_each_hosts_sources_with_diffs_and_changes_nothing(site: Site) -> None:
    plan = site.planned()
    assert plan.summary["check"] is True
    assert site.after_plan == site.before_plan, "plan changed a node"
    assert site.boots_after_plan == site.boots_before, "plan rebooted a node"
    for name in site.names:
        assert all(f"absent {path}" in site.after_plan[name] for path in CREATED_BY_APPLY), name
        assert "no HwHiAiUser" in site.after_plan[name]

    mirror = yaml.safe_load((site.inventory.parent / "group_vars" / "npu_nodes.yml").read_text())
    assert site.air_gap is not None and mirror["openeuler_repos_mirror_url"].startswith(site.air_gap.url)
    would_install = plan.results(PACKAGES_TASK)
    for name in site.names:
        tasks = plan.tasks(name)
        assert PACKAGES_TASK in tasks, tasks
        packages = would_install[name]["msg"].removeprefix("would install: ").split(", ")
        kernel = site.sh(name, "uname -r").strip()
        if site.flavour(name).startswith("openeuler"):
            release = f"openEuler-{site.flavour(name).removeprefix('openeuler-')}-LTS-SP1"
            repo = plan.diff(name, "openeuler_repos : Write the openEuler repositories")
            assert f"+baseurl={mirror['openeuler_repos_mirror_url']}/{release}/OS/$basearch/" in repo, repo
            assert "+gpgcheck=1" in repo
            hold = plan.diff(name, "openeuler_repos : Exclude kernel packages from dnf transactions")
            assert "+exclude=kernel*" in hold
            assert {"dkms", "gcc", "make", "pciutils", "net-tools", "python3-devel"} <= set(packages)
            assert {f"kernel-devel-{kernel}", f"kernel-headers-{kernel}"} <= set(packages)
        else:
            source = plan.diff(name, "openeuler_repos : Write the Ubuntu source")
            assert f"+URIs: {mirror['openeuler_repos_apt_mirror_url']}" in source, source
            assert "+Suites: jammy jammy-updates jammy-security" in source
            assert {"dkms", "gcc", "make", "pciutils", "net-tools", "python3-dev"} <= set(packages)
            assert f"linux-headers-{kernel}" in packages


def test_plan_of_a_fresh_site_lists_installers_reboots_and_pools(site: Site) -> None:
    plan = site.planned()
    assert plan.rc == 0, plan.explain()
    arch = site.arch
    for name in site.names:
        tasks = plan.tasks(name)
        model = site.model(name)  # each node fetches its own line's files (the line its PCI bus shows)
        assert [task for task in tasks if task.startswith("ascend_driver : Would run ")] == [
            f"ascend_driver : Would run {model.driver_file(DRIVER, arch)}",
            f"ascend_driver : Would run {model.firmware_file(FIRMWARE)}",
        ], tasks
        assert REBOOT in tasks
        cann_runs = [task for task in tasks if task.startswith("cann : Would run ")]
        assert cann_runs == [
            f"cann : Would run Ascend-cann-toolkit_{CANN}_linux-{arch}.run",
            f"cann : Would run {model.cann_ops_file(CANN, arch, new_layout=True)}",
            f"cann : Would run Ascend-cann-nnal_{NNAL}_linux-{arch}.run",
        ], (name, cann_runs)
        assert "npu_pools : Write one environment file per pool" in tasks
    assert "vllm_serve : Write the systemd units" in plan.tasks("node1")


def test_plan_names_the_packages_it_would_install(site: Site) -> None:
    plan = site.planned()
    for name in site.names:
        shown = json.dumps(plan.changes(name))
        assert "pciutils" in shown and "dkms" in shown, shown[:2000]


# -- apply, apply again -------------------------------------------------------------------------------------


def test_apply_converges_every_host_then_a_second_apply_changes_nothing(site: Site) -> None:
    first, again = site.converged()
    for name in site.names:  # DRILL_NODE: converged by the apply after its power came back
        stats = site.converging(name).summary["hosts"][name]
        assert stats["changed"] > 0 and stats["failed"] == stats["unreachable"] == 0, (name, stats)
    assert sorted(first.summary["hosts"]) == site.names
    assert again.rc == 0, again.explain()
    assert again.changed() == dict.fromkeys(site.names, 0), again.summary["changes"]
    # Driver and firmware together cost one reboot per node (DRILL_NODE: and its boot when the power came
    # back); the second apply reboots nothing.
    assert site.boots_after == {
        name: count + (2 if name == DRILL_NODE else 1) for name, count in site.boots_before.items()
    }
    # Both applies ran site.yml on every node and recorded it: the first found no record, the second --full.
    assert first.summary["drift"] == {name: NO_RECORD for name in site.names}
    assert first.summary["recorded"] == [name for name in site.names if name != DRILL_NODE]
    assert again.summary["recorded"] == site.names
    assert again.summary["verified"] == again.summary["drift"] == {}
    # converged: the --full apply and the verified one after it restarted no engine
    assert site.entered_after == site.entered_before_full, "an apply of a converged site restarted an engine"
    print(f"\nsite.yml on 3 nodes: first apply {first.seconds:.1f} s, second (no-op) {again.seconds:.1f} s")


def test_a_node_losing_power_in_its_driver_install_is_unreachable_then_converged_and_doctor_says_ok(
    site: Site,
) -> None:
    """DRILL_NODE loses power (``sim power off --hard``) while its driver .run is in its 40 % stage: that
    apply names it unreachable and converges the other two (records, endpoint). The power back, the node
    holds a half-done install (driver files, no version.info, no Driver_Install_Status); the next apply
    installs the driver again and converges it (the others verified), and doctor says it is OK."""
    first, recovered = site.first, site.recovered
    assert first is not None and recovered is not None and site.lost_power_after_s is not None
    others = [name for name in site.names if name != DRILL_NODE]
    assert first.rc == 4, first.explain()  # unreachable, the others converged: ansible-playbook's 4
    assert first.summary["converged"] == others and list(first.summary["unreachable"]) == [DRILL_NODE]
    stats = first.summary["hosts"]
    assert stats[DRILL_NODE]["unreachable"] == 1 and stats[DRILL_NODE]["failed"] == 0, stats
    assert all(stats[name]["failed"] == stats[name]["unreachable"] == 0 for name in others), stats
    (lost,) = [f for f in first.summary["failures"] if f["host"] == DRILL_NODE]
    drill_model = site.model(DRILL_NODE)
    driver_run = f"{DRIVER_RUN_TASK}{drill_model.driver_file(DRIVER, site.arch)}"
    assert lost["unreachable"] is True and lost["task"] == driver_run, lost
    assert first.summary["recorded"] == others
    endpoints = [(e["host"], e["pool"], e["ready"]) for e in first.summary["endpoints"]]
    assert endpoints == [(name, "smol", True) for name in SERVING], endpoints
    reports = {host: res.get("msg") for host, res in first.results(REPORT_TASK).items()}
    assert reports == dict.fromkeys(others, REPORT)  # DRILL_NODE never reached the stack report

    # What the power loss left: the installer's first stages, not its version.info nor its completion.
    assert site.cut_short.splitlines() == [
        "driver files present",
        "no version.info",
        "no Driver_Install_Status",
        "upgradePercentage:40%",
        "0",
    ], site.cut_short

    assert recovered.rc == 0, recovered.explain()
    assert sorted(recovered.summary["verified"]) == others
    assert recovered.summary["drift"] == {DRILL_NODE: NO_RECORD}
    assert recovered.summary["recorded"] == [DRILL_NODE]
    driver_runs = [c["task"] for c in recovered.changes(DRILL_NODE) if c["task"].startswith(DRIVER_RUN_TASK)]
    assert driver_runs == [driver_run, f"{DRIVER_RUN_TASK}{drill_model.firmware_file(FIRMWARE)}"]
    version = site.sh(DRILL_NODE, "cat /usr/local/Ascend/driver/version.info")
    assert parse_driver_version_info(version).version == DRIVER
    install_info = site.sh(DRILL_NODE, "cat /etc/ascend_install.info").splitlines()
    assert "Driver_Install_Status=complete" in install_info, install_info

    doctor = site.doctor
    assert doctor is not None and doctor.returncode == 0, doctor and doctor.stdout + doctor.stderr
    assert doctor.stdout.splitlines()[-2:] == [f"{DRILL_NODE}  OK", "1/1 node(s) OK"], doctor.stdout
    print(
        f"\npower drill: {DRILL_NODE} lost power {site.lost_power_after_s:.1f} s into the first apply"
        f" ({first.seconds:.1f} s); the apply after power on {recovered.seconds:.1f} s"
    )


def test_a_third_apply_verifies_each_node_against_its_record_and_runs_no_role(site: Site) -> None:
    site.converged()
    verified = site.verified
    assert verified is not None and verified.rc == 0, verified and verified.explain()
    assert sorted(verified.summary["verified"]) == site.names and verified.summary["drift"] == {}
    assert verified.changed() == dict.fromkeys(site.names, 0) and verified.summary["recorded"] == []
    assert verified.summary["playbook"] == "converged"
    # One comparison per node (which reports the stack), the health gate where a pool serves; no role task.
    events = [json.loads(p.read_text()) for p in verified.run_dir.glob("artifacts/*/job_events/*.json")]
    roles = {e["event_data"].get("role") for e in events if e.get("event") == "runner_on_ok"}
    assert roles == {None}, roles
    compared = verified.results("Compare the node with its record")
    assert sorted(compared) == site.names
    for name in site.names:
        watched = compared[name]["watched"]
        assert watched["paths"] > 20 and watched["units"] >= 1 and watched["packages"] >= 1, (name, watched)
    reports = {host: res["stack"]["line"] for host, res in compared.items()}
    assert reports == dict.fromkeys(site.names, REPORT)
    assert {host: res["provision_info"] for host, res in compared.items()} == reports
    assert verified.results(REPORT_TASK) == {}  # no task of its own any more
    endpoints = [(e["host"], e["pool"], e["ready"]) for e in verified.summary["endpoints"]]
    assert endpoints == [(name, "smol", True) for name in SERVING], endpoints
    record = node_json(site.cluster, "node2", "/var/lib/provision/converged.json")
    assert (
        "/etc/docker/daemon.json" in record["keys"]["paths"] and "docker.service" in record["keys"]["units"]
    )
    assert {"docker.io", "docker-engine"} & set(record["keys"]["packages"]), record["keys"]["packages"]
    assert record["npus"]["driver_version"] == DRIVER and set(record["npus"]["health"].values()) == {"OK"}
    assert site.sh("node2", "stat -c %a /var/lib/provision/converged.json").strip() == "600"


def test_drift_on_two_nodes_runs_site_there_only_and_puts_it_back(site: Site) -> None:
    """node2's docker is stopped and disabled by hand and its engine's unit disabled (left running), node3
    loses a pool file: the next apply names both, converges those two nodes with site.yml (the engine's unit
    enabled again, without a restart), verifies node1 (and its endpoint) without running a role."""
    site.converged()
    pool_file = f"/etc/provision/pools/{POOLS[0]['name']}.env"
    site.sh("node2", "systemctl disable --now docker.service docker.socket")
    site.sh("node2", f"systemctl disable {ENGINE_UNIT}")
    started = entered(site.cluster, "node2")
    site.sh("node3", f"rm {pool_file}")
    fixed = provision("apply", site.inventory)
    assert fixed.rc == 0, fixed.explain()
    assert list(fixed.summary["verified"]) == ["node1"]
    drift = fixed.summary["drift"]
    assert sorted(drift) == ["node2", "node3"]
    assert any(r.startswith("unit docker.service: ActiveState active -> inactive") for r in drift["node2"])
    assert f"unit {ENGINE_UNIT}: UnitFileState enabled -> disabled" in drift["node2"], drift["node2"]
    assert f"{pool_file}: was file, now absent" in drift["node3"], drift["node3"]
    assert fixed.summary["recorded"] == ["node2", "node3"]
    assert sorted(fixed.summary["hosts"]) == site.names
    assert site.sh("node2", "systemctl is-active docker; systemctl is-enabled docker").split() == [
        "active",
        "enabled",
    ]
    assert site.sh("node2", f"systemctl is-enabled {ENGINE_UNIT}").strip() == "enabled"
    assert entered(site.cluster, "node2") == started, "enabling the unit again restarted the engine"
    assert env_file(site.cluster, "node3", pool_file)["NPU_POOL_PORT"] == str(POOLS[0]["port"])
    assert [e["host"] for e in fixed.summary["endpoints"]] == SERVING
    again = provision("apply", site.inventory)
    assert again.rc == 0 and sorted(again.summary["verified"]) == site.names, again.explain()
    print(f"\ndrift on 2 of 3 nodes: apply {fixed.seconds:.1f} s, then all verified {again.seconds:.1f} s")


# -- the air gap ---------------------------------------------------------------------------------------------

FETCH = (
    "import sys, urllib.request\n"
    "try:\n"
    "    sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())\n"
    "except OSError as exc:\n"
    "    sys.exit(f'FAILED {exc}')\n"
)


def fetch_from(site: Site, node: str, url: str) -> subprocess.CompletedProcess[str]:
    return site.cluster.exec(node, ["python3", "-c", FETCH, url], timeout=60)


def test_air_gap_the_nodes_reach_the_bundles_server_and_nothing_else(site: Site) -> None:
    """After every apply of the module (and the reboots in them), each node still reaches the bundle's
    server and nothing else: not the simulator's mirror, not another node."""
    site.converged()
    gap = site.air_gap
    assert gap is not None
    sums = "/ascend/sha256sums.txt"
    for name in site.names:
        got = fetch_from(site, name, gap.url + sums)
        assert got.returncode == 0, (name, got.stdout, got.stderr)
        assert (
            got.stdout
            == subprocess.run(
                ["tar", "-xOf", str(gap.bundle), sums.lstrip("/")], capture_output=True, text=True, check=True
            ).stdout
        )
        refused = fetch_from(site, name, gap.sim_mirror + sums)
        assert refused.returncode != 0 and "No route to host" in refused.stderr, (name, refused.stderr)
        other = next(node for node in site.cluster.nodes if node.name != name)
        refused = fetch_from(site, name, f"http://{other.ip}:8000/health")
        assert refused.returncode != 0 and "No route to host" in refused.stderr, (name, refused.stderr)
    # Since the cut, no node asked the simulator's mirror for anything; each fetched from the bundle.
    with gap.sim_log.open("rb") as log:
        log.seek(gap.sim_log_offset)
        since = log.read().decode(errors="replace")
    ips = {node.name: node.ip for node in site.cluster.nodes}
    assert not [line for line in since.splitlines() if line.split(" ", 1)[0] in ips.values()], since[-2000:]
    served = gap.log.read_text(errors="replace").splitlines()
    for name, ip in ips.items():
        asked = [line.split('"')[1] for line in served if line.startswith(f"{ip} ") and '"GET ' in line]
        driver = site.model(name).driver_file(DRIVER, site.arch)  # its own NPU line's driver
        assert any(f"GET /ascend/{driver} " in a for a in asked), (name, driver, asked)
        if site.flavour(name).startswith("openeuler"):
            assert any(a.endswith("/repodata/repomd.xml HTTP/1.1") for a in asked), (name, asked)
        else:  # apt checks the bundle's own signature (InRelease) with the bundle's key
            assert any("/ubuntu/dists/jammy/InRelease" in a for a in asked), (name, asked)
    print(
        f"\nair gap: bundle {gap.files} files, {gap.archive_bytes / 2**20:.1f} MiB,"
        f" built in {gap.build_s:.1f} s, served after {gap.serve_s:.1f} s; {len(served)} lines of requests"
    )


def test_air_gap_apt_trusts_the_bundles_key(site: Site) -> None:
    """The Ubuntu node's source names the bundle's server and is signed by the bundle's own key (the
    simulator's mirror key is not in the bundle): its apt update succeeded only with that key."""
    site.converged()
    gap = site.air_gap
    assert gap is not None
    key = subprocess.run(
        ["tar", "-xOf", str(gap.bundle), "ubuntu/provision-bundle-archive-keyring.asc"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for name in site.names:
        if not site.flavour(name).startswith("ubuntu"):
            continue
        source = site.sh(name, "cat /etc/apt/sources.list.d/provision-ubuntu.sources")
        assert f"URIs: {gap.url}/ubuntu" in source.splitlines(), source
        assert site.sh(name, "cat /etc/apt/keyrings/provision-ubuntu.asc") == key
        site.sh(name, "apt-get update -q")  # against the bundle's server alone, its signature checked


# -- the nodes -----------------------------------------------------------------------------------------------


def test_node_repos_prerequisites_and_kernel_hold(site: Site) -> None:
    site.converged()
    for name in site.names:
        flavour = site.flavour(name)
        if flavour.startswith("openeuler"):
            release = f"openEuler-{flavour.removeprefix('openeuler-')}-LTS-SP1"
            # dnf resolves $basearch to the node's arch: the repos of its release and arch.
            baseurls = site.sh(name, "dnf -q repoinfo 2>/dev/null | grep -i '^repo-baseurl'")
            for section in ("OS", "everything", "update", "EPOL/main"):
                assert f"/openeuler/{release}/{section}/{site.arch}/" in baseurls, baseurls
            site.sh(name, "rpm -q dkms gcc make pciutils net-tools python3-devel")
            site.sh(name, "rpm -q kernel-devel-$(uname -r) kernel-headers-$(uname -r)")
            assert "exclude=kernel*" in site.sh(name, "cat /etc/dnf/dnf.conf").splitlines()
        else:
            source = site.sh(name, "cat /etc/apt/sources.list.d/provision-ubuntu.sources")
            assert "Suites: jammy jammy-updates jammy-security" in source.splitlines()
            arch = site.sh(name, "dpkg --print-architecture").strip()
            lists = site.sh(name, "ls /var/lib/apt/lists")
            assert f"ubuntu_dists_jammy_main_binary-{arch}_Packages" in lists, lists
            status = site.sh(name, "dpkg -s dkms gcc make pciutils net-tools python3-dev")
            assert status.count("Status: install ok installed") == 6
            held = site.sh(name, "apt-mark showhold").split()
            assert f"linux-headers-{site.sh(name, 'uname -r').strip()}" in held, held
        site.sh(name, "command -v lspci ifconfig dkms gcc make")


def test_node_driver_firmware_device_nodes_and_npu_health(site: Site) -> None:
    site.converged()
    for name in site.names:
        assert site.sh(name, "id -nu HwHiAiUser; id -ng HwHiAiUser").split() == ["HwHiAiUser"] * 2
        driver = parse_driver_version_info(site.sh(name, "cat /usr/local/Ascend/driver/version.info"))
        firmware = parse_firmware_version_info(site.sh(name, "cat /usr/local/Ascend/firmware/version.info"))
        assert (driver.version, firmware.version) == (DRIVER, FIRMWARE), name

        devices = [f"/dev/davinci{i}" for i in range(NPUS)]
        devices += ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]
        listed = site.sh(name, "stat -c '%n|%F|%U' " + " ".join(devices)).splitlines()
        assert listed == [f"{device}|character special file|HwHiAiUser" for device in devices], name

        model = site.model(name)
        info = parse_npu_smi_info(site.sh(name, "npu-smi info"))
        assert info.npu_ids == tuple(range(NPUS // model.chips_per_npu)), name
        assert info.all_healthy and {npu.health for npu in info.npus} == {"OK"}, name
        assert info.driver_version == DRIVER, name
        board = parse_npu_smi_board(site.sh(name, "npu-smi info -t board -i 0"))
        assert (board.software_version, board.firmware_version, board.compatible) == (DRIVER, FIRMWARE, True)


def test_node_of_each_hardware_model_shows_its_configuration_to_the_tools(site: Site) -> None:
    """The A2, the A3 and the 300I Duo node: what lspci, npu-smi (table, board, usages) print parses to the
    model of provision/data/hardware.yml the node was made as, and the facts the roles read name its line."""
    site.converged()
    lines = {}
    for name in site.names:
        model = site.model(name)
        chip_name = site.cluster.node(name).model
        spec = model.chips[chip_name]
        npus = facts_from_probe(site.sh(name, PROBE_SCRIPT))["ascend_npus"]
        assert (npus["count"], npus["hardware_model"], npus["line"]) == (
            NPUS,
            model.name,
            model.base_image_tag,
        )
        assert npus["pci_device_ids"] == [model.pci_device_id], name
        lines[name] = npus["line"]
        info = parse_npu_smi_info(site.sh(name, "npu-smi info"))
        per = model.chips_per_npu
        assert [(n.id, n.chip_id, n.name) for n in info.npus] == [
            (chip // per, chip % per, chip_name) for chip in range(NPUS)
        ], name
        if spec.hbm_mb:
            assert {n.hbm_total_mb for n in info.npus} == {spec.hbm_mb}, name
        else:  # the 300I Duo has DDR, no HBM: npu-smi's Memory-Usage column
            assert {n.hbm_total_mb for n in info.npus} == {None}, name
            assert info.npus[0].memory_total_mb == spec.ddr_mb, name
        board = parse_npu_smi_board(site.sh(name, "npu-smi info -t board -i 1"))
        assert (board.npu_id, board.chip_count, board.pci_device_id) == (1, per, model.pci_id), name
        usages = parse_npu_smi_usages(site.sh(name, "npu-smi info -t usages -i 1"))
        assert [u.chip_id for u in usages.chips] == list(range(per)), name
        # the CANN operator package of its own line (Ascend-cann-910b-ops / -A3-ops / -310p-ops)
        ops = model.cann_ops_file(CANN, site.arch, new_layout=True).split("_")[0]
        assert f"{ops} package installed successfully" in site.sh(name, f"cat {INSTALL_LOG}"), name
    assert lines == {"node1": "910b", "node2": "a3", "node3": "310p"}


def test_node_cann_environment_and_version(site: Site) -> None:
    site.converged()
    for name in site.names:
        site.sh(name, "test -f /usr/local/Ascend/cann/set_env.sh")
        info = site.sh(name, f"cat /usr/local/Ascend/cann/{site.arch}-linux/ascend_toolkit_install.info")
        assert parse_cann_install_info(info).version == CANN, name
        login = site.sh(name, "bash -lc 'echo $ASCEND_TOOLKIT_HOME'").strip()
        assert login == "/usr/local/Ascend/cann", f"{name}: login shells source set_env.sh"


def test_node_local_facts_record_the_locked_stack(site: Site) -> None:
    site.converged()
    for name in site.names:
        assert site.sh(name, "ls /etc/ansible/facts.d").split() == [
            "ascend.fact",
            "cann.fact",
            "container_runtime.fact",
        ]
        ascend = node_json(site.cluster, name, "/etc/ansible/facts.d/ascend.fact")
        assert (ascend["driver"]["version"], ascend["firmware"]["version"]) == (DRIVER, FIRMWARE)
        assert (ascend["user"], ascend["group"]) == ("HwHiAiUser", "HwHiAiUser")
        cann = node_json(site.cluster, name, "/etc/ansible/facts.d/cann.fact")
        assert (cann["toolkit"], cann["ops"], cann["nnal"]) == (CANN, CANN, NNAL)
        assert cann["set_env"] == "/usr/local/Ascend/cann/set_env.sh"


def test_node_pool_files(site: Site) -> None:
    site.converged()
    for name in site.names:
        pools = SERVING_POOLS if name in SERVING else POOLS
        listed = site.sh(name, "ls /etc/provision/pools").split()
        assert listed == sorted(f"{pool['name']}.env" for pool in pools), name
        for pool in pools:
            values = env_file(site.cluster, name, f"/etc/provision/pools/{pool['name']}.env")
            devices = ",".join(str(device) for device in pool["devices"])
            assert values["ASCEND_VISIBLE_DEVICES"] == devices, (name, pool)
            assert values["ASCEND_RT_VISIBLE_DEVICES"] == devices, (name, pool)
            assert values["NPU_POOL_PORT"] == str(pool["port"]), (name, pool)
            assert values["NPU_POOL_PROFILE"] == str(pool.get("profile", "")), (name, pool)


def test_serving_endpoint_answers_a_completion(site: Site) -> None:
    """Service mode (the engine from its venv): each serving node answers a completion on its management
    address, its unit enabled; the API key is in a root-only file, off every command line, and required."""
    site.converged()
    for name in SERVING:  # openEuler and Ubuntu, converged from the bundle alone
        node = site.cluster.node(name)
        assert complete(f"http://{node.ip}:8000", api_key=API_KEY).strip(), f"{name}: an empty completion"
        assert site.sh(name, f"systemctl is-active {ENGINE_UNIT}").strip() == "active"
        assert site.sh(name, f"systemctl is-enabled {ENGINE_UNIT}").strip() == "enabled", "survives a reboot"
        args = site.sh(name, f"cat {ENGINE_ARGS}").splitlines()
        assert args[:3] == [f"{engine.engine_python()}", "-m", "vllm.entrypoints.openai.api_server"], args
        assert args[args.index("--port") + 1] == "8000"
        assert args[args.index("--host") + 1] == node.ip, "the default bind: the management address"
        secret = site.sh(name, "stat -c '%a %U' /etc/provision/serve/smol/secret.env").split()
        assert secret == ["600", "root"]
        processes = site.sh(name, "ps -eo args")
        assert API_KEY not in processes and API_KEY not in "\n".join(args), "the key stays off command lines"
    with pytest.raises(urllib.error.HTTPError, match="401"):  # no key, no answer
        urllib.request.urlopen(f"http://{site.cluster.node('node1').ip}:8000/v1/models", timeout=10)
    for name in ("node3",):  # its pools name no profile: no instance
        units = site.sh(name, "ls /etc/systemd/system | grep '^vllm-' || true").split()
        assert units == [], name
    shown = provision_cli("serve", "status", str(site.inventory), runs=site.inventory.parent / "runs")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert shown.stdout.splitlines()[-1] == "2/2 ready on 2 host(s)", shown.stdout


def test_stack_report_matches_the_lock(site: Site) -> None:
    _, again = site.converged()
    converging = {name: site.converging(name).results(REPORT_TASK)[name].get("msg") for name in site.names}
    assert converging == dict.fromkeys(site.names, REPORT)
    reports = {host: res.get("msg") for host, res in again.results(REPORT_TASK).items()}
    assert reports == dict.fromkeys(site.names, REPORT)


# -- container runtime (daemon.json) -------------------------------------------------------------------------
# Tests of the container_runtime role's result on the converged nodes belong here, named
# test_container_runtime_*: they take ``site`` (``site.converged()``, ``site.sh(node, script)``,
# ``site.names``) and read daemon.json with ``node_json(site.cluster, node, "/etc/docker/daemon.json")``.

CONTAINER_RUNTIME = "/usr/local/Ascend/Ascend-Docker-Runtime/ascend-docker-runtime"
CONTAINER_VERIFY = "container_runtime : Check each container saw exactly its pool's NPUs"


def test_container_runtime_daemon_json_engine_and_each_pools_devices(site: Site) -> None:
    _, again = site.converged()
    image = yaml.safe_load(site.cluster.group_vars_path.read_text())["container_runtime_verify_image"]
    for name in site.names:
        verified = site.converging(name).results(CONTAINER_VERIFY)
        daemon = node_json(site.cluster, name, "/etc/docker/daemon.json")
        assert daemon == {
            "runtimes": {"ascend": {"path": CONTAINER_RUNTIME, "runtimeArgs": []}},
            "default-runtime": "ascend",
        }, name
        assert site.sh(name, "systemctl is-active docker; systemctl is-enabled docker").split() == [
            "active",
            "enabled",
        ], name
        fact = node_json(site.cluster, name, "/etc/ansible/facts.d/container_runtime.fact")
        assert fact["ascend_docker_runtime"] == str(LOCK["docker_runtime"]), name
        # the role's own check ran in the apply that converged the node (one container per pool) and not
        # in the no-op one
        pools = SERVING_POOLS if name in SERVING else POOLS
        messages = [item.get("msg") for item in verified[name].get("results", [])]
        assert messages == [
            f"{name}: pool {pool['name']}: container sees exactly "
            + ", ".join(f"/dev/davinci{d}" for d in pool["devices"])
            for pool in pools
        ], (name, messages)
        assert name not in again.results(CONTAINER_VERIFY), name
        for pool in pools:
            devices = ",".join(str(d) for d in pool["devices"])
            listing = site.sh(
                name, f"docker run --rm --network none -e ASCEND_VISIBLE_DEVICES={devices} {image} ls /dev"
            )
            seen = sorted(n for n in listing.split() if n.startswith("davinci") and n[7:].isdigit())
            assert seen == sorted(f"davinci{d}" for d in pool["devices"]), (name, pool, seen)


def test_serve_status_reads_a_killed_engine_as_failed_with_the_journal(site: Site) -> None:
    """The last test on ``site``: node2's engine is left down (it restarts vllm_serve_restart_sec later)."""
    site.converged()
    site.sh("node2", f"systemctl kill --signal=SIGKILL {ENGINE_UNIT}")
    runs = site.inventory.parent / "runs"

    def status(*args: str) -> subprocess.CompletedProcess[str]:
        return provision_cli("serve", "status", str(site.inventory), *args, runs=runs)

    urls = {name: f"http://{site.cluster.node(name).ip}:8000" for name in SERVING}
    ended = "Main process exited, code=killed, status=9/KILL"
    assert_status_reads_node2_killed(status, ENGINE_UNIT, urls, ended)


# -- drills: three faulty nodes and a healthy one, plain ansible-playbook ------------------------------------


def test_faulty_nodes_stop_before_any_change_while_plain_ansible_playbook_converges_the_healthy_one(
    sim_cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    """node1 is fresh and healthy; node2 has a wrong pinned checksum for the driver, node3 manages its own
    packages and lacks the prerequisites, node4 runs an older driver with an unhealthy NPU. One plain
    ``ansible-playbook site.yml``: node1 converges through every stage, the other three stop at the driver's
    pre-change gate with what and how to fix, changing nothing."""
    npus = 2
    cluster = sim_cluster_factory(
        "site-bad",
        nodes=4,
        os_list="ubuntu-22.04,openeuler-22.03,openeuler-24.03,ubuntu-22.04",
        npus=npus,
    )
    inventory = copy_inventory(cluster, tmp_path, cluster_vars(cluster))
    arch = sh(cluster, "node1", "uname -m").strip()
    driver_file = f"Ascend-hdk-910b-npu-driver_{DRIVER}_linux-{arch}.run"

    # Before the run: node2-4 have their sources (node3 without the packages); node4 the older driver.
    host_vars(inventory, "node3", {"openeuler_repos_install_packages": False})
    prepared = provision("apply", inventory, "-p", "repos", "--limit", "node2,node3,node4")
    assert prepared.rc == 0, prepared.explain()
    host_vars(inventory, "node4", DRILL_OLD)
    old = provision("apply", inventory, "-p", "driver", "--limit", "node4")
    assert old.rc == 0, old.explain()
    host_vars(inventory, "node4", None)
    hardware.set_faults(cluster.node("node4").root, {"npu_health": {"1": "Critical"}})
    host_vars(inventory, "node2", {"ascend_driver_checksums": {driver_file: "0" * 64}})
    faulty = ("node2", "node3", "node4")
    # The staging folder is where the .run files are verified, before anything runs as root: node2 may
    # fetch into it (its firmware file checks out, its driver file does not); it is compared apart.
    staging = "/var/cache/provision"
    before, boots_before = untouched_state(cluster, skip=(staging,)), cluster.boots()

    run = ansible_playbook(inventory, home=tmp_path)
    assert run.rc == 2, run.tail()  # ansible-playbook: a host failed
    recap = run.recap()
    assert recap["node1"]["failed"] == recap["node1"]["unreachable"] == 0, run.tail()
    assert recap["node1"]["changed"] > 0
    for name in faulty:
        assert recap[name]["failed"] == 1, (name, recap[name])
    fetch = [  # ansible-playbook names a collection's role by its FQCN
        "provision.ascend.ascend_driver : Create the staging folder",
        "provision.ascend.ascend_driver : Download the .run files and verify their sha256",
    ]
    assert set(run.changed_tasks("node2")) <= set(fetch), run.changed_tasks("node2")
    assert run.changed_tasks("node3") == run.changed_tasks("node4") == []
    assert recap["node3"]["changed"] == recap["node4"]["changed"] == 0

    fatal = {host: str(result.get("msg")) for host, result in run.results("failed").items()}
    assert sorted(fatal) == list(faulty), run.tail()
    assert driver_file in fatal["node2"]
    assert f"expected {'0' * 64} (pinned in ascend_driver_checksums)" in fatal["node2"]
    assert "correct ascend_driver_checksums" in fatal["node2"]
    assert "Nothing was installed on node2" in fatal["node2"]
    assert "node3 lacks what the Ascend driver installer needs: lspci, ifconfig, dkms, gcc" in fatal["node3"]
    assert "Install them with playbooks/repos.yml" in fatal["node3"]
    assert "Nothing was changed on this node" in fatal["node3"]
    assert "unhealthy NPUs: NPU 1 Critical" in fatal["node4"]
    assert "repair the NPU" in fatal["node4"] and "ascend_driver_force: true" in fatal["node4"]

    # The faulty nodes: not a file, package, user or boot more than before the run.
    after, boots_after = untouched_state(cluster, skip=(staging,)), cluster.boots()
    for name in faulty:
        assert after[name] == before[name], name
        assert boots_after[name] == boots_before[name], name
    assert driver_file not in sh(cluster, "node2", f"ls -A {staging}/ascend 2>/dev/null; true")
    assert sh(cluster, "node3", f"ls -A {staging}/ascend 2>/dev/null; true") == ""
    version = sh(cluster, "node4", "cat /usr/local/Ascend/driver/version.info")
    assert parse_driver_version_info(version).version == DRILL_OLD["ascend_driver_version"]

    # node1 went through every stage: driver + firmware (one reboot), CANN, the stack report.
    assert boots_after["node1"] == boots_before["node1"] + 1
    info = parse_npu_smi_info(sh(cluster, "node1", "npu-smi info"))
    assert (info.driver_version, len(info.npus), info.all_healthy) == (DRIVER, npus, True)
    assert node_json(cluster, "node1", "/etc/ansible/facts.d/cann.fact")["toolkit"] == CANN
    reports = {host: result.get("msg") for host, result in run.results("ok", REPORT_TASK).items()}
    assert reports == {"node1": REPORT}, run.tail()

    again = ansible_playbook(inventory, "--limit", "node1", home=tmp_path)
    assert again.rc == 0, again.tail()
    assert again.recap()["node1"]["changed"] == 0, again.tail()
    print(
        f"\nplain ansible-playbook site.yml: 4 nodes {run.seconds:.1f} s, node1 again {again.seconds:.1f} s"
    )
