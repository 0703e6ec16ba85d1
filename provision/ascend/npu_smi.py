"""Parsers of ``npu-smi`` output (Huawei Ascend NPU management tool).

Every function takes the tool's stdout as one string and returns frozen dataclasses. The parsers
work BY STRUCTURE, never by character columns, because column widths, padding, tabs, trailing
spaces and blank lines differ between driver versions:

* ``npu-smi info``: rows are split on ``|``; the two lines of each NPU block are paired; the
  values in a cell are matched to the column labels of the table header (so a 310P table without
  an HBM column parses as well); ``NA`` and ``-`` become ``None``.
* ``npu-smi info -t <type>`` (board, usages, power, temp, health, common, ecc) and ``info -l``:
  ``key : value`` lines, split on the first colon; keys are compared case- and space-insensitively.
  A card-level output (``-i N`` without ``-c``) holds one blank-line-separated section per chip, marked
  by its ``Chip ID`` line (printed after the chip's values by ``-t usages|power|temp|ecc``, before them by
  ``-t common``), and sections of the management chips marked ``Chip Name : mcu|MCU|3559`` (npu-smi's
  own printf calls, hicann/driver ``npucli/src/npu_card_info.c``). :func:`parse_npu_smi_sections` splits
  them; every typed result carries ``chips``, one value per NPU chip, so the second chip of a 300I Duo
  or of an A3 NPU is not lost behind the first.
* ``npu-smi info -m``: whitespace-separated columns; the chip name (last column) may hold spaces.
* ``npu-smi info -t topo``: a matrix of ``NPUn`` labels plus an optional ``CPU Affinity`` column.

Errors: unrecognised input raises :class:`ParseError` (a ``ValueError``) whose message names the
output that was expected. When npu-smi printed its DCMI initialisation failure instead of data
(``dcmi module initialize failed. ret is -8005``: the device is held by another container), every
npu-smi parser raises :class:`DcmiInitError`, a subclass of :class:`ParseError` carrying
``.code`` (e.g. ``-8005``). :func:`dcmi_error_code` only detects it and returns the code or ``None``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from provision.errors import ProvisionError

__all__ = [
    "DCMI_DEVICE_BUSY",
    "HEALTH_SEVERITY",
    "POWER_KEYS",
    "BoardInfo",
    "ChipSection",
    "CommonInfo",
    "DcmiInitError",
    "EccInfo",
    "HealthInfo",
    "KeyValues",
    "NpuChipMapping",
    "NpuList",
    "NpuListEntry",
    "NpuProcess",
    "NpuSmiInfo",
    "NpuStatus",
    "NpuTopology",
    "ParseError",
    "PowerInfo",
    "SuperPodInfo",
    "TempInfo",
    "TopoRow",
    "UsagesInfo",
    "dcmi_error_code",
    "parse_mcu_version",
    "parse_npu_smi_board",
    "parse_npu_smi_chip_map",
    "parse_npu_smi_common",
    "parse_npu_smi_ecc",
    "parse_npu_smi_health",
    "parse_npu_smi_info",
    "parse_npu_smi_key_values",
    "parse_npu_smi_list",
    "parse_npu_smi_power",
    "parse_npu_smi_sections",
    "parse_npu_smi_spod_info",
    "parse_npu_smi_temp",
    "parse_npu_smi_topo",
    "parse_npu_smi_usages",
]


# --------------------------------------------------------------------------------------------
# Errors and shared helpers (also used by the hccn, pci and versions parsers)
# --------------------------------------------------------------------------------------------


class ParseError(ProvisionError, ValueError):
    """A vendor tool printed something the parser does not recognise."""


class DcmiInitError(ParseError):
    """npu-smi could not initialise DCMI (``dcmi module initialize failed. ret is <code>``).

    ``code`` is the negative return code; ``-8005`` (:data:`DCMI_DEVICE_BUSY`) means the device is
    already held by another container (two containers cannot share an NPU).
    """

    def __init__(self, code: int, line: str) -> None:
        hint = " (device is already occupied by another container)" if code == DCMI_DEVICE_BUSY else ""
        super().__init__(f"npu-smi failed: {line.strip()}{hint}")
        self.code = code


DCMI_DEVICE_BUSY = -8005
"""DCMI return code: the NPU is held by another container."""

_DCMI_RE = re.compile(r"dcmi module initialize failed\.?\s*ret is\s*(-?\d+)", re.IGNORECASE)
_NULLS = frozenset({"", "NA", "N/A", "-", "--"})


def dcmi_error_code(text: str) -> int | None:
    """Return the DCMI return code if ``text`` holds npu-smi's initialisation failure, else ``None``."""
    m = _DCMI_RE.search(text)
    return int(m.group(1)) if m else None


def _check_dcmi(text: str) -> None:
    m = _DCMI_RE.search(text)
    if m:
        raise DcmiInitError(int(m.group(1)), m.group(0))


def _is_null(value: str) -> bool:
    return value.strip().upper() in _NULLS


def _opt_int(value: str | None, what: str) -> int | None:
    """``"40"`` → 40, ``"0x60"`` → 96, ``"NA"``/``"-"``/None → None; ``"3.0"`` → 3 (rounded)."""
    if value is None or _is_null(value):
        return None
    v = value.strip()
    try:
        if v.lower().startswith("0x"):
            return int(v, 16)
        try:
            return int(v)
        except ValueError:
            return round(float(v))
    except ValueError:
        raise ParseError(f"expected an integer for {what}, got {value!r}") from None


def _opt_float(value: str | None, what: str) -> float | None:
    if value is None or _is_null(value):
        return None
    try:
        return float(value.strip())
    except ValueError:
        raise ParseError(f"expected a number for {what}, got {value!r}") from None


def _opt_str(value: str | None) -> str | None:
    if value is None or _is_null(value):
        return None
    return value.strip()


def _norm_key(key: str) -> str:
    return "".join(key.split()).lower()


def _nonblank_lines(text: str) -> Iterator[str]:
    for line in text.splitlines():
        if line.strip():
            yield line


