"""Parsers on what Huawei's open-source tools print beyond the captures, and the per-chip view of them.

The values of every real capture (tests/fixtures/samples, sources in its README) are checked in
test_parsers.py. Here: formats known only from the tools' printf calls (hicann/driver, named in each test),
the chip sections of multi-chip outputs, and the A3's PCI id through lspci and the facts probe.
"""

from __future__ import annotations

import pytest

from provision.ascend import (
    ParseError,
    ascend_devices,
    ascend_model,
    parse_hccn_gateway,
    parse_hccn_net_health,
    parse_hccn_netdetect,
    parse_hccn_ping,
    parse_lspci,
    parse_npu_smi_common,
    parse_npu_smi_health,
    parse_npu_smi_info,
    parse_npu_smi_power,
    parse_npu_smi_usages,
)
from provision.ascend.facts import facts_from_probe
from provision.ascend.npu_smi import POWER_KEYS, parse_npu_smi_sections, parse_npu_smi_temp
from tests.helpers import probe_section, sample, sample_captures, sample_segments

pytestmark = pytest.mark.unit


MULTI = sample_captures("npu_smi_multichip_key_values.txt")


# ------------------------------------------------------------------ hccn_tool


def test_gateway_without_a_route_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="hccn_tool -gateway -g"):
        parse_hccn_gateway("Cmd executed successfully!\n")


def test_ping_variants_of_the_open_source_tool() -> None:
    # hicann/driver: "device %d PING6 %s" (ds_net_ext.c) and the HCCS ping's "... packets loss" (tool_cmd.c).
    v6 = parse_hccn_ping(
        "device 3 PING6 fd00::2\nrecv seq=0,time=0.05ms\n"
        "1 packets transmitted, 1 received, 0.00% packet loss\n"
    )
    assert (v6.device, v6.target, v6.success) == (3, "fd00::2", True)
    hccs = parse_hccn_ping(
        "1 packets transmitted, 0 received, 100.00% packets loss\nCmd executed successfully!\n"
    )
    assert (hccs.success, hccs.loss_pct) == (False, 100.0)


def test_netdetect_and_net_health_as_the_open_source_tool_prints_them() -> None:
    # hicann/driver tool_ops.c: TOOL_PRINT_INFO("netdetect addr: %s") and status 9 "Unknown".
    assert parse_hccn_netdetect("netdetect addr: 10.0.0.1\n") == "10.0.0.1"
    unknown = parse_hccn_net_health("net health status: Unknown\n")
    assert (unknown.code, unknown.ok) == (9, False)


# ------------------------------------------------------------------ npu-smi key/value, several chips


def test_common_of_a_910b_leaves_the_mcu_out_of_the_chips() -> None:
    c = parse_npu_smi_common(MULTI["common_910b_with_mcu"])
    assert [(x.chip_id, x.temp_c, x.power_w, x.aicore_count) for x in c.chips] == [(0, 46, 69.0, 32)]
    assert c.power_w == 69.0
    sections = parse_npu_smi_sections(MULTI["common_910b_with_mcu"])
    assert [(s.chip_id, s.chip_name, s.is_npu_chip) for s in sections] == [
        (0, None, True),
        (None, "mcu", False),
    ]
    assert sections[1].raw.get("Temperature(C)") == "48"
    assert sections[1].raw.get("NPU ID") == "0"  # the card header travels with every section


def test_single_chip_samples_have_one_chip() -> None:
    usages = parse_npu_smi_usages(sample_segments("npu_smi_info_t_usages_i_0.txt")[0])
    assert [(x.chip_id, x.hbm_capacity_mb) for x in usages.chips] == [(0, 65536)]
    temp = parse_npu_smi_temp(
        "NPU ID : 0\nChip Count : 1\n\nNPU Temperature (C) : 39\nChip ID : 0\n\n"
        "LM75A_TE (C) : 36\nChip Name : MCU\n"
    )
    assert [(t.chip_id, t.npu_temp_c, t.sensors) for t in temp.chips] == [(0, 39.0, ())]
    assert temp.sensor("LM75A_TE (C)") == 36.0  # the card view keeps the MCU's sensors


