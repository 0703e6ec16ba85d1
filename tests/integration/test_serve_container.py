"""vllm_serve in container mode on a 2-node simulated cluster: the REAL vLLM CPU engine in docker containers.

The nodes run a real dockerd with the (simulated) Ascend Docker Runtime, installed by the container_runtime
role from the cluster's mirror after the repos and driver stages (the driver creates /dev/davinciN). The
serving image is built here from the nodes' base rootfs (``provision_sim.serving.image``) and put on the
cluster's HTTP mirror (``images/`` + ``sha256sums.txt``); the role downloads it from its ``http://`` URL,
verifies it against that file, ``docker load``s it and removes the tarball, as an air-gapped site does. The
engine's venv and model reach the containers through read-only volumes (they are bind-mounted into the nodes
at their host paths). node1 gives its container the pool's NPU through the Ascend runtime
(``ASCEND_VISIBLE_DEVICES``), node2 with ``--device`` (host_vars ``vllm_serve_container_devices: device``).
One cluster for the module; the tests run in file order:

1. ``apply -p serve --limit node1`` with a wrong ``vllm_serve_image_checksum``: downloaded once, refused,
   nothing loaded, nothing left in the staging folder.
2. ``plan -p serve`` (nothing written), ``apply -p serve``: each node downloads the image once, verifies,
   loads it and removes the tarball; both ready, a completion from each; the containers are not privileged,
   see only the pool's /dev/davinci3 (+ the manager devices), mount read-only; a second apply changes nothing
   and downloads nothing; ``serve status INVENTORY`` 2/2 ready.
3. ``plan -p serve`` without ``vllm_serve_image``: the default tag names the node's architecture (serve.yml
   gathers no facts; the role reads the platform facts).
4. ``apply -p upgrade`` to a broken image loaded from a ``file://`` URL with a pinned sha256: node1 fails its
   gate and comes back on the previous image, ready; the rollout stops; node2 answers every request sent
   during it and never saw the broken image.
5. The engine killed in node2's container (``docker kill``): ``serve status`` says failed, with the journal.

Costs: repos + driver + container_runtime stages (≈ 4 min on 2 loaded cores), two engines (~3.6 GB each).
"""

from __future__ import annotations

import json
import platform
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.ascend import lock
from provision.image.spec import Target
from provision_sim.cluster import Cluster
from provision_sim.serving import vllm_cpu as engine
from provision_sim.serving.image import (
    BROKEN_TAG,
    ServeImage,
    broken_image,
    ensure_serve_image,
    mirror_serve_image,
)
from provision_sim.serving.setup import container_volumes, engine_binds, engine_profile_vars
from tests.helpers import (
    Run,
    copy_inventory,
    host_vars,
    journals,
    json_summary,
    mirror_vars,
    provision_cli,
)
from tests.helpers import provision as run_provision
from tests.integration.test_serve import API_KEY, APPLY_TIMEOUT_S, Traffic, complete

ClusterFactory = Callable[..., Cluster]  # the sim_cluster_module_factory fixture (tests/conftest.py)

pytestmark = [pytest.mark.cluster, pytest.mark.engine, pytest.mark.slow]

POOL = {"name": "smol", "devices": [3], "port": 8000, "profile": "smollm2-cpu"}
CONTAINER = "vllm-smol"
UNIT = "vllm-smol.service"
STAGES = ("repos", "driver", "container_runtime")
MANAGERS = ["davinci_manager", "devmm_svm", "hisi_hdc"]
STAGING = "/var/cache/provision/vllm_serve"  # vllm_serve_image_staging_dir
WRONG_SHA256 = "0" * 64
DOWNLOAD = "vllm_serve : Download the image tarball and verify its sha256"