def split_key_value_lines(text: str, what: str, sep: str = ":") -> tuple[tuple[str, str], ...]:
    """Split ``key <sep> value`` lines (blank lines skipped) into stripped pairs, in order.

    The split is on the FIRST ``sep``; keys never hold it but values may (``0000:C1:00.0``).
    A non-blank line without ``sep`` or with an empty key raises :class:`ParseError`.
    """
    pairs: list[tuple[str, str]] = []
    for line in _nonblank_lines(text):
        key, found, value = line.partition(sep)
        if not found or not key.strip():
            raise ParseError(f"expected '{what}' output of 'key {sep} value' lines, got {line.strip()!r}")
        pairs.append((" ".join(key.split()), value.strip()))
    if not pairs:
        raise ParseError(f"expected '{what}' output, got empty text")
    return tuple(pairs)


# --------------------------------------------------------------------------------------------
# key : value outputs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KeyValues:
    """Ordered ``key : value`` pairs of one output; repeated keys are kept.

    Lookups ignore case and whitespace in keys (``"NPU Temperature (C)"`` == ``"npu temperature(c)"``).
    """

    pairs: tuple[tuple[str, str], ...]

    def get(self, key: str, default: str | None = None) -> str | None:
        """The value of the first occurrence of ``key``."""
        want = _norm_key(key)
        for k, v in self.pairs:
            if _norm_key(k) == want:
                return v
        return default

    def get_all(self, key: str) -> tuple[str, ...]:
        """The values of every occurrence of ``key``, in order."""
        want = _norm_key(key)
        return tuple(v for k, v in self.pairs if _norm_key(k) == want)

    def first(self, *keys: str) -> str | None:
        """The value of the first of ``keys`` that is present."""
        for key in keys:
            value = self.get(key)
            if value is not None:
                return value
        return None

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def as_dict(self) -> dict[str, str]:
        """Plain dict; for a repeated key the first value wins."""
        out: dict[str, str] = {}
        for k, v in self.pairs:
            out.setdefault(k, v)
        return out

    def require(self, key: str, what: str) -> str:
        value = self.get(key)
        if value is None:
            raise ParseError(f"expected key {key!r} in '{what}' output")
        return value


def parse_npu_smi_key_values(text: str, what: str = "npu-smi info -t") -> KeyValues:
    """Generic parser of npu-smi ``key : value`` outputs (``-t board|usages|power|temp|...``, ``-l``)."""
    _check_dcmi(text)
    return KeyValues(split_key_value_lines(text, what))


@dataclass(frozen=True, slots=True)
class ChipSection:
    """One chip's section of a card-level ``npu-smi info -t <type> -i N`` output.

    ``chip_id`` is set for an NPU chip (its ``Chip ID`` line), None for a management chip (the MCU, the
    3559 CPU of a 310 card), which npu-smi marks with ``Chip Name`` only. ``raw`` holds the section's pairs
    with the card's header pairs (``NPU ID``, ``Chip Count``) in front.
    """

    chip_id: int | None
    chip_name: str | None
    raw: KeyValues

    @property
    def is_npu_chip(self) -> bool:
        return self.chip_id is not None


_HEADER_KEYS = frozenset({"npuid", "chipcount", "totalcount"})


def _blocks(text: str) -> list[list[str]]:
    blocks: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.strip():
            blocks[-1].append(line)
        elif blocks[-1]:
            blocks.append([])
    return [b for b in blocks if b]


def parse_npu_smi_sections(text: str, what: str = "npu-smi info -t") -> tuple[ChipSection, ...]:
    """The chip sections of a key/value output, in output order (NPU chips and management chips).

    A section is a run of non-blank lines holding ``Chip ID`` or ``Chip Name``; runs holding neither are the
    card's header (``NPU ID``, ``Chip Count``), whose pairs every section's ``raw`` starts with. An output
    without blank lines (doc captures) is one section.
    """
    _check_dcmi(text)
    header: list[tuple[str, str]] = []
    sections: list[ChipSection] = []
    for block in _blocks(text):
        pairs = split_key_value_lines("\n".join(block), what)
        kv = KeyValues(pairs)
        chip_id, chip_name = kv.get("Chip ID"), kv.get("Chip Name")
        if chip_id is None and chip_name is None:
            header.extend(pairs)
            continue
        own = tuple(p for p in pairs if _norm_key(p[0]) not in _HEADER_KEYS)
        head = tuple(p for p in (*header, *pairs) if _norm_key(p[0]) in _HEADER_KEYS)
        sections.append(
            ChipSection(
                chip_id=_opt_int(chip_id, "Chip ID"),
                chip_name=_opt_str(chip_name),
                raw=KeyValues(head + own),
            )
        )
    if not header and not sections:
        raise ParseError(f"expected '{what}' output, got empty text")
    return tuple(sections)


def _npu_chips(text: str, what: str) -> tuple[KeyValues, ...]:
    return tuple(s.raw for s in parse_npu_smi_sections(text, what) if s.is_npu_chip)


@dataclass(frozen=True, slots=True)
class BoardInfo:
    """``npu-smi info -t board -i N`` (card view) or ``... -i N -c C -t board`` (chip view)."""

    npu_id: int | None
    chip_id: int | None
    product_name: str | None
    model: str | None
    manufacturer: str | None
    serial_number: str | None
    software_version: str | None
    firmware_version: str | None
    compatibility: str | None
    board_id: int | None
    pcie_bus_info: str | None
    slot_id: int | None
    pci_vendor_id: int | None
    pci_device_id: int | None
    subsystem_vendor_id: int | None
    subsystem_device_id: int | None
    chip_count: int | None
    chip_type: str | None
    chip_name: str | None
    chip_version: str | None
    raw: KeyValues
    chips: tuple[BoardInfo, ...] = ()
    """One value per NPU chip section (a ``-c C`` chip view has one; a card view has none)."""

    @property
    def compatible(self) -> bool | None:
        """Driver/firmware compatibility: ``Compatibility : OK`` → True, ``NOK`` → False, absent → None."""
        if self.compatibility is None:
            return None
        return self.compatibility.upper() == "OK"


