"""``npu-smi``: renderers (byte-for-byte the formats of ``tests/fixtures/samples``) and the CLI.

Three hardware models (``hardware_model`` in hardware.json): ``a2`` (910B, one chip per NPU), ``a3``
(910_93, two chips per NPU, "Chip  Phy-ID" table of vllm-ascend#5850) and ``300i-duo`` (310P3, two chips
per card, the 104-column table of Syllo/nvtop#421). Where no capture exists (A3 and 310P key/value
outputs), the renderers print the key sets and order of npu-smi's own printf calls (hicann/driver
``src/custom/dev_prod/user/npucli/src``). ``hardware.json``'s ``npus`` lists CHIPS; ``npu_id``/``chip_id``
place each under its NPU.

The renderers are pure functions of plain values so unit tests can feed them the sample's values
and compare with the sample text. :func:`main` reads ``hardware.json`` and the loaded-driver state.

Behaviour without a loaded driver (never installed, or installed but the node not rebooted yet):
prints the DCMI initialisation failure real hosts print and exits 1::

    DrvMngGetConsoleLogLevel failed. (g_conLogLevel=3)
    dcmi module initialize failed. ret is -8020
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import common

Npu = Mapping[str, Any]

EXIT_OK = 0
EXIT_ERROR = 1
DRIVER_NOT_LOADED = -8020
SEP = "+---------------------------+---------------+----------------------------------------------------+"
SEP_EQ = "+===========================+===============+====================================================+"
TOP = "+" + "-" * 96 + "+"
PROC_HEADER = (
    "| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |"
)

HEALTH_DEFAULT_CODES = {
    "Warning": (
        "80E18008",
        "node type=SoC, sensor type=Memory, event state=correctable ECC errors exceed threshold",
    ),
    "Alarm": ("80E18005", "node type=HBM, sensor type=Memory, event state=single-bit ECC errors"),
    "Critical": ("80CB8009", "node type=HBM, sensor type=Memory, event state=uncorrectable ECC error"),
}

TOPO_LEGEND = """Legend:

  X    = Self
  SYS  = Path traversing PCIe and NUMA nodes. Nodes are connected through SMP, such as QPI, UPI.
  PHB  = Path traversing PCIe and the PCIe host bridge of a CPU.
  PIX  = Path traversing a single PCIe switch
  PXB  = Path traversing multiple PCIe switches
  HCCS = Connection traversing HCCS.
  NA   = Unknown relationship.
