"""The monitoring stage end to end on the shared serving cluster (container mode: the simulated driver with
npu-smi, docker and the real vLLM CPU engine on both nodes, ``cluster.py``):

1. ``apply -p monitoring -e monitoring_enabled=true -e monitoring_node_exporter=true`` installs the mirror's
   NPU-Exporter on both nodes (its sha256 checked, a systemd unit) and each distribution's node_exporter
   package from the mirror's repositories (openEuler's ``golang-github-prometheus-node_exporter`` with unit
   ``node_exporter``, Ubuntu's ``prometheus-node-exporter``), and writes the drop-in files on the controller;
   a second apply changes nothing and downloads nothing.
2. Debian's real Prometheus, started here with the generated ``prometheus.yml`` (its targets, relabelling
   and the collection's rules; the scrape interval is the role's variable, 2 s here), scrapes the exporters,
   the node_exporters and the engines over the cluster network: every target up, the engine's and the
   exporter's series per host and pool, node_exporter's host metrics per host.
3. Every panel of the collection's Grafana dashboard, after a few completions on each node, answers with
   finite values for both hosts, and is drawn from this Prometheus (``dashboard.py``; with
   ``PROVISION_DASHBOARD_PNG=PATH`` the module's whole history is drawn there at its end: the docs' figure).
4. Fault drills, at once so that their ``for:`` windows overlap: an NPU of node1 made unhealthy fires
   ``NpuUnhealthy`` after its real ``for:`` and resolves once cleared; node2's engine stopped fires
   ``VllmEngineDown`` after its ``for:`` and resolves once it serves again; node2's NPU-Exporter stopped
   fires ``NpuExporterDown`` after its ``for:`` and resolves once it is started again. The cluster is left
   healthy (every unit active, no alert).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.ascend.npu_smi import parse_npu_smi_info
from provision.paths import ansible_root
from provision_sim import hardware
from tests.helpers import Prometheus, journals, json_summary, mirror_vars
from tests.integration.serving.cluster import POOL_NAME, PORT, UNIT, Served, complete
from tests.integration.serving.dashboard import render

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.engine,
    pytest.mark.slow,
]

EXPORTER_UNIT = "npu-exporter.service"
EXPORTER_PORT = 8082  # the role's default, the vendor's
NODE_EXPORTER_PORT = 9100  # node_exporter's default, which both distributions' packages keep
# The distributions' node_exporter package and its own unit (provision_sim.mirror.node_exporter cites them).
NODE_EXPORTER = {"openeuler": ("golang-github-prometheus-node_exporter", "node_exporter.service"),
                 "ubuntu": ("prometheus-node-exporter", "prometheus-node-exporter.service")}  # fmt: skip
INTERVAL_S = 2  # monitoring_scrape_interval for this Prometheus (scrape and rule evaluation)
UPDATE_S = 5  # the exporter's -updateTime (the role's default): a fault shows within this
RULES = ansible_root() / "roles" / "monitoring" / "files" / "rules"
DASHBOARD = ansible_root() / "roles" / "monitoring" / "files" / "dashboards" / "provision-fleet.json"
NODES = ("node1", "node2")
FIGURE_TITLE = "provision-fleet on the simulated 2-node cluster (real vLLM CPU engines, simulated NPUs)"


def rule_for_s(alert: str) -> float:
    """The ``for:`` window of ``alert`` in the collection's rules, in seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    for path in RULES.glob("*.yml"):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                if rule.get("alert") == alert:
                    window = re.fullmatch(r"(\d+)([smh])", str(rule["for"]))
                    assert window, f"{path}: {alert} has for: {rule['for']}"
                    return float(window[1]) * units[window[2]]
    raise AssertionError(f"no alert {alert} in {RULES}")


@dataclass
class Monitored:
    served: Served
    dropin: Path
    first: dict[str, Any]
    second: dict[str, Any]
    exporter_gets: tuple[int, int]  # downloads of the binary after the first and the second apply
    prometheus: Prometheus
    timings: dict[str, float] = field(default_factory=dict)


