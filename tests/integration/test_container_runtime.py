"""The container_runtime role on a mixed cluster: docker + the Ascend Docker Runtime, daemon.json, pools.

One cluster for the module (openEuler 22.03 + Ubuntu 22.04, 8 NPUs each), brought to the state the role
expects by the stages before it (repos, driver: device nodes exist). node1 starts with a daemon.json of the
user's own. Dry run -> apply -> repeat = 0 changed and no restart -> a container asking for a pool's NPUs
sees exactly those -> a runtime that ignores ASCEND_VISIBLE_DEVICES and a device the node does not have
fail with clear messages -> a corrupted .run stops its node before any change.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from provision.ascend import lock
from provision_sim.cluster import Cluster
from provision_sim.mirror import repos
from tests.helpers import Run, copy_inventory, host_vars, mirror_vars, shell
from tests.helpers import provision as run_provision

pytestmark = pytest.mark.cluster

ClusterFactory = Callable[..., Cluster]
VERSION = str(lock.default_stack()["docker_runtime"])
RUNTIME = "/usr/local/Ascend/Ascend-Docker-Runtime/ascend-docker-runtime"
FACT = "/etc/ansible/facts.d/container_runtime.fact"
POOLS = [
    {"name": "chat", "devices": [0, 1], "port": 8000},
    {"name": "batch", "devices": [4, 5, 6], "port": 8001},
]
USER_DAEMON = {
    "log-driver": "json-file",
    "log-opts": {"max-size": "10m"},
    "insecure-registries": ["10.9.9.9:5000"],
}
VERIFY = "container_runtime : Check each container saw exactly its pool's NPUs"
LIMIT = Path("/etc/systemd/system/docker.service.d/zz-test-start-limit.conf")


def provision(verb: str, inventory: Path, playbook: str, *args: str, timeout: float = 900) -> Run:
    return run_provision(verb, inventory, "-p", playbook, *args, timeout=timeout)


def sh(cluster: Cluster, node: str, script: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``shell`` with room for docker's slower starts and stops."""
    return shell(cluster, node, script, check=check, timeout=180)


def daemon_json(cluster: Cluster, node: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(sh(cluster, node, "cat /etc/docker/daemon.json").stdout)
    return data


def engine_started(cluster: Cluster, node: str) -> str:
    """When docker last became active (changes on every (re)start)."""
    return sh(cluster, node, "systemctl show docker -p ActiveEnterTimestampMonotonic --value").stdout.strip()


def engine_stops(cluster: Cluster, node: str) -> int:
    """How often systemd stopped docker since boot (a restart is one stop)."""
    out = sh(cluster, node, "journalctl -u docker.service -o cat --no-pager", check=False).stdout
    return sum(1 for line in out.splitlines() if line.startswith("Stopping docker"))


def seen_devices(cluster: Cluster, node: str, devices: str) -> list[str]:
    """The /dev/davinci* a container asking for ``devices`` gets (default runtime: ascend)."""
    out = sh(
        cluster,
        node,
        f"docker run --rm --network none -e ASCEND_VISIBLE_DEVICES={devices} {repos.VERIFY_IMAGE} ls -1 /dev",
    ).stdout
    return sorted(line for line in out.split() if line.startswith("davinci"))


@pytest.fixture(scope="module")
def stack(
    sim_cluster_module_factory: ClusterFactory, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Cluster, Path]]:
    """The cluster after repos + driver, with the inventory (pools) and node1's own daemon.json."""
    cluster = sim_cluster_module_factory("crt", nodes=2, os_list="openeuler-22.03,ubuntu-22.04", npus=8)
    folder = tmp_path_factory.mktemp("container-runtime")
    inventory = copy_inventory(cluster, folder, {**mirror_vars(cluster), "npu_pools_list": POOLS})
    for playbook in ("repos", "driver"):
        run = provision("apply", inventory, playbook)
        assert run.rc == 0, run.explain()
    sh(
        cluster,
        "node1",
        f"mkdir -p /etc/docker && echo '{json.dumps(USER_DAEMON)}' > /etc/docker/daemon.json",
    )
    yield cluster, inventory


