"""The vllm_serve role's scenario in container mode (docker + the Ascend runtime), on the shared serving
cluster (``cluster.py``; service mode is checked on the clusters that serve that way, ``cluster.py`` says
where). In this order:

1. ``plan -p serve`` wrote nothing, ``apply -p serve`` (the fixture ran both): both instances ready, a
   completion from the controller, the API key off command lines and required; ``serve status`` 2/2 ready;
   a second apply changes nothing and skips the configure step; a unit disabled by hand is enabled again.
2. ``apply -p upgrade`` to a broken configuration (an image whose entrypoint fails): node1 fails its gate and
   is rolled back to the previous configuration, ready again; the rollout stops, and node2 answers every
   request sent while it ran.
3. The engine killed on node2 (``disruptive``: last): ``serve status`` reports it failed, with the journal.

Also: a wrong sha256 refused with nothing loaded, the containers' confinement (devices, privileges, mounts),
and the default image tag naming the nodes' architecture.
"""

from __future__ import annotations

import json
import platform
import re
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.ascend import lock
from provision.image.spec import Target
from provision_sim.serving import vllm_cpu as engine
from provision_sim.serving.image import BROKEN_TAG
from tests.helpers import Run, Traffic, assert_status_reads_node2_killed, json_summary
from tests.helpers import provision as run_provision
from tests.integration.serving.cluster import (
    API_KEY,
    ARGS,
    CONTAINER,
    DOWNLOAD,
    STAGING,
    UNIT,
    WRONG_SHA256,
    Served,
    broken_settings,
    complete,
    kill_engine,
)

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.engine,
    pytest.mark.slow,
]

MANAGERS = ["davinci_manager", "devmm_svm", "hisi_hdc"]
NODES = ("node1", "node2")


def inspect(served: Served, node: str) -> dict[str, Any]:
    data: list[dict[str, Any]] = json.loads(served.sh(node, "docker", "inspect", CONTAINER))
    return data[0]


def start_to_ready_s(served: Served, node: str) -> float | None:
    """Seconds from the unit's first start to the engine's "Application startup complete" (journal)."""
    text = served.sh(node, "journalctl", "-u", UNIT, "--no-pager", "-o", "short-unix")
    started = ready = None
    for line in text.splitlines():
        stamp = line.split(" ", 1)[0]
        if started is None and f"Started {UNIT}" in line:
            started = float(stamp)
        elif started is not None and "Application startup complete" in line:
            ready = float(stamp)
            break
    return None if started is None or ready is None else ready - started


def entered(served: Served, node: str) -> str:
    """When the engine's unit last became active (changes with every start)."""
    return served.sh(node, "systemctl", "show", "-P", "ActiveEnterTimestamp", UNIT).strip()


def task_seconds(run_dir: str, task: str) -> dict[str, float]:
    """Per host, how long ``task`` took in a run (ansible-runner's job events)."""
    out = {}
    for path in Path(run_dir).glob("artifacts/*/job_events/*.json"):
        event = json.loads(path.read_text())
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("task") == task and "duration" in data:
            out[str(data["host"])] = float(data["duration"])
    return out