def mirrored_exporter(served: Served) -> Path:
    """The binary the cluster's mirror serves (its folder, from ``mirror.json``). Read there rather than
    rebuilt: a rebuild follows the simulator's source as it is now, not as it was when the mirror was made."""
    info = json.loads((served.cluster.dir / "mirror.json").read_text())
    url = str(mirror_vars(served.cluster)["provision_mirror_url"])
    return Path(info["root"]) / url.removeprefix(info["url"]).strip("/") / "npu-exporter"


def exporter_gets(served: Served) -> int:
    """How many times the nodes downloaded the exporter binary (the mirror's log, http.server format)."""
    mirror = str(mirror_vars(served.cluster)["provision_mirror_url"]).split("/", 3)[3]
    log = (served.cluster.dir / "mirror.log").read_text(errors="replace")
    return len(re.findall(rf'"GET /{re.escape(mirror)}/npu-exporter HTTP', log))


@pytest.fixture(scope="module")
def monitored(served: Served, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Monitored]:
    dropin = tmp_path_factory.mktemp("monitoring")
    args = (
        "--json",
        "-e",
        "monitoring_enabled=true",
        "-e",
        "monitoring_node_exporter=true",
        "-e",
        f"monitoring_controller_dir={dropin}",
        "-e",
        f"monitoring_scrape_interval={INTERVAL_S}s",
    )
    timings: dict[str, float] = {}
    begun = time.monotonic()
    first = json_summary(
        served.apply(*args, playbook="monitoring"),
        "apply -p monitoring" + journals(served.cluster, EXPORTER_UNIT),
    )
    timings["first apply"] = time.monotonic() - begun
    gets = exporter_gets(served)
    begun = time.monotonic()
    second = json_summary(served.apply(*args, playbook="monitoring"), "second apply -p monitoring")
    timings["second apply"] = time.monotonic() - begun
    prometheus = Prometheus(dropin / "prometheus.yml", tmp_path_factory.mktemp("prometheus")).start()
    started = time.time()
    try:
        yield Monitored(served, dropin, first, second, (gets, exporter_gets(served)), prometheus, timings)
        figure = os.environ.get("PROVISION_DASHBOARD_PNG")
        if figure:  # the docs' figure: the module's whole history, its fault drills included
            end = time.time()
            render(
                json.loads(DASHBOARD.read_text()),
                lambda expr: prometheus.query_range(expr, started, end, INTERVAL_S),
                Path(figure),
                title=FIGURE_TITLE + ", through the fault drills",
            )
    finally:
        prometheus.stop()
        print("\nobservability: " + ", ".join(f"{what} {s:.1f} s" for what, s in timings.items()))


def node_exporter_of(served: Served, node: str) -> tuple[str, str]:
    """The node_exporter package and unit of ``node``'s distribution."""
    return NODE_EXPORTER[served.cluster.node(node).flavour.split("-")[0]]