def test_plan_apply_and_a_repeat_that_changes_nothing(stack: tuple[Cluster, Path]) -> None:
    cluster, inventory = stack
    plan = provision("plan", inventory, "container_runtime")
    assert plan.rc == 0, plan.explain()
    for node in ("node1", "node2"):
        tasks = plan.tasks(node)
        assert any(
            t.endswith(f"Would download Ascend-docker-runtime_{VERSION}_linux-{cluster_arch(cluster)}.run")
            for t in tasks
        ), tasks
        assert "container_runtime : Write daemon.json" in tasks, tasks
        assert sh(cluster, node, "command -v dockerd", check=False).returncode != 0  # plan changed nothing
    assert sh(cluster, "node1", "cat /etc/docker/daemon.json").stdout.strip() == json.dumps(USER_DAEMON)

    first = provision("apply", inventory, "container_runtime")
    assert first.rc == 0, first.explain()
    for node, package in (("node1", "rpm -q docker-engine"), ("node2", "dpkg -s docker.io")):
        sh(cluster, node, package)
        assert sh(
            cluster, node, "systemctl is-active docker; systemctl is-enabled docker"
        ).stdout.split() == [
            "active",
            "enabled",
        ]
        data = daemon_json(cluster, node)
        assert data["runtimes"]["ascend"] == {"path": RUNTIME, "runtimeArgs": []}
        assert data["default-runtime"] == "ascend"
        fact = json.loads(sh(cluster, node, f"cat {FACT}").stdout)
        assert fact["ascend_docker_runtime"] == VERSION and fact["runtime"] == RUNTIME
        # the engine was started by its package and restarted exactly once, for the runtime
        assert engine_stops(cluster, node) == 1, sh(
            cluster, node, "journalctl -u docker -o cat", check=False
        ).stdout
        # the verification ran (its image was loaded for it) and passed
        sh(cluster, node, f"docker image inspect {repos.VERIFY_IMAGE} >/dev/null")
        assert VERIFY not in first.failures().get(node, "")
    # as on a new machine the host forwards nothing (tests/conftest.py fresh_host_network), and a new
    # namespace copies that: each node's dockerd turned its own forwarding on, as it does on a server
    assert Path("/proc/sys/net/ipv4/ip_forward").read_text().strip() == "0"
    for node in ("node1", "node2"):
        assert sh(cluster, node, "cat /proc/sys/net/ipv4/ip_forward").stdout.strip() == "1"
    # the user's own settings are all still there
    user = daemon_json(cluster, "node1")
    assert {k: user[k] for k in USER_DAEMON} == USER_DAEMON
    assert set(user) == {*USER_DAEMON, "runtimes", "default-runtime"}

    started = {node: engine_started(cluster, node) for node in ("node1", "node2")}
    again = provision("apply", inventory, "container_runtime")
    assert again.rc == 0, again.explain()
    assert again.changed() == {"node1": 0, "node2": 0}, again.summary["changes"]
    for node in ("node1", "node2"):
        assert engine_started(cluster, node) == started[node]
        assert engine_stops(cluster, node) == 1
    # a converged node ends the role after reading its state: no engine, runtime or daemon.json task runs
    assert again.events("container_runtime : Enable and start the engine") == {}
    # on a converged cluster the plan shows nothing
    converged = provision("plan", inventory, "container_runtime")
    assert converged.rc == 0, converged.explain()
    assert converged.changed() == {"node1": 0, "node2": 0}, converged.summary["changes"]
    print(
        f"\ncontainer_runtime on 2 nodes: plan {plan.summary['seconds']} s, "
        f"apply {first.summary['seconds']} s, no-op apply {again.summary['seconds']} s, "
        f"no-op plan {converged.summary['seconds']} s"
    )


def test_drift_on_a_converged_node_is_repaired(stack: tuple[Cluster, Path]) -> None:
    """The role's early end on a converged node must not hide drift: a daemon.json edited by hand (the
    default runtime dropped) and an engine stopped and disabled are both put back; the restart that the new
    daemon.json needs happens even when the engine has just used up systemd's start limit (CI caught that:
    the tests before restart docker often enough within 60 s on a fast machine)."""
    cluster, inventory = stack
    # node1's engine has just used up systemd's start limit (docker.service allows 3 starts in 60 s; here 1
    # in an hour, so it holds however fast the machine is): the role's one restart must still happen.
    sh(
        cluster,
        "node1",
        f"mkdir -p {LIMIT.parent}"
        f" && printf '[Unit]\\nStartLimitBurst=1\\nStartLimitIntervalSec=3600\\n' > {LIMIT}"
        " && systemctl daemon-reload && systemctl reset-failed docker.service"
        " && systemctl restart docker.service",
    )
    edited = {key: value for key, value in daemon_json(cluster, "node1").items() if key != "default-runtime"}
    sh(cluster, "node1", f"echo '{json.dumps(edited)}' > /etc/docker/daemon.json")
    sh(cluster, "node2", "systemctl disable --now docker.service")
    assert sh(cluster, "node2", "systemctl is-enabled docker", check=False).stdout.strip() == "disabled"

    try:
        run = provision("apply", inventory, "container_runtime")
    finally:
        sh(cluster, "node1", f"rm -f {LIMIT} && systemctl daemon-reload")
    assert run.rc == 0, run.explain()
    assert "container_runtime : Write daemon.json" in run.tasks("node1"), run.tasks("node1")
    assert "container_runtime : Enable and start the engine" in run.tasks("node2"), run.tasks("node2")
    repaired = daemon_json(cluster, "node1")
    assert repaired["default-runtime"] == "ascend"
    assert {k: repaired[k] for k in USER_DAEMON} == USER_DAEMON
    for node in ("node1", "node2"):
        assert sh(
            cluster, node, "systemctl is-active docker; systemctl is-enabled docker"
        ).stdout.split() == [
            "active",
            "enabled",
        ]
    again = provision("apply", inventory, "container_runtime")
    assert again.changed() == {"node1": 0, "node2": 0}, again.summary["changes"]