def parse_npu_smi_board(text: str) -> BoardInfo:
    """Parse ``npu-smi info -t board -i N`` (also the ``-c C`` chip variant)."""
    what = "npu-smi info -t board"
    kv = parse_npu_smi_key_values(text, what)
    kv.require("NPU ID", what)
    if not any(k in kv for k in ("Software Version", "Firmware Version", "Board ID", "PCIe Bus Info")):
        raise ParseError(
            f"expected board fields (Software Version, Firmware Version, ...) in '{what}' output"
        )
    return replace(_board(kv), chips=tuple(_board(c) for c in _npu_chips(text, what)))


def _board(kv: KeyValues) -> BoardInfo:
    return BoardInfo(
        npu_id=_opt_int(kv.get("NPU ID"), "NPU ID"),
        chip_id=_opt_int(kv.get("Chip ID"), "Chip ID"),
        product_name=_opt_str(kv.get("Product Name")),
        model=_opt_str(kv.get("Model")),
        manufacturer=_opt_str(kv.get("Manufacturer")),
        serial_number=_opt_str(kv.get("Serial Number")),
        software_version=_opt_str(kv.get("Software Version")),
        firmware_version=_opt_str(kv.get("Firmware Version")),
        compatibility=_opt_str(kv.get("Compatibility")),
        board_id=_opt_int(kv.get("Board ID"), "Board ID"),
        pcie_bus_info=_opt_str(kv.get("PCIe Bus Info")),
        slot_id=_opt_int(kv.get("Slot ID"), "Slot ID"),
        pci_vendor_id=_opt_int(kv.get("PCI Vendor ID"), "PCI Vendor ID"),
        pci_device_id=_opt_int(kv.get("PCI Device ID"), "PCI Device ID"),
        subsystem_vendor_id=_opt_int(kv.get("Subsystem Vendor ID"), "Subsystem Vendor ID"),
        subsystem_device_id=_opt_int(kv.get("Subsystem Device ID"), "Subsystem Device ID"),
        chip_count=_opt_int(kv.get("Chip Count"), "Chip Count"),
        chip_type=_opt_str(kv.get("Chip Type")),
        chip_name=_opt_str(kv.get("Chip Name")),
        chip_version=_opt_str(kv.get("Chip Version")),
        raw=kv,
    )


@dataclass(frozen=True, slots=True)
class UsagesInfo:
    """``npu-smi info -t usages -i N``. Rates are percent; absent fields (older drivers) are None."""

    npu_id: int | None
    chip_id: int | None
    chip_count: int | None
    ddr_capacity_mb: int | None
    ddr_usage_pct: int | None
    ddr_hugepages_total: int | None
    ddr_hugepages_usage_pct: int | None
    hbm_capacity_mb: int | None
    hbm_usage_pct: int | None
    aicore_usage_pct: int | None
    aivector_usage_pct: int | None
    aicpu_usage_pct: int | None
    ctrlcpu_usage_pct: int | None
    ddr_bandwidth_usage_pct: int | None
    hbm_bandwidth_usage_pct: int | None
    npu_utilization_pct: int | None
    aicube_usage_pct: int | None
    raw: KeyValues
    chips: tuple[UsagesInfo, ...] = ()
    """One value per NPU chip section, in output order (two on a 300I Duo card or an A3 NPU)."""


def parse_npu_smi_usages(text: str) -> UsagesInfo:
    """Parse ``npu-smi info -t usages -i N``."""
    what = "npu-smi info -t usages"
    kv = parse_npu_smi_key_values(text, what)
    if "HBM Capacity(MB)" not in kv and "Aicore Usage Rate(%)" not in kv:
        raise ParseError(f"expected 'HBM Capacity(MB)' or 'Aicore Usage Rate(%)' in '{what}' output")
    return replace(_usages(kv), chips=tuple(_usages(c) for c in _npu_chips(text, what)))


def _usages(kv: KeyValues) -> UsagesInfo:
    def i(key: str) -> int | None:
        return _opt_int(kv.get(key), key)

    return UsagesInfo(
        npu_id=i("NPU ID"),
        chip_id=i("Chip ID"),
        chip_count=i("Chip Count"),
        ddr_capacity_mb=i("DDR Capacity(MB)"),
        ddr_usage_pct=i("DDR Usage Rate(%)"),
        ddr_hugepages_total=i("DDR Hugepages Total(page)"),
        ddr_hugepages_usage_pct=i("DDR Hugepages Usage Rate(%)"),
        hbm_capacity_mb=i("HBM Capacity(MB)"),
        hbm_usage_pct=i("HBM Usage Rate(%)"),
        aicore_usage_pct=i("Aicore Usage Rate(%)"),
        aivector_usage_pct=i("Aivector Usage Rate(%)"),
        aicpu_usage_pct=i("Aicpu Usage Rate(%)"),
        ctrlcpu_usage_pct=i("Ctrlcpu Usage Rate(%)"),
        ddr_bandwidth_usage_pct=i("DDR Bandwidth Usage Rate(%)"),
        hbm_bandwidth_usage_pct=i("HBM Bandwidth Usage Rate(%)"),
        npu_utilization_pct=i("NPU Utilization(%)"),
        aicube_usage_pct=i("Aicube Usage Rate(%)"),
        raw=kv,
    )


POWER_KEYS = ("NPU Real-time Power(W)", "Rated Power Dissipation(W)", "Power Dissipation(W)")
"""The power keys npu-smi prints (hicann/driver ``npucli/src/npu_chip_info.c``): NPU chips print
``NPU Real-time Power(W)``, a 310 NPU chip ``Rated Power Dissipation(W)``, a management chip (the MCU,
which on a 310P card is the only one answering ``-t power``) ``Power Dissipation(W)``. Only the first
has a public capture; the others are accepted because the tool's source prints them."""


@dataclass(frozen=True, slots=True)
class PowerInfo:
    """``npu-smi info -t power -i N``: the first of :data:`POWER_KEYS` present (None when printed NA).

    ``key`` names the key it came from; ``chips`` holds one value per NPU chip section.
    """

    npu_id: int | None
    chip_id: int | None
    power_w: float | None
    raw: KeyValues
    key: str = POWER_KEYS[0]
    chips: tuple[PowerInfo, ...] = ()