def test_apply_installs_the_exporters_then_changes_nothing(monitored: Monitored) -> None:
    served = monitored.served
    hosts = monitored.first["hosts"]
    assert sorted(hosts) == list(NODES)
    assert all(stats["changed"] > 0 and stats["failed"] == 0 for stats in hosts.values()), hosts
    for node in NODES:
        assert served.sh(node, "systemctl", "is-active", EXPORTER_UNIT).strip() == "active"
        assert served.sh(node, "systemctl", "is-enabled", EXPORTER_UNIT).strip() == "enabled"
        unit = served.sh(node, "systemctl", "cat", EXPORTER_UNIT)
        # on the node's management address (its ansible_host), not every address
        ip = served.cluster.node(node).ip
        assert f"-ip={ip} -port={EXPORTER_PORT} -updateTime={UPDATE_S} -containerMode=docker" in unit
        package, unit = node_exporter_of(served, node)
        assert served.sh(node, "systemctl", "is-active", unit).strip() == "active", (node, unit)
        assert served.sh(node, "systemctl", "is-enabled", unit).strip() == "enabled", (node, unit)
        if unit == "node_exporter.service":  # openEuler's layout: its unit, binary and user
            assert served.sh(node, "rpm", "-q", "--qf", "%{NAME}", package) == package
            assert "ExecStart=/usr/sbin/node_exporter $OPTIONS" in served.sh(node, "systemctl", "cat", unit)
            pid = served.sh(node, "systemctl", "show", "-p", "MainPID", "--value", unit).strip()
            assert served.sh(node, "stat", "-c", "%U", f"/proc/{pid}").strip() == "node_exporter"
        else:
            status = served.sh(node, "dpkg-query", "-W", "-f", "${Status}", package)
            assert status == "install ok installed", (node, status)
    installed = {served.sh(n, "sha256sum", "/usr/local/bin/npu-exporter").split()[0] for n in NODES}
    binary = mirrored_exporter(served)
    mirrored = hashlib.sha256(binary.read_bytes()).hexdigest()
    assert f"{mirrored}  npu-exporter" in (binary.parent / "sha256sums.txt").read_text().splitlines()
    assert installed == {mirrored}, "both nodes run the mirror's binary"

    changed = {host: stats["changed"] for host, stats in monitored.second["hosts"].items()}
    assert changed == {"node1": 0, "node2": 0}, "the second apply changed nothing"
    assert monitored.exporter_gets == (2, 2), "one download per node, none by the second apply"

    exporters = json.loads((monitored.dropin / "targets" / "npu-exporter.json").read_text())
    hosts_metrics = json.loads((monitored.dropin / "targets" / "node.json").read_text())
    engines = json.loads((monitored.dropin / "targets" / "vllm.json").read_text())
    ips = {node: served.cluster.node(node).ip for node in NODES}
    assert [(t["targets"], t["labels"]["host"]) for t in exporters] == [
        ([f"{ips[n]}:{EXPORTER_PORT}"], n) for n in NODES
    ]
    assert [(t["targets"], t["labels"]["host"], t["labels"]["pool"]) for t in engines] == [
        ([f"{ips[n]}:{PORT}"], n, POOL_NAME) for n in NODES
    ]
    assert [(t["targets"], t["labels"]["host"]) for t in hosts_metrics] == [
        ([f"{ips[n]}:{NODE_EXPORTER_PORT}"], n) for n in NODES
    ]
    for name in ("npu.yml", "targets.yml", "vllm.yml"):
        assert (monitored.dropin / "rules" / name).read_bytes() == (RULES / name).read_bytes()
    # smollm2-cpu sets no ttft_slo_ms: each instance records the role's default, 2000 ms.
    (slo,) = yaml.safe_load((monitored.dropin / "rules" / "slo.yml").read_text())["groups"]
    assert [(r["expr"], r["labels"]["host"], r["labels"]["pool"]) for r in slo["rules"]] == [
        ("vector(2)", n, POOL_NAME) for n in NODES
    ]
    assert (monitored.dropin / "dashboards" / "provision-fleet.json").is_file()


