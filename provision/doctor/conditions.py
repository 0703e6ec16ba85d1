"""The conditions over a node's collected facts that ``failures.yml`` signatures name.

Each condition takes the node's facts (:func:`provision.doctor.probe.collect`) and what the inventory
expects of the node (:class:`Expected`) and returns its evidence: one line per thing found wrong, empty
when the node is fine. A condition says nothing about what it cannot see (no npu-smi, no hccn_tool, no
docker): those are other entries' business.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from provision.systemd import describe_unit

DISK_MIN_FREE_MB = 1024
"""Below this many MiB free where the stack writes, a node is reported (the engine's logs and the CANN
plog alone grow by that much)."""


@dataclass(frozen=True, slots=True)
class Expected:
    """What the inventory wants of a node: the locked (or overridden) versions and its NPU count."""

    driver: str | None = None
    firmware: str | None = None
    cann: str | None = None
    nnal: str | None = None
    npu_count: int | None = None
    min_free_mb: int = DISK_MIN_FREE_MB
    disk_paths: tuple[str, ...] = field(default=())
    """Paths whose free space counts (empty: every path the probe measured)."""


Facts = Mapping[str, Any]
Condition = Callable[[Facts, Expected], list[str]]


def npu_foreign_process(node: Facts, expected: Expected) -> list[str]:
    """A process on an NPU whose unit is neither a vllm-<pool> unit nor the container of one."""
    ours = {f"docker-{c['id']}.scope" for name, c in (node.get("containers") or {}).items() if _vllm(name)}
    holders: Mapping[str, str | None] = node.get("holders") or {}
    found = []
    for chip in (node.get("npus") or {}).get("chips") or []:
        for pid in chip.get("processes") or []:
            unit = holders.get(str(pid))
            if unit is not None and (_vllm(unit) or unit in ours):
                continue
            where = f"unit {unit}" if unit else "no systemd unit (gone, or outside systemd)"
            found.append(f"NPU {chip['id']} chip {chip['chip_id']}: process {pid} ({where})")
    return found


def npu_unhealthy(node: Facts, expected: Expected) -> list[str]:
    """An NPU whose Health column in ``npu-smi info`` is not OK (Warning, Alarm, Critical...)."""
    return [
        f"NPU {chip['id']} chip {chip['chip_id']}: Health {chip['health']}"
        for chip in (node.get("npus") or {}).get("chips") or []
        if chip.get("health") not in (None, "OK")
    ]


def stack_off_lock(node: Facts, expected: Expected) -> list[str]:
    npus = node.get("npus") or {}
    cann_fact = (node.get("facts") or {}).get("cann")
    nnal = cann_fact.get("nnal") if isinstance(cann_fact, Mapping) else None
    toolkits = (node.get("cann") or {}).get("toolkits") or []
    found = []
    for what, have, want in (
        ("driver", npus.get("driver_version"), expected.driver),
        ("firmware", npus.get("firmware_version"), expected.firmware),
    ):
        if have and want and have != want:
            found.append(f"{what} {have} installed, the lock wants {want}")
    if toolkits and expected.cann and expected.cann not in toolkits:
        found.append(f"CANN toolkit {', '.join(toolkits)} installed, the lock wants {expected.cann}")
    if nnal and expected.nnal and nnal != expected.nnal:
        found.append(f"NNAL {nnal} recorded, the lock wants {expected.nnal}")
    return found


def hccn_link_down(node: Facts, expected: Expected) -> list[str]:
    ports = (node.get("hccn") or {}).get("npus") or {}
    return [
        f"hccn_tool -i {npu} -link -g: link status: {port['link']}"
        for npu, port in sorted(ports.items(), key=lambda kv: int(kv[0]))
        if port.get("link") not in (None, "UP")
    ]


LINK_STAT_TIME = "%a %b %d %H:%M:%S %Y"
"""The time of ``hccn_tool -link_stat -g`` (``Tue Jun  6 16:32:12 2023``, the node's local time)."""


def hccn_link_flapped(node: Facts, expected: Expected) -> list[str]:
    """An NPU port that is UP but went down and came back (its ``-link_stat -g`` records), in the window
    (``--since``, counted back from the ``current time`` the tool printed; every record without one)."""
    ports = (node.get("hccn") or {}).get("npus") or {}
    since = node.get("since_s")
    found = []
    for npu, stat in sorted((node.get("link_stats") or {}).items(), key=lambda kv: int(kv[0])):
        records = [tuple(r) for r in stat.get("records") or []]
        link = (ports.get(npu) or {}).get("link")
        if not records or records[0][1] != "LINK UP" or link not in (None, "UP"):
            continue  # down now (hccn_link_down's), or no record
        start = _time(stat.get("current_time"))
        start = start - timedelta(seconds=since) if start and since else None
        downs = [when for when, what in records if what == "LINK DOWN" and _after(when, start)]
        if downs:
            found.append(
                f"hccn_tool -i {npu} -link_stat -g: LINK DOWN at {downs[0]}, LINK UP again at "
                f"{records[0][0]}; link up count {stat.get('link_up_count')}"
            )
    return found


def hccn_link_slow(node: Facts, expected: Expected) -> list[str]:
    """A pair of NPU ports that the HCCN gate's bandwidth check (hccl_test, on a group's head) last found
    below its floor or failing, in the window (``--since``, by the record's age on the node's clock). A
    launch that never reached the peer measured no link: not this entry's."""
    record = node.get("links")
    if not isinstance(record, Mapping):
        return []
    since, age = node.get("since_s"), record.get("age_s")
    if since and isinstance(age, int) and age > since:
        return []
    when = f"{describe_age(age)} ago" if isinstance(age, int) else "at an unknown time"
    found = []
    for link in record.get("links") or []:
        if link.get("ok") or link.get("launch_failed"):
            continue
        device, peer_device = link.get("device"), link.get("peer_device")
        found.append(
            f"hccl_test all_reduce_test {when}: {link.get('host')} NPU {device} (port eth{device}) <-> "
            f"{link.get('peer')} NPU {peer_device} (port eth{peer_device}): {link.get('problem')}"
        )
    return found


def describe_age(seconds: int) -> str:
    """``42 s``, ``15 min``, ``3 h``, ``2 d``: how long ago, for a person."""
    if seconds < 120:
        return f"{max(seconds, 0)} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    if seconds < 172800:
        return f"{seconds // 3600} h"
    return f"{seconds // 86400} d"


def _time(text: object) -> datetime | None:
    try:
        return datetime.strptime(" ".join(str(text).split()), LINK_STAT_TIME)
    except ValueError:
        return None


def _after(when: str, start: datetime | None) -> bool:
    """Whether a record of ``when`` is in the window; one whose time cannot be read counts."""
    at = _time(when)
    return start is None or at is None or at >= start


NET_HEALTH_UNCHECKED = ("success", "init", "detect ip set")
"""``-net_health -g`` statuses that are no fault: fine, or never checked (no detection address yet)."""


def hccn_net_unhealthy(node: Facts, expected: Expected) -> list[str]:
    """An NPU port whose link is up but whose net health check fails (a port down is hccn_link_down's)."""
    ports = (node.get("hccn") or {}).get("npus") or {}
    return [
        f"hccn_tool -i {npu} -net_health -g: net health status: {port['net_health']}"
        for npu, port in sorted(ports.items(), key=lambda kv: int(kv[0]))
        if port.get("net_health") is not None
        and str(port["net_health"]).lower() not in NET_HEALTH_UNCHECKED
        and port.get("link") in (None, "UP")
    ]


def hccn_tls_mixed(node: Facts, expected: Expected) -> list[str]:
    ports = (node.get("hccn") or {}).get("npus") or {}
    switches = {npu: port["tls"] for npu, port in ports.items() if port.get("tls") is not None}
    if len(set(switches.values())) < 2:
        return []
    on = sorted((n for n, s in switches.items() if s), key=int)
    off = sorted((n for n, s in switches.items() if not s), key=int)
    return [f"TLS enabled on NPU {', '.join(on)}, disabled on NPU {', '.join(off)}"]


def device_nodes_missing(node: Facts, expected: Expected) -> list[str]:
    npus = node.get("npus") or {}
    if not npus.get("driver_version"):
        return []  # no driver installed: nothing to load yet (the driver role's business)
    present = set(node.get("devnodes") or [])
    count = expected.npu_count or int(npus.get("count") or 0)
    wanted = [f"/dev/davinci{i}" for i in range(count)]
    wanted += ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]
    missing = [d for d in wanted if d not in present]
    return [f"missing: {' '.join(missing)} (driver {npus['driver_version']} installed)"] if missing else []


