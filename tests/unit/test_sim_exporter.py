"""The simulated MindCluster NPU-Exporter: the real families, help texts, labels and types (checked against
the real exporter's list, tests/fixtures/metrics/npu-exporter.txt, and linted by promtool), the fault knobs,
the vendor's flags, and the single-file binary of the mirror scraped over HTTP by a real Prometheus."""

from __future__ import annotations

import json
import random
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from provision_sim.hardware.node.ascendsim import exporter
from provision_sim.hardware.testroot import SimRoot
from provision_sim.mirror.exporter import EXPORTER_FILE, build_exporter
from provision_sim.mirror.run_files import write_sha256sums
from tests.helpers import Prometheus, metric_families, promtool

pytestmark = pytest.mark.unit

SAMPLE = re.compile(r"^(?P<name>[a-z_:]+)(\{(?P<labels>[^}]*)\})? (?P<value>\S+)( (?P<ts>\d+))?$")
CARD_LABELS = ["container_name", "id", "model_name", "namespace", "pcie_bus_info", "pod_name", "vdie_id"]


def _config(sim: SimRoot) -> dict[str, object]:
    data: dict[str, object] = json.loads(sim.path("/etc/provision-sim/hardware.json").read_text())
    return data


def samples(body: str) -> dict[tuple[str, str], float]:
    """(name, id) -> value of every per-NPU sample."""
    out: dict[tuple[str, str], float] = {}
    for line in body.splitlines():
        match = SAMPLE.match(line)
        if match and match["labels"]:
            npu = re.search(r'\bid="(\d+)"', match["labels"])
            if npu:
                out[(match["name"], npu[1])] = float(match["value"])
    return out


@pytest.fixture
def sim(tmp_path: Path) -> SimRoot:
    return SimRoot.create(tmp_path / "node", npus=8, model="910B3")


def test_families_are_the_real_exporters_with_help_and_type(sim: SimRoot) -> None:
    body = exporter.render(_config(sim), 1_700_000_000_000)
    real = metric_families("npu-exporter")
    helps = re.findall(r"^# HELP (\S+) (.+)$", body, re.M)
    types = re.findall(r"^# TYPE (\S+) (\S+)$", body, re.M)
    assert [name for name, _ in helps] == sorted(name for name, _ in helps) == [name for name, _ in types]
    assert {name for name, _ in helps} <= set(real)
    assert all(kind == real[name] == "gauge" for name, kind in types)
    assert ("npu_chip_info_health_status", "the npu health status") in helps
    assert "machine_npu_nums 8\n" in body
    line = next(line for line in body.splitlines() if line.startswith("npu_chip_info_hbm_total_memory{"))
    match = SAMPLE.match(line)
    assert match and match["ts"] == "1700000000000" and match["value"] == "65536"
    labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
    assert sorted(labels) == CARD_LABELS
    assert labels["model_name"] == "910B3-Ascend-V1" and labels["pcie_bus_info"] == "0000:C1:00.0"


def test_promtool_lints_the_output(sim: SimRoot) -> None:
    body = exporter.render(_config(sim), 1_700_000_000_000)
    done = subprocess.run(
        [promtool(), "check", "metrics"], input=body, capture_output=True, text=True, check=False
    )
    # Exit 3 is lint findings only (a parse error exits 1): the one finding is the vendor's camelCase label.
    vendor_quirk = "npu_exporter_version_info label names should be written in 'snake_case' not 'camelCase'"
    assert done.returncode == 3 and done.stderr.strip().splitlines() == [vendor_quirk], (
        done.stdout + done.stderr
    )
    broken = body.replace(
        'npu_chip_info_power{container_name=""', 'npu_chip_info_power{container_name=""""', 1
    )
    done = subprocess.run(
        [promtool(), "check", "metrics"], input=broken, capture_output=True, text=True, check=False
    )
    assert done.returncode == 1 and "parsing error" in done.stderr