def test_prometheus_has_every_target_up_and_the_series_per_host_and_pool(monitored: Monitored) -> None:
    prometheus, served = monitored.prometheus, monitored.served
    begun = time.monotonic()

    def all_up() -> bool:
        found = prometheus.targets()
        return len(found) == 6 and all(t["health"] == "up" for t in found)

    monitored.timings["every target up"] = prometheus.wait(
        "every target up",
        all_up,
        timeout=60,
        detail=lambda: str([(t["scrapeUrl"], t["health"], t["lastError"]) for t in prometheus.targets()]),
    )
    targets = {(t["labels"]["job"], t["labels"]["host"]): t["scrapeUrl"] for t in prometheus.targets()}
    ips = {node: served.cluster.node(node).ip for node in NODES}
    assert targets == {
        **{("npu-exporter", n): f"http://{ips[n]}:{EXPORTER_PORT}/metrics" for n in NODES},
        **{("vllm", n): f"http://{ips[n]}:{PORT}/metrics" for n in NODES},
        **{("node", n): f"http://{ips[n]}:{NODE_EXPORTER_PORT}/metrics" for n in NODES},
    }

    def per_host(expr: str) -> dict[str, list[dict[str, str]]]:
        out: dict[str, list[dict[str, str]]] = {}
        for series in prometheus.query(expr):
            out.setdefault(series["metric"]["host"], []).append(series["metric"])
        return out

    prometheus.wait("the engines' series", lambda: len(per_host("vllm:num_requests_running")) == 2)
    running = per_host("vllm:num_requests_running")
    for node in NODES:
        (series,) = running[node]
        assert (series["pool"], series["profile"]) == (POOL_NAME, "smollm2-cpu"), series
        assert series["model"] == series["model_name"], "the target's model is the name vLLM serves"
        assert series["instance"] == f"{ips[node]}:{PORT}"

    prometheus.wait("the NPU series", lambda: len(per_host("npu_chip_info_hbm_used_memory")) == 2)
    hbm = per_host("npu_chip_info_hbm_used_memory")
    npus = len(json.loads(served.sh("node1", "cat", hardware.HW_CONFIG))["npus"])
    pooled = per_host(f'npu_chip_info_hbm_used_memory{{pool="{POOL_NAME}"}}')
    pool_npus = [str(d) for p in served.settings()["npu_pools_list"] for d in p["devices"]]
    for node in NODES:
        assert len(hbm[node]) == npus, hbm[node]
        assert [s["id"] for s in pooled[node]] == pool_npus, "the pool's NPU got its pool label"
    # node_exporter's host metrics, a series per host (node_load1, MemAvailable: default collectors)
    begun_node = time.monotonic()
    prometheus.wait("the host series", lambda: len(per_host("node_memory_MemAvailable_bytes")) == 2)
    for metric in ("node_memory_MemAvailable_bytes", "node_load1"):
        found = {s["metric"]["host"]: s for s in prometheus.query(metric)}
        assert sorted(found) == list(NODES), (metric, found)
        for node in NODES:
            assert found[node]["metric"]["job"] == "node", found[node]
            assert found[node]["metric"]["instance"] == f"{ips[node]}:{NODE_EXPORTER_PORT}", found[node]
            assert math.isfinite(float(found[node]["value"][1])), found[node]
        if metric.startswith("node_memory"):
            assert all(float(s["value"][1]) > 0 for s in found.values()), found
    monitored.timings["host series"] = time.monotonic() - begun_node
    # The SLO each VllmTtftP99OverSlo compares with, recorded by the generated rules/slo.yml.
    prometheus.wait("the SLO series", lambda: len(per_host("provision:ttft_slo_seconds")) == 2)
    slo = {s["metric"]["host"]: s for s in prometheus.query("provision:ttft_slo_seconds")}
    for node in NODES:
        assert slo[node]["metric"]["pool"] == POOL_NAME and float(slo[node]["value"][1]) == 2.0, slo
    assert prometheus.api("alerts")["alerts"] == [], "a healthy cluster has no alert pending"
    monitored.timings["series"] = time.monotonic() - begun


def test_every_dashboard_panel_shows_both_hosts_and_is_drawn(monitored: Monitored, tmp_path: Path) -> None:
    prometheus, served = monitored.prometheus, monitored.served
    begun = time.monotonic()
    for node in NODES:  # the rates and latency quantiles need requests inside their windows
        for _ in range(3):
            assert complete(served.url(node))
    dashboard = json.loads(DASHBOARD.read_text())
    targets = [(panel["title"], t["expr"]) for panel in dashboard["panels"] for t in panel["targets"]]
    missing: dict[str, set[str]] = {}

    def every_query_answers_for_both_hosts() -> bool:
        missing.clear()
        for title, expr in targets:
            answered = prometheus.query(expr)
            hosts = {s["metric"].get("host") for s in answered if math.isfinite(float(s["value"][1]))}
            if not set(NODES) <= hosts:
                missing[f"{title}: {expr}"] = set(NODES) - hosts
        return not missing

    def lacking() -> str:
        return "\n".join(
            f"  panel {query} lacks {', '.join(sorted(hosts))}" for query, hosts in sorted(missing.items())
        )

    # two scrapes after the requests make a rate; then every panel has its values (else: which lack which)
    prometheus.wait(
        f"every dashboard query for {NODES}", every_query_answers_for_both_hosts, 60, detail=lacking
    )
    assert not missing, missing
    out = tmp_path / "dashboard.png"
    end = time.time()
    drawn = render(
        dashboard,
        lambda expr: prometheus.query_range(expr, end - 600, end, INTERVAL_S),
        out,
        title=FIGURE_TITLE,
    )
    assert set(drawn) == {panel["title"] for panel in dashboard["panels"]}
    assert all(count >= len(NODES) for count in drawn.values()), drawn
    assert out.read_bytes().startswith(b"\x89PNG"), out
    monitored.timings["dashboard"] = time.monotonic() - begun