def test_power_key_variants_of_the_open_source_tool() -> None:
    # hicann/driver npucli/src/npu_chip_info.c show_ascend_chip_power_info + npu_card_info.c
    # show_ascend_card_info: a 310P card answers -t power only from its MCU ("Power Dissipation(W)").
    duo = parse_npu_smi_power(
        "\tNPU ID                         : 2\n\tChip Count                     : 2\n\n"
        "\tPower Dissipation(W)           : 45.2\n\tChip Name                      : MCU\n\n"
    )
    assert (duo.npu_id, duo.power_w, duo.key, duo.chips) == (2, 45.2, "Power Dissipation(W)", ())
    rated = parse_npu_smi_power(
        "NPU ID : 0\nChip Count : 1\n\nChip ID : 0\nRated Power Dissipation(W) : 8.0\n"
    )
    assert (rated.power_w, rated.key, [c.chip_id for c in rated.chips]) == (
        8.0,
        "Rated Power Dissipation(W)",
        [0],
    )
    assert POWER_KEYS[0] == "NPU Real-time Power(W)"
    with pytest.raises(ParseError, match="Power Dissipation"):
        parse_npu_smi_power("NPU ID : 0\nChip Count : 1\n")


# ------------------------------------------------------------------ npu-smi info of A3 and 300I Duo


# ------------------------------------------------------------------ PCI: the A3's device id


def test_a3_pci_id_is_known() -> None:
    # hicann/driver ascend_bug_report.sh: PCIE_BDF_910_93="19e5:d803".
    assert ascend_model(0xD803) == "910_93"
    devs = parse_lspci("9d:00.0 1200: 19e5:d803 (rev 20)\n9f:00.0 1200: 19e5:d803 (rev 20)\n")
    assert [d.model for d in ascend_devices(devs)] == ["910_93", "910_93"]


def test_facts_of_an_a3_node() -> None:
    info = parse_npu_smi_info(sample("npu_smi_info_910_93_a3.txt"))
    lines = "".join(f"{n.bus_id} 1200: 19e5:d803 (rev 20)\n" for n in info.npus)  # one function per chip
    probe = (
        probe_section("pci", lines)
        + probe_section("npu-smi /usr/local/bin/npu-smi", sample("npu_smi_info_910_93_a3.txt"))
        + probe_section("npu-smi-rc", "0")
    )
    npus = facts_from_probe(probe)["ascend_npus"]
    assert (npus["count"], npus["model"], npus["pci_device_ids"]) == (16, "910_93", ["0xd803"])
    assert (npus["hardware_model"], npus["line"]) == ("a3", "a3")
    assert len(npus["chips"]) == 16 and npus["all_healthy"] is True
    # per chip, as the PCI view counts: the driver role's check `health | length == count` holds
    assert npus["health"] == {str(i): "OK" for i in range(16)}


def test_health_at_device_level_as_npu_smi_prints_it() -> None:
    # `npu-smi info -t health -i 0` without -c (the npu-smi reference's example): one section per chip with
    # "Health", then the MCU's; the command failures.yml tells operators to run
    health = parse_npu_smi_health(sample("npu_smi_info_t_health_i_0.txt"))
    assert health.ok and health.status == "OK"
    assert health.npu_id == 0 and health.chips == ((0, "OK"),)
    assert health.error_codes == ()
    # the chip-level layout (-c 0) still reads as before
    misc = sample_segments("npu_smi_info_misc.txt")
    chip = parse_npu_smi_health(next(s for s in misc if s.lstrip().startswith("Health Status")))
    assert chip.ok and chip.status == "OK" and chip.chips == ((None, "OK"),)


def test_the_simulator_prints_super_pod_info_as_the_capture_and_a_bad_one_is_refused() -> None:
    from provision.ascend.npu_smi import parse_npu_smi_spod_info
    from provision_sim.hardware.node.ascendsim.npusmi import render_spod_info

    text = sample("npu_smi_info_t_spod_info.txt")  # parsed in test_parsers.py
    assert render_spod_info(16777216, 0, 4).rstrip("\n") == text.rstrip("\n")  # the capture's layout
    with pytest.raises(ParseError, match="SDID"):
        parse_npu_smi_spod_info("Super Pod ID : 0\n")


def test_health_at_device_level_names_the_worst_chip() -> None:
    from provision_sim.hardware.node.ascendsim.npusmi import render_health_device

    health = parse_npu_smi_health(render_health_device(3, ["OK", "Critical"]))
    assert not health.ok and health.status == "Critical"
    assert health.npu_id == 3 and health.chips == ((0, "OK"), (1, "Critical"))
    with pytest.raises(ParseError, match="Health Status"):
        parse_npu_smi_health(
            "        NPU ID                         : 0\n        Chip Count                     : 1\n"
        )