def parse_npu_smi_power(text: str) -> PowerInfo:
    """Parse ``npu-smi info -t power -i N`` (also ``-c C``)."""
    what = "npu-smi info -t power"
    kv = parse_npu_smi_key_values(text, what)
    top = _power(kv)
    if top is None:
        raise ParseError(f"expected one of {', '.join(repr(k) for k in POWER_KEYS)} in '{what}' output")
    chips = tuple(p for p in map(_power, _npu_chips(text, what)) if p is not None)
    return replace(top, chips=chips)


def _power(kv: KeyValues) -> PowerInfo | None:
    key = next((k for k in POWER_KEYS if k in kv), None)
    if key is None:
        return None
    return PowerInfo(
        npu_id=_opt_int(kv.get("NPU ID"), "NPU ID"),
        chip_id=_opt_int(kv.get("Chip ID"), "Chip ID"),
        power_w=_opt_float(kv.get(key), key),
        raw=kv,
        key=key,
    )


@dataclass(frozen=True, slots=True)
class TempInfo:
    """``npu-smi info -t temp -i N``.

    ``npu_temp_c`` is ``NPU Temperature (C)``; ``sensors`` holds every other ``... (C)`` reading in
    output order (e.g. ``("LM75A_TE (C)", 36.0)``), NA readings left out.
    """

    npu_id: int | None
    chip_id: int | None
    npu_temp_c: float | None
    sensors: tuple[tuple[str, float], ...]
    raw: KeyValues
    chips: tuple[TempInfo, ...] = ()
    """One value per NPU chip section (their ``sensors`` hold that chip's readings only)."""

    def sensor(self, name: str) -> float | None:
        want = _norm_key(name)
        for k, v in self.sensors:
            if _norm_key(k) == want:
                return v
        return None


def parse_npu_smi_temp(text: str) -> TempInfo:
    """Parse ``npu-smi info -t temp -i N``."""
    what = "npu-smi info -t temp"
    kv = parse_npu_smi_key_values(text, what)
    top = _temp(kv)
    if top is None:
        raise ParseError(f"expected key 'NPU Temperature (C)' in '{what}' output")
    chips = tuple(t for t in map(_temp, _npu_chips(text, what)) if t is not None)
    return replace(top, chips=chips)


def _temp(kv: KeyValues) -> TempInfo | None:
    main_key = next((k for k in ("NPU Temperature (C)", "Temperature(C)") if k in kv), None)
    if main_key is None:
        return None
    sensors: list[tuple[str, float]] = []
    for k, v in kv.pairs:
        if _norm_key(k) != _norm_key(main_key) and _norm_key(k).endswith("(c)"):
            reading = _opt_float(v, k)
            if reading is not None:
                sensors.append((k, reading))
    return TempInfo(
        npu_id=_opt_int(kv.get("NPU ID"), "NPU ID"),
        chip_id=_opt_int(kv.get("Chip ID"), "Chip ID"),
        npu_temp_c=_opt_float(kv.get(main_key), main_key),
        sensors=tuple(sensors),
        raw=kv,
    )


HEALTH_SEVERITY: dict[str, int] = {"ok": 0, "warning": 1, "alarm": 2, "critical": 3, "unknown": 4}
"""npu-smi's health words, mildest first (UNKNOWN: the chip is absent or not started)."""


@dataclass(frozen=True, slots=True)
class HealthInfo:
    """``npu-smi info -t health -i N [-c C]``.

    Two real layouts: with ``-c C`` one chip's ``Health Status`` / ``Error Code`` / ``Error Information``;
    without ``-c`` (device level, the command operators are told to run) one section per chip holding
    ``Chip ID`` and ``Health``, plus the MCU's. ``chips`` is ``((chip_id, health), ...)`` of the NPU chips
    (the ``-c`` layout: one entry, its chip id None); ``status`` is the worst of them. ``error_codes`` is
    empty when the tool prints NA or does not print them (device level).
    """

    status: str
    error_codes: tuple[str, ...]
    error_information: str | None
    raw: KeyValues
    npu_id: int | None = None
    chips: tuple[tuple[int | None, str], ...] = ()

    @property
    def ok(self) -> bool:
        return all(h.upper() == "OK" for _, h in self.chips) if self.chips else self.status.upper() == "OK"


def parse_npu_smi_health(text: str) -> HealthInfo:
    """Parse ``npu-smi info -t health`` at chip level (``-c C``) or device level (every chip of ``-i N``)."""
    what = "npu-smi info -t health"
    kv = parse_npu_smi_key_values(text, what)
    npu_id = _opt_int(kv.get("NPU ID"), "NPU ID")
    status = kv.get("Health Status")
    if status is not None:
        codes = _opt_str(kv.get("Error Code"))
        return HealthInfo(
            status=status,
            error_codes=tuple(c for c in re.split(r"[\s,]+", codes) if c) if codes else (),
            error_information=_opt_str(kv.get("Error Information")),
            raw=kv,
            npu_id=npu_id,
            chips=((None, status),),
        )
    chips = tuple(
        (s.chip_id, s.raw.require("Health", what))
        for s in parse_npu_smi_sections(text, what)
        if s.is_npu_chip
    )
    if not chips:
        raise ParseError(
            f"expected '{what}' output with 'Health Status : ...' (-c C) or 'Chip ID' and 'Health' lines"
        )
    worst = max((h for _, h in chips), key=lambda h: HEALTH_SEVERITY.get(h.lower(), len(HEALTH_SEVERITY)))
    return HealthInfo(
        status=worst, error_codes=(), error_information=None, raw=kv, npu_id=npu_id, chips=chips
    )


@dataclass(frozen=True, slots=True)
class CommonInfo:
    """``npu-smi info -t common -i N``."""

    npu_id: int | None
    chip_id: int | None
    chip_count: int | None
    memory_usage_pct: int | None
    hbm_usage_pct: int | None
    aicore_usage_pct: int | None
    aicore_freq_mhz: int | None
    aicore_cur_freq_mhz: int | None
    aicore_count: int | None
    temp_c: int | None
    power_w: float | None
    raw: KeyValues
    chips: tuple[CommonInfo, ...] = ()
    """One value per NPU chip section. The card-level fields above take each key's first occurrence,
    so on a 300I Duo ``power_w`` is the MCU's (the card's) power and each chip's is None."""