"""


# ------------------------------------------------------------------------------------------------
# renderers
# ------------------------------------------------------------------------------------------------


def _kv(key: str, value: object, indent: str = "        ", width: int = 31) -> str:
    return f"{indent}{key:<{width}}: {value}"


def _fmt_power(value: object) -> str:
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def render_info(
    version: str,
    driver_version: str,
    npus: Sequence[Npu],
    *,
    process_table: bool = True,
    chip_phy: bool = False,
) -> str:
    """``npu-smi info`` of an A2 (one row pair per NPU) or, with ``chip_phy``, an A3 (one per chip).

    Each row: id, name, health, power_w (a string such as ``-`` prints as is), temp_c,
    hugepages_used/total, bus_id, aicore_pct, memory_used_mb/total_mb, hbm_used_mb, hbm_total_mb,
    processes (list of dicts); on an A3 also npu_id, chip_id and phy_id."""
    chip_header = "Chip  Phy-ID              " if chip_phy else "Chip                      "
    lines = [
        TOP,
        f"| {'npu-smi ' + version:<33}{'Version: ' + driver_version:<62}|",
        SEP,
        "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|",
        f"| {chip_header}| Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |",
        SEP_EQ,
    ]
    for i, n in enumerate(npus):
        npu = n.get("npu_id", n["id"])
        huge = f"{n.get('hugepages_used', 0):<5}/ {n.get('hugepages_total', 0):<14}"
        lines.append(
            f"| {npu!s:<6}{n['name']:<20}| {n['health']:<14}| "
            f"{_fmt_power(n['power_w']):<12}{n['temp_c']!s:<18}{huge}|"
        )
        mem = f"{n.get('memory_used_mb', 0):<5}/ {n.get('memory_total_mb', 0)}"
        hbm = f"{n['hbm_used_mb']:<5}/ {n['hbm_total_mb']:<14}"
        chip = f"{n.get('chip_id', 0)!s:<5} {n.get('phy_id', n['id'])!s:<20}" if chip_phy else f"{0:<26}"
        lines.append(f"| {chip}| {n['bus_id']:<14}| {n.get('aicore_pct', 0)!s:<12}{mem:<18}{hbm}|")
        same_npu = i + 1 < len(npus) and npus[i + 1].get("npu_id", npus[i + 1]["id"]) == npu
        lines.append(TOP if same_npu else SEP_EQ)
    if process_table:
        lines.append(SEP)
        lines.append(PROC_HEADER)
        lines.append(SEP_EQ)
        for npu, chips in _by_npu(npus):
            procs = [(c.get("chip_id", 0), p) for c in chips for p in c.get("processes") or []]
            if not procs:
                lines.append(f"| {'No running processes found in NPU ' + str(npu):<95}|")
            for chip_id, p in procs:
                cells = f"| {npu!s:<8}{chip_id!s:<18}| {p['pid']!s:<14}| "
                lines.append(cells + f"{p['name']!s:<25}| {p['memory_mb']!s:<24}|")
            lines.append(SEP_EQ)
    return "\n".join(lines) + "\n"


def _by_npu(rows: Sequence[Npu]) -> list[tuple[int, list[Npu]]]:
    """Rows grouped by NPU id, in order (an A2 row is its own NPU)."""
    out: list[tuple[int, list[Npu]]] = []
    for r in rows:
        npu = int(r.get("npu_id", r["id"]))
        if out and out[-1][0] == npu:
            out[-1][1].append(r)
        else:
            out.append((npu, [r]))
    return out


TOP_310P = "+" + "-" * 104 + "+"
SEP_310P = "+" + "-" * 31 + "+" + "-" * 17 + "+" + "-" * 54 + "+"
EQ_310P = "+" + "=" * 31 + "+" + "=" * 17 + "+" + "=" * 54 + "+"


def render_info_310p(
    version: str, driver_version: str, rows: Sequence[Npu], *, process_table: bool = True
) -> str:
    """``npu-smi info`` of 310P cards (Atlas 300I Duo): the widths of Syllo/nvtop#421, which are npu-smi's
    ``print_total_info`` / ``print_card_total_info_*`` printf formats (hicann/driver npu_info_print.c)."""
    lines = [
        TOP_310P,
        f"| npu-smi {version:<40} Version: {driver_version:<44} |",
        SEP_310P,
        "| NPU     Name                  | Health          "
        "| Power(W)     Temp(C)           Hugepages-Usage(page) |",
        "| Chip    Device                | Bus-Id          "
        "| AICore(%)    Memory-Usage(MB)                        |",
        EQ_310P,
    ]
    for npu, chips in _by_npu(rows):
        for i, n in enumerate(chips):
            lines.append(
                f"| {npu:<7} {n['name']:<22}| {n['health']:<15} | {'NA':<12} {n['temp_c']!s:<17} "
                f"{n.get('hugepages_used', 0):<6}/ {n.get('hugepages_total', 0):<13} |"
            )
            mem = f"{n.get('memory_used_mb', 0):<5}/ {n.get('memory_total_mb', 0):<32}"
            lines.append(
                f"| {n.get('chip_id', 0)!s:<7} {n['id']!s:<22}| {n['bus_id']:<15} "
                f"| {n.get('aicore_pct', 0)!s:<12} {mem} |"
            )
            if i != len(chips) - 1:
                lines.append(SEP_310P)
        lines.append(EQ_310P)
    if process_table:
        lines.append(SEP_310P)
        lines.append(
            "| NPU     Chip                  | Process id      "
            "| Process name             | Process memory(MB)        |"
        )
        lines.append(EQ_310P)
        for npu, chips in _by_npu(rows):
            procs = [(c.get("chip_id", 0), p) for c in chips for p in c.get("processes") or []]
            for chip_id, p in procs:
                cells = f"| {npu:<7} {chip_id!s:<22}| {p['pid']!s:<15} "
                lines.append(cells + f"| {p['name']!s:<24} | {p['memory_mb']!s:<25} |")
            if not procs:
                lines.append(f"| No running processes found in NPU {npu:<7}" + " " * 63 + "|")
            lines.append(EQ_310P)
    return "\n".join(lines) + "\n"


def render_list(npu_ids: Sequence[int], chip_count: int = 1) -> str:
    """``npu-smi info -l``."""
    blocks = [_kv("Total Count", len(npu_ids))]
    for i in npu_ids:
        blocks.append(_kv("NPU ID", i) + "\n" + _kv("Chip Count", chip_count))
    return "\n\n".join(blocks) + "\n"


def render_chip_map(npu_ids: Sequence[int], chip_name: str, chips_per_npu: int = 1) -> str:
    """``npu-smi info -m`` (chip rows carry no trailing padding, header and Mcu rows do: verbatim). With
    several chips per NPU the logic ids count on across NPUs and the Mcu row takes the next chip id
    (``print_mapping_info``; the 310P layout of the gpustack capture)."""
    pad = " " * 8
    lines = [pad + f"{'NPU ID':<31}{'Chip ID':<31}{'Chip Logic ID':<31}{'Chip Name':<30}"]
    logic = 0
    for i in npu_ids:
        for chip in range(chips_per_npu):
            lines.append(pad + f"{i:<31}{chip:<31}{(i if chips_per_npu == 1 else logic):<31}{chip_name}")
            logic += 1
        lines.append(pad + f"{i:<31}{chips_per_npu:<31}{'-':<31}{'Mcu':<30}")
    return "\n".join(lines) + "\n"


def render_chip_map_phy(rows: Sequence[Npu]) -> str:
    """``npu-smi info -m`` of an A3: the extra ``Chip Phy-ID`` column of npu-smi's
    ``print_mapping_info_910_93`` (no capture; spacing as the A2 sample)."""
    pad = " " * 8
    head = ("NPU ID", "Chip ID", "Chip Logic ID", "Chip Phy-ID")
    lines = [pad + "".join(f"{h:<31}" for h in head) + f"{'Chip Name':<30}"]
    for r in rows:
        cells = (r.get("npu_id", r["id"]), r.get("chip_id", 0), r["id"], r["id"])
        lines.append(pad + "".join(f"{c!s:<31}" for c in cells) + str(r["chip_name"]))
    return "\n".join(lines) + "\n"


def render_board(b: Mapping[str, Any]) -> str:
    """``npu-smi info -t board -i N`` (a 310P card prints no product rows: ``print_ascend_board_info``)."""
    product = [
        ("Product Name", b["product_name"]),
        ("Model", b.get("model", "NA")),
        ("Manufacturer", b.get("manufacturer", "Huawei")),
        ("Serial Number", b["serial"]),
    ]
    rows = [
        ("NPU ID", b["id"]),
        *(product if b.get("product_rows", True) else []),
        ("Software Version", b["software_version"]),
        ("Firmware Version", b["firmware_version"]),
        ("Compatibility", b["compatibility"]),
        ("Board ID", b["board_id"]),
        ("PCB ID", b.get("pcb_id", "A")),
        ("BOM ID", b.get("bom_id", "1")),
        ("PCIe Bus Info", b["bus_id"]),
        ("Slot ID", b.get("slot_id", 0)),
        ("Class ID", "NA"),
        ("PCI Vendor ID", b["vendor_id"]),
        ("PCI Device ID", b["device_id"]),
        ("Subsystem Vendor ID", b["subsystem_vendor_id"]),
        ("Subsystem Device ID", b["subsystem_device_id"]),
        ("Chip Count", b.get("chip_count", 1)),
    ]
    return "\n".join(_kv(k, v) for k, v in rows) + "\n"


def render_board_chip(b: Mapping[str, Any]) -> str:
    """``npu-smi info -t board -i N -c 0`` (chip view)."""
    rows = [
        ("NPU ID", b["id"]),
        ("Chip ID", b.get("chip_id", 0)),
        ("Chip Type", "Ascend"),
        ("Chip Name", b["chip_name"]),
        ("Chip Version", "V1"),
        ("Board ID", b["board_id"]),
        ("PCB ID", "NA"),
        ("BOM ID", b.get("bom_id", "1")),
        ("VDie ID", b["vdie_id"]),
        ("NDie ID", b["ndie_id"]),
        ("Chip Position ID", b.get("chip_position", b["id"])),
        ("PCIe Bus Info", b["bus_id"]),
        ("Firmware Version", b["firmware_version"]),
    ]
    if b.get("npu_name"):
        # print_ascend_chip_info: a 910_93 prints its NPU Name and no Chip Type
        rows = [rows[0], ("NPU Name", b["npu_name"]), *(r for r in rows[1:] if r[0] != "Chip Type")]
    return "\n".join(_kv(k, v) for k, v in rows) + "\n"


def _usage_rows(c: Mapping[str, Any]) -> list[tuple[str, object]]:
    """One chip's ``-t usages`` rows: the 910B/910_93 set, or the 310P set of the gpustack capture."""
    if c.get("family") == "310P":
        return [
            ("DDR Capacity(MB)", c["memory_total_mb"]),
            ("DDR Usage Rate(%)", c["memory_pct"]),
            ("DDR Hugepages Total(page)", 0),
            ("DDR Hugepages Usage Rate(%)", 0),
            ("Aicore Usage Rate(%)", c.get("aicore_pct", 0)),
            ("Aicpu Usage Rate(%)", c.get("aicpu_pct", 0)),
            ("Ctrlcpu Usage Rate(%)", c.get("ctrlcpu_pct", 0)),
            ("Vectorcore Usage Rate(%)", 0),
            ("DDR Bandwidth Usage Rate(%)", c.get("ddr_bw_pct", 0)),
            *((f"DVPP {k} Usage Rate(%)", 0) for k in ("VDEC", "VPC", "VENC", "JPEGE", "JPEGD")),
        ]
    return [
        ("DDR Capacity(MB)", 0),
        ("DDR Usage Rate(%)", 0),
        ("DDR Hugepages Total(page)", 0),
        ("DDR Hugepages Usage Rate(%)", 0),
        ("HBM Capacity(MB)", c["hbm_total_mb"]),
        ("HBM Usage Rate(%)", c["hbm_usage_pct"]),
        ("Aicore Usage Rate(%)", c.get("aicore_pct", 0)),
        ("Aivector Usage Rate(%)", c.get("aivector_pct", 0)),
        ("Aicpu Usage Rate(%)", c.get("aicpu_pct", 0)),
        ("Ctrlcpu Usage Rate(%)", c.get("ctrlcpu_pct", 0)),
        ("DDR Bandwidth Usage Rate(%)", 0),
        ("HBM Bandwidth Usage Rate(%)", c.get("hbm_bw_pct", 0)),
        ("NPU Utilization(%)", c.get("aicore_pct", 0)),
        ("Aicube Usage Rate(%)", c.get("aicube_pct", 0)),
    ]


