"""``npu-exporter``: MindCluster NPU-Exporter's Prometheus endpoint, from the simulated NPU state.

Only the hardware access is simulated (the DCMI and hccn_tool reads become reads of ``hardware.json`` and
its fault knobs, on every cache refresh). What a scraper sees is the real exporter's:

* flags as the exporter's ``main.go`` declares them (Go's ``flag`` package: ``-port=8082`` or ``-port 8082``,
  one or two dashes): ``-ip`` (required: the real one refuses an empty or invalid listen address), ``-port``
  (default 8082, range 1025-40000), ``-updateTime`` (seconds between cache refreshes, 1-60, default 5),
  ``-logFile``, ``-logLevel``, ``-containerMode`` (docker, containerd, isula), ``-concurrency``, ``-version``;
* ``GET /`` the home page, ``GET /metrics`` the metrics in Prometheus' text format 0.0.4, every family with
  its ``# HELP``/``# TYPE`` line (all gauges), families sorted by name, label pairs sorted, each sample with
  the millisecond timestamp of the cache refresh, as client_golang prints const metrics with a timestamp;
* names, help texts and labels of the collectors in Ascend/mind-cluster
  ``component/npu-exporter/collector/metrics/collector_for_{npu,hbm,network}.go``: per-chip label set
  ``id, model_name, vdie_id, pcie_bus_info, namespace, pod_name, container_name`` (the last three empty for
  a process on the host), ``model_name`` as DCMI's ``<name>-<type>-<version>`` (``910B3-Ascend-V1``), health
  and link codes 1 healthy/UP, 0 not.

Fault knobs read (see :mod:`provision_sim.hardware`): ``npu_health`` (health_status 0 and the error code),
``ecc`` (the HBM ECC counts), ``link_down`` (link_status 0, network_status 0), ``net_health`` (network_status
0 unless Success/Init). Without a loaded driver it logs that DCMI failed to initialise and exits 1 (the real
one cannot start its device manager then).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import ip_address
from typing import Any

from . import common, npusmi

VERSION = "v7.3.0"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
CARD_LABELS = ("id", "model_name", "vdie_id", "pcie_bus_info", "namespace", "pod_name", "container_name")

# name -> help, as the collectors declare them (BuildDesc).
HELP: dict[str, str] = {
    "machine_npu_nums": "Amount of npu installed on the machine.",
    "npu_chip_info_utilization": "the ai core utilization",
    "npu_chip_info_overall_utilization": "the overall utilization of npu",
    "npu_chip_info_temperature": "the npu temperature",
    "npu_chip_info_power": "the npu power",
    "npu_chip_info_aicore_current_freq": "the npu ai core current frequency, unit is 'MHz'",
    "npu_chip_info_health_status": "the npu health status",
    "npu_chip_info_network_status": "the npu network health status",
    "npu_chip_info_name": "the Ascend npu name with value '1'",
    "npu_chip_info_error_code": "the npu error code",
    "npu_chip_info_hbm_used_memory": "the npu hbm used memory",
    "npu_chip_info_hbm_total_memory": "the npu hbm total memory",
    "npu_chip_info_hbm_utilization": "the npu hbm utilization",
    "npu_chip_info_hbm_ecc_enable_flag": "whether HBM ecc detection is enabled",
    "npu_chip_info_hbm_ecc_single_bit_error_cnt": "HBM Single Bit Error Count",
    "npu_chip_info_hbm_ecc_double_bit_error_cnt": "HBM Double Bit Error Count",
    "npu_chip_info_hbm_ecc_total_single_bit_error_cnt": "HBM Single Bit Aggregate Total Err Cnt",
    "npu_chip_info_hbm_ecc_total_double_bit_error_cnt": "HBM Double Bit Aggregate Total Err Cnt",
    "npu_chip_info_hbm_ecc_single_bit_isolated_pages_cnt": "HBM Single Bit Isolated Pages Count",
    "npu_chip_info_hbm_ecc_double_bit_isolated_pages_cnt": "HBM Double Bit Isolated Pages Count",
    "npu_chip_info_link_status": "the npu link status",
    "npu_exporter_version_info": "exporter version with value '1'",
}

# ECC metric -> the npu-smi -t ecc key the ``ecc`` fault knob sets.
ECC_KEYS = {
    "npu_chip_info_hbm_ecc_single_bit_error_cnt": "HBM Single Bit Error Count",
    "npu_chip_info_hbm_ecc_double_bit_error_cnt": "HBM Double Bit Error Count",
    "npu_chip_info_hbm_ecc_total_single_bit_error_cnt": "HBM Single Bit Aggregate Total Err Cnt",
    "npu_chip_info_hbm_ecc_total_double_bit_error_cnt": "HBM Double Bit Aggregate Total Err Cnt",
    "npu_chip_info_hbm_ecc_single_bit_isolated_pages_cnt": "HBM Single Bit Isolated Pages Count",
    "npu_chip_info_hbm_ecc_double_bit_isolated_pages_cnt": "HBM Double Bit Isolated Pages Count",
}

HOME = """<html>
   <head><title>NPU-Exporter</title></head>
   <body>
   <h1 align="center">NPU-Exporter</h1>
   <p align="center">Welcome to use NPU-Exporter,the Prometheus metrics url is http://ip:{port}/metrics: \