def parse_npu_smi_common(text: str) -> CommonInfo:
    """Parse ``npu-smi info -t common -i N``."""
    what = "npu-smi info -t common"
    kv = parse_npu_smi_key_values(text, what)
    if "Aicore Usage Rate(%)" not in kv and "Temperature(C)" not in kv:
        raise ParseError(f"expected 'Aicore Usage Rate(%)' and 'Temperature(C)' in '{what}' output")
    return replace(_common(kv), chips=tuple(_common(c) for c in _npu_chips(text, what)))


def _common(kv: KeyValues) -> CommonInfo:
    def i(key: str) -> int | None:
        return _opt_int(kv.get(key), key)

    return CommonInfo(
        npu_id=i("NPU ID"),
        chip_id=i("Chip ID"),
        chip_count=i("Chip Count"),
        memory_usage_pct=i("Memory Usage Rate(%)"),
        hbm_usage_pct=i("HBM Usage Rate(%)"),
        aicore_usage_pct=i("Aicore Usage Rate(%)"),
        aicore_freq_mhz=i("Aicore Freq(MHZ)"),
        aicore_cur_freq_mhz=i("Aicore curFreq(MHZ)"),
        aicore_count=i("Aicore Count"),
        temp_c=i("Temperature(C)"),
        power_w=_opt_float(kv.get("NPU Real-time Power(W)"), "NPU Real-time Power(W)"),
        raw=kv,
    )


@dataclass(frozen=True, slots=True)
class EccInfo:
    """``npu-smi info -i N -t ecc``. ``counts`` holds every counter (``... Count``/``... Cnt``)."""

    npu_id: int | None
    chip_id: int | None
    counts: tuple[tuple[str, int], ...]
    raw: KeyValues
    chips: tuple[EccInfo, ...] = ()
    """One value per NPU chip section."""

    def count(self, name: str) -> int | None:
        want = _norm_key(name)
        for k, v in self.counts:
            if _norm_key(k) == want:
                return v
        return None

    @property
    def hbm_single_bit_errors(self) -> int | None:
        return self.count("HBM Single Bit Error Count")

    @property
    def hbm_double_bit_errors(self) -> int | None:
        return self.count("HBM Double Bit Error Count")

    @property
    def has_uncorrectable(self) -> bool:
        """True when any double-bit (uncorrectable) error counter is non-zero."""
        return any(v > 0 for k, v in self.counts if "double" in k.lower())


def parse_npu_smi_ecc(text: str) -> EccInfo:
    """Parse ``npu-smi info -i N -t ecc``."""
    what = "npu-smi info -t ecc"
    kv = parse_npu_smi_key_values(text, what)
    top = _ecc(kv)
    if not top.counts and not any("error" in k.lower() for k, _ in kv.pairs):
        raise ParseError(f"expected error counters ('HBM Single Bit Error Count', ...) in '{what}' output")
    return replace(top, chips=tuple(_ecc(c) for c in _npu_chips(text, what)))


def _ecc(kv: KeyValues) -> EccInfo:
    counts: list[tuple[str, int]] = []
    for k, v in kv.pairs:
        low = k.lower()
        if ("error" in low or "err" in low.split() or "pages" in low) and ("count" in low or "cnt" in low):
            n = _opt_int(v, k)
            if n is not None:
                counts.append((k, n))
    return EccInfo(
        npu_id=_opt_int(kv.get("NPU ID"), "NPU ID"),
        chip_id=_opt_int(kv.get("Chip ID"), "Chip ID"),
        counts=tuple(counts),
        raw=kv,
    )


def parse_mcu_version(text: str) -> str:
    """Parse ``npu-smi upgrade -b mcu -i N`` (``Version : 23.3.13``) → the version string."""
    what = "npu-smi upgrade -b mcu"
    kv = parse_npu_smi_key_values(text, what)
    version = _opt_str(kv.require("Version", what))
    if version is None:
        raise ParseError(f"expected a version in '{what}' output")
    return version


# --------------------------------------------------------------------------------------------
# npu-smi info -t spod-info -i N -c C (Atlas A3)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SuperPodInfo:
    """An A3 chip's place in its super pod: ``SDID`` (the rank table's ``super_device_id``), ``Super Pod
    ID`` (its ``super_pod_id``), ``Super Pod Size`` and ``Server Index`` (the server's id in the pod)."""

    sdid: int
    super_pod_id: int
    super_pod_size: int | None
    server_index: int | None


def parse_npu_smi_spod_info(text: str) -> SuperPodInfo:
    """Parse ``npu-smi info -t spod-info -i N -c C`` (``SDID : 16777216`` ...; the sample in
    ``tests/fixtures/samples/npu_smi_info_t_spod_info.txt``)."""
    what = "npu-smi info -t spod-info"
    kv = parse_npu_smi_key_values(text, what)
    sdid = _opt_int(kv.require("SDID", what), "SDID")
    pod = _opt_int(kv.require("Super Pod ID", what), "Super Pod ID")
    if sdid is None or pod is None:
        raise ParseError(f"expected SDID and Super Pod ID in '{what}' output")
    return SuperPodInfo(
        sdid=sdid,
        super_pod_id=pod,
        super_pod_size=_opt_int(kv.get("Super Pod Size"), "Super Pod Size"),
        server_index=_opt_int(kv.get("Server Index"), "Server Index"),
    )


# --------------------------------------------------------------------------------------------
# npu-smi info -l / -m
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NpuListEntry:
    """One ``NPU ID`` block of ``npu-smi info -l``."""

    npu_id: int
    chip_count: int | None
    product_name: str | None = None
    serial_number: str | None = None
    extra: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class NpuList:
    """``npu-smi info -l``. ``total_count`` is the tool's ``Total Count`` (not re-checked)."""

    total_count: int | None
    npus: tuple[NpuListEntry, ...]

    @property
    def npu_ids(self) -> tuple[int, ...]:
        return tuple(e.npu_id for e in self.npus)

    @property
    def chip_total(self) -> int:
        return sum(e.chip_count or 0 for e in self.npus)