@dataclass
class Served:
    cluster: Cluster
    inventory: Path
    runs: Path
    image: ServeImage
    image_url: str
    broken: ServeImage
    timings: dict[str, float] = field(default_factory=dict)
    refused: Run | None = None
    refused_gets: int = 0
    refused_image: bool = True
    refused_left: str = ""
    first_apply_gets: int = 0
    plan: dict[str, Any] = field(default_factory=dict)
    unit_after_plan: bool = False
    first_apply: dict[str, Any] = field(default_factory=dict)

    def url(self, node: str) -> str:
        return f"http://{self.cluster.node(node).ip}:{POOL['port']}"

    def group_vars(self) -> Path:
        return self.inventory.parent / "group_vars" / "all.yml"

    def sh(self, node: str, *argv: str) -> str:
        done = self.cluster.exec(node, list(argv), timeout=120)
        assert done.returncode == 0, f"{node}: {' '.join(argv)}: {done.stdout}{done.stderr}"
        return done.stdout

    def image_gets(self) -> int:
        """How many times the nodes downloaded the image tarball (the mirror's log, http.server format)."""
        log = (self.cluster.dir / "mirror.log").read_text(errors="replace")
        return len(re.findall(rf'"GET /{re.escape(self.image_url.split("/", 3)[3])} HTTP', log))

    def staged(self, node: str) -> str:
        """What the staging folder holds on ``node`` (the role created it before downloading)."""
        return self.sh(node, "find", STAGING, "-mindepth", "1")


def settings(image: ServeImage, url: str) -> dict[str, object]:
    values: dict[str, object] = {
        "npu_pools_list": [POOL],
        "vllm_serve_mode": "container",
        "vllm_serve_image": image.tag,
        "vllm_serve_image_url": url,  # on the mirror, its sha256 in sha256sums.txt beside it
        # the engine's venv, interpreter and libnuma, at the paths the nodes see them (read-only)
        "vllm_serve_container_volumes": container_volumes(),
        "vllm_serve_api_key": API_KEY,
        # A killed engine stays down (auto-restart) long enough for `serve status` to see it.
        "vllm_serve_restart_sec": 60,
    }
    values.update(engine_profile_vars())  # the rig's profile, its model in the engine cache
    return values


@pytest.fixture(scope="module")
def served(
    sim_host: None, sim_cluster_module_factory: ClusterFactory, tmp_path_factory: pytest.TempPathFactory
) -> Served:
    engine.prepare()  # cached: instant after the first time (~3 min)
    started = time.monotonic()
    image, broken = ensure_serve_image(), broken_image()
    build_s = time.monotonic() - started
    cluster = sim_cluster_module_factory(
        "servec", nodes=2, os_list="openeuler-22.03,ubuntu-22.04", binds=engine_binds()
    )
    image_url, image = mirror_serve_image(cluster.dir, image)
    folder = tmp_path_factory.mktemp("servec")
    inventory = copy_inventory(cluster, folder, mirror_vars(cluster))
    state = Served(
        cluster, inventory, folder / "runs", image, image_url, broken, timings={"image build": build_s}
    )
    state.group_vars().write_text(yaml.safe_dump(settings(image, image_url)))
    host_vars(inventory, "node2", {"vllm_serve_container_devices": "device"})
    for stage in STAGES:
        begun = time.monotonic()
        done = provision_cli("apply", str(inventory), "-p", stage, "--json", runs=state.runs, timeout=900)
        json_summary(done, stage)
        state.timings[stage] = time.monotonic() - begun
    # node1 lacks the image: a wrong sha256 must be refused before anything is loaded
    wrong = f"vllm_serve_image_checksum={WRONG_SHA256}"
    state.refused = run_provision("apply", inventory, "-p", "serve", "--limit", "node1", "-e", wrong)
    state.refused_gets = state.image_gets()
    state.refused_image = cluster.exec("node1", ["docker", "image", "inspect", image.tag]).returncode == 0
    state.refused_left = state.staged("node1")
    planned = provision_cli(
        "plan", str(inventory), "-p", "serve", "--json", runs=state.runs, timeout=APPLY_TIMEOUT_S
    )
    state.plan = json_summary(planned, "plan")
    unit = cluster.exec("node1", ["test", "-e", f"/etc/systemd/system/{UNIT}"])
    state.unit_after_plan = unit.returncode == 0
    begun = time.monotonic()
    done = provision_cli(
        "apply", str(inventory), "-p", "serve", "--json", runs=state.runs, timeout=APPLY_TIMEOUT_S
    )
    state.timings["first apply"] = time.monotonic() - begun
    state.first_apply = json_summary(done, "apply -p serve" + journals(cluster, UNIT))
    state.first_apply_gets = state.image_gets()
    return state