<a href="./metrics">Metrics</a></p>
   </body>
   </html>
"""

Sample = tuple[str, Mapping[str, str], float]


def _value(number: float) -> str:
    """A sample value as Go's strconv.FormatFloat(v, 'g', -1, 64) prints it in client_golang."""
    if float(number).is_integer() and abs(number) < 1e21:
        return str(int(number))
    return repr(float(number))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def chip_samples(config: Mapping[str, Any]) -> list[Sample]:
    """Every sample of the node's NPUs (name, labels, value), from ``hardware.json`` and its fault knobs."""
    knobs = common.faults(dict(config))
    down = {int(x) for x in knobs.get("link_down") or []}
    forced_net = knobs.get("net_health") or {}
    ecc = knobs.get("ecc") or {}
    model = f"{config.get('model', '910B3')}-Ascend-V1"
    load = npusmi.node_load(config)
    out: list[Sample] = []
    for npu in config.get("npus") or []:
        npu_id = int(npu["id"])
        labels = {
            "id": str(npu_id),
            "model_name": model,
            "vdie_id": str(npu.get("vdie_id", "")),
            "pcie_bus_info": str(npu.get("bus_id", "")),
            "namespace": "",
            "pod_name": "",
            "container_name": "",
        }
        status, code, _ = npusmi.npu_health(config, npu_id)
        net = str(forced_net.get(str(npu_id)) or ("Fault" if npu_id in down else "Success"))
        used = npusmi.hbm_used(npu)
        total = int(npu["hbm_total_mb"])
        counts = ecc.get(str(npu_id)) or {}
        share = load.get(npu_id, 0.0)
        busy = npusmi.loaded_aicore_pct(npu, share)
        values: dict[str, float] = {
            "npu_chip_info_utilization": float(busy),
            "npu_chip_info_overall_utilization": float(busy),
            "npu_chip_info_temperature": float(npu["temp_c"]),
            "npu_chip_info_power": npusmi.loaded_power_w(npu, share),
            "npu_chip_info_aicore_current_freq": float(npu.get("aicore_freq_mhz", 1800)),
            "npu_chip_info_health_status": 1.0 if status == "OK" else 0.0,
            "npu_chip_info_network_status": 1.0 if net in ("Success", "Init") else 0.0,
            "npu_chip_info_name": 1.0,
            "npu_chip_info_error_code": float(int(code, 16)) if code not in ("NA", "") else 0.0,
            "npu_chip_info_hbm_used_memory": float(used),
            "npu_chip_info_hbm_total_memory": float(total),
            "npu_chip_info_hbm_utilization": float(round(used * 100 / total)) if total else 0.0,
            "npu_chip_info_hbm_ecc_enable_flag": 1.0,
            "npu_chip_info_link_status": 0.0 if npu_id in down else 1.0,
        }
        for metric, key in ECC_KEYS.items():
            values[metric] = float(counts.get(key, 0))
        for name, value in values.items():
            if name == "npu_chip_info_name":
                # cardLabelForNpuName: the model_name label is called name in this one family.
                named = {("name" if k == "model_name" else k): v for k, v in labels.items()}
                out.append((name, named, value))
            else:
                out.append((name, labels, value))
    return out


def render(config: Mapping[str, Any], timestamp_ms: int) -> str:
    """The ``/metrics`` body for ``config`` at ``timestamp_ms``."""
    npus = len(config.get("npus") or [])
    families: dict[str, list[str]] = {name: [] for name in HELP}
    families["machine_npu_nums"].append(f"machine_npu_nums {npus}")
    families["npu_exporter_version_info"].append(
        f'npu_exporter_version_info{{exporterVersion="{VERSION}"}} 1'
    )
    for name, labels, value in chip_samples(config):
        pairs = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
        families[name].append(f"{name}{{{pairs}}} {_value(value)} {timestamp_ms}")
    lines: list[str] = []
    for name in sorted(families):
        if not families[name]:
            continue
        lines += [f"# HELP {name} {HELP[name]}", f"# TYPE {name} gauge", *families[name]]
    return "\n".join(lines) + "\n"