def test_plan_then_apply_serves_both_nodes_then_changes_nothing(served: Served) -> None:
    planned = {change["task"] for change in served.plan["changes"]}
    assert served.image is not None
    wrote = "vllm_serve : Would bring " + served.image.tag
    assert {wrote, "vllm_serve : Write the systemd units"} <= planned, planned
    assert not served.unit_after_plan, "the dry run wrote nothing"

    hosts = served.first_apply["hosts"]
    assert sorted(hosts) == ["node1", "node2"]
    assert all(stats["changed"] > 0 and stats["failed"] == 0 for stats in hosts.values())
    for node in ("node1", "node2"):
        assert complete(served.url(node)).strip(), f"{node} answered an empty completion"
        assert served.sh(node, "systemctl", "is-enabled", UNIT).strip() == "enabled", "survives a reboot"
        args = served.sh(node, "cat", ARGS).splitlines()
        assert args[:5] == ["docker", "run", "--rm", "--name", CONTAINER]
        assert args[args.index(served.image.tag) + 1 :][:2] == ["--model", str(engine.model_dir())]
        assert args[args.index("--port") + 1] == "8000"
        ip = served.cluster.node(node).ip  # the default bind: the node's management address, not 0.0.0.0
        assert args[args.index("--host") + 1] == ip, args
        secret = served.sh(node, "stat", "-c", "%a %U", "/etc/provision/serve/smol/secret.env")
        assert secret.split() == ["600", "root"]
        processes = served.sh(node, "ps", "-eo", "args")
        assert API_KEY not in processes and API_KEY not in "\n".join(args), "the key stays off command lines"
        # the profile's VLLM_CACHE_ROOT is the rig's prepared cache: vLLM found the model's class there (a
        # miss runs one more vLLM import and, the folder being read-only here, logs this error)
        container_env = inspect(served, node)["Config"]["Env"]
        assert f"VLLM_CACHE_ROOT={engine.vllm_cache_root()}" in container_env, container_env
        log = served.sh(node, "journalctl", "-u", UNIT, "--no-pager", "-o", "cat")
        assert "Application startup complete" in log, log[-3000:]
        assert "Error saving model info cache" not in log, log[-3000:]
    with pytest.raises(urllib.error.HTTPError, match="401"):
        urllib.request.urlopen(
            urllib.request.Request(f"{served.url('node1')}/v1/models"), timeout=10
        )  # no key, no answer

    shown = served.status()
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert shown.stdout.splitlines()[-1] == "2/2 ready on 2 host(s)"

    started = {node: entered(served, node) for node in NODES}
    summary = json_summary(served.apply("--json"), "second apply")
    assert {host: stats["changed"] for host, stats in summary["hosts"].items()} == {"node1": 0, "node2": 0}
    # converged: every write ran and found its file as it would write it, so nothing was restarted
    noop = Run(0, summary, "", summary["seconds"])
    written = noop.events("vllm_serve : Write the arguments")
    assert sorted(written) == list(NODES) and not any(e["res"]["changed"] for e in written.values()), written
    assert {node: entered(served, node) for node in NODES} == started, "a second apply restarted an engine"
    assert {e["host"] for e in summary["endpoints"] if e["ready"]} == {"node1", "node2"}, summary["endpoints"]
    assert served.image_gets() == served.first_apply_gets, "the second apply downloaded nothing"
    served.timings["second apply"] = summary["seconds"]

    # drift the early path must not hide: a unit disabled by hand is enabled again (no restart needed)
    served.sh("node2", "systemctl", "disable", UNIT)
    repaired = json_summary(served.apply("--json"), "repair")
    changed = {host: stats["changed"] for host, stats in repaired["hosts"].items()}
    assert changed["node1"] == 0 and changed["node2"] >= 1, changed
    assert served.sh("node2", "systemctl", "is-enabled", UNIT).strip() == "enabled"
    print("\n" + ", ".join(f"{what} {s:.1f} s" for what, s in served.timings.items()))


def test_rolling_upgrade_to_a_broken_config_rolls_back_while_node2_answers(served: Served) -> None:
    good = served.settings_file.read_text()
    broken, cause = broken_settings(served)
    node1, node2 = served.url("node1"), served.url("node2")
    before = {node: served.sh(node, "cat", ARGS) for node in ("node1", "node2")}
    served.settings_file.write_text(yaml.safe_dump(broken))
    try:
        with Traffic([node1, node2], api_key=API_KEY) as traffic:
            started = time.monotonic()
            done = served.apply(playbook="upgrade")
            took = time.monotonic() - started
    finally:
        served.settings_file.write_text(good)

    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "FAILED node1: vllm_serve : Fail the host, naming both verdicts" in out
    assert f"{UNIT} on node1 failed its health gate with the new configuration" in out
    assert "was rolled back to the previous one, which is ready again" in out
    assert cause in out, "the journal tail names the cause"
    assert "node2" not in re.findall(r"FAILED (\S+):", out), "the rollout stopped before node2"

    to_node2 = traffic.of(node2)
    assert not traffic.capped, "requests ran during the whole upgrade"
    assert len(to_node2) >= 5, traffic.results
    assert all(ok for _, ok, _ in to_node2), [r for r in to_node2 if not r[1]]
    assert served.sh("node2", "cat", ARGS) == before["node2"]

    assert complete(node1).strip(), "node1 serves again on the previous configuration"
    assert served.sh("node1", "cat", ARGS) == before["node1"]
    assert served.image is not None
    absent = served.cluster.exec("node2", ["docker", "image", "inspect", BROKEN_TAG])
    assert absent.returncode != 0, "node2 was never touched"
    assert inspect(served, "node1")["Config"]["Image"] == served.image.tag
    failed_on_node1 = sum(not ok for _, ok, _ in traffic.of(node1))
    print(
        f"\nupgrade + rollback {took:.1f} s; requests: node2 {len(to_node2)} all answered, "
        f"node1 {len(traffic.of(node1))} ({failed_on_node1} failed while it restarted)"
    )


