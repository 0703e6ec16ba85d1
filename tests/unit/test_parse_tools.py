"""hccn_tool, lspci and version-file parsers on constructed inputs, and garbage for every parser."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import provision.ascend as ascend
from provision.ascend import (
    ParseError,
    ascend_devices,
    ascend_model,
    normalize_bus_id,
    parse_ascend_install_info,
    parse_bracket_list,
    parse_driver_version_info,
    parse_hccn_gateway,
    parse_hccn_ip,
    parse_hccn_link,
    parse_hccn_net_health,
    parse_hccn_netdetect,
    parse_hccn_ping,
    parse_hccn_tls,
    parse_install_log,
    parse_key_equals,
    parse_lspci,
)

pytestmark = pytest.mark.unit


# ------------------------------------------------------------------ hccn_tool


def test_link_down_and_spacing() -> None:
    assert parse_hccn_link("link status: DOWN\n") == "DOWN"
    assert parse_hccn_link("  link status :   up  \n") == "UP"


@pytest.mark.parametrize(
    ("status", "code", "ok"),
    [("Success", 0, True), ("Socket fail", 1, False), ("Detect ip set", 8, False), ("Weird", None, False)],
)
def test_net_health_codes(status: str, code: int | None, ok: bool) -> None:
    h = parse_hccn_net_health(f"net health status: {status}\n")
    assert (h.status, h.code, h.ok) == (status, code, ok)


def test_ip_with_real_addresses_and_no_netmask() -> None:
    ip = parse_hccn_ip("ipaddr:192.168.100.11\nnetmask:255.255.0.0\n")
    assert (ip.ipaddr, ip.netmask) == ("192.168.100.11", "255.255.0.0")
    assert parse_hccn_ip("ipaddr: 10.0.0.1\n").netmask is None


def test_netdetect_both_spellings() -> None:
    assert parse_hccn_netdetect("netdetect address: 10.0.0.254\n") == "10.0.0.254"
    assert parse_hccn_netdetect("netdetect addr: 10.0.0.254\n") == "10.0.0.254"


def test_gateway_real_format() -> None:
    gw = parse_hccn_gateway("default gateway:10.0.0.254, Iface:eth0\n")
    assert (gw.gateway, gw.ifname) == ("10.0.0.254", "eth0")
    assert parse_hccn_gateway("default gateway: 10.0.0.1\n").ifname is None


def test_tls_enabled() -> None:
    tls = parse_hccn_tls(
        "some header\n"
        "dev_id:3, tls switch[1](0:disable, 1:enable), tls preconfigured[0](0:non-preset, 1:preset),"
        " tls alarm time threshold[30]days\n"
    )
    assert (tls.dev_id, tls.enabled, tls.preconfigured, tls.alarm_threshold_days) == (3, True, False, 30)


# The real formats (tests/fixtures/samples/hccn_tool_real_captures.txt), with other values.
PING_OK = """\
device 0 PING 10.0.0.2
recv seq=0,time=0.071000ms
recv seq=1,time=0.065000ms
recv seq=2,time=0.066000ms
3 packets transmitted, 3 received, 0.00% packet loss
"""

PING_ALL_LOST = """\
device 0 PING 10.0.0.9
recv time out seq=0
recv time out seq=1
recv time out seq=2
3 packets transmitted, 0 received, 100.00% packet loss
"""


def test_ping_success() -> None:
    r = parse_hccn_ping(PING_OK)
    assert r.success
    assert (r.transmitted, r.received, r.loss_pct, r.timeouts, r.target) == (3, 3, 0.0, 0, "10.0.0.2")


def test_ping_total_loss_is_not_success_despite_substring() -> None:
    assert "0.00% packet loss" in PING_ALL_LOST  # the naive substring check would be fooled
    r = parse_hccn_ping(PING_ALL_LOST)
    assert not r.success
    assert (r.transmitted, r.received, r.loss_pct, r.timeouts) == (3, 0, 100.0, 3)


def test_ping_partial_loss_and_timeouts_without_summary() -> None:
    partial = "recv time out seq=1\n4 packets transmitted, 3 received, 25.00% packet loss\n"
    r = parse_hccn_ping(partial)
    assert not r.success
    assert (r.loss_pct, r.timeouts) == (25.0, 1)
    only_timeouts = parse_hccn_ping("recv time out seq=0\nrecv time out seq=1\n")
    assert not only_timeouts.success
    assert only_timeouts.transmitted is None
    assert only_timeouts.timeouts == 2


def test_ping_accepts_linux_style_summary() -> None:
    r = parse_hccn_ping("5 packets transmitted, 5 received, 0% packet loss, time 4005ms\n")
    assert r.success


# ------------------------------------------------------------------ lspci


def test_lspci_numeric_forms() -> None:
    text = (
        "01:00.0 1200: 19e5:d802 (rev 20)\n"
        "0000:02:00.0 1200: 19e5:d500 (rev 20)\n"
        "03:00.0 0604: 19e5:a120 (rev 01)\n"
        "\n"
        "c1:00.0 Processing accelerators [1200]: Huawei Technologies Co., Ltd. Device [19e5:d801] (rev 21)\n"
        "00:1f.2 SATA controller [0106]: Intel Corporation 82801IR [8086:2922] (rev 02)"
        " (prog-if 01 [AHCI 1.0])\n"
    )
    devs = parse_lspci(text)
    assert [d.bus_id for d in devs] == [
        "0000:01:00.0",
        "0000:02:00.0",
        "0000:03:00.0",
        "0000:c1:00.0",
        "0000:00:1f.2",
    ]
    assert [d.model for d in devs] == ["910B", "310P", None, "910", None]
    assert devs[0].class_code == 0x1200 and devs[0].revision == 0x20
    assert devs[3].class_name == "Processing accelerators" and devs[3].revision == 0x21
    assert devs[4].vendor_id == 0x8086 and devs[4].class_code == 0x0106
    assert [d.slot for d in ascend_devices(devs)] == ["01:00.0", "0000:02:00.0", "c1:00.0"]


def test_lspci_empty_output_means_no_devices() -> None:
    assert parse_lspci("") == ()
    assert parse_lspci("\n\n") == ()


def test_model_map_and_bus_ids() -> None:
    assert ascend_model(0xD802) == "910B"
    assert ascend_model(0xD801) == "910"
    assert ascend_model(0xD500) == "310P"
    assert ascend_model(0xD100) == "310"
    assert ascend_model(0x1234) is None
    assert ascend_model(None) is None
    assert normalize_bus_id("0000:C1:00.0") == normalize_bus_id("c1:00.0") == "0000:c1:00.0"
    with pytest.raises(ParseError, match="PCI address"):
        normalize_bus_id("C1-00")


# ------------------------------------------------------------------ versions


INSTALL_INFO = """\
UserName=HwHiAiUser
UserGroup=HwHiAiUser
Firmware_Install_Type=full
Firmware_Install_Path_Param=/usr/local/Ascend
Driver_Install_Type=full
Driver_Install_Path_Param=/usr/local/Ascend
Driver_Install_For_All=no
Driver_Install_Mode=normal
Driver_Install_Status=complete
"""


def test_ascend_install_info() -> None:
    info = parse_ascend_install_info(INSTALL_INFO)
    assert info.driver_install_path == "/usr/local/Ascend"
    assert info.firmware_install_path == "/usr/local/Ascend"
    assert (info.user_name, info.user_group) == ("HwHiAiUser", "HwHiAiUser")
    assert info.driver_install_status == "complete"
    assert info.raw["Driver_Install_Mode"] == "normal"
    assert hash(info)  # frozen and hashable despite the raw dict


def test_key_equals_tolerates_spaces_and_comments() -> None:
    parsed = parse_key_equals("# c\n\n  Version = 25.0.rc1.1  \nx=a=b\n")
    assert parsed == {"Version": "25.0.rc1.1", "x": "a=b"}
    assert parse_driver_version_info("version=1.2\n").version == "1.2"  # key case ignored


def test_bracket_list() -> None:
    assert parse_bracket_list("[A],[B]") == (("A",), ("B",))
    assert parse_bracket_list("[7.0.0,7.7.99]") == (("7.0.0", "7.7.99"),)
    assert parse_bracket_list("") == ()
    assert parse_bracket_list(None) == ()


def test_install_log_with_error_is_not_success() -> None:
    log = parse_install_log(
        "[Driver] [2025-07-17 10:35:21] [INFO]Start time: 2025-07-17 10:35:21\n"
        "[Driver] [2025-07-17 10:35:22] [ERROR]Dkms install failed, details in : /var/log/x.log\n"
        "[Driver] [2025-07-17 10:35:23] [INFO]Driver package installed successfully!\n"
    )
    assert not log.succeeded
    assert [e.message for e in log.errors] == ["Dkms install failed, details in : /var/log/x.log"]


# ------------------------------------------------------------------ garbage into every parser


PARSERS = sorted(n for n in ascend.__all__ if n.startswith("parse_") and n != "parse_bracket_list")


@pytest.mark.parametrize("name", PARSERS)
@pytest.mark.parametrize("text", ["garbage that is no tool output\n", "<html>\n<body>502</body>\n"])
def test_garbage_raises_parse_error(name: str, text: str) -> None:
    parser: Callable[[str], object] = getattr(ascend, name)
    with pytest.raises(ParseError, match="expected"):
        parser(text)


@pytest.mark.parametrize("name", [n for n in PARSERS if n != "parse_lspci"])
def test_empty_text_raises_parse_error(name: str) -> None:
    parser: Callable[[str], object] = getattr(ascend, name)
    with pytest.raises(ParseError):
        parser("")


def test_wrong_tool_output_is_rejected() -> None:
    with pytest.raises(ParseError):
        ascend.parse_npu_smi_board("Health Status : OK\n")
    with pytest.raises(ParseError):
        ascend.parse_npu_smi_usages("NPU ID : 0\nNPU Real-time Power(W) : 80\n")
    with pytest.raises(ParseError):
        ascend.parse_cann_install_info("Version_x=1\n")
    with pytest.raises(ParseError):
        ascend.parse_hccn_tls("dev_id:0, tls switch[x]\n")