def test_fault_knobs_reach_the_metrics(sim: SimRoot) -> None:
    healthy = samples(exporter.render(_config(sim), 0))
    assert {healthy[("npu_chip_info_health_status", str(i))] for i in range(8)} == {1.0}
    sim.set_faults(
        {
            "npu_health": {"3": "Critical"},
            "ecc": {"3": {"HBM Double Bit Error Count": 2}},
            "link_down": [5],
            "net_health": {"6": "Receive timeout"},
        }
    )
    faulty = samples(exporter.render(_config(sim), 0))
    assert faulty[("npu_chip_info_health_status", "3")] == 0.0
    assert faulty[("npu_chip_info_health_status", "2")] == 1.0
    assert faulty[("npu_chip_info_error_code", "3")] == 0x80CB8009
    assert faulty[("npu_chip_info_hbm_ecc_double_bit_error_cnt", "3")] == 2.0
    assert faulty[("npu_chip_info_link_status", "5")] == 0.0
    assert faulty[("npu_chip_info_network_status", "5")] == 0.0
    assert faulty[("npu_chip_info_link_status", "6")] == 1.0
    assert faulty[("npu_chip_info_network_status", "6")] == 0.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-ip=127.0.0.1", "-port=80"], "the port is invalid"),
        (["-port=8082"], "the listen ip is invalid"),
        (["-ip", "127.0.0.1", "-updateTime", "61"], "the updateTime is invalid"),
    ],
)
def test_the_vendors_flag_checks(argv: list[str], message: str) -> None:
    assert exporter.validate(exporter.parse_flags(argv)) == message


def test_go_flag_syntax() -> None:
    flags = exporter.parse_flags(
        ["--ip=10.0.0.1", "-port", "9100", "-updateTime=2", "-containerMode=containerd"]
    )
    assert (flags.ip, flags.port, flags.update_time, flags.container_mode) == (
        "10.0.0.1",
        9100,
        2,
        "containerd",
    )
    assert exporter.validate(flags) is None
    with pytest.raises(exporter.FlagError, match="flag provided but not defined: -bogus"):
        exporter.parse_flags(["-bogus=1"])


def _free_port() -> int:
    """A free loopback port the exporter accepts (1025-40000: the kernel's ephemeral ports lie above)."""
    for port in random.sample(range(20000, 40000), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port in 20000-40000")


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


def _wait(
    what: str, probe: Callable[[], object], proc: subprocess.Popen[str] | None = None, timeout: float = 30
) -> None:
    """Until ``probe()`` is true; fails with the process's stderr when ``proc`` exits first."""
    deadline = time.monotonic() + timeout
    last: OSError | None = None
    while True:
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"{what} exited {proc.returncode}: {proc.communicate()[1]}", pytrace=False)
        try:
            if probe():
                return
        except OSError as exc:
            last = exc
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not come up in {timeout:.0f} s: {last!r}", pytrace=False)
        time.sleep(0.2)


@pytest.fixture
def binary(tmp_path: Path) -> Path:
    """The mirror's npu-exporter, listed in sha256sums.txt."""
    mirror = tmp_path / "mirror"
    path = build_exporter(mirror)
    write_sha256sums(mirror)
    assert EXPORTER_FILE in (mirror / "sha256sums.txt").read_text()
    assert build_exporter(tmp_path / "again").read_bytes() == path.read_bytes()  # deterministic
    return path