def test_fault_drills_fire_their_alerts_within_for_and_resolve(monitored: Monitored) -> None:
    prometheus, served = monitored.prometheus, monitored.served
    npu = next(iter(served.settings()["npu_pools_list"]))["devices"][0]  # the pool's NPU on node1
    npu_for, engine_for = rule_for_s("NpuUnhealthy"), rule_for_s("VllmEngineDown")
    exporter_for = rule_for_s("NpuExporterDown")
    slack = 10.0  # the polling here and a loaded 2-core machine

    def state(alert: str, **labels: str) -> str:
        found = [a for a in prometheus.alerts(alert) if labels.items() <= a["labels"].items()]
        return str(found[0]["state"]) if found else ""

    root = served.cluster.node("node1").root
    assert prometheus.api("alerts")["alerts"] == [], "nothing pending before the drills"
    begun = time.monotonic()
    hardware.set_faults(root, {"npu_health": {str(npu): "Critical"}})
    # Each window counts from before its stop was sent: a scrape may see the port closed before the
    # command's SSH round trip returns, so the moment it returns is later than the fault began.
    stopped = time.monotonic()
    served.sh("node2", "systemctl", "stop", UNIT)  # returns once the engine's port is closed
    exporter_stopped = time.monotonic()
    served.sh("node2", "systemctl", "stop", EXPORTER_UNIT)  # node2's: node1's reports the NPU fault
    try:
        # the NPU: health 0 within -updateTime and a scrape, pending, firing once for: has passed
        unhealthy = {"host": "node1", "id": str(npu), "pool": POOL_NAME}
        prometheus.wait(
            "NpuUnhealthy pending",
            lambda: state("NpuUnhealthy", **unhealthy) == "pending",
            UPDATE_S + 3 * INTERVAL_S + slack - (time.monotonic() - begun),
        )
        prometheus.wait(
            "NpuUnhealthy firing",
            lambda: state("NpuUnhealthy", **unhealthy) == "firing",
            npu_for + UPDATE_S + 3 * INTERVAL_S + slack - (time.monotonic() - begun),
        )
        fired = time.monotonic() - begun
        assert fired >= npu_for, (
            f"NpuUnhealthy fired {fired:.0f} s after the fault, before its for: {npu_for:.0f} s"
        )
        (alert,) = prometheus.alerts("NpuUnhealthy")
        assert (
            alert["labels"]["severity"] == "critical"
            and "npu-smi info -t health" in alert["annotations"]["runbook"]
        )
        hardware.set_faults(root, {"npu_health": None})
        cleared = time.monotonic()
        prometheus.wait(
            "NpuUnhealthy resolved",
            lambda: not prometheus.alerts("NpuUnhealthy"),
            UPDATE_S + 2 * INTERVAL_S + slack,
        )
        monitored.timings["NpuUnhealthy firing"] = fired
        monitored.timings["NpuUnhealthy resolved"] = time.monotonic() - cleared

        # node2's engine and exporter: their targets down at the next scrape, each alert firing once its for:
        # has passed (watched together: their windows end within seconds of each other)
        down = {"host": "node2", "pool": POOL_NAME}
        drills = {
            "VllmEngineDown": (down, stopped, engine_for),
            "NpuExporterDown": ({"host": "node2"}, exporter_stopped, exporter_for),
        }
        fired_after: dict[str, float] = {}

        def both_firing() -> bool:
            for name, (labels, since, _) in drills.items():
                if name not in fired_after and state(name, **labels) == "firing":
                    fired_after[name] = time.monotonic() - since
            return len(fired_after) == len(drills)

        left = max(engine_for, exporter_for) + 2 * INTERVAL_S + slack - (time.monotonic() - stopped)
        prometheus.wait("VllmEngineDown and NpuExporterDown firing", both_firing, left)
        monitored.timings["VllmEngineDown firing"] = fired_after["VllmEngineDown"]
        monitored.timings["NpuExporterDown firing"] = fired_after["NpuExporterDown"]
        for name, (_, _, window) in drills.items():
            assert fired_after[name] >= window, (
                f"{name} fired {fired_after[name]:.0f} s after, before its for:"
            )
        # the exporter's bound: for: + one scrape interval (+ the rule evaluation after it, the polling)
        assert fired_after["NpuExporterDown"] <= exporter_for + INTERVAL_S + slack, fired_after
        assert [a["labels"]["host"] for a in prometheus.alerts("VllmEngineDown")] == ["node2"]
        (alert,) = prometheus.alerts("NpuExporterDown")
        runbook = alert["annotations"]["runbook"]
        assert alert["labels"]["severity"] == "warning" and "journalctl -u npu-exporter on node2" in runbook

        served.sh("node2", "systemctl", "start", EXPORTER_UNIT)
        exporter_started = time.monotonic()
        prometheus.wait(
            "NpuExporterDown resolved",
            lambda: not prometheus.alerts("NpuExporterDown"),
            2 * INTERVAL_S + slack,
        )
        monitored.timings["NpuExporterDown resolved"] = time.monotonic() - exporter_started
    finally:
        hardware.set_faults(root, {"npu_health": None})
        served.sh("node2", "systemctl", "start", UNIT)
        served.sh("node2", "systemctl", "start", EXPORTER_UNIT)
    restarted = time.monotonic()
    served.wait_ready("node2")
    prometheus.wait(
        "VllmEngineDown resolved", lambda: not prometheus.alerts("VllmEngineDown"), 2 * INTERVAL_S + slack
    )
    monitored.timings["node2 serving again"] = time.monotonic() - restarted
    assert prometheus.api("alerts")["alerts"] == [], "the cluster is left healthy"
    for node in NODES:
        assert served.sh(node, "systemctl", "is-active", EXPORTER_UNIT).strip() == "active"


