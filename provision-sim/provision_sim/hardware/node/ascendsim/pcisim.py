"""The PCI view: a fake ``/sys/bus/pci`` tree that the REAL ``lspci`` (pciutils) reads.

pciutils' default access method (``linux-sysfs``) lists ``/sys/bus/pci/devices/*`` and reads each
device's ``config``, ``vendor``, ``device``, ``class``, ``revision``, ``subsystem_vendor``,
``subsystem_device`` (``-v`` adds ``irq``, ``resource``, ``numa_node``; ``-k`` the ``driver`` link and
``modalias``). The boot unit generates this tree under ``/run/provision-sim/sysfs/bus/pci`` and
bind-mounts it over ``/sys/bus/pci`` inside the node, so plain ``lspci`` (once the pciutils package is
installed) and direct reads of ``/sys/bus/pci/devices/*/{vendor,device}`` both see the NPUs.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

KERNEL_DRIVER = "devdrv_device_driver"


def config_space(dev: Mapping[str, Any]) -> bytes:
    """A 256-byte type-0 (or type-1 for bridges) configuration header."""
    cfg = bytearray(256)
    vendor, device = int(dev["vendor"], 16), int(dev["device"], 16)
    cls = int(dev["class"], 16)
    struct.pack_into("<HH", cfg, 0x00, vendor, device)
    struct.pack_into("<H", cfg, 0x04, 0x0006)  # command: memory space + bus master
    cfg[0x08] = int(dev.get("revision", "0x00"), 16)
    cfg[0x09] = cls & 0xFF
    cfg[0x0A] = (cls >> 8) & 0xFF
    cfg[0x0B] = (cls >> 16) & 0xFF
    bridge = (cls >> 8) == 0x0604
    cfg[0x0E] = 0x01 if bridge else 0x00
    if not bridge:
        struct.pack_into(
            "<HH",
            cfg,
            0x2C,
            int(dev.get("subsystem_vendor", dev["vendor"]), 16),
            int(dev.get("subsystem_device", "0x0000"), 16),
        )
    return bytes(cfg)


def _modalias(dev: Mapping[str, Any]) -> str:
    cls = int(dev["class"], 16)
    return (
        f"pci:v{int(dev['vendor'], 16):08X}d{int(dev['device'], 16):08X}"
        f"sv{int(dev.get('subsystem_vendor', dev['vendor']), 16):08X}"
        f"sd{int(dev.get('subsystem_device', '0x0'), 16):08X}"
        f"bc{(cls >> 16) & 0xFF:02X}sc{(cls >> 8) & 0xFF:02X}i{cls & 0xFF:02X}"
    )


def devices_of(config: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every PCI function of the node: the NPUs plus ``extra_pci`` (host bridge, NIC...)."""
    pci = config["pci"]
    out: list[dict[str, Any]] = []
    for n in config["npus"]:
        out.append(
            {
                # a 300I Duo's chips have their own functions though npu-smi prints the card's address
                "address": str(n.get("pci_address") or n["bus_id"]).lower(),
                "vendor": pci["vendor"],
                "device": pci["device"],
                "class": pci["class"],
                "revision": pci["revision"],
                "subsystem_vendor": pci["subsystem_vendor"],
                "subsystem_device": pci["subsystem_device"],
                "numa_node": n.get("numa_node", -1),
                "npu": True,
            }
        )
    for extra in config.get("extra_pci") or []:
        out.append({**extra, "address": str(extra["address"]).lower(), "npu": False})
    return out


def write_tree(root: Path, devices: Sequence[Mapping[str, Any]], *, driver_loaded: bool) -> None:
    """Create ``root/{devices,drivers,slots}`` (``root`` plays ``/sys/bus/pci``)."""
    (root / "slots").mkdir(parents=True, exist_ok=True)
    drivers = root / "drivers"
    drivers.mkdir(parents=True, exist_ok=True)
    if driver_loaded:
        (drivers / KERNEL_DRIVER).mkdir(exist_ok=True)
    for dev in devices:
        d = root / "devices" / dev["address"]
        d.mkdir(parents=True, exist_ok=True)
        files = {
            "vendor": f"{dev['vendor']}\n",
            "device": f"{dev['device']}\n",
            "class": f"{dev['class']}\n",
            "revision": f"{dev.get('revision', '0x00')}\n",
            "subsystem_vendor": f"{dev.get('subsystem_vendor', dev['vendor'])}\n",
            "subsystem_device": f"{dev.get('subsystem_device', '0x0000')}\n",
            "irq": "0\n",
            "enable": "1\n",
            "numa_node": f"{dev.get('numa_node', -1)}\n",
            "modalias": _modalias(dev) + "\n",
            "resource": "0x0000000000000000 0x0000000000000000 0x0000000000000000\n" * 13,
            "uevent": f"PCI_CLASS={int(dev['class'], 16):X}\nPCI_SLOT_NAME={dev['address']}\n",
        }
        for name, text in files.items():
            (d / name).write_text(text, encoding="ascii")
        (d / "config").write_bytes(config_space(dev))
        link = d / "driver"
        if link.is_symlink():
            link.unlink()
        if driver_loaded and dev.get("npu"):
            os.symlink(f"../../drivers/{KERNEL_DRIVER}", link)
