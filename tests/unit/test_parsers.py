"""Every verbatim sample in tests/fixtures/samples/ is parsed and its VALUES are checked.

The sample files carry ``# SOURCE`` / ``# ===`` comment lines and sometimes several outputs in one
file. :func:`outputs` strips them: a run of ``#`` lines (or an ``hccn_tool`` command line) ends one
output and starts the next; the parsers only ever see real tool output.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from provision.ascend import (
    DCMI_DEVICE_BUSY,
    DcmiInitError,
    ParseError,
    ascend_devices,
    ascend_model,
    dcmi_error_code,
    normalize_bus_id,
    parse_cann_install_info,
    parse_driver_version_info,
    parse_firmware_version_info,
    parse_hccn_fec,
    parse_hccn_gateway,
    parse_hccn_ip,
    parse_hccn_key_values,
    parse_hccn_link,
    parse_hccn_link_stat,
    parse_hccn_net_health,
    parse_hccn_netdetect,
    parse_hccn_ping,
    parse_hccn_tls,
    parse_install_log,
    parse_lspci,
    parse_mcu_version,
    parse_npu_smi_board,
    parse_npu_smi_chip_map,
    parse_npu_smi_common,
    parse_npu_smi_ecc,
    parse_npu_smi_health,
    parse_npu_smi_info,
    parse_npu_smi_key_values,
    parse_npu_smi_list,
    parse_npu_smi_power,
    parse_npu_smi_temp,
    parse_npu_smi_topo,
    parse_npu_smi_usages,
)
from provision.ascend.hccn import parse_hccl_test
from provision.doctor.catalog import shipped
from tests.helpers import SAMPLES, fault_logs

pytestmark = pytest.mark.unit

REFERENCE = Path("/work/shared/reference/samples")
HCCN_CMD = "/usr/local/Ascend/driver/tools/hccn_tool"


@dataclass(frozen=True)
class Output:
    title: str
    text: str


def outputs(name: str) -> list[Output]:
    """Split a sample file into its real outputs (comment lines and command lines removed)."""
    result: list[Output] = []
    title: list[str] = []
    body: list[str] = []
    in_comment = False

    def flush() -> None:
        if any(line.strip() for line in body):
            result.append(Output(" | ".join(title), "\n".join(body) + "\n"))

    for line in (SAMPLES / name).read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or line.startswith(HCCN_CMD):
            if not in_comment:
                flush()
                title, body = [], []
            title.append(line)
            in_comment = line.startswith("#")  # a command line is a one-line header
            continue
        in_comment = False
        if line.strip() == "...":  # upstream elision marks in the docs, not tool output
            continue
        body.append(line)
    flush()
    return result


def split_before_second(text: str, marker: str) -> tuple[str, str]:
    """The temp and power outputs share one section of npu_smi_info_misc.txt."""
    first = text.index(marker)
    second = text.index(marker, first + len(marker))
    start = text.rindex("\n", 0, second) + 1
    return text[:start], text[start:]


# --------------------------------------------------------------------------------------------
# Checks, one per output, in file order
# --------------------------------------------------------------------------------------------


def check_install_driver(text: str) -> None:
    log = parse_install_log(text)
    assert log.component == "Driver"
    assert log.succeeded
    assert log.errors == ()
    assert log.install_type == "DKMS"
    assert log.last_percentage == 100
    assert not log.mentions_reboot
    assert log.entries[0].timestamp == "2025-07-17 10:35:21"
    assert log.entries[0].message == "Start time: 2025-07-17 10:35:21"
    assert any(e.level == "WARNING" for e in log.entries)


def check_install_firmware(text: str) -> None:
    log = parse_install_log(text)
    assert log.component == "Firmware"
    assert log.succeeded
    assert log.chips_upgraded == 8
    assert log.mentions_reboot
    assert log.last_percentage == 100


def check_driver_a(text: str) -> None:
    info = parse_driver_version_info(text)
    assert info.version == "25.0.rc1.1"
    assert info.package_version == "25.0.rc1.1"
    assert info.inner_version == "V100R001C21SPC002B220"
    assert info.ascendhal_version == "7.35.23"
    assert info.compatible_versions == (
        "V100R001C17",
        "V100R001C18",
        "V100R001C19",
        "V100R001C20",
        "V100R001C21",
    )
    assert info.compatible_firmware == (("7.0.0", "7.7.99"),)
    assert info.raw["tsfw_version"] == "1.0"


def check_firmware_a(text: str) -> None:
    info = parse_firmware_version_info(text)
    assert info.version == "7.7.0.1.231"
    assert info.firmware_version == "1.0"
    assert info.package_version == "25.0.rc1.1"
    assert info.compatible_drivers == (
        ("23.0.0", "23.0.0."),
        ("24.0", "24.0."),
        ("24.1", "24.1."),
        ("25.0", "25.0."),
    )


def check_driver_b(text: str) -> None:
    info = parse_driver_version_info(text)
    assert info.version == "24.1.rc1"
    assert info.package_version is None  # this driver's version.info has no package_version line
    assert info.inner_version == "V100R001C15SPC006B220"
    assert info.compatible_firmware == (("7.0.0", "7.2.99"),)
    assert info.compatible_versions[0] == "V100R001C30"


def check_firmware_b(text: str) -> None:
    info = parse_firmware_version_info(text)
    assert info.version == "7.1.0.11.220"
    assert info.package_version == "23.0.7"
    assert info.compatible_drivers == (("23.0.rc3", "23.0.rc3."), ("23.0.0", "23.0.0."))


def check_cann_85(text: str) -> None:
    info = parse_cann_install_info(text)
    assert info.package_name == "Ascend-cann-toolkit"
    assert info.version == "8.5.0"
    assert info.inner_version == "V100R001C25SPC001B212"
    assert info.arch == "aarch64"
    assert info.os == "linux"
    assert info.path == "/usr/local/Ascend/cann-8.5.0/aarch64-linux"
    assert len(info.compatible_versions) == 6


def check_cann_82(text: str) -> None:
    info = parse_cann_install_info(text)
    assert info.version == "8.2.RC1"
    assert info.path == "/usr/local/Ascend/ascend-toolkit/8.2.RC1/aarch64-linux"


def check_net_health_init(text: str) -> None:
    h = parse_hccn_net_health(text)
    assert h.status == "Init"
    assert h.code == 6
    assert not h.ok


def check_link_up(text: str) -> None:
    assert parse_hccn_link(text) == "UP"


def check_optical(text: str) -> None:
    kv = parse_hccn_key_values(text, "hccn_tool -optical -g")
    assert kv.get("optical info") == ""
    assert kv.get("present") == "not present"
    assert kv.get("Tx Power") == "4.4035 mW"
    assert kv.get("Rx LoL Flag") == "0xff"
    assert kv.get("temp high thres") == "70 C"


def check_tls(text: str) -> None:
    tls = parse_hccn_tls(text)
    assert tls.dev_id == 0
    assert tls.enabled is False
    assert tls.preconfigured is True
    assert tls.alarm_threshold_days == 60
    assert dict(tls.fields)["tls switch"] == "0"


def check_fec(text: str) -> None:
    assert parse_hccn_fec(text) == "rs FEC mode"


def check_ip(text: str) -> None:
    ip = parse_hccn_ip(text)
    assert ip.ipaddr == "10.xx.xx.10"  # redacted upstream; kept as printed
    assert ip.netmask == "255.255.255.0"


def check_stat(text: str) -> None:
    kv = parse_hccn_key_values(text, "hccn_tool -stat -g")
    assert kv.pairs[0] == ("packet statistics", "")
    assert kv.get("mac_tx_mac_pause_num") == "0"
    assert kv.get("nic_tx_all_pkg_num") == "122404"
    assert kv.get("nic_rx_all_oct_num") == "482237805"


def check_link_stat(text: str) -> None:
    ls = parse_hccn_link_stat(text)
    assert ls.device == 0
    assert ls.current_time == "Wed Jun  7 10:08:28 2023"
    assert ls.link_up_count == 2
    assert ls.records == (
        ("Tue Jun  6 16:32:12 2023", "LINK UP"),
        ("Tue Jun  6 16:32:10 2023", "LINK DOWN"),
        ("Tue Jun  6 16:31:55 2023", "LINK UP"),
    )


def check_net_health_success(text: str) -> None:
    h = parse_hccn_net_health(text)
    assert h.status == "Success"
    assert h.code == 0
    assert h.ok


LSPCI_BUSES = (
    "0000:01:00.0",
    "0000:02:00.0",
    "0000:41:00.0",
    "0000:42:00.0",
    "0000:81:00.0",
    "0000:82:00.0",
    "0000:c1:00.0",
    "0000:c2:00.0",
)


def check_lspci(text: str) -> None:
    devices = parse_lspci(text)
    assert len(devices) == 8
    assert ascend_devices(devices) == devices
    assert tuple(d.bus_id for d in devices) == LSPCI_BUSES
    first = devices[0]
    assert first.slot == "01:00.0"
    assert first.vendor_id == 0x19E5
    assert first.device_id == 0xD802
    assert first.class_code == 0x1200
    assert first.class_name == "Processing accelerators"
    assert first.revision == 0x20
    assert first.model == "910B"
    assert {d.model for d in devices} == {"910B"}


def check_910b3(text: str) -> None:
    info = parse_npu_smi_info(text)
    assert info.version == "24.1.rc1.b030"
    assert info.driver_version == "24.1.rc1.b030"
    assert info.npu_ids == (0, 1, 2, 3, 4, 5, 6, 7)
    assert len(info.npus) == 8
    assert info.all_healthy
    assert info.process_table is False  # the upstream doc omits the process table
    assert info.processes == ()
    npu3 = info.npu(3)
    assert npu3.id == 3
    assert npu3.name == "910B3"
    assert npu3.health == "OK"
    assert npu3.healthy
    assert npu3.power_w == 99.8
    assert npu3.temp_c == 40
    assert (npu3.hbm_used_mb, npu3.hbm_total_mb) == (3314, 65536)
    assert npu3.bus_id == "0000:82:00.0"
    assert npu3.aicore_pct == 0
    assert npu3.chip_id == 0
    assert npu3.chip_device is None
    assert (npu3.memory_used_mb, npu3.memory_total_mb) == (0, 0)
    assert (npu3.hugepages_used, npu3.hugepages_total) == (0, 0)
    assert npu3.processes == ()
    npu0 = info.npu(0)
    assert (npu0.power_w, npu0.temp_c, npu0.hbm_used_mb, npu0.bus_id) == (101.8, 43, 3318, "0000:C1:00.0")
    assert info.npu(7).hbm_used_mb == 3315
    assert info.npu(6).power_w == 103.8
    # npu-smi prints upper-case bus ids, lspci lower-case: normalised they are the same set.
    assert sorted(normalize_bus_id(n.bus_id or "") for n in info.npus) == list(LSPCI_BUSES)


def check_910b4(text: str) -> None:
    info = parse_npu_smi_info(text)
    assert info.version == "25.0.rc1.1"
    assert info.driver_version == "25.0.rc1.1"
    assert info.npu_ids == tuple(range(8))
    assert info.all_healthy
    assert info.process_table is True
    assert info.processes == ()
    assert info.busy_npu_ids == ()
    assert {n.name for n in info.npus} == {"910B4"}
    assert {n.hbm_total_mb for n in info.npus} == {32768}
    n0 = info.npu(0)
    assert (n0.power_w, n0.temp_c, n0.hbm_used_mb, n0.bus_id) == (87.2, 33, 2654, "0000:C1:00.0")
    n4 = info.npu(4)
    assert (n4.power_w, n4.temp_c, n4.bus_id) == (84.5, 39, "0000:01:00.0")
    n7 = info.npu(7)
    assert (n7.power_w, n7.temp_c, n7.hbm_used_mb, n7.bus_id) == (81.6, 37, 2653, "0000:42:00.0")


def check_list(text: str) -> None:
    lst = parse_npu_smi_list(text)
    assert lst.total_count == 8
    assert lst.npu_ids == tuple(range(8))
    assert all(e.chip_count == 1 for e in lst.npus)
    assert lst.chip_total == 8


def check_chip_map(text: str) -> None:
    rows = parse_npu_smi_chip_map(text)
    assert len(rows) == 16
    chips = [r for r in rows if not r.is_mcu]
    mcus = [r for r in rows if r.is_mcu]
    assert [(r.npu_id, r.chip_id, r.chip_logic_id) for r in chips] == [(i, 0, i) for i in range(8)]
    assert {r.chip_name for r in chips} == {"Ascend 910B4"}
    assert [(r.npu_id, r.chip_id, r.chip_logic_id, r.chip_name) for r in mcus] == [
        (i, 1, None, "Mcu") for i in range(8)
    ]


def check_common(text: str) -> None:
    c = parse_npu_smi_common(text)
    assert (c.npu_id, c.chip_count, c.chip_id) == (0, 1, 0)
    assert c.memory_usage_pct == 6
    assert c.hbm_usage_pct == 0
    assert c.aicore_usage_pct == 0
    assert (c.aicore_freq_mhz, c.aicore_cur_freq_mhz, c.aicore_count) == (900, 900, 30)
    assert c.temp_c == 41
    assert c.power_w == 71.7


def check_health(text: str) -> None:
    h = parse_npu_smi_health(text)
    assert h.status == "OK"
    assert h.ok
    assert h.error_codes == ()
    assert h.error_information is None


def check_health_device(text: str) -> None:
    h = parse_npu_smi_health(text)
    assert h.ok and h.status == "OK"
    assert (h.npu_id, h.chips, h.error_codes) == (0, ((0, "OK"),), ())


def check_spod_info(text: str) -> None:
    from provision.ascend.npu_smi import SuperPodInfo, parse_npu_smi_spod_info

    assert parse_npu_smi_spod_info(text) == SuperPodInfo(
        sdid=16777216, super_pod_id=0, super_pod_size=384, server_index=4
    )


def check_hccl_test(text: str) -> None:
    rows = parse_hccl_test(text)
    assert [row.data_size for row in rows] == [8192 * 2**i for i in range(14)]
    assert rows[-1].alg_bandwidth_gbs == 23.76245 and rows[-1].check_result == "success"


def check_fault_log(text: str) -> None:
    """A block of real failure lines (test_doctor_real_faults.py checks which entry names it)."""
    named = [f.id for f in shipped().failures if f.signature.regex and f.search(text)]
    assert named, text


def check_ecc(text: str) -> None:
    e = parse_npu_smi_ecc(text)
    assert e.npu_id == 1
    assert e.chip_id == 0
    assert len(e.counts) == 12
    assert all(v == 0 for _, v in e.counts)
    assert e.hbm_single_bit_errors == 0
    assert e.hbm_double_bit_errors == 0
    assert e.count("DDR Double Bit Aggregate Total Err Cnt") == 0
    assert not e.has_uncorrectable


def check_temp_and_power(text: str) -> None:
    temp_text, power_text = split_before_second(text, "NPU ID")
    t = parse_npu_smi_temp(temp_text)
    assert t.npu_id == 0
    assert t.chip_id == 0
    assert t.npu_temp_c == 39
    assert t.sensors == (("LM75A_TE (C)", 36.0), ("LM75B_TE (C)", 36.0))
    assert t.sensor("lm75a_te(c)") == 36.0
    assert t.raw.get("Chip Name") == "MCU"
    p = parse_npu_smi_power(power_text)
    assert (p.npu_id, p.chip_id) == (0, 0)
    assert p.power_w == 103.5
    with pytest.raises(ParseError, match="Power"):
        parse_npu_smi_power(temp_text)
    with pytest.raises(ParseError, match="Temperature"):
        parse_npu_smi_temp(power_text)


def check_topo(text: str) -> None:
    topo = parse_npu_smi_topo(text)
    assert topo.columns == tuple(f"NPU{i}" for i in range(8))
    assert [r.name for r in topo.rows] == [f"NPU{i}" for i in range(8)]
    for i in range(8):
        for j in range(8):
            assert topo.link(i, j) == ("X" if i == j else "HCCS")
    assert topo.link_types == frozenset({"HCCS"})
    assert [r.cpu_affinity for r in topo.rows] == [
        "144-167",
        "144-167",
        "96-119",
        "96-119",
        "0-23",
        "0-23",
        "48-71",
        "48-71",
    ]
    legend = dict(topo.legend)
    assert len(legend) == 7
    assert legend["HCCS"] == "Connection traversing HCCS."
    assert legend["X"] == "Self"


def check_mcu(text: str) -> None:
    assert parse_mcu_version(text) == "23.3.13"


def check_dcmi_failure(text: str) -> None:
    assert dcmi_error_code(text) == DCMI_DEVICE_BUSY == -8005
    with pytest.raises(DcmiInitError) as exc:
        parse_npu_smi_info(text)
    assert exc.value.code == -8005
    assert "occupied by another container" in str(exc.value)
    assert isinstance(exc.value, ParseError)
    for parser in (parse_npu_smi_board, parse_npu_smi_list, parse_npu_smi_chip_map, parse_npu_smi_topo):
        with pytest.raises(DcmiInitError):
            parser(text)


def check_board_a(text: str) -> None:
    b = parse_npu_smi_board(text)
    assert b.npu_id == 0
    assert b.product_name == "IT21HMDC_Bin5"
    assert b.model is None  # "NA"
    assert b.manufacturer == "Huawei"
    assert b.serial_number == "1025C9048791"
    assert b.software_version == "25.5.1"
    assert b.firmware_version == "7.8.0.6.201"
    assert b.compatibility == "OK"
    assert b.compatible is True
    assert b.board_id == 0x60
    assert b.pcie_bus_info == "0000:C1:00.0"
    assert b.slot_id == 0
    assert b.pci_vendor_id == 0x19E5
    assert b.pci_device_id == 0xD802
    assert ascend_model(b.pci_device_id) == "910B"
    assert (b.subsystem_vendor_id, b.subsystem_device_id) == (0x19E5, 0x3003)
    assert b.chip_count == 1
    assert b.chip_id is None
    assert b.raw.get("Class ID") == "NA"


def check_board_b(text: str) -> None:
    b = parse_npu_smi_board(text)
    assert b.software_version == "23.0.5"
    assert b.firmware_version == "7.1.0.7.220"
    assert b.compatible is True
    assert b.board_id == 0x02
    assert b.pcie_bus_info == "0000:61:00.0"
    assert b.pci_vendor_id == 0x19E5  # printed lower-case 0x19e5
    assert b.pci_device_id == 0xD801
    assert ascend_model(b.pci_device_id) == "910"
    assert (b.subsystem_vendor_id, b.subsystem_device_id) == (0x0200, 0x0100)
    assert b.product_name is None


def check_board_chip(text: str) -> None:
    b = parse_npu_smi_board(text)
    assert (b.npu_id, b.chip_id) == (0, 0)
    assert b.chip_type == "Ascend"
    assert b.chip_name == "xxx"
    assert b.chip_version == "V1"
    assert b.raw.get("PCB ID") == "NA"
    assert b.raw.get("VDie ID") == "42C711D4 20B03704 4A10C8D4 14CC040A D2102003"
    assert b.firmware_version == "7.1.0.7.220"
    assert b.compatible is None


def check_usages_a(text: str) -> None:
    u = parse_npu_smi_usages(text)
    assert (u.npu_id, u.chip_count, u.chip_id) == (0, 1, 0)
    assert u.ddr_capacity_mb == 0
    assert u.hbm_capacity_mb == 65536
    assert u.hbm_usage_pct == 5
    assert u.aicore_usage_pct == 0
    assert u.aivector_usage_pct == 0
    assert u.ctrlcpu_usage_pct == 6
    assert u.npu_utilization_pct == 0
    assert u.aicube_usage_pct == 0


def check_usages_b(text: str) -> None:
    u = parse_npu_smi_usages(text)
    assert u.ddr_capacity_mb == 13553
    assert u.ddr_usage_pct == 6
    assert u.hbm_capacity_mb == 32768
    assert u.hbm_usage_pct == 0
    assert u.aivector_usage_pct is None  # older driver: no such line
    assert u.npu_utilization_pct is None


# -- hccn_tool_real_captures.txt (MindIE guides, GPUStack) --------------------------------------------


def check_real_ip(text: str) -> None:
    ip = parse_hccn_ip(text)
    assert (ip.ipaddr, ip.netmask) == ("11.12.165.80", "255.255.255.0")  # the first of 8 ports


def ping_check(device: int | None, target: str | None, received: int, loss: float, ok: bool) -> Check:
    def check(text: str) -> None:
        r = parse_hccn_ping(text)
        assert (r.device, r.target, r.transmitted, r.received, r.loss_pct, r.success) == (
            device,
            target,
            3,
            received,
            loss,
            ok,
        )
        assert r.timeouts == (0 if ok else 1)

    check.__name__ = f"check_ping_{'ok' if ok else 'loss'}_{device}"
    return check


def check_real_lldp(text: str) -> None:
    kv = parse_hccn_key_values(text)
    assert kv.get_all("Ifname") == ("400GE1/1/5:1", "400GE1/1/5:2")  # the value keeps its colon


def check_real_link_up(text: str) -> None:
    assert parse_hccn_link(text) == "UP"


def check_real_link_down(text: str) -> None:
    assert parse_hccn_link(text) == "DOWN"


def check_real_net_health(text: str) -> None:
    h = parse_hccn_net_health(text)
    assert (h.status, h.code, h.ok) == ("Success", 0, True)


def check_real_netdetect(text: str) -> None:
    assert parse_hccn_netdetect(text) == "11.12.165.1"


def gateway_check(gateway: str, iface: str) -> Check:
    def check(text: str) -> None:
        gw = parse_hccn_gateway(text)
        assert (gw.gateway, gw.ifname) == (gateway, iface)

    check.__name__ = f"check_gateway_{iface}"
    return check


def check_real_tls(text: str) -> None:
    t = parse_hccn_tls(text)
    assert (t.dev_id, t.enabled, t.preconfigured, t.alarm_threshold_days) == (3, False, True, 60)


def check_set_is_no_getter_output(text: str) -> None:
    assert text.strip() == "Cmd executed successfully!"
    with pytest.raises(ParseError):
        parse_hccn_tls(text)
    with pytest.raises(ParseError):
        parse_hccn_gateway(text)


# -- multi-chip npu-smi outputs (gpustack; vllm-ascend#5850 A3; Syllo/nvtop#421 300I Duo) --------------


def check_common_910b_mcu(text: str) -> None:
    c = parse_npu_smi_common(text)
    assert (c.npu_id, c.chip_count, c.chip_id, c.temp_c, c.power_w) == (0, 1, 0, 46, 69.0)
    assert [(x.chip_id, x.temp_c, x.aicore_count) for x in c.chips] == [(0, 46, 32)]  # the mcu is no chip
    assert c.raw.get_all("NPU Real-time Power(W)") == ("69.0", "45.2")


def check_common_310p_duo(text: str) -> None:
    c = parse_npu_smi_common(text)
    assert (c.npu_id, c.chip_count) == (1, 2)
    assert [(x.chip_id, x.temp_c, x.memory_usage_pct, x.aicore_cur_freq_mhz, x.power_w) for x in c.chips] == [
        (0, 60, 3, 960, None),
        (1, 59, 3, 960, None),
    ]
    assert c.power_w == 45.2  # only the MCU prints the card's power
    assert c.raw.get_all("Temperature(C)") == ("60", "59", "48")


def check_usages_310p_duo(text: str) -> None:
    u = parse_npu_smi_usages(text)
    assert (u.npu_id, u.chip_count) == (1, 2)
    assert [(x.chip_id, x.ddr_capacity_mb, x.ctrlcpu_usage_pct, x.hbm_capacity_mb) for x in u.chips] == [
        (0, 44280, 2, None),
        (1, 43693, 3, None),
    ]
    assert [x.raw.get("DDR Bandwidth Usage Rate(%)") for x in u.chips] == ["51", "51"]


def check_info_a3(text: str) -> None:
    info = parse_npu_smi_info(text)
    assert (info.version, info.driver_version) == ("25.2.1", "25.2.1")
    assert info.npu_ids == tuple(range(8)) and len(info.npus) == 16
    assert [(n.chip_id, n.chip_device) for n in info.npus[:4]] == [(0, 0), (1, 1), (0, 2), (1, 3)]
    die1 = info.npu(3, 1)
    assert (die1.name, die1.chip_device, die1.bus_id, die1.power_w, die1.temp_c) == (
        "Ascend910",
        7,
        "0000:93:00.0",
        None,
        36,
    )
    assert (info.npu(7, 1).hbm_used_mb, info.npu(7, 1).hbm_total_mb) == (2879, 65536)
    assert info.npu(0, 0).power_w == 161.8
    assert info.all_healthy and info.process_table and not info.processes


def check_info_310p_duo(text: str) -> None:
    info = parse_npu_smi_info(text)
    assert (info.version, info.driver_version) == ("25.2.0", "25.2.0")
    assert [(n.id, n.chip_id, n.chip_device, n.name, n.power_w, n.temp_c) for n in info.npus] == [
        (2, 0, 0, "310P3", None, 45),
        (2, 1, 1, "310P3", None, 43),
    ]
    assert [(n.memory_used_mb, n.memory_total_mb, n.hbm_total_mb) for n in info.npus] == [
        (1529, 44280, None),
        (1412, 43693, None),
    ]
    assert {n.bus_id for n in info.npus} == {"0000:01:00.0"}  # both chips print the card's address


Check = Callable[[str], None]

EXPECTED: dict[str, list[Check]] = {
    "driver_firmware_install_logs.txt": [check_install_driver, check_install_firmware],
    "driver_version_info.txt": [
        check_driver_a,
        check_firmware_a,
        check_driver_b,
        check_firmware_b,
        check_cann_85,
        check_cann_82,
    ],
    "hccn_tool_outputs.txt": [
        check_net_health_init,
        check_link_up,
        check_optical,
        check_tls,
        check_fec,
        check_ip,
        check_stat,
        check_link_stat,
        check_net_health_success,
    ],
    "hccl_test_outputs.txt": [check_hccl_test],
    "hccn_tool_real_captures.txt": [
        check_real_ip,
        ping_check(0, "11.12.165.80", 3, 0.0, True),
        ping_check(7, "11.12.165.80", 3, 0.0, True),
        check_real_lldp,
        check_real_link_up,
        check_real_net_health,
        check_real_netdetect,
        gateway_check("11.12.165.1", "eth0"),
        gateway_check("11.12.165.1", "eth7"),
        check_real_tls,
        check_set_is_no_getter_output,
        ping_check(0, "10.10.100.10", 3, 0.0, True),
        ping_check(None, None, 2, 33.33, False),
        gateway_check("192.168.6.1", "eth0"),
        check_real_link_down,
    ],
    "lspci_d802.txt": [check_lspci],
    "npu_smi_info_310p3_duo.txt": [check_info_310p_duo],
    "npu_smi_info_910_93_a3.txt": [check_info_a3],
    "npu_smi_multichip_key_values.txt": [check_common_910b_mcu, check_common_310p_duo, check_usages_310p_duo],
    "npu_smi_info_910b3_8npu.txt": [check_910b3],
    "npu_smi_info_910b4_8npu_idle_full.txt": [check_910b4],
    "npu_smi_info_l.txt": [check_list],
    "npu_smi_info_m.txt": [check_chip_map],
    "npu_smi_info_misc.txt": [
        check_common,
        check_health,
        check_ecc,
        check_temp_and_power,
        check_topo,
        check_mcu,
        check_dcmi_failure,
    ],
    "npu_smi_info_t_board_i_0.txt": [check_board_a, check_board_b, check_board_chip],
    "npu_smi_info_t_usages_i_0.txt": [check_usages_a, check_usages_b],
    "npu_smi_info_t_health_i_0.txt": [check_health_device],
    "npu_smi_info_t_spod_info.txt": [check_spod_info],
    "ascend_fault_logs.txt": [check_fault_log] * len(fault_logs()),
}

CASES = [
    pytest.param(name, i, check, id=f"{name}#{i}-{check.__name__.removeprefix('check_')}")
    for name, checks in EXPECTED.items()
    for i, check in enumerate(checks)
]


@pytest.mark.parametrize(("name", "index", "check"), CASES)
def test_sample_output(name: str, index: int, check: Check) -> None:
    check(outputs(name)[index].text)


@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLES.glob("*.txt")))
def test_every_sample_file_is_covered(name: str) -> None:
    """Each fixture file has a check per output; a new sample file or output fails here."""
    assert name in EXPECTED, f"no checks for sample {name}"
    found = outputs(name)
    assert len(found) == len(EXPECTED[name]), [o.title for o in found]
    for o in found:
        assert not any(line.startswith("#") for line in o.text.splitlines())


def test_fixture_samples_keep_source_lines() -> None:
    for path in SAMPLES.glob("*.txt"):
        assert "SOURCE" in path.read_text(encoding="utf-8"), path.name


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="shared reference samples not present")
def test_fixtures_are_verbatim_copies_of_reference() -> None:
    """Every reference sample is here byte for byte; captures found since sit beside them (README.md)."""
    ref = sorted(p.name for p in REFERENCE.iterdir())
    assert set(ref) <= {p.name for p in SAMPLES.iterdir()}
    for name in ref:
        assert (SAMPLES / name).read_bytes() == (REFERENCE / name).read_bytes(), name


def test_generic_key_values_on_board_sample() -> None:
    kv = parse_npu_smi_key_values(outputs("npu_smi_info_t_board_i_0.txt")[0].text)
    assert kv.get("npu id") == "0"
    assert kv.get("PCIE BUS INFO") == "0000:C1:00.0"  # value keeps its colons
    assert "Serial Number" in kv
    assert "No Such Key" not in kv
    assert kv.as_dict()["Chip Count"] == "1"
    assert len(kv.pairs) == 19