class Cache:
    """The metrics body, refreshed every ``update_s`` seconds (the exporter's ``-updateTime``)."""

    def __init__(self, update_s: int) -> None:
        self.update_s = update_s
        self._lock = threading.Lock()
        self._body = ""
        self._at = 0.0

    def body(self) -> str:
        with self._lock:
            now = time.time()
            if not self._body or now - self._at >= self.update_s:
                config = common.load_config() or {}
                self._body = render(config, int(now * 1000))
                self._at = now
            return self._body


class Flags:
    def __init__(self) -> None:
        self.ip = ""
        self.port = 8082
        self.update_time = 5
        self.log_file = "/var/log/mindx-dl/npu-exporter/npu-exporter.log"
        self.log_level = 0
        self.container_mode = "docker"
        self.concurrency = 5
        self.version = False


class FlagError(Exception):
    pass


_FLAG_NAMES = {
    "ip": ("ip", str),
    "port": ("port", int),
    "updateTime": ("update_time", int),
    "logFile": ("log_file", str),
    "logLevel": ("log_level", int),
    "containerMode": ("container_mode", str),
    "concurrency": ("concurrency", int),
    "containerd": (None, str),
    "endpoint": (None, str),
}


def parse_flags(argv: Sequence[str]) -> Flags:
    """Go ``flag`` syntax: ``-name=value``, ``-name value``, ``--name``; a bool flag takes no value."""
    flags = Flags()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-") or arg in ("-", "--"):
            raise FlagError(f"unexpected argument: {arg}")
        name, eq, value = arg.lstrip("-").partition("=")
        if name == "version":
            flags.version = value.lower() not in ("false", "0") if eq else True
            i += 1
            continue
        if name not in _FLAG_NAMES:
            raise FlagError(f"flag provided but not defined: -{name}")
        if not eq:
            if i + 1 >= len(argv):
                raise FlagError(f"flag needs an argument: -{name}")
            value = argv[i + 1]
            i += 1
        attr, kind = _FLAG_NAMES[name]
        try:
            parsed = kind(value)
        except ValueError:
            raise FlagError(f'invalid value "{value}" for flag -{name}: parse error') from None
        if attr:
            setattr(flags, attr, parsed)
        i += 1
    return flags


def validate(flags: Flags) -> str | None:
    """The fatal message the real exporter logs for these flags (None: they are valid)."""
    if not 1025 <= flags.port <= 40000:
        return "the port is invalid"
    try:
        ip_address(flags.ip)
    except ValueError:
        return "the listen ip is invalid"
    if not 1 <= flags.update_time <= 60:
        return "the updateTime is invalid"
    if flags.container_mode not in ("docker", "containerd", "isula"):
        return "containerMode is invalid"
    return None


def _log(log_file: str, level: str, msg: str) -> None:
    stamp = time.strftime("%Y/%m/%d %H:%M:%S")
    line = f"[{level}]     {stamp}.000000 1       npu-exporter/main.go:0    {msg}\n"
    sys.stderr.write(line)
    try:
        path = common.host_path(log_file)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            out.write(line)
    except OSError:
        pass


def serve(flags: Flags) -> int:
    cache = Cache(flags.update_time)
    home = HOME.format(port=flags.port)

    class Handler(BaseHTTPRequestHandler):
        server_version = "npu-exporter"

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, cache.body(), CONTENT_TYPE)
            elif path == "/":
                self._send(200, home, "text/html; charset=utf-8")
            else:
                self._send(404, "404 page not found\n", "text/plain; charset=utf-8")

        def _send(self, code: int, body: str, kind: str) -> None:
            data = body.encode("utf-8")
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer((flags.ip, flags.port), Handler)
    _log(flags.log_file, "INFO", f"listen on: {flags.ip}")
    _log(flags.log_file, "INFO", f"npu exporter starting and the version is {VERSION}")
    _log(flags.log_file, "INFO", f"Starting update cache every {flags.update_time} seconds")
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        flags = parse_flags(list(sys.argv[1:] if argv is None else argv))
    except FlagError as exc:
        sys.stderr.write(f"{exc}\nUsage of npu-exporter:\n")
        return 2
    if flags.version:
        print(f"NPU-exporter version: {VERSION}")
        return 0
    problem = validate(flags)
    if problem:
        _log(flags.log_file, "ERROR", problem)
        return 1
    if common.load_config() is None or common.loaded_driver() is None:
        _log(
            flags.log_file,
            "ERROR",
            f"new npu collector failed, error is dcmi init failed, error code: {npusmi.DRIVER_NOT_LOADED}",
        )
        return 1
    return serve(flags)
