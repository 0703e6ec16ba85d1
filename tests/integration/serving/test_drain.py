"""Drained rolling upgrades behind a real load balancer, on the shared serving cluster (container mode).

HAProxy (Debian's, ``provision_sim.serving.balancer``) runs on the controller in front of both nodes'
engines, health-checking each node's readiness endpoint (``vllm-serve-ready``, ``:8099/ready/smol``). With the
drain on:

1. each node's endpoint answers 200 for its pool and 404 for another;
2. ``apply -p upgrade -e vllm_serve_upgrade_batch=2`` with a changed profile is refused before anything is
   written (it would restart every ready instance of the model): both args files unchanged, nothing drained,
   no engine restarted;
3. ``apply -p upgrade`` (batch 1) to ``max_model_len`` 2048 under a steady, paced load through HAProxy:
   0 failed requests; in HAProxy's log each node goes DOWN (``info: "Drained"``) before its engine stops and
   UP after it is ready again, node1 then node2, never both out at once; the other node served meanwhile.
   The same upgrade moves node2 to the stand-in of the OFFICIAL vllm-ascend image
   (``provision_sim.serving.image.official_image``: CMD ["/bin/bash"], CANN's entrypoint, none of ours), for
   which the role supplies the whole command (``vllm_serve_image_command`` auto): node2 serves from it.

The module is ``disruptive``: it runs after every test that needs the cluster's own configuration and leaves
the cluster as the drill left it (the drain on, ``max_model_len`` 2048, node2 on the official image's
stand-in), its inventory saying so; going back cost another restart of both engines (~2 min on 2 cores).
Prints sent / failed / p50 / p99 through HAProxy and the upgrade's slowest tasks.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision_sim.serving.balancer import HAProxy, Load
from provision_sim.serving.image import OFFICIAL_TAG, official_image
from tests.helpers import complete, host_vars, json_summary
from tests.helpers import provision as run_provision
from tests.integration.serving.cluster import API_KEY, ARGS, CONTAINER, POOL_NAME, PORT, UNIT, Served

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.engine,
    pytest.mark.slow,
    pytest.mark.disruptive,
]

NODES = ("node1", "node2")
READY_PORT = 8099  # vllm_serve_ready_port's default
DRAIN_DIR = "/run/provision/serve"  # vllm_serve_drain_dir's default
# HAProxy's checks and the role's waits that follow them (1 s x (2 + 1) after a mark, 1 s x (2 + 1) after).
INTER_S, FALL, RISE = 1.0, 2, 2
DRAIN_VARS = {
    "vllm_serve_drain": True,
    "vllm_serve_lb_check_interval_s": INTER_S,
    "vllm_serve_lb_check_fall": FALL,
    "vllm_serve_lb_check_rise": RISE,
}
# The load: two clients, each pausing PAUSE_S after every answer, so the two engines never take both cores
# (back to back they did, and every Ansible task on the nodes crawled); bounded in count and in time.
WORKERS, PAUSE_S, MAX_REQUESTS, MAX_S = 2, 1.0, 1500, 540.0
REFUSE = "vllm_serve : Refuse a batch that would take down the last ready instance of a model"


def _settings(served: Served, **profile: Any) -> dict[str, Any]:
    settings = {**served.settings(), **DRAIN_VARS}
    if profile:
        profiles = dict(settings["vllm_serve_profiles"])
        profiles["smollm2-cpu"] = {**profiles["smollm2-cpu"], **profile}
        settings["vllm_serve_profiles"] = profiles
    return settings


def _entered(served: Served) -> dict[str, str]:
    return {n: served.sh(n, "systemctl", "show", "-P", "ActiveEnterTimestamp", UNIT).strip() for n in NODES}


def _host_vars(served: Served, node: str) -> dict[str, Any] | None:
    path = served.inventory.parent / "host_vars" / f"{node}.yml"
    values: dict[str, Any] | None = yaml.safe_load(path.read_text()) if path.is_file() else None
    return values


def _marks(served: Served, node: str) -> list[str]:
    found = served.cluster.exec(node, ["find", DRAIN_DIR, "-name", "*.drained"])
    return str(found.stdout).split()


def _journal(served: Served, node: str, since: float) -> list[tuple[float, str]]:
    text = served.sh(
        node, "journalctl", "-u", UNIT, "--no-pager", "-o", "short-unix", "--since", f"@{int(since)}"
    )
    out = []
    for line in text.splitlines():
        stamp, _, rest = line.partition(" ")
        try:
            out.append((float(stamp), rest))
        except ValueError:
            continue
    return out


def _first(lines: list[tuple[float, str]], needle: str, after: float = 0.0) -> float:
    found = [at for at, text in lines if needle in text and at >= after]
    assert found, f"no {needle!r} after {after}: {[text for _, text in lines][-30:]}"
    return found[0]


def _slowest_tasks(run_dir: Path, count: int = 6) -> list[tuple[float, str, str]]:
    """(seconds, host, task) of the run's slowest task results (ansible-runner's job events)."""
    out = []
    for path in run_dir.glob("artifacts/*/job_events/*.json"):
        data = json.loads(path.read_text()).get("event_data") or {}
        if "duration" in data and data.get("host"):
            out.append((float(data["duration"]), str(data["host"]), str(data.get("task"))))
    return sorted(out, reverse=True)[:count]


@pytest.fixture(scope="module")
def balanced(served: Served, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HAProxy]:
    """The drain on (an apply that installs the readiness endpoints and restarts nothing), HAProxy in
    front of both engines. The cluster stays as the drill leaves it (the module is disruptive: last)."""
    before = _entered(served)
    served.settings_file.write_text(yaml.safe_dump(_settings(served)))
    json_summary(served.apply("--json"), "apply -p serve with the drain on")
    assert _entered(served) == before, "turning the drain on restarted an engine"
    servers = {n: f"{served.cluster.node(n).ip}:{PORT}" for n in NODES}
    lb = HAProxy(
        tmp_path_factory.mktemp("haproxy"),
        servers,
        pool=POOL_NAME,
        ready_port=READY_PORT,
        inter_s=INTER_S,
        fall=FALL,
        rise=RISE,
    )
    with lb:
        lb.wait_up(list(NODES))
        yield lb


def test_each_node_answers_on_its_readiness_endpoint(served: Served, balanced: HAProxy) -> None:
    for node in NODES:
        base = f"http://{served.cluster.node(node).ip}:{READY_PORT}/ready"
        with urllib.request.urlopen(f"{base}/{POOL_NAME}", timeout=10) as reply:
            answer = (reply.status, reply.reason, reply.read().strip())
            assert answer == (200, "Ready", f"{POOL_NAME}: ready".encode()), node
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(f"{base}/no-such-pool", timeout=10)
    assert balanced.changes() == [], "both servers stayed UP since HAProxy started"


def test_a_batch_holding_every_ready_replica_is_refused_before_anything_is_written(
    served: Served, balanced: HAProxy
) -> None:
    args = {n: served.sh(n, "cat", ARGS) for n in NODES}
    started = _entered(served)
    served.settings_file.write_text(yaml.safe_dump(_settings(served, max_model_len=2048)))
    refused = run_provision(
        "apply", served.inventory, "-p", "upgrade", "-e", "vllm_serve_upgrade_batch=2", timeout=300
    )
    assert refused.rc == 1, refused.explain()
    failures = refused.failures()
    assert sorted(failures) == list(NODES), failures
    for node in NODES:
        message = failures[node]
        assert message.startswith(REFUSE + ": "), message
        assert "Refusing this batch (node1, node2) of the rolling upgrade before anything was written" in (
            message
        )
        assert (
            "model smollm2: this batch would restart every ready instance of it (node1/smol, node2/smol) "
            "and it has no other instance"
        ) in message
        assert "-e vllm_serve_upgrade_batch=1" in message
        assert refused.tasks(node) == [], f"{node} changed: {refused.tasks(node)}"
        assert served.sh(node, "cat", ARGS) == args[node], f"{node}: args file written"
        assert _marks(served, node) == [], f"{node}: drained"
    assert _entered(served) == started, "an engine restarted"
    assert balanced.changes() == [], "HAProxy never took a server out"
    print(f"\nrefusal of batch 2: {refused.seconds:.1f} s")


def test_a_drained_rolling_upgrade_fails_no_request_through_haproxy(
    served: Served, balanced: HAProxy
) -> None:
    served.settings_file.write_text(yaml.safe_dump(_settings(served, max_model_len=2048)))
    official = official_image()
    ours = json.loads(served.sh("node1", "docker", "inspect", CONTAINER))[0]["Config"]["Image"]
    host_vars(
        served.inventory,
        "node2",
        {
            **(_host_vars(served, "node2") or {}),
            "vllm_serve_image": official.tag,
            "vllm_serve_image_url": official.url,  # file://, its sha256 pinned
            "vllm_serve_image_checksum": official.sha256,
        },
    )
    since = time.time() - 1
    load_before = os.getloadavg()[0]
    with Load(
        balanced.url,
        api_key=API_KEY,
        workers=WORKERS,
        pause_s=PAUSE_S,
        max_requests=MAX_REQUESTS,
        max_s=MAX_S,
    ) as load:
        time.sleep(3)  # a few requests through both servers before anything changes
        done = run_provision("apply", served.inventory, "-p", "upgrade", timeout=600)
        time.sleep(3)  # and a few after
    figures = load.summary()
    slowest = _slowest_tasks(done.run_dir)
    print(
        f"\ndrained upgrade (batch 1, 2 nodes): {done.seconds:.1f} s, load average {load_before:.1f} -> "
        f"{os.getloadavg()[0]:.1f}; through HAProxy ({WORKERS} clients, {PAUSE_S} s pause): sent "
        f"{figures['sent']}, failed {figures['failed']}, p50 {figures['p50_s']} s, p99 {figures['p99_s']} s"
    )
    print("slowest tasks: " + "; ".join(f"{host} {task} {s:.1f} s" for s, host, task in slowest))
    assert done.rc == 0, done.explain()
    assert not load.capped, "the load ran during the whole upgrade"
    failed = [s for s in load.sent if not s.ok]
    assert figures["failed"] == 0, failed[:10]
    assert figures["sent"] >= 30, figures

    for node in NODES:
        args = served.sh(node, "cat", ARGS).splitlines()
        assert args[args.index("--max-model-len") + 1] == "2048", f"{node} was not upgraded"
        assert _marks(served, node) == [], f"{node}: still drained"

    # node1 on our image: its entrypoint serves the vLLM arguments; node2 on the official image's stand-in,
    # which has none of it: the role gave the whole command, and node2 serves
    node1_args, node2_args = (served.sh(n, "cat", ARGS).splitlines() for n in NODES)
    assert node1_args[node1_args.index(ours) + 1] == "--model"
    assert node2_args[node2_args.index(OFFICIAL_TAG) + 1 :][:4] == [
        "python3",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
    ]
    image = json.loads(served.sh("node2", "docker", "image", "inspect", OFFICIAL_TAG))[0]["Config"]
    assert image["Cmd"] == ["/bin/bash"] and image["Entrypoint"][:2] == ["/bin/bash", "-c"], image
    assert (
        json.loads(served.sh("node2", "docker", "inspect", CONTAINER))[0]["Config"]["Image"] == OFFICIAL_TAG
    )
    assert complete(served.url("node2"), api_key=API_KEY, prompt="Hello", timeout=30).strip()

    # HAProxy's log: one node out at a time, each for its drain, back after it was ready again; it logs each
    # request when it ends, with the server that answered it
    ended = [
        (datetime.fromisoformat(stamp).timestamp(), server)
        for stamp, server in re.findall(
            rf"^(\S+) \S+ \[[^]]+\] serve {POOL_NAME}/(node\d) ", balanced.log.read_text(), re.MULTILINE
        )
    ]
    changes = balanced.changes()
    assert [(c.server, c.state) for c in changes] == [
        ("node1", "DOWN"),
        ("node1", "UP"),
        ("node2", "DOWN"),
        ("node2", "UP"),
    ], changes
    for node, (down, up) in zip(NODES, zip(changes[::2], changes[1::2], strict=True), strict=True):
        assert 'Layer7 wrong status, code: 503, info: "Drained"' in down.reason, down.reason
        assert "Layer7 check passed, code: 200" in up.reason, up.reason
        journal = _journal(served, node, since)
        stopping = _first(journal, f"Stopping {UNIT}")
        ready = _first(journal, "Application startup complete", after=stopping)
        assert down.at < stopping, f"{node}: its engine stopped before HAProxy took it out"
        assert ready < up.at, f"{node}: HAProxy put it back before its engine was ready"
        late = [at for at, server in ended if server == node and stopping < at < up.at]
        assert not late, f"{node}: requests ended there while its engine was stopped or loading: {late}"
        print(
            f"{node}: out {up.at - down.at:.1f} s (DOWN {stopping - down.at:.1f} s before its engine "
            f"stopped, UP {up.at - ready:.1f} s after it was ready)"
        )

    # the other node served while one was out
    for (down, up), other in ((changes[0:2], "node2"), (changes[2:4], "node1")):
        assert [at for at, server in ended if server == other and down.at < at < up.at], (
            f"{other} served nothing while {down.server} was out"
        )