def parse_npu_smi_list(text: str) -> NpuList:
    """Parse ``npu-smi info -l``: ``Total Count`` then one block per NPU starting at ``NPU ID``."""
    what = "npu-smi info -l"
    kv = parse_npu_smi_key_values(text, what)
    total: int | None = None
    entries: list[NpuListEntry] = []
    current: dict[str, str] | None = None
    extra: list[tuple[str, str]] = []

    def flush() -> None:
        if current is not None:
            entries.append(
                NpuListEntry(
                    npu_id=_opt_int(current["npu id"], "NPU ID") or 0,
                    chip_count=_opt_int(current.get("chip count"), "Chip Count"),
                    product_name=_opt_str(current.get("product name")),
                    serial_number=_opt_str(current.get("serial number")),
                    extra=tuple(extra),
                )
            )

    for k, v in kv.pairs:
        key = k.lower()
        if key == "total count":
            total = _opt_int(v, k)
        elif key == "npu id":
            flush()
            if _opt_int(v, k) is None:
                raise ParseError(f"expected a number after 'NPU ID' in '{what}' output, got {v!r}")
            current = {"npu id": v}
            extra = []
        elif current is None:
            raise ParseError(f"expected 'Total Count' or 'NPU ID' first in '{what}' output, got {k!r}")
        elif key in ("chip count", "product name", "serial number"):
            current[key] = v
        else:
            extra.append((k, v))
    flush()
    if total is None and not entries:
        raise ParseError(f"expected 'Total Count' and 'NPU ID' lines in '{what}' output")
    return NpuList(total_count=total, npus=tuple(entries))


@dataclass(frozen=True, slots=True)
class NpuChipMapping:
    """One row of ``npu-smi info -m``. The MCU of a card is listed with logic id ``-`` (None)."""

    npu_id: int
    chip_id: int
    chip_logic_id: int | None
    chip_name: str
    chip_phy_id: int | None = None

    @property
    def is_mcu(self) -> bool:
        return self.chip_name.strip().lower() == "mcu"


def parse_npu_smi_chip_map(text: str) -> tuple[NpuChipMapping, ...]:
    """Parse ``npu-smi info -m`` (NPU ID, Chip ID, Chip Logic ID, [Chip Phy-ID,] Chip Name)."""
    what = "npu-smi info -m"
    _check_dcmi(text)
    lines = list(_nonblank_lines(text))
    if not lines or "npu id" not in lines[0].lower() or "chip name" not in lines[0].lower():
        raise ParseError(f"expected '{what}' output with a 'NPU ID ... Chip Name' header line")
    # Header labels hold single spaces ("Chip Logic ID"); labels are separated by runs of spaces.
    labels = [_norm_key(lab) for lab in re.split(r"\s{2,}|\t", lines[0].strip()) if lab.strip()]
    if labels[-1] != "chipname":
        raise ParseError(f"expected 'Chip Name' as the last column of '{what}' output")
    n_fixed = len(labels) - 1
    rows: list[NpuChipMapping] = []
    for line in lines[1:]:
        tokens = line.split()
        if len(tokens) < n_fixed + 1:
            raise ParseError(f"expected {n_fixed + 1} columns in '{what}' row, got {line.strip()!r}")
        cols = dict(zip(labels[:n_fixed], tokens[:n_fixed], strict=True))
        npu_id = _opt_int(cols.get("npuid"), "NPU ID")
        chip_id = _opt_int(cols.get("chipid"), "Chip ID")
        if npu_id is None or chip_id is None:
            raise ParseError(f"expected numeric NPU ID and Chip ID in '{what}' row, got {line.strip()!r}")
        rows.append(
            NpuChipMapping(
                npu_id=npu_id,
                chip_id=chip_id,
                chip_logic_id=_opt_int(cols.get("chiplogicid"), "Chip Logic ID"),
                chip_name=" ".join(tokens[n_fixed:]),
                chip_phy_id=_opt_int(cols.get("chipphy-id", cols.get("chipphyid")), "Chip Phy-ID"),
            )
        )
    return tuple(rows)


# --------------------------------------------------------------------------------------------
# npu-smi info -t topo
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopoRow:
    name: str
    links: tuple[str, ...]
    cpu_affinity: str | None


@dataclass(frozen=True, slots=True)
class NpuTopology:
    """``npu-smi info -t topo``: ``columns`` are the device labels (``NPU0``...), ``rows`` the matrix
    (``X`` self, ``HCCS``, ``PIX``, ``PXB``, ``PHB``, ``SYS``, ``NA``), ``legend`` the abbreviations."""

    columns: tuple[str, ...]
    rows: tuple[TopoRow, ...]
    legend: tuple[tuple[str, str], ...]

    def link(self, a: int, b: int) -> str:
        """Link type between NPU ``a`` and NPU ``b`` by their position in the matrix."""
        return self.rows[a].links[b]

    @property
    def link_types(self) -> frozenset[str]:
        return frozenset(t for r in self.rows for t in r.links if t != "X")


_TOPO_DEV_RE = re.compile(r"^[A-Za-z]+\d+$")


def parse_npu_smi_topo(text: str) -> NpuTopology:
    """Parse ``npu-smi info -t topo``; stops the matrix at the ``Legend:`` line."""
    what = "npu-smi info -t topo"
    _check_dcmi(text)
    columns: tuple[str, ...] = ()
    has_affinity = False
    rows: list[TopoRow] = []
    legend: list[tuple[str, str]] = []
    in_legend = False
    for line in _nonblank_lines(text):
        stripped = line.strip()
        if stripped.lower().startswith("legend"):
            in_legend = True
            continue
        if in_legend:
            key, found, desc = stripped.partition("=")
            if not found:
                raise ParseError(
                    f"expected 'ABBR = meaning' legend lines in '{what}' output, got {stripped!r}"
                )
            legend.append((key.strip(), desc.strip()))
            continue
        tokens = stripped.split()
        if not columns:
            devs = [t for t in tokens if _TOPO_DEV_RE.match(t)]
            if not devs or tokens[: len(devs)] != devs:
                raise ParseError(
                    f"expected a '{what}' header of device labels (NPU0 NPU1 ...), got {stripped!r}"
                )
            columns = tuple(devs)
            has_affinity = len(tokens) > len(devs)
            continue
        n = len(columns)
        if len(tokens) < n + 1 or (has_affinity and len(tokens) < n + 2):
            raise ParseError(f"expected {n} link columns in '{what}' row, got {stripped!r}")
        rows.append(
            TopoRow(
                name=tokens[0],
                links=tuple(tokens[1 : n + 1]),
                cpu_affinity=" ".join(tokens[n + 1 :]) if has_affinity else None,
            )
        )
    if not columns or not rows:
        raise ParseError(f"expected a '{what}' matrix (header NPU0 NPU1 ... and one row per NPU)")
    return NpuTopology(columns=columns, rows=tuple(rows), legend=tuple(legend))