def cluster_arch(cluster: Cluster) -> str:
    return sh(cluster, "node1", "uname -m").stdout.strip()


def test_a_container_sees_exactly_its_pools_npus(stack: tuple[Cluster, Path]) -> None:
    cluster, _ = stack
    for node in ("node1", "node2"):
        assert seen_devices(cluster, node, "0,1") == ["davinci0", "davinci1", "davinci_manager"]
        assert seen_devices(cluster, node, "4-6") == ["davinci4", "davinci5", "davinci6", "davinci_manager"]
        assert seen_devices(cluster, node, "void") == []
        # the driver files the runtime mounts, read-only
        out = sh(
            cluster,
            node,
            f"docker run --rm -e ASCEND_VISIBLE_DEVICES=2 {repos.VERIFY_IMAGE} "
            "sh -c 'ls /usr/local/Ascend/driver; touch /usr/local/bin/npu-smi 2>&1; echo $?'",
        ).stdout
        assert "version.info" in out and out.split()[-1] != "0"


def test_a_runtime_that_ignores_the_pool_and_an_unknown_device_fail_clearly(
    stack: tuple[Cluster, Path],
) -> None:
    cluster, inventory = stack
    # node2: a runtime that passes straight to runc, giving a container no NPU at all
    sh(
        cluster,
        "node2",
        f"cp -p {RUNTIME} /root/ascend-docker-runtime.orig && "
        f"printf '#!/bin/sh\\nexec /usr/sbin/runc \"$@\"\\n' > {RUNTIME}",
    )
    # node1: a pool with an NPU the node does not have (the inventory claims 16)
    host_vars(
        inventory,
        "node1",
        {"ascend_npu_count": 16, "npu_pools_list": [{"name": "big", "devices": [6, 7, 8, 9], "port": 8000}]},
    )
    try:
        run = provision("apply", inventory, "container_runtime", "-e", "container_runtime_verify=always")
    finally:
        host_vars(inventory, "node1", None)
        sh(cluster, "node2", f"mv /root/ascend-docker-runtime.orig {RUNTIME}")
    assert run.rc == 1, run.explain()
    failures = run.failures()
    assert failures["node2"].startswith(VERIFY), failures
    assert (
        "node2: pool chat: a container given ASCEND_VISIBLE_DEVICES=0,1 should see exactly /dev/davinci0, "
        "/dev/davinci1 but saw none; missing /dev/davinci_manager, /dev/devmm_svm, /dev/hisi_hdc"
    ) in failures["node2"]
    assert (
        "node1: pool big: the verification container (image provision-sim/busybox:1, ASCEND_VISIBLE_DEVICES="
        "6,7,8,9) did not run (exit "
    ) in failures["node1"], failures
    assert (
        "failed to get /dev/davinci8 info : lstat /dev/davinci8: no such file or directory"
        in failures["node1"]
    )
    # restored: the verification passes again
    ok = provision("apply", inventory, "container_runtime", "-e", "container_runtime_verify=always")
    assert ok.rc == 0, ok.explain()
    assert ok.changed() == {"node1": 0, "node2": 0}