def render_card(npu_id: int, sections: Sequence[str], width: int = 31, indent: str = "        ") -> str:
    """A card-level ``-t <type> -i N``: the NPU ID / Chip Count header, then the chip sections
    (``show_ascend_card_info`` of npu-smi: a blank line after the header and between sections)."""
    chips = sum(1 for sec in sections if "Chip ID" in sec)
    head = _kv("NPU ID", npu_id, indent, width) + "\n" + _kv("Chip Count", chips, indent, width)
    return head + "\n\n" + "\n\n".join(sections) + "\n"


def render_usages_chips(npu_id: int, chips: Sequence[Mapping[str, Any]]) -> str:
    """``npu-smi info -t usages -i N`` of a card with several chips (``Chip ID`` closes each section)."""
    return render_card(
        npu_id,
        ["\n".join(_kv(k, v) for k, v in [*_usage_rows(c), ("Chip ID", c["chip_id"])]) for c in chips],
    )


def render_common_chips(npu_id: int, chips: Sequence[Mapping[str, Any]], mcu: Mapping[str, Any]) -> str:
    """``npu-smi info -t common -i N`` of a card with several chips: ``Chip ID`` opens each section, the
    mcu section ends it (``print_common_info``; the 310P key set is the gpustack capture's)."""
    sections = []
    for c in chips:
        if c.get("family") == "310P":
            rows = [
                ("Chip ID", c["chip_id"]),
                ("Memory Usage Rate(%)", c["memory_pct"]),
                ("Aicore Usage Rate(%)", c.get("aicore_pct", 0)),
                ("Aicore Freq(MHZ)", c["aicore_freq_mhz"]),
                ("Aicore curFreq(MHZ)", c.get("aicore_cur_freq_mhz", c["aicore_freq_mhz"])),
                ("Temperature(C)", c["temp_c"]),
            ]
        else:
            rows = [
                ("Chip ID", c["chip_id"]),
                ("Memory Usage Rate(%)", c.get("memory_pct", 0)),
                ("HBM Usage Rate(%)", c["hbm_usage_pct"]),
                ("Aicore Usage Rate(%)", c.get("aicore_pct", 0)),
                ("Aicore Freq(MHZ)", c["aicore_freq_mhz"]),
                ("Aicore curFreq(MHZ)", c.get("aicore_cur_freq_mhz", c["aicore_freq_mhz"])),
                ("Aicore Count", c["aicore_count"]),
                ("Temperature(C)", c["temp_c"]),
                ("NPU Real-time Power(W)", _fmt_power(c["power_w"])),
            ]
        sections.append("\n".join(_kv(k, v) for k, v in rows))
    mcu_rows: list[tuple[str, object]] = [("Chip Name", "mcu"), ("Temperature(C)", mcu["temp_c"])]
    if mcu.get("power_w") is not None:  # print_mcu_common_info: only 310-class cards print the MCU's power
        mcu_rows.append(("NPU Real-time Power(W)", _fmt_power(mcu["power_w"])))
    sections.append("\n".join(_kv(k, v) for k, v in mcu_rows))
    return render_card(npu_id, sections)