# --------------------------------------------------------------------------------------------
# npu-smi info (the main table and the process table)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NpuProcess:
    """A row of the process table: a process holding device memory on NPU ``npu_id`` chip ``chip_id``."""

    npu_id: int
    chip_id: int | None
    pid: int
    name: str
    memory_mb: int | None


@dataclass(frozen=True, slots=True)
class NpuStatus:
    """One NPU block (two table lines) of ``npu-smi info``.

    On the 910B (one chip per NPU) there is exactly one record per NPU. On multi-chip cards
    (310P Duo, A3) npu-smi prints one block per chip, so ``id`` repeats and ``chip_id`` differs.
    ``chip_device`` is the optional second number of the chip cell (``Device``/``Phy-ID`` column
    of multi-chip tables). Numeric fields printed as ``NA`` or ``-`` are None; ``memory_*`` is the
    chip's DDR (``Memory-Usage``), ``hbm_*`` its HBM; ``hugepages_*`` are pages.
    """

    id: int
    name: str
    health: str
    power_w: float | None
    temp_c: int | None
    hugepages_used: int | None
    hugepages_total: int | None
    chip_id: int
    chip_device: int | None
    bus_id: str | None
    aicore_pct: int | None
    memory_used_mb: int | None
    memory_total_mb: int | None
    hbm_used_mb: int | None
    hbm_total_mb: int | None
    processes: tuple[NpuProcess, ...] = ()

    @property
    def healthy(self) -> bool:
        """The gate used before any driver work: the Health column says ``OK``."""
        return self.health.upper() == "OK"


@dataclass(frozen=True, slots=True)
class NpuSmiInfo:
    """The whole ``npu-smi info`` output.

    ``version`` is the npu-smi version of the header (``npu-smi 24.1.rc1.b030``), ``driver_version``
    its ``Version:`` field (both None when the header line is missing). ``npus`` holds the blocks in
    table order (see :class:`NpuStatus`). ``process_table`` says whether the output had the process
    table at all (some doc captures omit it); ``processes`` lists every process row.
    """

    version: str | None
    driver_version: str | None
    npus: tuple[NpuStatus, ...]
    processes: tuple[NpuProcess, ...] = ()
    process_table: bool = False

    @property
    def npu_ids(self) -> tuple[int, ...]:
        """Distinct NPU ids in table order."""
        return tuple(dict.fromkeys(n.id for n in self.npus))

    def npu(self, npu_id: int, chip_id: int = 0) -> NpuStatus:
        """The block of NPU ``npu_id`` (chip ``chip_id``); KeyError if absent."""
        for n in self.npus:
            if n.id == npu_id and n.chip_id == chip_id:
                return n
        raise KeyError(f"NPU {npu_id} chip {chip_id} not in npu-smi info output")

    @property
    def all_healthy(self) -> bool:
        return bool(self.npus) and all(n.healthy for n in self.npus)

    @property
    def unhealthy(self) -> tuple[NpuStatus, ...]:
        return tuple(n for n in self.npus if not n.healthy)

    @property
    def busy_npu_ids(self) -> tuple[int, ...]:
        """NPU ids with at least one process in the process table."""
        return tuple(dict.fromkeys(p.npu_id for p in self.processes))


# Column labels used when a table lacks its header rows (the 910B layout).
_DEFAULT_LABELS = (
    ("NPU", "Name"),
    ("Power(W)", "Temp(C)", "Hugepages-Usage(page)"),
    ("Chip",),
    ("AICore(%)", "Memory-Usage(MB)", "HBM-Usage(MB)"),
)
_ITEM_RE = re.compile(r"[^\s/]+\s*/\s*[^\s/]+|\S+")
_NO_PROC_RE = re.compile(r"no running processes found in npu\s*(\d+)", re.IGNORECASE)
_VERSION_RE = re.compile(r"npu-smi\s+(\S+)(?:\s+Version:\s*(\S+))?", re.IGNORECASE)

_Value = str | tuple[str, str]


def _labels(cell: str) -> tuple[str, ...]:
    """Split a header cell into labels; a ``(unit)`` token separated by a space joins its label."""
    out: list[str] = []
    for tok in cell.split():
        if tok.startswith("(") and out:
            out[-1] += tok
        else:
            out.append(tok)
    return tuple(out)


def _items(cell: str) -> list[_Value]:
    """``"0    0 / 0   3314 / 65536"`` → ``["0", ("0", "0"), ("3314", "65536")]``."""
    items: list[_Value] = []
    for m in _ITEM_RE.finditer(cell):
        used, sep, total = m.group(0).partition("/")
        items.append((used.strip(), total.strip()) if sep else m.group(0))
    return items


def _label_key(label: str) -> str | None:
    low = label.lower()
    for prefix, key in (
        ("power", "power"),
        ("temp", "temp"),
        ("hugepage", "hugepages"),
        ("aicore", "aicore"),
        ("memory", "memory"),
        ("hbm", "hbm"),
    ):
        if low.startswith(prefix):
            return key
    return None


def _map_cell(cell: str, labels: tuple[str, ...], row: str) -> dict[str, _Value]:
    items = _items(cell)
    if len(items) != len(labels):
        raise ParseError(
            f"expected {len(labels)} values ({' '.join(labels)}) in npu-smi info row, got {row.strip()!r}"
        )
    out: dict[str, _Value] = {}
    for label, item in zip(labels, items, strict=True):
        key = _label_key(label)
        if key is not None:
            out[key] = item
    return out


def _scalar(values: dict[str, _Value], key: str, row: str) -> str | None:
    v = values.get(key)
    if v is None:
        return None
    if isinstance(v, tuple):
        raise ParseError(f"expected a single value for {key} in npu-smi info row, got {row.strip()!r}")
    return v