def inspect(served: Served, node: str) -> dict[str, Any]:
    data: list[dict[str, Any]] = json.loads(served.sh(node, "docker", "inspect", CONTAINER))
    return data[0]


def start_to_ready_s(served: Served, node: str) -> float | None:
    """Seconds from the unit's first start to the engine's "Application startup complete" (journal)."""
    text = served.sh(node, "journalctl", "-u", UNIT, "--no-pager", "-o", "short-unix")
    started = ready = None
    for line in text.splitlines():
        stamp = line.split(" ", 1)[0]
        if started is None and "Started vllm-smol.service" in line:
            started = float(stamp)
        elif started is not None and "Application startup complete" in line:
            ready = float(stamp)
            break
    return None if started is None or ready is None else ready - started


def task_seconds(run_dir: str, task: str) -> dict[str, float]:
    """Per host, how long ``task`` took in a run (ansible-runner's job events)."""
    out = {}
    for path in Path(run_dir).glob("artifacts/*/job_events/*.json"):
        event = json.loads(path.read_text())
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("task") == task and "duration" in data:
            out[str(data["host"])] = float(data["duration"])
    return out


def status(served: Served) -> Any:
    return provision_cli("serve", "status", str(served.inventory), runs=served.runs, timeout=120)


# --------------------------------------------------------------------------------------------- tests


def test_a_wrong_sha256_is_refused_and_nothing_is_loaded(served: Served) -> None:
    refused = served.refused
    assert refused is not None and refused.rc == 1, refused and refused.explain()
    message = refused.failures()["node1"]
    assert "Fail the host, naming the image tarball and its sha256" in message, message
    assert (
        f"node1 did not load {served.image.tag}: {served.image_url} (vllm_serve_image_url) was refused, "
        f"sha256 from vllm_serve_image_checksum {WRONG_SHA256}: "
    ) in message
    assert f"did not match {WRONG_SHA256}; it was {served.image.sha256}" in message
    assert f"Nothing was loaded, and nothing of it was left in {STAGING}." in message
    assert "vllm_serve : Load the image" not in refused.tasks("node1")
    assert not served.refused_image, "the image was not loaded"
    assert served.refused_left == "", f"left in {STAGING}: {served.refused_left}"
    assert served.refused_gets == 1, "node1 downloaded the tarball once, then refused it"