# Last: its bench load can leave a latency alert pending, which the fault drills must not start with.
def test_npu_utilisation_follows_the_engine_load_and_rests_at_idle(monitored: Monitored) -> None:
    """The pool's NPU on node1 is held by its engine's container: under ``provision bench`` load its AI-core
    utilisation rises in the exporter's ``npu_chip_info_utilization`` (so in Prometheus, the dashboard and
    the autoscaling drill) and in ``npu-smi info``, and falls back once the load stops."""
    prometheus, served = monitored.prometheus, monitored.served
    (device,) = next(p["devices"] for p in served.settings()["npu_pools_list"] if p["name"] == POOL_NAME)
    expr = f'npu_chip_info_utilization{{host="node1",pool="{POOL_NAME}"}}'

    def now() -> float:
        (series,) = prometheus.query(expr)
        return float(series["value"][1])

    def smi() -> int | None:
        return parse_npu_smi_info(served.sh("node1", "npu-smi", "info")).npu(device).aicore_pct

    prometheus.wait("the pool's NPU utilisation", lambda: prometheus.query(expr), timeout=60)
    # at rest: the idle engine's own polling is all the chip's holder does (a few exporter refreshes)
    rest: list[float] = []
    for _ in range(3):
        rest.append(now())
        time.sleep(UPDATE_S)
    rest_smi = smi()
    assert rest_smi is not None
    bench = served.bench_load("node1", prompts=48, concurrency=8)
    try:
        rose_s = prometheus.wait(
            "the utilisation under load", lambda: now() >= max(rest) + 20, timeout=180, every=1
        )
        loaded, loaded_smi = now(), smi()
    finally:
        out, err = bench.communicate(timeout=900)
    assert bench.returncode == 0, f"{out[-2000:]}\n{err[-2000:]}"
    assert loaded_smi is not None and loaded_smi >= rest_smi + 10, (rest_smi, loaded_smi)
    fell_s = prometheus.wait(
        "the utilisation back at rest", lambda: now() <= max(rest) + 5, timeout=120, every=1
    )
    assert all(float(v).is_integer() for v in (*rest, loaded)), "whole percents, as DCMI gives them"
    monitored.timings["utilisation rose under load"] = rose_s
    monitored.timings["utilisation back at rest"] = fell_s
    print(
        f"\nNPU utilisation node1 chip {device}: rest {rest} %, under load {loaded} % (npu-smi {rest_smi}"
        f" -> {loaded_smi} %), rose in {rose_s:.1f} s, back in {fell_s:.1f} s after the load"
    )