def docker_runtime_unregistered(node: Facts, expected: Expected) -> list[str]:
    config = node.get("daemon_json")
    if config is None or not _loaded(node, "docker.service"):
        return []
    if isinstance(config, str):
        return [f"/etc/docker/daemon.json: {config}"]
    runtimes = config.get("runtimes") if isinstance(config, Mapping) else None
    if isinstance(runtimes, Mapping) and "ascend" in runtimes:
        return []
    return ['/etc/docker/daemon.json has no "ascend" in "runtimes"']


def docker_start_limit(node: Facts, expected: Expected) -> list[str]:
    state = (node.get("units") or {}).get("docker.service") or {}
    if state.get("Result") != "start-limit-hit":
        return []
    lines = [line for line in _journal(node, "docker.service") if "repeated too quickly" in line]
    return [f"docker.service: {describe_unit(state)}", *lines[-1:]]


def docker_down(node: Facts, expected: Expected) -> list[str]:
    state = (node.get("units") or {}).get("docker.service") or {}
    if not _loaded(node, "docker.service") or state.get("UnitFileState") != "enabled":
        return []
    if state.get("ActiveState") == "active" or state.get("Result") == "start-limit-hit":
        return []
    return [f"docker.service: {describe_unit(state)}", *_journal(node, "docker.service")[-3:]]


