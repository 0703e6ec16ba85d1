"""The NPU probe: run for real here (no NPUs), and parsed from sample outputs of a real Atlas node."""

from __future__ import annotations

import subprocess

import pytest

from provision.ascend.facts import PROBE_SCRIPT, facts_from_probe
from tests.helpers import SAMPLES, probe_section, sample, without_comments

pytestmark = pytest.mark.unit


def test_probe_runs_on_a_machine_without_npus() -> None:
    out = subprocess.run(
        ["sh", "-c", PROBE_SCRIPT, "probe", "/", "/no/such/dir"], capture_output=True, text=True, check=True
    ).stdout
    facts = facts_from_probe(out)
    assert facts["ascend_npus"]["count"] == 0
    assert facts["ascend_npus"]["npu_smi"] is None
    assert facts["ascend_npus"]["line"] is None
    assert set(facts["ascend_disk_free_mb"]) == {"/", "/no/such/dir"}
    assert facts["ascend_disk_free_mb"]["/"] > 0


def test_facts_of_an_installed_910b_node() -> None:
    driver_info = (SAMPLES / "driver_version_info.txt").read_text().split("# Same source")[0]
    out = (
        probe_section("pci", sample("lspci_d802.txt"))
        + probe_section("npu-smi /usr/local/bin/npu-smi", sample("npu_smi_info_910b3_8npu.txt"))
        + probe_section("npu-smi-rc", "0")
        + probe_section("file /usr/local/Ascend/driver/version.info", without_comments(driver_info))
        + probe_section("df", "/usr/local /dev/sda2 1000 10 40960 1% /\n/var /dev/sda3 1000 10 2048 1% /var")
    )
    facts = facts_from_probe(out)
    npus = facts["ascend_npus"]
    assert npus["count"] == 8
    assert npus["model"] == "910B"
    assert npus["pci_device_ids"] == ["0xd802"]
    assert (npus["hardware_model"], npus["line"]) == ("a2", "910b")
    assert npus["driver_version"] == "25.0.rc1.1"
    assert npus["all_healthy"] is True
    assert npus["health"] == {str(i): "OK" for i in range(8)}
    chip3 = npus["chips"][3]
    assert (chip3["bus_id"], chip3["power_w"], chip3["hbm_total_mb"]) == ("0000:82:00.0", 99.8, 65536)
    assert facts["ascend_disk_free_mb"] == {"/usr/local": 40, "/var": 2}


def test_npu_smi_without_loaded_driver_is_an_error_not_a_crash() -> None:
    out = (
        probe_section("pci", sample("lspci_d802.txt"))
        + probe_section("npu-smi /usr/local/bin/npu-smi", "dcmi module initialize failed. ret is -8005")
        + probe_section("npu-smi-rc", "255")
    )
    npus = facts_from_probe(out)["ascend_npus"]
    assert npus["count"] == 8
    assert npus["npu_smi_error"] == "dcmi module initialize failed. ret is -8005"
    assert npus["all_healthy"] is None


def test_an_unhealthy_npu_is_reported() -> None:
    table = sample("npu_smi_info_910b3_8npu.txt").replace(
        "| 2     910B3               | OK      ", "| 2     910B3               | Critical"
    )
    out = (
        probe_section("pci", sample("lspci_d802.txt"))
        + probe_section("npu-smi npu-smi", table)
        + probe_section("npu-smi-rc", "0")
    )
    npus = facts_from_probe(out)["ascend_npus"]
    assert npus["all_healthy"] is False
    assert npus["health"]["2"] == "Critical"


def test_the_driver_install_status_is_read_from_ascend_install_info() -> None:
    """``Driver_Install_Status=complete``, which the driver installer writes last, or nothing (cut short)."""
    info = "UserName=HwHiAiUser\nUserGroup=HwHiAiUser\nDriver_Install_Path_Param=/usr/local/Ascend\n"
    pci = probe_section("pci", sample("lspci_d802.txt"))
    cut_short = facts_from_probe(pci + probe_section("file /etc/ascend_install.info", info))["ascend_npus"]
    assert (cut_short["driver_install_path"], cut_short["driver_install_status"]) == (
        "/usr/local/Ascend",
        None,
    )
    done = info + "Driver_Install_Status=complete\n"
    finished = facts_from_probe(pci + probe_section("file /etc/ascend_install.info", done))["ascend_npus"]
    assert finished["driver_install_status"] == "complete"
    assert facts_from_probe(pci)["ascend_npus"]["driver_install_status"] is None