def render_power_chips(npu_id: int, chips: Sequence[Mapping[str, Any]], mcu_power_w: float | None) -> str:
    """``npu-smi info -t power -i N`` of a card with several chips. A 310P chip answers NOT_SUPPORT and
    is left out; the MCU then prints ``Power Dissipation(W)`` (``show_ascend_chip_power_info``)."""
    sections = [
        _kv("NPU Real-time Power(W)", _fmt_power(c["power_w"])) + "\n" + _kv("Chip ID", c["chip_id"])
        for c in chips
        if c.get("family") != "310P"
    ]
    if mcu_power_w is not None:
        sections.append(_kv("Power Dissipation(W)", _fmt_power(mcu_power_w)) + "\n" + _kv("Chip Name", "MCU"))
    text = render_card(npu_id, sections)
    if not any("Chip ID" in sec for sec in sections):  # Chip Count counts the card's chips, not the answers
        text = text.replace(_kv("Chip Count", 0), _kv("Chip Count", len(chips)), 1)
    return text


def render_temp_chips(npu_id: int, chips: Sequence[Mapping[str, Any]], lm75: int) -> str:
    """``npu-smi info -t temp -i N`` of a card with several chips (MCU section as on the A2 sample)."""
    sections = [_kv("NPU Temperature (C)", c["temp_c"]) + "\n" + _kv("Chip ID", c["chip_id"]) for c in chips]
    sections.append(
        _kv("LM75A_TE (C)", lm75) + "\n" + _kv("LM75B_TE (C)", lm75) + "\n" + _kv("Chip Name", "MCU")
    )
    return render_card(npu_id, sections)


def render_usages(u: Mapping[str, Any]) -> str:
    """``npu-smi info -t usages -i N``."""
    head = _kv("NPU ID", u["id"]) + "\n" + _kv("Chip Count", 1)
    rows = [
        ("DDR Capacity(MB)", 0),
        ("DDR Usage Rate(%)", 0),
        ("DDR Hugepages Total(page)", 0),
        ("DDR Hugepages Usage Rate(%)", 0),
        ("HBM Capacity(MB)", u["hbm_total_mb"]),
        ("HBM Usage Rate(%)", u["hbm_usage_pct"]),
        ("Aicore Usage Rate(%)", u.get("aicore_pct", 0)),
        ("Aivector Usage Rate(%)", u.get("aivector_pct", 0)),
        ("Aicpu Usage Rate(%)", u.get("aicpu_pct", 0)),
        ("Ctrlcpu Usage Rate(%)", u.get("ctrlcpu_pct", 0)),
        ("DDR Bandwidth Usage Rate(%)", 0),
        ("HBM Bandwidth Usage Rate(%)", u.get("hbm_bw_pct", 0)),
        ("NPU Utilization(%)", u.get("aicore_pct", 0)),
        ("Aicube Usage Rate(%)", u.get("aicube_pct", 0)),
        ("Chip ID", 0),
    ]
    return head + "\n\n" + "\n".join(_kv(k, v) for k, v in rows) + "\n"


def render_common(c: Mapping[str, Any]) -> str:
    """``npu-smi info -t common -i N``."""
    rows = [
        ("NPU ID", c["id"]),
        ("Chip Count", 1),
        ("Chip ID", 0),
        ("Memory Usage Rate(%)", c.get("memory_pct", 0)),
        ("HBM Usage Rate(%)", c["hbm_usage_pct"]),
        ("Aicore Usage Rate(%)", c.get("aicore_pct", 0)),
        ("Aicore Freq(MHZ)", c["aicore_freq_mhz"]),
        ("Aicore curFreq(MHZ)", c.get("aicore_cur_freq_mhz", c["aicore_freq_mhz"])),
        ("Aicore Count", c["aicore_count"]),
        ("Temperature(C)", c["temp_c"]),
        ("NPU Real-time Power(W)", _fmt_power(c["power_w"])),
    ]
    return "\n".join(_kv(k, v) for k, v in rows) + "\n"


def render_health(status: str, code: str = "NA", info: str = "NA") -> str:
    """``npu-smi info -t health -i N -c 0`` (no indentation: verbatim)."""
    return (
        "\n".join(
            _kv(k, v, indent="")
            for k, v in (
                ("Health Status", status),
                ("Error Code", code),
                ("Error Information", info),
            )
        )
        + "\n"
    )


def render_health_device(npu_id: int, statuses: list[str]) -> str:
    """``npu-smi info -t health -i N`` without ``-c``: one section per chip, then the MCU's (the layout of
    the npu-smi reference's example, tests/fixtures/samples/npu_smi_info_t_health_i_0.txt)."""
    head = _kv("NPU ID", npu_id) + "\n" + _kv("Chip Count", len(statuses))
    chips = [_kv("Chip ID", i) + "\n" + _kv("Health", s) for i, s in enumerate(statuses)]
    worst = next((s for s in statuses if s.upper() != "OK"), "OK")
    mcu = _kv("Health", worst) + "\n" + _kv("Chip Name", "MCU")
    return "\n\n".join([head, *chips, mcu]) + "\n"


ECC_KEYS = (
    "DDR Single Bit Error Count",
    "DDR Double Bit Error Count",
    "DDR Single Bit Aggregate Total Err Cnt",
    "DDR Double Bit Aggregate Total Err Cnt",
    "DDR Single Bit Isolated Pages Count",
    "DDR Double Bit Isolated Pages Count",
    "HBM Single Bit Error Count",
    "HBM Double Bit Error Count",
    "HBM Single Bit Aggregate Total Err Cnt",
    "HBM Double Bit Aggregate Total Err Cnt",
    "HBM Single Bit Isolated Pages Count",
    "HBM Double Bit Isolated Pages Count",
)


def render_ecc(npu_id: int, counts: Mapping[str, int] | None = None) -> str:
    """``npu-smi info -t ecc -i N`` (no indentation, 41-wide keys: verbatim)."""
    counts = counts or {}
    head = _kv("NPU ID", npu_id, indent="", width=41) + "\n" + _kv("Chip Count", 1, indent="", width=41)
    body = [_kv(k, counts.get(k, 0), indent="", width=41) for k in ECC_KEYS]
    body.append(_kv("Chip ID", 0, indent="", width=41))
    return head + "\n\n" + "\n".join(body) + "\n"


def render_temp(npu_id: int, temp_c: int, lm75a: int, lm75b: int) -> str:
    """``npu-smi info -t temp -i N``."""
    return (
        _kv("NPU ID", npu_id)
        + "\n"
        + _kv("Chip Count", 1)
        + "\n\n"
        + _kv("NPU Temperature (C)", temp_c)
        + "\n"
        + _kv("Chip ID", 0)
        + "\n\n"
        + _kv("LM75A_TE (C)", lm75a)
        + "\n"
        + _kv("LM75B_TE (C)", lm75b)
        + "\n"
        + _kv("Chip Name", "MCU")
        + "\n"
    )