def vllm_unit_down(node: Facts, expected: Expected) -> list[str]:
    found = []
    for unit, state in sorted((node.get("units") or {}).items()):
        if not _vllm(unit) or state.get("LoadState") == "not-found":
            continue
        if state.get("ActiveState") == "active" and state.get("SubState") == "running":
            continue
        found.append(f"{unit}: {describe_unit(state)}")
        found += [f"  {line}" for line in _journal(node, unit)[-5:]]
    return found


def dkms_residue(node: Facts, expected: Expected) -> list[str]:
    builds = node.get("dkms_builds")
    kernel = node.get("kernel")
    if builds is None or not kernel:
        return []
    kernels = sorted({b.split("/", 1)[1] for b in builds if "/" in b and b.split("/", 1)[1] != "build"})
    if kernel in kernels:
        return []
    tail = [line for line in node.get("dkms_make_log") or [] if line.strip()][-2:]
    if kernels:
        return [f"/var/lib/dkms/davinci_ascend: built for {', '.join(kernels)}, not for the running {kernel}"]
    return [
        f"/var/lib/dkms/davinci_ascend: no completed build for {kernel} (a failed build's residue)",
        *tail,
    ]


def disk_low(node: Facts, expected: Expected) -> list[str]:
    free: Mapping[str, int] = node.get("disk_free_mb") or {}
    paths = expected.disk_paths or tuple(free)
    return [
        f"{path}: {free[path]} MiB free (below {expected.min_free_mb} MiB)"
        for path in paths
        if path in free and free[path] < expected.min_free_mb
    ]


CONDITIONS: dict[str, Condition] = {
    fn.__name__: fn
    for fn in (
        npu_foreign_process,
        npu_unhealthy,
        stack_off_lock,
        hccn_link_down,
        hccn_link_flapped,
        hccn_link_slow,
        hccn_net_unhealthy,
        hccn_tls_mixed,
        device_nodes_missing,
        docker_runtime_unregistered,
        docker_start_limit,
        docker_down,
        vllm_unit_down,
        dkms_residue,
        disk_low,
    )
}


def _vllm(name: str) -> bool:
    return name.startswith("vllm-")


def _loaded(node: Facts, unit: str) -> bool:
    return ((node.get("units") or {}).get(unit) or {}).get("LoadState") == "loaded"


def _journal(node: Facts, unit: str) -> list[str]:
    return list((node.get("journals") or {}).get(unit) or [])
