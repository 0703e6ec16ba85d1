"""Parser of ``lspci`` output and the Ascend PCI model map.

Accepted line forms (``lspci``, ``lspci -n``, ``lspci -nn``, each optionally with ``-D`` domains)::

    01:00.0 Processing accelerators: Huawei Technologies Co., Ltd. Device d802 (rev 20)
    01:00.0 1200: 19e5:d802 (rev 20)
    0000:01:00.0 Processing accelerators [1200]: Huawei Technologies Co., Ltd. Device [19e5:d802] (rev 20)

In the plain form the numeric ids are not printed: the vendor is recognised by its name
(``Huawei Technologies`` → 0x19e5) and the device id by lspci's ``Device xxxx`` fallback text.
Blank lines are skipped; any other line that does not start with a PCI address raises
:class:`ParseError`. Empty output (e.g. ``lspci | grep d802`` on a host without NPUs) → ``()``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from provision.ascend.hardware import pci_families
from provision.ascend.npu_smi import ParseError

__all__ = [
    "ASCEND_MODELS",
    "HUAWEI_VENDOR_ID",
    "PROCESSING_ACCELERATOR_CLASS",
    "PciDevice",
    "ascend_devices",
    "ascend_model",
    "normalize_bus_id",
    "parse_lspci",
]

HUAWEI_VENDOR_ID = 0x19E5
PROCESSING_ACCELERATOR_CLASS = 0x1200
ASCEND_MODELS: dict[int, str] = pci_families()
"""PCI device id (vendor 0x19e5) → Ascend chip family (``provision/data/hardware.yml``): 0xd802 = 910B,
0xd803 = 910_93 (Atlas A3), 0xd801 = 910, 0xd500 = 310P, 0xd100 = 310."""


def ascend_model(device_id: int | None) -> str | None:
    """``0xd802`` → ``"910B"``; None for an unknown or missing id."""
    return None if device_id is None else ASCEND_MODELS.get(device_id)


_BDF_RE = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{4,}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})\.(?P<fn>[0-7])$"
)


def normalize_bus_id(bus_id: str) -> str:
    """``"C1:00.0"`` / ``"0000:C1:00.0"`` → ``"0000:c1:00.0"`` (lspci and npu-smi spell it differently)."""
    m = _BDF_RE.match(bus_id.strip())
    if not m:
        raise ParseError(f"expected a PCI address like 0000:c1:00.0, got {bus_id!r}")
    domain = (m.group("domain") or "0000").lower()
    return f"{domain}:{m.group('bus').lower()}:{m.group('dev').lower()}.{m.group('fn')}"


@dataclass(frozen=True, slots=True)
class PciDevice:
    """One lspci line. ``slot`` as printed; ``bus_id`` normalised (``0000:01:00.0``)."""

    slot: str
    bus_id: str
    class_code: int | None
    class_name: str | None
    vendor_id: int | None
    device_id: int | None
    description: str
    revision: int | None

    @property
    def is_huawei(self) -> bool:
        return self.vendor_id == HUAWEI_VENDOR_ID

    @property
    def model(self) -> str | None:
        """Ascend model (``"910B"``) for a Huawei device id in :data:`ASCEND_MODELS`, else None."""
        return ascend_model(self.device_id) if self.is_huawei else None


_LINE_RE = re.compile(r"^(?P<slot>\S+)\s+(?P<rest>.*)$")
_NUMERIC_RE = re.compile(
    r"^(?P<cls>[0-9a-fA-F]{4}):\s+(?P<ven>[0-9a-fA-F]{4}):(?P<dev>[0-9a-fA-F]{4})"
    r"(?:\s+\(rev\s+(?P<rev>[0-9a-fA-F]+)\))?.*$"
)
_NAMED_RE = re.compile(r"^(?P<cname>[^:\[]+?)(?:\s+\[(?P<cls>[0-9a-fA-F]{4})\])?:\s+(?P<desc>.*)$")
_IDS_RE = re.compile(r"\[(?P<ven>[0-9a-fA-F]{4}):(?P<dev>[0-9a-fA-F]{4})\]")
_DEVICE_WORD_RE = re.compile(r"\bDevice\s+(?P<dev>[0-9a-fA-F]{4})\b")
_REV_RE = re.compile(r"\(rev\s+(?P<rev>[0-9a-fA-F]+)\)")
_VENDOR_NAMES = (("huawei technologies", HUAWEI_VENDOR_ID),)
_CLASS_NAMES = {"processing accelerators": PROCESSING_ACCELERATOR_CLASS}


def _parse_line(line: str) -> PciDevice:
    m = _LINE_RE.match(line.strip())
    if not m or not _BDF_RE.match(m.group("slot")):
        raise ParseError(
            f"expected an lspci line starting with a PCI address (01:00.0 ...), got {line.strip()!r}"
        )
    slot, rest = m.group("slot"), m.group("rest")
    num = _NUMERIC_RE.match(rest)
    if num:
        rev = num.group("rev")
        return PciDevice(
            slot=slot,
            bus_id=normalize_bus_id(slot),
            class_code=int(num.group("cls"), 16),
            class_name=None,
            vendor_id=int(num.group("ven"), 16),
            device_id=int(num.group("dev"), 16),
            description=rest,
            revision=int(rev, 16) if rev else None,
        )
    named = _NAMED_RE.match(rest)
    if not named:
        raise ParseError(f"expected an lspci line 'SLOT CLASS: DESCRIPTION', got {line.strip()!r}")
    desc = named.group("desc")
    class_name = named.group("cname").strip()
    cls = named.group("cls")
    ids = _IDS_RE.search(desc)
    vendor: int | None = None
    device: int | None = None
    if ids:
        vendor, device = int(ids.group("ven"), 16), int(ids.group("dev"), 16)
    else:
        low = desc.lower()
        vendor = next((vid for name, vid in _VENDOR_NAMES if name in low), None)
        word = _DEVICE_WORD_RE.search(desc)
        device = int(word.group("dev"), 16) if word else None
    rev_m = _REV_RE.search(desc)
    return PciDevice(
        slot=slot,
        bus_id=normalize_bus_id(slot),
        class_code=int(cls, 16) if cls else _CLASS_NAMES.get(class_name.lower()),
        class_name=class_name,
        vendor_id=vendor,
        device_id=device,
        description=desc,
        revision=int(rev_m.group("rev"), 16) if rev_m else None,
    )


def parse_lspci(text: str) -> tuple[PciDevice, ...]:
    """Parse ``lspci`` / ``lspci -n`` / ``lspci -nn`` output (any subset of lines, e.g. after grep)."""
    return tuple(_parse_line(line) for line in text.splitlines() if line.strip())


def ascend_devices(devices: Iterable[PciDevice]) -> tuple[PciDevice, ...]:
    """The Huawei devices whose device id is a known Ascend NPU (:data:`ASCEND_MODELS`)."""
    return tuple(d for d in devices if d.model is not None)