def render_power(npu_id: int, power_w: object) -> str:
    """``npu-smi info -t power -i N``."""
    return (
        _kv("NPU ID", npu_id)
        + "\n"
        + _kv("Chip Count", 1)
        + "\n\n"
        + _kv("NPU Real-time Power(W)", _fmt_power(power_w))
        + "\n"
        + _kv("Chip ID", 0)
        + "\n"
    )


def render_topo(affinities: Sequence[str], link: str = "HCCS") -> str:
    """``npu-smi info -t topo`` (full HCCS mesh; a tab starts the header line: verbatim)."""
    n = len(affinities)
    header = "\t   " + "".join(f"{'NPU' + str(i):<11}" for i in range(n)) + "CPU Affinity"
    rows = [header]
    for i in range(n):
        cells = "".join(f"{'X' if i == j else link:<11}" for j in range(n))
        rows.append(f"{'NPU' + str(i):<11}{cells}{affinities[i]}")
    return "\n".join(rows) + "\n\n" + TOPO_LEGEND


def render_mcu(version: str) -> str:
    """``npu-smi upgrade -b mcu -i N``."""
    return _kv("Version", version) + "\n"


def dcmi_failure(code: int) -> str:
    return (
        f"DrvMngGetConsoleLogLevel failed. (g_conLogLevel=3)\ndcmi module initialize failed. ret is {code}\n"
    )


# ------------------------------------------------------------------------------------------------
# state → values
# ------------------------------------------------------------------------------------------------


def npu_health(config: Mapping[str, Any], npu_id: int) -> tuple[str, str, str]:
    """(status, error code, error information) of one NPU from the ``npu_health`` fault knob."""
    knob = (common.faults(dict(config)).get("npu_health") or {}).get(str(npu_id))
    if not knob:
        return "OK", "NA", "NA"
    if isinstance(knob, str):
        code, info = HEALTH_DEFAULT_CODES.get(knob, ("80E18005", "NA"))
        return knob, code, info
    status = str(knob.get("status", "Alarm"))
    code, info = HEALTH_DEFAULT_CODES.get(status, ("80E18005", "NA"))
    return status, str(knob.get("error_code", code)), str(knob.get("error_info", info))


def hbm_used(npu: Mapping[str, Any]) -> int:
    return int(npu["hbm_used_mb"]) + sum(int(p.get("memory_mb", 0)) for p in npu.get("processes") or [])


def _with_knob_hbm(config: Mapping[str, Any], npu: Mapping[str, Any]) -> Mapping[str, Any]:
    """The chip with the HBM capacity of the ``hbm_mb`` knob (a smaller part), its idle use scaled with it."""
    capacity = (common.faults(dict(config)).get("hbm_mb") or {}).get(str(npu["id"]))
    if capacity is None or not npu.get("hbm_total_mb"):
        return npu
    used = round(int(npu["hbm_used_mb"]) * int(capacity) / int(npu["hbm_total_mb"]))
    return {**npu, "hbm_total_mb": int(capacity), "hbm_used_mb": used}


def _with_knob_processes(config: Mapping[str, Any], npu: Mapping[str, Any]) -> Mapping[str, Any]:
    """The chip with the live processes of the ``npu_processes`` knob added to its own.

    A process whose PID is gone is not listed (npu-smi shows only processes that hold the device), and
    its name is what the kernel calls it, as npu-smi prints it (vllm-ascend#5606: ``VLLMWorker_TP``).
    """
    wanted = (common.faults(dict(config)).get("npu_processes") or {}).get(str(npu["id"])) or []
    live = []
    for entry in wanted:
        try:
            comm = Path(f"/proc/{int(entry['pid'])}/comm").read_text(encoding="utf-8").strip()
        except (OSError, KeyError, TypeError, ValueError):
            continue
        live.append(
            {
                "pid": int(entry["pid"]),
                "name": entry.get("name") or comm,
                "memory_mb": int(entry.get("memory_mb", 0)),
            }
        )
    if not live:
        return npu
    return {**npu, "processes": [*(npu.get("processes") or []), *live]}


LOAD_W = 200.0
"""What a chip draws above its idle power (its ``power_w``) while the processes that hold it keep every CPU
they may run on busy; ``power_load_w`` of a chip in hardware.json overrides it."""
LOAD_WINDOW_S = 0.2
"""How long one npu-smi call watches the holders' CPU time (only when some process holds a chip)."""