@pytest.mark.disruptive
def test_killed_engine_reads_failed_with_the_journal(served: Served) -> None:
    ended = kill_engine(served, "node2")
    urls = {node: served.url(node) for node in ("node1", "node2")}
    assert_status_reads_node2_killed(served.status, UNIT, urls, ended)


def test_a_wrong_sha256_is_refused_and_nothing_is_loaded(served: Served) -> None:
    refused, image = served.refused, served.image
    assert image is not None
    assert refused is not None and refused.rc == 1, refused and refused.explain()
    message = refused.failures()["node1"]
    assert "Fail the host, naming the image tarball and its sha256" in message, message
    assert (
        f"node1 did not load {image.tag}: {served.image_url} (vllm_serve_image_url) was refused, "
        f"sha256 from vllm_serve_image_checksum {WRONG_SHA256}: "
    ) in message
    assert f"did not match {WRONG_SHA256}; it was {image.sha256}" in message
    assert f"Nothing was loaded, and nothing of it was left in {STAGING}." in message
    assert "vllm_serve : Load the image" not in refused.tasks("node1")
    assert not served.refused_image, "the image was not loaded"
    assert served.refused_left == "", f"left in {STAGING}: {served.refused_left}"
    assert served.refused_gets == 1, "node1 downloaded the tarball once, then refused it"


def test_containers_get_the_image_once_and_only_the_pools_devices(served: Served) -> None:
    for task in (DOWNLOAD, "vllm_serve : Load the image", "vllm_serve : Remove the downloaded tarball"):
        done_on = [c["host"] for c in served.first_apply["changes"] if c["task"] == task]
        assert sorted(done_on) == ["node1", "node2"], task
    assert served.first_apply_gets == served.refused_gets + 2, "one download per node"
    assert served.image is not None
    for node in ("node1", "node2"):
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

    run_dir = str(served.first_apply["run_dir"])
    downloads = task_seconds(run_dir, DOWNLOAD.split(" : ")[1])
    timings = {f"{n} download + sha256": s for n, s in downloads.items()}
    timings.update({f"{n} docker load": s for n, s in task_seconds(run_dir, "Load the image").items()})
    for node in ("node1", "node2"):
        took = start_to_ready_s(served, node)
        if took is not None:
            timings[f"{node} container start -> ready"] = took
    print("\n" + ", ".join(f"{what} {seconds:.1f} s" for what, seconds in sorted(timings.items())))
    print(f"image {served.image.path.name}: {served.image.size / 2**20:.0f} MiB")


def test_the_default_image_tag_names_the_nodes_architecture(served: Served) -> None:
    good = served.settings_file.read_text()
    default = yaml.safe_load(good)
    del default["vllm_serve_image"]  # the role's default: vllm_serve_image_repository:<lock's tag>-<arch>
    served.settings_file.write_text(yaml.safe_dump(default))
    try:
        plan = run_provision("plan", served.inventory, "-p", "serve", "--limit", "node1")
    finally:
        served.settings_file.write_text(good)
    assert plan.rc == 0, plan.explain()
    # The nodes are containers of this host: their `uname -m` is its machine (x86_64 -> amd64 here).
    tag = Target(lock.default_stack_name(), arch=platform.machine()).tag
    assert tag.endswith("-" + {"x86_64": "amd64", "aarch64": "arm64"}[platform.machine()]), tag
    assert f"vllm_serve : Would bring vllm-ascend:{tag}" in plan.tasks("node1"), plan.tasks("node1")
    read = "vllm_serve : Read the node's architecture for the image tag (container mode)"
    assert "node1" in plan.events(read), "serve.yml gathers no facts: the role read them"