def test_a_corrupted_run_file_stops_its_node_before_any_change(stack: tuple[Cluster, Path]) -> None:
    cluster, inventory = stack
    name = f"Ascend-docker-runtime_{VERSION}_linux-{cluster_arch(cluster)}.run"
    # node1 must (re)install: its fact is gone; the pinned checksum is not the mirror file's
    sh(cluster, "node1", f"mv {FACT} /root/container_runtime.fact")
    before = {
        "daemon": sh(cluster, "node1", "cat /etc/docker/daemon.json").stdout,
        "runtime": sh(cluster, "node1", f"stat -c %Y {RUNTIME}").stdout,
        "started": engine_started(cluster, "node1"),
    }
    host_vars(inventory, "node1", {"container_runtime_checksums": {name: "0" * 64}})
    try:
        run = provision("apply", inventory, "container_runtime")
    finally:
        host_vars(inventory, "node1", None)
    assert run.rc == 1, run.explain()
    message = run.failures()["node1"]
    assert message.startswith("container_runtime : Check the runtime arrived intact"), message
    assert (
        f"{name} from " in message
        and f"expected {'0' * 64} (pinned in container_runtime_checksums)" in message
    )
    assert "Nothing was installed on node1." in message
    assert "node2" not in run.failures() and run.changed()["node2"] == 0
    assert sh(cluster, "node1", "cat /etc/docker/daemon.json").stdout == before["daemon"]
    assert sh(cluster, "node1", f"stat -c %Y {RUNTIME}").stdout == before["runtime"]
    assert engine_started(cluster, "node1") == before["started"]
    assert sh(cluster, "node1", f"test -e {FACT}", check=False).returncode != 0
    assert (
        sh(cluster, "node1", f"ls /var/cache/provision/container_runtime/{name}", check=False).returncode != 0
    )
    # with the mirror's checksum it installs again (an upgrade over the same version), fact back, one restart
    fixed = provision("apply", inventory, "container_runtime")
    assert fixed.rc == 0, fixed.explain()
    assert json.loads(sh(cluster, "node1", f"cat {FACT}").stdout)["ascend_docker_runtime"] == VERSION


def test_a_daemon_json_that_does_not_parse_stops_its_node_unchanged(stack: tuple[Cluster, Path]) -> None:
    cluster, inventory = stack
    good = sh(cluster, "node2", "cat /etc/docker/daemon.json").stdout
    sh(cluster, "node2", 'printf \'{"log-driver": "json-file",\' > /etc/docker/daemon.json')
    try:
        run = provision("apply", inventory, "container_runtime")
        assert run.rc == 1, run.explain()
        message = run.failures()["node2"]
        assert message.startswith("container_runtime : Check daemon.json holds a JSON object"), message
        assert "/etc/docker/daemon.json" in message and "nothing was changed on this node" in message
        assert "node1" not in run.failures() and run.changed()["node1"] == 0
        assert sh(cluster, "node2", "cat /etc/docker/daemon.json").stdout == '{"log-driver": "json-file",'
    finally:
        sh(cluster, "node2", f"printf '%s' '{good}' > /etc/docker/daemon.json")


def test_an_engine_that_failed_to_start_says_why_and_a_rerun_converges(stack: tuple[Cluster, Path]) -> None:
    """An engine that cannot start fails its node with the cause from the unit's journal; once the cause is
    fixed the next apply converges, though systemd's start limit is used up by the failed start (a newcomer
    met exactly that: each rerun failed with 'Start request repeated too quickly')."""
    cluster, inventory = stack
    broken = LIMIT.parent / "zz-test-broken.conf"
    flag = "/run/zz-test-docker-broken"  # the cause: present, the engine cannot start
    cause = "dockerd-test: the disk is on fire"
    pre = f"if [ -e {flag} ]; then echo {cause}; exit 1; fi"
    sh(
        cluster,
        "node2",
        f"mkdir -p {LIMIT.parent} && touch {flag}"
        f" && printf '[Unit]\\nStartLimitBurst=1\\nStartLimitIntervalSec=3600\\n' > {LIMIT}"
        f" && printf '[Service]\\nExecStartPre=/bin/sh -c \"{pre}\"\\n' > {broken}"
        " && systemctl daemon-reload && systemctl stop docker.service"
        " && { systemctl stop docker.socket 2>/dev/null || true; }",
    )
    try:
        failed = provision("apply", inventory, "container_runtime")
        assert failed.rc == 1, failed.explain()
        message = failed.failures()["node2"]
        assert message.startswith("container_runtime : Enable and start the engine"), message
        assert re.search(r"\ndocker: [a-z]+/[a-z-]+", message), message  # the unit's state
        assert "last " in message and cause in message, message
        assert "node1" not in failed.failures()
        # the cause goes (no daemon-reload: it would reset the counter); the start limit stays used up
        sh(cluster, "node2", f"rm -f {flag}")
        refused = sh(cluster, "node2", "systemctl start docker.service", check=False)
        assert refused.returncode != 0, refused.stdout + refused.stderr
        journal = sh(cluster, "node2", "journalctl -u docker.service -o cat --no-pager").stdout
        assert "Start request repeated too quickly" in journal, journal[-2000:]
        rerun = provision("apply", inventory, "container_runtime")
    finally:
        sh(cluster, "node2", f"rm -f {flag} {broken} {LIMIT} && systemctl daemon-reload")
    assert rerun.rc == 0, rerun.explain()
    assert sh(cluster, "node2", "systemctl is-active docker").stdout.strip() == "active"
