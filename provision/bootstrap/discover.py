"""What a node is: one read-only shell probe over SSH, parsed on the controller.

The probe prints labelled sections (the same ``@@@provision <label>`` format as
:data:`provision.ascend.facts.PROBE_SCRIPT`, which it runs at its end for the NPU part: PCI view from
``lspci -n -d 19e5:`` or ``/sys/bus/pci``, ``npu-smi info``, driver/firmware ``version.info``). Before that it
adds: ``uname``, ``/etc/os-release``, ``lscpu`` (or ``/proc/cpuinfo``), ``/proc/meminfo``, ``lsblk``, the NICs
from ``/sys/class/net`` with ``ip -o addr``, and python3. :func:`parse_discovery` turns the text into the
``bootstrap_facts`` written to host_vars; only values that stay the same from run to run are kept (no free
memory, temperatures or NPU health), so a second run finds nothing to change.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from provision.ascend.facts import PROBE_SCRIPT, facts_from_probe, split_sections
from provision.scripts import node_script

DISCOVERY_SCRIPT = node_script("bootstrap_discover.sh") + "\n" + PROBE_SCRIPT

# aarch64 CPU implementer/part ids (/proc/cpuinfo) of CPUs whose lscpu may print no model name.
ARM_CPUS = {(0x48, 0xD01): "Kunpeng-920"}


def discovery_command() -> str:
    """The probe as one ``sh -c`` command (run as root: ``npu-smi`` needs it)."""
    return f"sh -c {shlex.quote(DISCOVERY_SCRIPT)} sh"


def parse_discovery(text: str) -> dict[str, Any]:
    """The probe's output -> ``bootstrap_facts`` (plain data: str, int, bool, None, lists, dicts)."""
    sections = split_sections(text)
    uname = [*sections.get("uname", "").splitlines(), "", "", ""]
    os_release = _key_values(sections.get("os-release", ""), "=")
    lscpu = _key_values(sections.get("lscpu", ""), ":")
    npus = facts_from_probe(text)["ascend_npus"]
    python = sections.get("python", "").splitlines()
    return {
        "hostname": uname[2].strip() or None,
        "arch": uname[0].strip() or None,
        "kernel": uname[1].strip() or None,
        "os": {
            "id": os_release.get("ID"),
            "name": os_release.get("NAME"),
            "version": os_release.get("VERSION_ID"),
            "pretty_name": os_release.get("PRETTY_NAME"),
        },
        "cpu": _cpu(lscpu, sections.get("cpuinfo", "")),
        "memory_mb": _memory_mb(sections.get("meminfo", "")),
        "disks": _disks(sections.get("lsblk", "")),
        "nics": _nics(sections.get("nics", ""), sections.get("addresses", "")),
        "npus": {
            "count": npus["count"],
            "model": npus["model"],
            "pci_ids": [f"19e5:{d.removeprefix('0x')}" for d in npus["pci_device_ids"]],
            "bus_ids": npus["bus_ids"],
        },
        "npu_driver": {
            "installed": bool(npus["driver_version"] or npus["npu_smi"]),
            "driver_version": npus["driver_version"],
            "firmware_version": npus["firmware_version"],
            "npu_smi": npus["npu_smi"],
        },
        "python": {
            "path": python[0].strip() if python else None,
            "version": python[1].strip() if len(python) > 1 else None,
        },
    }


def _key_values(body: str, sep: str) -> dict[str, str]:
    """``KEY=value`` / ``Key: value`` lines; the first occurrence of a key wins; quotes removed."""
    out: dict[str, str] = {}
    for line in body.splitlines():
        key, found, value = line.partition(sep)
        if found and key.strip() and key.strip() not in out:
            out[key.strip()] = value.strip().strip('"').strip("'")
    return out


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    match = re.match(r"^\s*(\d+)", text)
    return int(match.group(1)) if match else None


def _cpu(lscpu: dict[str, str], cpuinfo: str) -> dict[str, Any]:
    info = _key_values("\n".join(cpuinfo.splitlines()[1:]), ":")
    model = lscpu.get("Model name") or info.get("model name")
    implementer = _int_any(info.get("CPU implementer")) or _int_any(lscpu.get("Vendor ID"))
    part = _int_any(info.get("CPU part"))
    if (not model or model == "-") and implementer is not None and part is not None:
        model = ARM_CPUS.get((implementer, part), model)
    count_line = cpuinfo.splitlines()[0] if cpuinfo.strip() else ""
    sockets = _int(lscpu.get("Socket(s)"))
    per_socket = _int(lscpu.get("Core(s) per socket")) or _int(lscpu.get("Core(s) per cluster"))
    return {
        "model": model or None,
        "vendor": lscpu.get("Vendor ID") or info.get("vendor_id"),
        "count": _int(lscpu.get("CPU(s)")) or _int(count_line),
        "sockets": sockets,
        "cores_per_socket": per_socket,
        "numa_nodes": _int(lscpu.get("NUMA node(s)")),
    }


def _int_any(text: str | None) -> int | None:
    """``0x48`` or ``72``; None for names such as ``HiSilicon``."""
    if not text:
        return None
    try:
        return int(text, 0)
    except ValueError:
        return None


def _memory_mb(body: str) -> int | None:
    values = _key_values(body, ":")
    total = _int(values.get("MemTotal"))
    return None if total is None else total // 1024


_PAIR = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _disks(body: str) -> list[dict[str, Any]]:
    """``lsblk -P`` pairs of whole disks (no loop, rom or ram devices)."""
    disks: list[dict[str, Any]] = []
    for line in body.splitlines():
        pairs = dict(_PAIR.findall(line))
        size = _int(pairs.get("SIZE"))
        if pairs.get("TYPE") != "disk" or not size or pairs.get("NAME", "").startswith("zram"):
            continue  # zram: swap in memory, not a disk
        disks.append(
            {
                "name": pairs.get("NAME"),
                "size_gb": round(size / 1e9),
                "model": (pairs.get("MODEL") or "").strip() or None,
                "rotational": pairs.get("ROTA") == "1",
            }
        )
    return disks


def _nics(body: str, addresses: str) -> list[dict[str, Any]]:
    by_name: dict[str, list[str]] = {}
    for line in addresses.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] in ("inet", "inet6"):
            name = fields[1].split("@")[0]
            if fields[2] == "inet6" and fields[3].startswith("fe80:"):
                continue
            by_name.setdefault(name, []).append(fields[3])
    nics: list[dict[str, Any]] = []
    for line in body.splitlines():
        parts = line.split("|")
        if len(parts) != 6 or not parts[0]:
            continue
        name, mac, state, mtu, speed, driver = parts
        speed_mbps = _int(speed)
        nics.append(
            {
                "name": name,
                "mac": mac or None,
                "state": state or None,
                "mtu": _int(mtu),
                "speed_mbps": speed_mbps if speed_mbps and speed_mbps > 0 else None,
                "driver": driver or None,
                "addresses": by_name.get(name, []),
            }
        )
    return nics
