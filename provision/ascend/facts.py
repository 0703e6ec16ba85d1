"""Node facts about Ascend hardware, from one read-only shell probe run on the node.

``PROBE_SCRIPT`` prints labelled sections (PCI view, ``npu-smi info``, driver/firmware ``version.info``,
``/etc/ascend_install.info``, ``df``); ``facts_from_probe()`` parses them on the controller with the
parsers of this package. The ``ascend_facts`` action plugin runs the probe; tests can feed it text.

PCI view: the real ``lspci -n -d 19e5:`` when pciutils is installed, else the same numeric lines made
from ``/sys/bus/pci/devices/*/{vendor,device,class,revision}`` (what lspci itself reads).
"""

from __future__ import annotations

from typing import Any

from provision.ascend.hardware import model as hardware_model
from provision.ascend.hardware import model_for_pci_id
from provision.ascend.npu_smi import ParseError, dcmi_error_code, parse_npu_smi_info
from provision.ascend.pci import ascend_devices, ascend_model, parse_lspci
from provision.ascend.versions import parse_ascend_install_info, parse_key_equals
from provision.scripts import node_script

MARK = "@@@provision "
SECTION_FUNCTION = f"sec() {{ printf '\\n%s%s\\n' '{MARK}' \"$1\"; }}"
"""The shell function every probe script prints its sections with (``sec LABEL``)."""

# Positional arguments after the script: the paths whose free space to report.
PROBE_SCRIPT = node_script("ascend_probe.sh")


def sections(text: str) -> list[tuple[str, str]]:
    """``(label, body)`` of every section of a probe's output, in order (lines ``MARK label`` open one).

    The probes (this module's, ``ascend_state``'s, the HCCN gate's) print their sections with the shell
    function ``sec`` of :data:`SECTION_FUNCTION`.
    """
    out: list[tuple[str, str]] = []
    label: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        if line.startswith(MARK):
            if label is not None:
                out.append((label, "\n".join(body).strip("\n")))
            label, body = line[len(MARK) :].strip(), []
        elif label is not None:
            body.append(line)
    if label is not None:
        out.append((label, "\n".join(body).strip("\n")))
    return out


def split_sections(text: str) -> dict[str, str]:
    """Section label -> body of the probe output."""
    found = dict(sections(text))
    if "pci" not in found:
        raise ParseError("probe output has no PCI section")
    return found


def facts_from_probe(text: str) -> dict[str, Any]:
    """``ascend_npus`` and ``ascend_disk_free_mb`` facts from the probe output."""
    sections = split_sections(text)
    devices = ascend_devices(parse_lspci(sections["pci"]))
    models = sorted({m for d in devices if (m := ascend_model(d.device_id))})
    servers = sorted({s.name for d in devices if (s := model_for_pci_id(d.device_id))})
    npus: dict[str, Any] = {
        # one PCI function per chip: 16 on an Atlas A3 (8 NPUs x 2), 8 on an A2
        "count": len(devices),
        "model": models[0] if len(models) == 1 else (", ".join(models) or None),
        "hardware_model": servers[0] if len(servers) == 1 else None,
        # the NPU line the vendor's file and image names use (910b, a3, 310p): the roles' default
        "line": hardware_model(servers[0]).base_image_tag if len(servers) == 1 else None,
        "pci_device_ids": sorted({f"0x{d.device_id:04x}" for d in devices if d.device_id is not None}),
        "bus_ids": [d.bus_id for d in devices],
        "npu_smi": None,
        "npu_smi_error": None,
        "driver_version": None,
        "firmware_version": None,
        "driver_install_path": None,
        # Driver_Install_Status of /etc/ascend_install.info: the driver installer writes "complete" last
        "driver_install_status": None,
        "health": {},
        "all_healthy": None,
        "chips": [],
    }
    for label, body in sections.items():
        if label.startswith("npu-smi "):
            npus["npu_smi"] = label.removeprefix("npu-smi ")
            _npu_smi(npus, body, sections.get("npu-smi-rc", "1").strip())
        elif label == "file /usr/local/Ascend/driver/version.info":
            npus["driver_version"] = parse_key_equals(body).get("Version")
        elif label == "file /usr/local/Ascend/firmware/version.info":
            npus["firmware_version"] = parse_key_equals(body).get("Version")
        elif label == "file /etc/ascend_install.info":
            install_info = parse_ascend_install_info(body)
            npus["driver_install_path"] = install_info.driver_install_path
            npus["driver_install_status"] = install_info.driver_install_status
    return {"ascend_npus": npus, "ascend_disk_free_mb": _disk(sections.get("df", ""))}


def _npu_smi(npus: dict[str, Any], body: str, rc: str) -> None:
    code = dcmi_error_code(body)
    if rc != "0" or code is not None:
        last = body.strip().splitlines()[-1] if body.strip() else f"exit code {rc}"
        npus["npu_smi_error"] = last
        return
    info = parse_npu_smi_info(body)
    # Per chip, keyed by its logic id (the /dev/davinciN index: npu-smi's Phy-ID / Device column where an
    # NPU has several chips, else the NPU id), so that it counts what the PCI view counts.
    npus["health"] = {str(n.id if n.chip_device is None else n.chip_device): n.health for n in info.npus}
    npus["all_healthy"] = info.all_healthy
    npus["chips"] = [
        {
            "id": n.id,
            "chip_id": n.chip_id,
            "name": n.name,
            "health": n.health,
            "bus_id": n.bus_id,
            "power_w": n.power_w,
            "temp_c": n.temp_c,
            "hbm_used_mb": n.hbm_used_mb,
            "hbm_total_mb": n.hbm_total_mb,
            "aicore_pct": n.aicore_pct,
            "processes": [p.pid for p in n.processes],
        }
        for n in info.npus
    ]


def _disk(body: str) -> dict[str, int]:
    """``<path> <df -Pk row>`` lines -> free MiB for each path asked for (a missing path: its parent's)."""
    free: dict[str, int] = {}
    for line in body.splitlines():
        fields = line.split()
        if len(fields) >= 7 and fields[4].isdigit():
            free[fields[0]] = int(fields[4]) // 1024
    return free