def _cpu_seconds(proc: str, pid: int) -> dict[str, float] | None:
    """CPU seconds ``pid`` has run, by thread: ``/proc/PID/task/TID/schedstat``'s first field (nanoseconds
    on a CPU), else the whole process under the key ``""`` from utime + stime of ``/proc/PID/stat`` (fields
    14 and 15, in clock ticks). The ticks are 10 ms apart: over a 0.2 s window one tick is 5 % of a core,
    which the ns counter does not round away."""
    try:
        tasks = os.listdir(f"{proc}/{pid}/task")
    except OSError:
        tasks = []
    by_thread: dict[str, float] = {}
    for task in tasks:
        try:
            by_thread[task] = int(Path(f"{proc}/{pid}/task/{task}/schedstat").read_text().split()[0]) / 1e9
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended meanwhile
    if by_thread:
        return by_thread
    try:
        stat = Path(f"{proc}/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    try:
        return {"": (int(fields[11]) + int(fields[12])) / float(os.sysconf("SC_CLK_TCK"))}
    except (IndexError, ValueError):
        return None


def _busy_seconds(
    before: Mapping[str, float] | None, after: Mapping[str, float] | None, elapsed: float
) -> float:
    """CPU seconds a process ran between two :func:`_cpu_seconds` reads ``elapsed`` apart. The kernel's
    counters move by up to a scheduler tick around a read (a 0.2 s window saw a single busy thread at 102 %
    of a core on a loaded machine), and no thread runs longer than the wall clock: each thread's share is
    capped at ``elapsed`` (the process-wide fallback only by the chip's share, at most 1). A thread that
    ended inside the window takes its time with it (never below 0); one born inside it counts from 0."""
    if before is None or after is None:
        return 0.0
    if "" in after:
        return max(0.0, after[""] - before.get("", after[""]))
    return sum(min(elapsed, max(0.0, ran - before.get(tid, 0.0))) for tid, ran in after.items())


def container_holders(proc: str, chip_ids: Iterable[int]) -> dict[int, list[int]]:
    """Chip id -> the processes of containers given ``/dev/davinci<id>``: a process whose root is not
    npu-smi's own and holds that device node (the Ascend Docker Runtime's ``ASCEND_VISIBLE_DEVICES`` and
    ``docker run --device`` both put it there). The simulated engine runs on CPUs and never opens the
    device, so the container that was given it stands for the holder."""
    wanted = list(chip_ids)
    found: dict[int, list[int]] = {}
    try:
        own = os.stat("/")
        pids = [int(e) for e in os.listdir(proc) if e.isdigit()]
    except OSError:
        return found
    for pid in pids:
        root = f"{proc}/{pid}/root"
        try:
            there = os.stat(root)
        except OSError:
            continue
        if (there.st_dev, there.st_ino) == (own.st_dev, own.st_ino):
            continue
        for chip in wanted:
            if os.path.exists(f"{root}/dev/davinci{chip}"):
                found.setdefault(chip, []).append(pid)
    return found


def chip_load(npus: Sequence[Mapping[str, Any]], window_s: float = LOAD_WINDOW_S) -> dict[int, float]:
    """Chip id -> the share (0..1) of the CPUs its holders may use that they kept busy over ``window_s``.

    The holders are the live processes of the ``npu_processes`` knob (real PIDs of the machine, as that
    knob names them) and the processes of containers given the chip (:func:`container_holders`, read from
    the node's ``/proc``). No holder: no chip is loaded, and the call does not wait."""
    holders = container_holders(str(common.host_path("/proc")), [int(n["id"]) for n in npus])
    for n in npus:
        for p in n.get("processes") or []:
            holders.setdefault(int(n["id"]), []).append(int(p["pid"]))
    pids = sorted({pid for group in holders.values() for pid in group})
    if not pids:
        return {}
    cpus: set[int] = set()
    for pid in pids:
        try:
            cpus |= os.sched_getaffinity(pid)
        except OSError:
            continue
    before = {pid: _cpu_seconds("/proc", pid) for pid in pids}
    started = time.monotonic()
    time.sleep(window_s)
    after = {pid: _cpu_seconds("/proc", pid) for pid in pids}
    elapsed = time.monotonic() - started
    busy = {pid: _busy_seconds(before[pid], after[pid], elapsed) for pid in pids}
    capacity = elapsed * max(len(cpus), 1)
    return {chip: min(1.0, sum(busy[p] for p in set(group)) / capacity) for chip, group in holders.items()}


def node_load(config: Mapping[str, Any], window_s: float = LOAD_WINDOW_S) -> dict[int, float]:
    """:func:`chip_load` of a node's chips, the ``npu_processes`` knob's live processes among the holders."""
    return chip_load([_with_knob_processes(config, n) for n in config.get("npus") or []], window_s)


def loaded_power_w(n: Mapping[str, Any], share: float) -> float:
    """A chip's power at ``share`` (0..1) of load: its idle ``power_w`` plus ``power_load_w`` (default
    :data:`LOAD_W`) times the share."""
    return round(float(n["power_w"]) + float(n.get("power_load_w", LOAD_W)) * share, 1)


def loaded_aicore_pct(n: Mapping[str, Any], share: float) -> int:
    """A chip's AI-core utilisation at ``share`` (0..1) of load, a whole percent as DCMI gives it: its idle
    ``aicore_pct`` (default 0) at no load, 100 with every CPU its holders may use busy, linear between."""
    idle = int(n.get("aicore_pct", 0))
    return min(100, max(idle, round(idle + (100 - idle) * share)))


def compatibility(driver_fw_range: Sequence[str] | None, firmware: str) -> str:
    if not driver_fw_range or len(driver_fw_range) != 2:
        return "OK"
    lo, hi = (common.version_tuple(v) for v in driver_fw_range)
    fw = common.version_tuple(firmware)
    return "OK" if lo <= fw[: len(lo)] and fw[: len(hi)] <= hi else "NOK"


class Node:
    """A node's hardware as npu-smi sees it (config + loaded driver + flashed firmware)."""

    def __init__(self, config: Mapping[str, Any], loaded: Mapping[str, Any]) -> None:
        self.config = config
        self.loaded = loaded
        self.npus: list[Mapping[str, Any]] = [
            _with_knob_processes(config, _with_knob_hbm(config, n)) for n in config["npus"]
        ]
        self.hardware = str(config.get("hardware_model", "a2"))
        self.per = int(config.get("chips_per_npu", 1))
        self._load: dict[int, float] | None = None

    def share(self, n: Mapping[str, Any]) -> float:
        """The load of the processes that hold the chip (:func:`chip_load`, measured once per call)."""
        if self._load is None:
            self._load = chip_load(self.npus)
        return self._load.get(int(n["id"]), 0.0)

    def power_w(self, n: Mapping[str, Any]) -> float:
        """The chip's power now (:func:`loaded_power_w` at its holders' load)."""
        return loaded_power_w(n, self.share(n))

    def aicore_pct(self, n: Mapping[str, Any]) -> int:
        """The chip's AI-core utilisation now (:func:`loaded_aicore_pct` at its holders' load)."""
        return loaded_aicore_pct(n, self.share(n))

    @staticmethod
    def npu_id(n: Mapping[str, Any]) -> int:
        return int(n.get("npu_id", n["id"]))

    def npu_ids(self) -> list[int]:
        return list(dict.fromkeys(self.npu_id(n) for n in self.npus))

    def chips(self, npu_id: int) -> list[Mapping[str, Any]]:
        return [n for n in self.npus if self.npu_id(n) == npu_id]

    def npu(self, npu_id: int) -> Mapping[str, Any] | None:
        """The first chip of NPU ``npu_id``."""
        return next(iter(self.chips(npu_id)), None)

    def row(self, n: Mapping[str, Any]) -> dict[str, Any]:
        status, _, _ = npu_health(self.config, int(n["id"]))
        chip = int(n.get("chip_id", 0))
        return {
            "id": n["id"],
            "npu_id": self.npu_id(n),
            "chip_id": chip,
            "phy_id": n["id"],
            "name": self.config["model"],
            "health": status,
            # an A3 prints no power for the second die of an NPU (vllm-ascend#5850)
            "power_w": "-" if self.hardware == "a3" and chip == 1 else self.power_w(n),
            "temp_c": n["temp_c"],
            "bus_id": n["bus_id"],
            "aicore_pct": self.aicore_pct(n),
            "memory_used_mb": n.get("memory_used_mb", 0),
            "memory_total_mb": n.get("memory_total_mb", 0),
            "hbm_used_mb": hbm_used(n),
            "hbm_total_mb": n["hbm_total_mb"],
            "processes": n.get("processes") or [],
        }

    def info_table(self, rows: Sequence[Mapping[str, Any]]) -> str:
        version = common.installed_driver_version() or str(self.loaded["driver_version"])
        driver = str(self.loaded["driver_version"])
        if self.hardware == "300i-duo":
            return render_info_310p(version, driver, rows)
        return render_info(version, driver, rows, chip_phy=self.hardware == "a3")

    def board(self, n: Mapping[str, Any]) -> dict[str, Any]:
        pci = self.config["pci"]
        board = self.config["board"]
        fw = str(self.loaded.get("firmware_version") or "NA")
        return {
            "id": self.npu_id(n),
            "product_name": board["product_name"],
            "model": board.get("model", "NA"),
            "manufacturer": board.get("manufacturer", "Huawei"),
            "serial": n["serial"],
            "software_version": self.loaded["driver_version"],
            "firmware_version": fw,
            "compatibility": compatibility(self.loaded.get("compatible_fw"), fw),
            "board_id": board["board_id"],
            "pcb_id": board.get("pcb_id", "A"),
            "bom_id": board.get("bom_id", "1"),
            "bus_id": n["bus_id"],
            "slot_id": n.get("slot_id", self.npu_id(n)),
            "vendor_id": "0x" + pci["vendor"][2:].upper(),
            "device_id": "0x" + pci["device"][2:].upper(),
            "subsystem_vendor_id": "0x" + pci["subsystem_vendor"][2:].upper(),
            "subsystem_device_id": "0x" + pci["subsystem_device"][2:].upper(),
            "chip_name": self.config["model"],
            "vdie_id": n.get("vdie_id", "NA"),
            "ndie_id": n.get("ndie_id", "NA"),
            "chip_count": self.per,
            "chip_id": int(n.get("chip_id", 0)),
            "chip_position": n["id"],
            "product_rows": self.hardware != "300i-duo",
            "npu_name": self.config["model"] if self.hardware == "a3" else None,
        }

    def usage_values(self, n: Mapping[str, Any]) -> dict[str, Any]:
        used = hbm_used(n)
        total = int(n["hbm_total_mb"])
        ddr_total = int(n.get("memory_total_mb", 0))
        return {
            "id": self.npu_id(n),
            "chip_id": int(n.get("chip_id", 0)),
            "family": "310P" if self.hardware == "300i-duo" else "910",
            "memory_total_mb": ddr_total,
            "memory_pct": round(int(n.get("memory_used_mb", 0)) * 100 / ddr_total) if ddr_total else 6,
            "hbm_total_mb": total,
            "hbm_usage_pct": round(used * 100 / total) if total else 0,
            "aicore_pct": self.aicore_pct(n),
            "ctrlcpu_pct": n.get("ctrlcpu_pct", 6),
            "aicore_freq_mhz": n.get("aicore_freq_mhz", 1800),
            "aicore_count": n.get("aicore_count", 20),
            "temp_c": n["temp_c"],
            "power_w": self.power_w(n),
        }


# ------------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------------

USAGE = """Usage: npu-smi <command> [<args>]
Commands:
        info            Show information.
        set             Set configuration.
        clear           Clear information.
        upgrade         Upgrade firmware.
Use "npu-smi <command> -h" to get the help of a command.
"""

INFO_USAGE = """Usage: npu-smi info <watch|proc-mem|-h|-m|-l|-t type> [Options...]
Options:
        -i %d           Card ID
        -c %d           Chip ID
        -t %s           Type: board, usages, common, health, ecc, temp, power, topo, memory, spod-info
"""

INFO_TYPES = ("board", "usages", "common", "health", "ecc", "temp", "power", "topo", "memory", "spod-info")

SUPER_POD_SIZE = 384
"""An Atlas A3 super pod's ``Super Pod Size`` as the sourced sample prints it (CloudMatrix384)."""


def render_spod_info(sdid: int, super_pod_id: int, server_index: int, size: int = SUPER_POD_SIZE) -> str:
    """``npu-smi info -t spod-info -i N -c C`` of an A3 chip: the layout of the sample in
    ``tests/fixtures/samples/npu_smi_info_t_spod_info.txt`` (hicann/shmem), unindented."""
    return (
        f"SDID : {sdid}\nSuper Pod Size : {size}\nSuper Pod ID : {super_pod_id}\n"
        f"Server Index : {server_index}\n"
    )


def super_device_id(server_index: int, phy_id: int) -> int:
    """A chip's SDID. The sample's chip 0 of server 4 reads 16777216 = 4 << 22, and MindCluster's hccl.json
    example has 37748736 = 9 << 22 for device 0: the server index sits from bit 22. The low bits of the
    real encoding are not documented; here they are the chip's physical id, unique within the server."""
    return (server_index << 22) | phy_id


class UsageError(Exception):
    pass


def _opts(args: Sequence[str]) -> dict[str, str]:
    """``-t board -i 0 -c 0`` (also ``-i0``) → {"t": "board", "i": "0", "c": "0"}; flags map to ""."""
    out: dict[str, str] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("-") or len(a) < 2:
            raise UsageError(f"Error: invalid parameter {a}.")
        key = a[1:]
        if key in ("t", "i", "c", "b", "f", "a", "d"):
            if i + 1 >= len(args):
                raise UsageError(f"Error: parameter -{key} requires a value.")
            out[key] = args[i + 1]
            i += 2
        elif len(key) > 1 and key[0] in "icd" and key[1:].isdigit():
            out[key[0]] = key[1:]
            i += 1
        else:
            out[key] = ""
            i += 1
    return out


def _npu_arg(node: Node, opts: Mapping[str, str]) -> Mapping[str, Any]:
    """The chip ``-i N [-c C]`` names (chip 0 of NPU N without ``-c``)."""
    raw = opts.get("i")
    if raw is None:
        raise UsageError("Error: parameter -i is required.")
    if not raw.isdigit() or node.npu(int(raw)) is None:
        raise UsageError(f"Error: the card id {raw} is invalid.")
    chips = node.chips(int(raw))
    chip = opts.get("c")
    if chip is None:
        return chips[0]
    if not chip.isdigit() or int(chip) >= len(chips):
        raise UsageError(f"Error: the chip id {chip} is invalid.")
    return chips[int(chip)]


def info(node: Node, args: Sequence[str]) -> str:
    opts = _opts(args)
    if "h" in opts:
        return INFO_USAGE
    if "l" in opts:
        return render_list(node.npu_ids(), node.per)
    if "m" in opts:
        if node.hardware == "a3":
            return render_chip_map_phy([{**n, "chip_name": node.config["model"]} for n in node.npus])
        return render_chip_map(node.npu_ids(), "Ascend " + str(node.config["model"]), node.per)
    t = opts.get("t")
    if t is None:
        if set(opts) - {"i", "c"}:
            raise UsageError("Error: invalid parameter.\n" + INFO_USAGE)
        if "i" not in opts:
            chips = node.npus
        elif "c" in opts:
            chips = [_npu_arg(node, opts)]
        else:
            chips = node.chips(node.npu_id(_npu_arg(node, opts)))
        return node.info_table([node.row(n) for n in chips])
    if t not in INFO_TYPES:
        raise UsageError(f"Error: the type {t} is invalid.\n" + INFO_USAGE)
    if t == "topo":
        return render_topo([str(n.get("cpu_affinity", "0-23")) for n in node.npus])
    if t == "spod-info":
        if node.hardware != "a3":  # a super pod is an A3's (the type is the A3 npu-smi's)
            raise UsageError(f"Error: the type {t} is invalid.\n" + INFO_USAGE)
        if "c" not in opts:
            raise UsageError("Error: parameter -c is required.")
        chip = _npu_arg(node, opts)
        index = int(node.config.get("node", {}).get("index", 0))
        pod = int(node.config.get("super_pod_id", 0))
        return render_spod_info(super_device_id(index, int(chip["id"])), pod, index)
    n = _npu_arg(node, opts)
    chip_id = int(n["id"])  # the chip's logic id: the fault knobs name chips by it
    card = node.npu_id(n)
    multi = node.hardware != "a2" and "c" not in opts
    # the chips' values only where a multi-chip output prints them: their power measures the holders' load
    values = [node.usage_values(c) for c in node.chips(card)] if multi else []
    if t == "board":
        b = node.board(n)
        return render_board_chip(b) if "c" in opts else render_board(b)
    if t == "usages":
        return render_usages_chips(card, values) if multi else render_usages(node.usage_values(n))
    if t == "common":
        if not multi:
            return render_common(node.usage_values(n))
        mcu_power = round(sum(v["power_w"] for v in values) * 0.4, 1) if node.hardware == "300i-duo" else None
        mcu = {"temp_c": max(int(v["temp_c"]) for v in values) - 3, "power_w": mcu_power}
        return render_common_chips(card, values, mcu)
    if t == "health":
        if "c" not in opts:
            return render_health_device(
                card, [npu_health(node.config, int(c["id"]))[0] for c in node.chips(card)]
            )
        return render_health(*npu_health(node.config, chip_id))
    if t == "ecc":
        ecc = (common.faults(dict(node.config)).get("ecc") or {}).get(str(chip_id)) or {}
        return render_ecc(card, {str(k): int(v) for k, v in ecc.items()})
    if t == "temp":
        temp = int(n["temp_c"])
        if multi:
            return render_temp_chips(card, values, temp - 4)
        return render_temp(card, temp, temp - 4, temp - 4)
    if t == "power":
        if multi:
            # A 310P card's power comes from its MCU alone; it is not the chips' sum (no capture of it).
            duo = round(sum(v["power_w"] for v in values) * 0.4, 1) if node.hardware == "300i-duo" else None
            return render_power_chips(card, values, duo)
        return render_power(card, node.power_w(n))
    # memory
    return (
        "\n".join(
            _kv(k, v)
            for k, v in (
                ("DDR Capacity(MB)", n.get("memory_total_mb", 0)),
                ("DDR Clock Speed(MHz)", 0),
                ("HBM Capacity(MB)", n["hbm_total_mb"]),
                ("HBM Clock Speed(MHz)", 1600),
                ("HBM Temperature(C)", int(n["temp_c"]) + 3),
                ("HBM Manufacturer ID", "0x57"),
            )
        )
        + "\n"
    )


def run(argv: Sequence[str]) -> tuple[int, str]:
    """(exit code, stdout) of ``npu-smi argv``."""
    if not argv or argv[0] in ("-h", "--help", "help"):
        return (EXIT_OK if argv else EXIT_ERROR), USAGE
    config = common.load_config()
    loaded = common.loaded_driver()
    if config is None or loaded is None:
        return EXIT_ERROR, dcmi_failure(DRIVER_NOT_LOADED)
    forced = common.faults(config).get("dcmi_error")
    if forced:
        return EXIT_ERROR, dcmi_failure(int(forced))
    node = Node(config, loaded)
    try:
        if argv[0] == "info":
            return EXIT_OK, info(node, argv[1:])
        if argv[0] == "upgrade":
            opts = _opts(argv[1:])
            if opts.get("b") == "mcu":
                _npu_arg(node, opts)
                return EXIT_OK, render_mcu(str(config.get("mcu_version", "23.3.13")))
            raise UsageError("Error: the upgrade operation is not supported by this device.")
        if argv[0] in ("set", "clear"):
            raise UsageError(f"Error: npu-smi {argv[0]} is not supported on this node.")
        raise UsageError(f"Error: invalid command {argv[0]}.\n" + USAGE)
    except UsageError as exc:
        return EXIT_ERROR, str(exc).rstrip("\n") + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    code, out = run(list(sys.argv[1:] if argv is None else argv))
    sys.stdout.write(out)
    sys.stdout.flush()
    return code