@pytest.fixture
def served(sim: SimRoot, binary: Path) -> Iterator[tuple[SimRoot, int]]:
    """The binary serving a node root whose driver is loaded, on a free loopback port."""
    sim.path("/run/provision-sim").mkdir(parents=True, exist_ok=True)
    sim.path("/run/provision-sim/driver.json").write_text('{"driver_version": "25.5.1"}')
    port = _free_port()
    argv = [sys.executable, str(binary), "-ip=127.0.0.1", f"-port={port}", "-updateTime=1"]
    proc = subprocess.Popen(argv, env=sim.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait("npu-exporter", lambda: "machine_npu_nums 8" in _get(f"http://127.0.0.1:{port}/metrics"), proc)
        yield sim, port
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def test_the_binary_serves_the_metrics_and_home_page(served: tuple[SimRoot, int]) -> None:
    sim, port = served
    assert "Welcome to use NPU-Exporter" in _get(f"http://127.0.0.1:{port}/")
    assert "listen on: 127.0.0.1" in sim.path("/var/log/mindx-dl/npu-exporter/npu-exporter.log").read_text()
    sim.set_faults({"npu_health": {"1": "Alarm"}})
    _wait(
        "the fault in /metrics",
        lambda: samples(_get(f"http://127.0.0.1:{port}/metrics"))[("npu_chip_info_health_status", "1")] == 0,
    )


def test_without_a_loaded_driver_the_binary_exits_1(sim: SimRoot, binary: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(binary), "-ip=127.0.0.1", "-port=18082"],
        env=sim.env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 1 and "dcmi" in done.stderr.lower()


def test_a_real_prometheus_scrapes_it_with_the_pool_relabelling(
    served: tuple[SimRoot, int], tmp_path: Path
) -> None:
    """Debian's Prometheus, on a free loopback port with a temporary storage, scrapes the binary with the
    exporter job as the monitoring role writes it (a host label from the target, the pool from host and id)
    and evaluates the collection's rules: the NPU made unhealthy is pending in NpuUnhealthy."""
    _, port = served
    rules = Path(__file__).parents[2] / "roles/monitoring/files/rules"
    (tmp_path / "targets.json").write_text(
        json.dumps([{"targets": [f"127.0.0.1:{port}"], "labels": {"host": "node1", "stack": "default"}}])
    )
    relabel = {
        "source_labels": ["host", "id"],
        "separator": ";",
        "regex": "node1;(0|1|2|3)",
        "target_label": "pool",
        "replacement": "chat",
    }
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules / "*.yml")],
        "scrape_configs": [
            {
                "job_name": "npu-exporter",
                "file_sd_configs": [{"files": [str(tmp_path / "targets.json")]}],
                "metric_relabel_configs": [relabel],
            }
        ],
    }
    (tmp_path / "prometheus.yml").write_text(json.dumps(config))
    served[0].set_faults({"npu_health": {"2": "Critical"}})
    prometheus = Prometheus(tmp_path / "prometheus.yml", tmp_path).start()
    try:
        prometheus.wait("the exporter up", lambda: prometheus.query('up{job="npu-exporter"} == 1'))
        prometheus.wait("the NPU series", lambda: len(prometheus.query("npu_chip_info_hbm_used_memory")) == 8)
        series = prometheus.query("npu_chip_info_hbm_used_memory")
        pools = {str(s["metric"]["id"]): s["metric"].get("pool") for s in series}
        assert pools == {
            "0": "chat",
            "1": "chat",
            "2": "chat",
            "3": "chat",
            **{str(i): None for i in range(4, 8)},
        }
        assert {s["metric"]["host"] for s in series} == {"node1"}
        prometheus.wait("NpuUnhealthy pending", lambda: prometheus.alerts("NpuUnhealthy"))
        (unhealthy,) = prometheus.alerts("NpuUnhealthy")
        assert unhealthy["labels"]["id"] == "2" and unhealthy["labels"]["pool"] == "chat"
        assert unhealthy["state"] == "pending"
        # a wait that runs out says what its probe lacked (the dashboard test: which panel, which host)
        with pytest.raises(
            pytest.fail.Exception, match=r"no_such_metric: not within 0 s \(None\)\n  lacks node1\n"
        ):
            prometheus.wait(
                "no_such_metric",
                lambda: prometheus.query("no_such_metric"),
                0,
                detail=lambda: "  lacks node1",
            )
    finally:
        prometheus.stop()