def test_plan_then_apply_serves_in_containers_then_changes_nothing(served: Served) -> None:
    planned = {change["task"] for change in served.plan["changes"]}
    assert {"vllm_serve : Would bring " + served.image.tag, "vllm_serve : Write the systemd units"} <= planned
    assert not served.unit_after_plan, "the dry run wrote nothing"

    hosts = served.first_apply["hosts"]
    assert sorted(hosts) == ["node1", "node2"]
    assert all(stats["changed"] > 0 and stats["failed"] == 0 for stats in hosts.values())
    for task in (DOWNLOAD, "vllm_serve : Load the image", "vllm_serve : Remove the downloaded tarball"):
        done_on = [c["host"] for c in served.first_apply["changes"] if c["task"] == task]
        assert sorted(done_on) == ["node1", "node2"], task
    assert served.first_apply_gets == served.refused_gets + 2, "one download per node"
    for node in ("node1", "node2"):
        assert complete(served.url(node)).strip(), f"{node} answered an empty completion"
        assert served.sh(node, "systemctl", "is-enabled", UNIT).strip() == "enabled", "survives a reboot"
        args = served.sh(node, "cat", "/etc/provision/serve/smol/args").splitlines()
        assert args[:5] == ["docker", "run", "--rm", "--name", CONTAINER]
        assert args[args.index(served.image.tag) + 1 :][:2] == ["--model", str(engine.model_dir())]
        assert API_KEY not in served.sh(node, "ps", "-eo", "args") and API_KEY not in "\n".join(args)

        info = inspect(served, node)
        assert info["Config"]["Image"] == served.image.tag and info["State"]["Running"] is True
        assert info["HostConfig"]["Privileged"] is False
        assert info["HostConfig"]["NetworkMode"] == "host"
        gid = served.sh(node, "getent", "group", "HwHiAiUser").split(":")[2]
        assert info["HostConfig"]["GroupAdd"] == [gid], "the image's user reaches the NPUs through HwHiAiUser"
        assert info["Mounts"] and all(mount["RW"] is False for mount in info["Mounts"]), info["Mounts"]
        assert f"VLLM_API_KEY={API_KEY}" in info["Config"]["Env"], "the key reached the engine by name"
        dev = served.sh(node, "docker", "exec", CONTAINER, "ls", "/dev").split()
        assert sorted(d for d in dev if d.startswith(("davinci", "devmm", "hisi"))) == ["davinci3", *MANAGERS]
        assert served.staged(node) == "", f"the downloaded tarball was removed from {STAGING}"

    node1, node2 = inspect(served, "node1"), inspect(served, "node2")
    assert "ASCEND_VISIBLE_DEVICES=3" in node1["Config"]["Env"] and not node1["HostConfig"]["Devices"]
    assert [d["PathOnHost"] for d in node2["HostConfig"]["Devices"]] == ["/dev/davinci3"] + [
        f"/dev/{name}" for name in MANAGERS
    ]

    shown = status(served)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert shown.stdout.splitlines()[-1] == "2/2 ready on 2 host(s)"

    again = provision_cli(
        "apply", str(served.inventory), "-p", "serve", "--json", runs=served.runs, timeout=APPLY_TIMEOUT_S
    )
    summary = json_summary(again, "second apply")
    assert {host: stats["changed"] for host, stats in summary["hosts"].items()} == {"node1": 0, "node2": 0}
    assert served.image_gets() == served.first_apply_gets, "the second apply downloaded nothing"
    # converged: files and units read, straight to the gate (configure.yml and service.yml not run)
    noop = Run(again.returncode, summary, again.stderr, summary["seconds"])
    assert noop.events("vllm_serve : Write the arguments") == {}, "the converged nodes ran configure.yml"
    served.timings["second apply"] = summary["seconds"]
    run_dir = str(served.first_apply["run_dir"])
    downloads = task_seconds(run_dir, DOWNLOAD.split(" : ", 1)[1])
    served.timings.update({f"{node} download + sha256": took for node, took in sorted(downloads.items())})
    loads = task_seconds(run_dir, "Load the image")
    served.timings.update({f"{node} docker load": took for node, took in sorted(loads.items())})
    for node in ("node1", "node2"):
        took = start_to_ready_s(served, node)
        if took is not None:
            served.timings[f"{node} container start -> ready"] = took
    print("\n" + ", ".join(f"{what} {seconds:.1f} s" for what, seconds in served.timings.items()))
    print(f"image {served.image.path.name}: {served.image.size / 2**20:.0f} MiB")