def _pair(values: dict[str, _Value], key: str, row: str) -> tuple[int | None, int | None]:
    v = values.get(key)
    if v is None:
        return None, None
    if isinstance(v, str):
        if _is_null(v):
            return None, None
        raise ParseError(f"expected 'used / total' for {key} in npu-smi info row, got {row.strip()!r}")
    return _opt_int(v[0], key), _opt_int(v[1], key)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


@dataclass(slots=True)
class _TableState:
    labels: list[tuple[str, ...]] = field(default_factory=lambda: list(_DEFAULT_LABELS))
    seen_header: bool = False


def _npu_block(first: str, second: str, st: _TableState) -> NpuStatus:
    c1, c2 = _cells(first), _cells(second)
    if len(c1) < 3 or len(c2) < 3:
        raise ParseError(
            "expected NPU block lines of 3 '|'-separated cells "
            f"(NPU Name | Health | Power Temp Hugepages), got {first.strip()!r} / {second.strip()!r}"
        )
    head = c1[0].split()
    npu_id = int(head[0]) if head and head[0].isdigit() else None
    if npu_id is None:
        raise ParseError(
            f"expected 'NPU-id Name' in the first cell of an npu-smi info block, got {first.strip()!r}"
        )
    top = _map_cell(c1[2], st.labels[1], first)
    chip_tokens = c2[0].split()
    chip_id = int(chip_tokens[0]) if chip_tokens and chip_tokens[0].isdigit() else None
    if chip_id is None:
        raise ParseError(
            f"expected the chip id in the second line of NPU {npu_id}'s block, got {second.strip()!r}"
        )
    bottom = _map_cell(c2[2], st.labels[3], second)
    hp_used, hp_total = _pair(top, "hugepages", first)
    mem_used, mem_total = _pair(bottom, "memory", second)
    hbm_used, hbm_total = _pair(bottom, "hbm", second)
    return NpuStatus(
        id=npu_id,
        name=" ".join(head[1:]),
        health=c1[1],
        power_w=_opt_float(_scalar(top, "power", first), "Power(W)"),
        temp_c=_opt_int(_scalar(top, "temp", first), "Temp(C)"),
        hugepages_used=hp_used,
        hugepages_total=hp_total,
        chip_id=chip_id,
        chip_device=_opt_int(chip_tokens[1], "Device") if len(chip_tokens) > 1 else None,
        bus_id=_opt_str(c2[1]),
        aicore_pct=_opt_int(_scalar(bottom, "aicore", second), "AICore(%)"),
        memory_used_mb=mem_used,
        memory_total_mb=mem_total,
        hbm_used_mb=hbm_used,
        hbm_total_mb=hbm_total,
    )


def _process_row(cells: list[str], line: str) -> NpuProcess:
    if len(cells) < 4:
        raise ParseError(
            "expected a process row 'NPU Chip | Process id | Process name | Process memory(MB)', "
            f"got {line.strip()!r}"
        )
    ids = cells[0].split()
    npu_id = _opt_int(ids[0], "NPU") if ids else None
    pid = _opt_int(cells[1], "Process id")
    if npu_id is None or pid is None:
        raise ParseError(f"expected numeric NPU id and process id in process row, got {line.strip()!r}")
    return NpuProcess(
        npu_id=npu_id,
        chip_id=_opt_int(ids[1], "Chip") if len(ids) > 1 else None,
        pid=pid,
        name=cells[2],
        memory_mb=_opt_int(cells[3], "Process memory(MB)"),
    )


def parse_npu_smi_info(text: str) -> NpuSmiInfo:
    """Parse ``npu-smi info`` (main table and, when present, the process table).

    Raises :class:`DcmiInitError` on the DCMI failure text and :class:`ParseError` when the text is
    not an npu-smi info table.
    """
    _check_dcmi(text)
    st = _TableState()
    version: str | None = None
    driver_version: str | None = None
    blocks: list[NpuStatus] = []
    processes: list[NpuProcess] = []
    process_table = False
    in_processes = False
    pending: str | None = None

    for raw_line in _nonblank_lines(text):
        line = raw_line.strip()
        if line.startswith("+"):
            if pending is not None:
                raise ParseError(f"expected two lines per NPU block, the second is missing after {pending!r}")
            continue
        if not line.startswith("|"):
            continue  # stray messages around the table
        cells = _cells(line)
        joined = " ".join(cells)
        low = joined.lower()
        first_word = cells[0].split()[0].lower() if cells[0].split() else ""

        if pending is None:
            if first_word == "npu-smi":
                m = _VERSION_RE.search(joined)
                if m:
                    version, driver_version = m.group(1), m.group(2)
                continue
            if "process id" in low or "process name" in low:
                in_processes = process_table = True
                continue
            if first_word == "npu" and len(cells) >= 3 and "health" in cells[1].lower():
                st.labels[0], st.labels[1] = _labels(cells[0]), _labels(cells[2])
                st.seen_header = True
                in_processes = False
                continue
            if first_word == "chip" and len(cells) >= 3 and "bus" in cells[1].lower():
                st.labels[2], st.labels[3] = _labels(cells[0]), _labels(cells[2])
                continue
            if _NO_PROC_RE.search(joined):
                in_processes = process_table = True
                continue
            if in_processes:
                processes.append(_process_row(cells, line))
                continue
            pending = line
            continue
        blocks.append(_npu_block(pending, line, st))
        pending = None

    if pending is not None:
        raise ParseError(f"expected two lines per NPU block, the second is missing after {pending!r}")
    if not st.seen_header and not blocks:
        raise ParseError("expected an 'npu-smi info' table (header 'NPU Name | Health | Power(W) ...')")

    by_chip: dict[tuple[int, int], list[NpuProcess]] = {}
    for p in processes:
        by_chip.setdefault((p.npu_id, p.chip_id if p.chip_id is not None else 0), []).append(p)
    npus = tuple(replace(b, processes=tuple(by_chip.get((b.id, b.chip_id), ()))) for b in blocks)
    return NpuSmiInfo(
        version=version,
        driver_version=driver_version,
        npus=npus,
        processes=tuple(processes),
        process_table=process_table,
    )