def test_the_default_image_tag_names_the_nodes_architecture(served: Served) -> None:
    good = served.group_vars().read_text()
    default = yaml.safe_load(good)
    del default["vllm_serve_image"]  # the role's default: vllm_serve_image_repository:<lock's tag>-<arch>
    served.group_vars().write_text(yaml.safe_dump(default))
    try:
        plan = run_provision("plan", served.inventory, "-p", "serve", "--limit", "node1")
    finally:
        served.group_vars().write_text(good)
    assert plan.rc == 0, plan.explain()
    # The nodes are containers of this host: their `uname -m` is its machine (x86_64 -> amd64 here).
    tag = Target(str(lock.load_lock()["default"]), arch=platform.machine()).tag
    assert tag.endswith("-" + {"x86_64": "amd64", "aarch64": "arm64"}[platform.machine()]), tag
    assert f"vllm_serve : Would bring vllm-ascend:{tag}" in plan.tasks("node1"), plan.tasks("node1")
    read = "vllm_serve : Read the node's architecture for the image tag (container mode)"
    assert "node1" in plan.events(read), "serve.yml gathers no facts: the role read them"


def test_rolling_upgrade_to_a_broken_image_rolls_back_while_node2_answers(served: Served) -> None:
    good = served.group_vars().read_text()
    broken = yaml.safe_load(good)
    broken["vllm_serve_image"] = BROKEN_TAG
    broken["vllm_serve_image_url"] = served.broken.url
    broken["vllm_serve_image_checksum"] = served.broken.sha256
    node1, node2 = served.url("node1"), served.url("node2")
    before = {node: served.sh(node, "cat", "/etc/provision/serve/smol/args") for node in ("node1", "node2")}
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
    assert f"{UNIT} on node1 failed its health gate with the new configuration" in out
    assert "was rolled back to the previous one, which is ready again" in out
    assert "/opt/provision/entrypoint.sh" in out, "the journal tail names the cause"
    assert "node2" not in re.findall(r"FAILED (\S+):", out), "the rollout stopped before node2"

    to_node2 = traffic.of(node2)
    assert not traffic.capped, "requests ran during the whole upgrade"
    assert len(to_node2) >= 5, traffic.results
    assert all(ok for _, ok, _ in to_node2), [r for r in to_node2 if not r[1]]
    assert served.sh("node2", "cat", "/etc/provision/serve/smol/args") == before["node2"]
    absent = served.cluster.exec("node2", ["docker", "image", "inspect", BROKEN_TAG])
    assert absent.returncode != 0, "node2 was never touched"

    assert complete(node1).strip(), "node1 serves again on the previous image"
    assert served.sh("node1", "cat", "/etc/provision/serve/smol/args") == before["node1"]
    assert inspect(served, "node1")["Config"]["Image"] == served.image.tag
    failed_on_node1 = sum(not ok for _, ok, _ in traffic.of(node1))
    print(
        f"\nupgrade to a broken image + rollback {took:.1f} s; requests: node2 {len(to_node2)} all answered, "
        f"node1 {len(traffic.of(node1))} ({failed_on_node1} failed while it restarted)"
    )


def test_engine_killed_in_its_container_reads_failed_with_the_journal(served: Served) -> None:
    served.sh("node2", "docker", "kill", "--signal", "KILL", CONTAINER)
    shown = status(served)
    assert shown.returncode == 1, shown.stdout + shown.stderr
    lines = shown.stdout.splitlines()
    node1 = next(line for line in lines if line.startswith("node1 "))
    node2 = next(line for line in lines if line.startswith("node2 "))
    assert node1.split()[:4] == ["node1", "smol", served.url("node1"), "ready"]
    assert node2.split()[:4] == ["node2", "smol", served.url("node2"), "failed"]
    # systemd stops the unit's other processes first (deactivating/stop-sigterm), then waits RestartSec
    # (activating/auto-restart): either is right after a kill.
    assert "the engine process is not running" in node2
    assert re.search(rf"{re.escape(UNIT)}: (deactivating/stop-sig(term|kill)|activating/auto-restart)", node2)
    assert any("Main process exited, code=exited, status=137" in line for line in lines if "| " in line)
    assert lines[-1] == "1/2 ready on 2 host(s)"
