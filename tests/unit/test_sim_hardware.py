"""The simulated NPU hardware: output formats byte-for-byte against the verbatim samples, the per-node
configuration, the boot-time driver load, the PCI view, npu-smi and hccn_tool in a temporary node root,
and the fault knobs — each output parsed with the production parsers of ``provision.ascend``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from provision.ascend import hccn, npu_smi, pci
from provision.errors import ProvisionError
from provision_sim import hardware
from provision_sim.hardware.node.ascendsim import npusmi
from provision_sim.hardware.testroot import SimRoot
from provision_sim.mirror import run_files as mirror
from tests.helpers import SAMPLES, icmp_allowed, sample_segments

pytestmark = pytest.mark.unit

ARCH = os.uname().machine
NPU_SMI = "/usr/local/bin/npu-smi"
HCCN = "/usr/local/Ascend/driver/tools/hccn_tool"
AFFINITY_8 = ["144-167", "144-167", "96-119", "96-119", "0-23", "0-23", "48-71", "48-71"]


def segments(name: str) -> list[str]:
    """The verbatim parts of a sample (copies of shared/reference); a missing one skips the test."""
    return sample_segments(name, skip_missing=True)


# ------------------------------------------------------------------------------------------------
# renderers == samples
# ------------------------------------------------------------------------------------------------

B3_BUS = ["0000:C1:00.0", "0000:C2:00.0", "0000:81:00.0", "0000:82:00.0"]
B3_BUS += ["0000:01:00.0", "0000:02:00.0", "0000:41:00.0", "0000:42:00.0"]


def _rows(
    name: str, power: list[float], temp: list[int], hbm: list[int], total: int
) -> list[dict[str, object]]:
    return [
        {"id": i, "name": name, "health": "OK", "power_w": power[i], "temp_c": temp[i], "bus_id": B3_BUS[i],
         "hbm_used_mb": hbm[i], "hbm_total_mb": total}
        for i in range(8)
    ]  # fmt: skip


def test_info_910b3_matches_sample() -> None:
    (expected,) = segments("npu_smi_info_910b3_8npu.txt")
    rows = _rows(
        "910B3",
        [101.8, 92.0, 102.0, 99.8, 98.6, 99.7, 103.8, 98.2],
        [43, 39, 40, 40, 45, 44, 45, 44],
        [3318, 3314, 3314, 3314, 3314, 3314, 3314, 3315],
        65536,
    )
    assert npusmi.render_info("24.1.rc1.b030", "24.1.rc1.b030", rows, process_table=False) == expected


def test_info_910b4_with_process_table_matches_sample() -> None:
    (expected,) = segments("npu_smi_info_910b4_8npu_idle_full.txt")
    rows = _rows(
        "910B4",
        [87.2, 82.7, 82.7, 89.1, 84.5, 84.8, 87.1, 81.6],
        [33, 33, 33, 34, 39, 37, 38, 37],
        [2654] * 7 + [2653],
        32768,
    )
    assert npusmi.render_info("25.0.rc1.1", "25.0.rc1.1", rows) == expected


def test_list_and_chip_map_match_samples() -> None:
    assert npusmi.render_list(range(8)) == segments("npu_smi_info_l.txt")[0]
    assert npusmi.render_chip_map(range(8), "Ascend 910B4") == segments("npu_smi_info_m.txt")[0]


def test_board_matches_sample() -> None:
    board = {
        "id": 0, "product_name": "IT21HMDC_Bin5", "serial": "1025C9048791", "software_version": "25.5.1",
        "firmware_version": "7.8.0.6.201", "compatibility": "OK", "board_id": "0x60",
        "bus_id": "0000:C1:00.0", "slot_id": 0, "vendor_id": "0x19E5", "device_id": "0xD802",
        "subsystem_vendor_id": "0x19E5", "subsystem_device_id": "0x3003",
    }  # fmt: skip
    assert npusmi.render_board(board) == segments("npu_smi_info_t_board_i_0.txt")[0]


def test_board_chip_view_matches_sample_modulo_indentation() -> None:
    chip = {
        "id": 0, "chip_name": "xxx", "board_id": "0x02", "bom_id": "1", "bus_id": "0000:61:00.0",
        "firmware_version": "7.1.0.7.220",
        "vdie_id": "42C711D4 20B03704 4A10C8D4 14CC040A D2102003",
        "ndie_id": "27216594 20401010 4E10C8D4 14CC040A A4102003",
    }  # fmt: skip
    expected = segments("npu_smi_info_t_board_i_0.txt")[2]  # the doc removed the indentation
    assert [line.lstrip() for line in npusmi.render_board_chip(chip).splitlines()] == expected.splitlines()


def test_usages_matches_sample() -> None:
    usages = {"id": 0, "hbm_total_mb": 65536, "hbm_usage_pct": 5, "ctrlcpu_pct": 6}
    assert npusmi.render_usages(usages) == segments("npu_smi_info_t_usages_i_0.txt")[0]


def test_misc_outputs_match_samples() -> None:
    common_, health, ecc, temp_power, topo, mcu, failure = segments("npu_smi_info_misc.txt")
    values = {
        "id": 0, "memory_pct": 6, "hbm_usage_pct": 0, "aicore_pct": 0, "aicore_freq_mhz": 900,
        "aicore_count": 30, "temp_c": 41, "power_w": 71.7,
    }  # fmt: skip
    assert npusmi.render_common(values) == common_
    assert npusmi.render_health("OK") == health
    assert npusmi.render_ecc(1) == ecc
    assert npusmi.render_temp(0, 39, 36, 36) + "\n" + npusmi.render_power(0, 103.5) == temp_power
    assert npusmi.render_topo(AFFINITY_8) == topo
    assert npusmi.render_mcu("23.3.13") == mcu
    assert npusmi.dcmi_failure(-8005) == failure


# ------------------------------------------------------------------------------------------------
# configuration and install into a rootfs
# ------------------------------------------------------------------------------------------------


def test_node_config_values_derive_from_index() -> None:
    a = hardware.node_config(name="a", index=1, npus=8)
    b = hardware.node_config(name="b", index=2, npus=8)
    assert [n["bus_id"] for n in a["npus"]] == B3_BUS
    assert [n["ip"] for n in a["npus"]] == [f"10.201.{i}.11" for i in range(8)]
    assert [n["ip"] for n in b["npus"]] == [f"10.201.{i}.12" for i in range(8)]
    assert hardware.npu_fabric_addresses(2, 8) == [f"10.201.{i}.12/24" for i in range(8)]
    assert hardware.npu_fabric_gateways(2) == ["10.201.0.1/24", "10.201.1.1/24"]
    assert [n["power_w"] for n in a["npus"]] != [n["power_w"] for n in b["npus"]]
    assert {n["serial"] for n in a["npus"]}.isdisjoint({n["serial"] for n in b["npus"]})
    assert a["npus"][0]["hbm_total_mb"] == 65536
    assert hardware.node_config(name="c", index=3, npus=2, model="910B4")["npus"][1]["hbm_total_mb"] == 32768
    with pytest.raises(ProvisionError, match="unknown NPU model"):
        hardware.node_config(name="x", index=1, npus=8, model="H100")
    with pytest.raises(ProvisionError, match="npus"):
        hardware.node_config(name="x", index=1, npus=0)


def test_install_tools_and_write_node_config(tmp_path: Path) -> None:
    hardware.install_tools(tmp_path)
    assert (tmp_path / "usr/lib/provision-sim/ascendsim/npusmi.py").is_file()
    assert not list((tmp_path / "usr/lib/provision-sim").rglob("__pycache__"))
    unit = tmp_path / "etc/systemd/system/provision-sim-hardware.service"
    assert "ExecStart=/usr/bin/python3 -m ascendsim boot" in unit.read_text()
    link = tmp_path / "etc/systemd/system/sysinit.target.wants/provision-sim-hardware.service"
    assert os.readlink(link) == "/etc/systemd/system/provision-sim-hardware.service"
    assert not (tmp_path / "usr/local/bin/npu-smi").exists()  # vendor tools only come with the driver
    hardware.install_tools(tmp_path)  # idempotent
    hardware.write_node_config(tmp_path, name="n3", index=3, npus=4, faults={"link_down": [1]})
    config = json.loads((tmp_path / "etc/provision-sim/hardware.json").read_text())
    assert config["node"] == {"name": "n3", "index": 3}
    assert len(config["npus"]) == 4
    assert config["faults"] == {"link_down": [1]}
    assert hardware.set_faults(tmp_path, {"disk_full": True, "link_down": None}) == {"disk_full": True}
    assert '"disk_full": true' in (tmp_path / "etc/provision-sim/hardware.json").read_text()


# ------------------------------------------------------------------------------------------------
# a node root with the driver installed and "rebooted"
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    dest = tmp_path_factory.mktemp("mirror")
    paths = mirror.build_artifacts(dest, arch=ARCH)
    return {p.name.split("_")[0]: p for p in paths}


def boot_with_driver(sim: SimRoot, artifacts: dict[str, Path]) -> None:
    res = sim.run([artifacts["Ascend-hdk-910b-npu-driver"], "--full", "--install-for-all", "--quiet"])
    assert res.returncode == 0, res.stdout + res.stderr
    res = sim.run([artifacts["Ascend-hdk-910b-npu-firmware"], "--full", "--quiet"])
    assert res.returncode == 2, res.stdout + res.stderr
    res = sim.reboot()
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.fixture
def node(tmp_path: Path, artifacts: dict[str, Path]) -> SimRoot:
    sim = SimRoot.create(tmp_path / "node", index=1)
    boot_with_driver(sim, artifacts)
    return sim


def config_of(sim: SimRoot) -> dict[str, object]:
    data: dict[str, object] = json.loads(sim.path(hardware.HW_CONFIG).read_text())
    return data


def test_npu_smi_info_parses_to_configured_values(node: SimRoot) -> None:
    res = node.tool(NPU_SMI, "info")
    assert res.returncode == 0, res.stdout
    info = npu_smi.parse_npu_smi_info(res.stdout)
    config = config_of(node)
    npus = config["npus"]
    assert isinstance(npus, list)
    assert info.version == info.driver_version == "25.5.1"
    assert info.npu_ids == tuple(range(8))
    assert info.all_healthy
    assert info.process_table and not info.processes
    for status, want in zip(info.npus, npus, strict=True):
        assert status.name == "910B3"
        assert status.bus_id == want["bus_id"]
        assert status.power_w == want["power_w"]
        assert status.temp_c == want["temp_c"]
        assert (status.hbm_used_mb, status.hbm_total_mb) == (want["hbm_used_mb"], 65536)


def test_npu_smi_detail_types_parse(node: SimRoot) -> None:
    npus = config_of(node)["npus"]
    assert isinstance(npus, list)
    listing = npu_smi.parse_npu_smi_list(node.tool(NPU_SMI, "info", "-l").stdout)
    assert listing.total_count == 8 and listing.npu_ids == tuple(range(8))
    chips = npu_smi.parse_npu_smi_chip_map(node.tool(NPU_SMI, "info", "-m").stdout)
    assert [c.chip_name for c in chips if not c.is_mcu] == ["Ascend 910B3"] * 8
    board = npu_smi.parse_npu_smi_board(node.tool(NPU_SMI, "info", "-t", "board", "-i", "2").stdout)
    assert (board.npu_id, board.software_version, board.firmware_version) == (2, "25.5.1", "7.8.0.6.201")
    assert board.compatible is True
    assert board.serial_number == npus[2]["serial"]
    assert (board.pci_vendor_id, board.pci_device_id) == (0x19E5, 0xD802)
    assert board.pcie_bus_info == "0000:81:00.0"
    chip = npu_smi.parse_npu_smi_board(node.tool(NPU_SMI, "info", "-t", "board", "-i", "2", "-c", "0").stdout)
    assert chip.chip_name == "910B3"
    usages = npu_smi.parse_npu_smi_usages(node.tool(NPU_SMI, "info", "-t", "usages", "-i", "0").stdout)
    assert usages.hbm_capacity_mb == 65536
    assert usages.hbm_usage_pct == round(npus[0]["hbm_used_mb"] * 100 / 65536)
    power = npu_smi.parse_npu_smi_power(node.tool(NPU_SMI, "info", "-t", "power", "-i", "5").stdout)
    assert power.power_w == npus[5]["power_w"]
    temp = npu_smi.parse_npu_smi_temp(node.tool(NPU_SMI, "info", "-t", "temp", "-i", "5").stdout)
    assert temp.npu_temp_c == npus[5]["temp_c"]
    common_ = npu_smi.parse_npu_smi_common(node.tool(NPU_SMI, "info", "-t", "common", "-i", "1").stdout)
    assert (common_.aicore_count, common_.temp_c) == (20, npus[1]["temp_c"])
    health = npu_smi.parse_npu_smi_health(
        node.tool(NPU_SMI, "info", "-t", "health", "-i", "7", "-c", "0").stdout
    )
    assert health.ok and health.error_codes == ()
    ecc = npu_smi.parse_npu_smi_ecc(node.tool(NPU_SMI, "info", "-t", "ecc", "-i", "7").stdout)
    assert not ecc.has_uncorrectable
    topo = npu_smi.parse_npu_smi_topo(node.tool(NPU_SMI, "info", "-t", "topo").stdout)
    assert topo.columns == tuple(f"NPU{i}" for i in range(8))
    assert [r.cpu_affinity for r in topo.rows] == AFFINITY_8
    memory = npu_smi.parse_npu_smi_key_values(node.tool(NPU_SMI, "info", "-t", "memory", "-i", "0").stdout)
    assert memory.get("HBM Capacity(MB)") == "65536"
    assert (
        npu_smi.parse_mcu_version(node.tool(NPU_SMI, "upgrade", "-b", "mcu", "-i", "0").stdout) == "23.3.13"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "Usage: npu-smi"),
        (("bogus",), "invalid command"),
        (("info", "-t", "foo", "-i", "0"), "type foo is invalid"),
        (("info", "-t", "board", "-i", "8"), "card id 8 is invalid"),
        (("info", "-t", "board"), "-i is required"),
        (("info", "-t", "board", "-i", "0", "-c", "1"), "chip id 1 is invalid"),
        (("info", "-x"), "invalid parameter"),
        (("set", "-t", "x"), "not supported"),
    ],
)
def test_npu_smi_bad_arguments(node: SimRoot, args: tuple[str, ...], message: str) -> None:
    res = node.tool(NPU_SMI, *args)
    assert res.returncode == 1
    assert message in res.stdout


def test_npu_smi_health_fault_knobs(node: SimRoot) -> None:
    node.set_faults({"npu_health": {"3": "Critical", "5": {"status": "Alarm", "error_code": "80E01801"}},
                     "ecc": {"3": {"HBM Double Bit Error Count": 2}}})  # fmt: skip
    info = npu_smi.parse_npu_smi_info(node.tool(NPU_SMI, "info").stdout)
    assert [(n.id, n.health) for n in info.unhealthy] == [(3, "Critical"), (5, "Alarm")]
    health = npu_smi.parse_npu_smi_health(
        node.tool(NPU_SMI, "info", "-t", "health", "-i", "5", "-c", "0").stdout
    )
    assert (health.status, health.error_codes) == ("Alarm", ("80E01801",))
    # without -c: the device-level layout (a Health line per chip, no error codes), as npu-smi prints it
    health3 = npu_smi.parse_npu_smi_health(node.tool(NPU_SMI, "info", "-t", "health", "-i", "3").stdout)
    assert health3.status == "Critical" and health3.chips == ((0, "Critical"),) and not health3.ok
    chip3 = npu_smi.parse_npu_smi_health(
        node.tool(NPU_SMI, "info", "-t", "health", "-i", "3", "-c", "0").stdout
    )
    assert chip3.status == "Critical" and chip3.error_codes
    ecc = npu_smi.parse_npu_smi_ecc(node.tool(NPU_SMI, "info", "-t", "ecc", "-i", "3").stdout)
    assert ecc.hbm_double_bit_errors == 2 and ecc.has_uncorrectable
    node.set_faults({"npu_health": None})
    assert npu_smi.parse_npu_smi_info(node.tool(NPU_SMI, "info").stdout).all_healthy


def test_npu_smi_dcmi_error_knob(node: SimRoot) -> None:
    node.set_faults({"dcmi_error": -8005})
    res = node.tool(NPU_SMI, "info")
    assert res.returncode == 1
    with pytest.raises(npu_smi.DcmiInitError) as exc:
        npu_smi.parse_npu_smi_info(res.stdout)
    assert exc.value.code == npu_smi.DCMI_DEVICE_BUSY


def test_npu_smi_process_table(node: SimRoot) -> None:
    path = node.path(hardware.HW_CONFIG)
    config = json.loads(path.read_text())
    config["npus"][1]["processes"] = [{"pid": 4242, "name": "python3.11", "memory_mb": 60000}]
    path.write_text(json.dumps(config))
    info = npu_smi.parse_npu_smi_info(node.tool(NPU_SMI, "info").stdout)
    assert info.busy_npu_ids == (1,)
    (proc,) = info.processes
    assert (proc.pid, proc.name, proc.memory_mb) == (4242, "python3.11", 60000)
    assert info.npu(1).hbm_used_mb == config["npus"][1]["hbm_used_mb"] + 60000


def test_nodes_report_their_own_values(tmp_path: Path, artifacts: dict[str, Path]) -> None:
    outputs = []
    for index in (4, 5):
        sim = SimRoot.create(tmp_path / f"n{index}", index=index, npus=2, model="910B4")
        boot_with_driver(sim, artifacts)
        info = npu_smi.parse_npu_smi_info(sim.tool(NPU_SMI, "info").stdout)
        assert info.npu_ids == (0, 1) and info.npus[0].name == "910B4" and info.npus[0].hbm_total_mb == 32768
        ip = hccn.parse_hccn_ip(sim.tool(HCCN, "-i", "1", "-ip", "-g").stdout)
        assert ip.ipaddr == f"10.201.1.{10 + index}"
        outputs.append([n.power_w for n in info.npus])
    assert outputs[0] != outputs[1]


def test_device_nodes_and_loaded_state(node: SimRoot) -> None:
    loaded = json.loads(node.path("/run/provision-sim/driver.json").read_text())
    assert loaded["driver_version"] == "25.5.1" and loaded["firmware_version"] == "7.8.0.6.201"
    names = sorted(p.name for p in node.path("/dev").iterdir())
    assert names == sorted([f"davinci{i}" for i in range(8)] + ["davinci_manager", "devmm_svm", "hisi_hdc"])
    mode = node.path("/dev/davinci0").stat().st_mode
    assert (mode & 0o777) == 0o666  # --install-for-all
    if loaded["device_kind"] == "char":
        assert os.major(node.path("/dev/davinci3").stat().st_rdev) == 236
        assert os.minor(node.path("/dev/davinci3").stat().st_rdev) == 3


# ------------------------------------------------------------------------------------------------
# PCI view
# ------------------------------------------------------------------------------------------------


def test_pci_sysfs_tree_without_driver(tmp_path: Path) -> None:
    sim = SimRoot.create(tmp_path, npus=8)
    assert sim.reboot().returncode == 0
    tree = sim.path("/run/provision-sim/sysfs/bus/pci/devices")
    npus = sorted(d.name for d in tree.iterdir() if (d / "device").read_text().strip() == "0xd802")
    assert npus == sorted(b.lower() for b in B3_BUS)
    dev = tree / "0000:c1:00.0"
    assert (dev / "vendor").read_text() == "0x19e5\n" and (dev / "class").read_text() == "0x120000\n"
    assert len((dev / "config").read_bytes()) == 256
    assert not (dev / "driver").exists()
    # without a driver nothing answers
    assert not sim.path(NPU_SMI).exists()
    res = sim.engine("npu-smi", "info")
    assert res.returncode == 1 and "dcmi module initialize failed. ret is -8020" in res.stdout
    assert not list(sim.path("/dev").glob("davinci*"))


@pytest.mark.skipif(shutil.which("lspci") is None, reason="pciutils (lspci) not installed on this machine")
def test_real_lspci_reads_the_fake_tree(node: SimRoot) -> None:
    tree = node.path("/run/provision-sim/sysfs/bus/pci")

    def lspci(*args: str) -> str:
        cmd = ["lspci", *args, "-A", "linux-sysfs", "-O", f"sysfs.path={tree}"]
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout

    plain = lspci()
    d802 = "".join(line + "\n" for line in plain.splitlines() if "d802" in line)
    assert d802 == segments("lspci_d802.txt")[0]
    devices = pci.parse_lspci(plain)
    assert len(pci.ascend_devices(devices)) == 8
    assert len(devices) == 10  # plus a root port and a NIC, like a real Kunpeng host
    numeric = pci.parse_lspci(lspci("-n", "-d", "19e5:"))
    assert [d.bus_id for d in pci.ascend_devices(numeric)] == sorted(b.lower() for b in B3_BUS)
    assert "Kernel driver in use: devdrv_device_driver" in lspci("-k", "-s", "c1:00.0")


# ------------------------------------------------------------------------------------------------
# hccn_tool
# ------------------------------------------------------------------------------------------------


def test_hccn_getters_parse(node: SimRoot) -> None:
    ip = hccn.parse_hccn_ip(node.tool(HCCN, "-i", "3", "-ip", "-g").stdout)
    assert (ip.ipaddr, ip.netmask) == ("10.201.3.11", "255.255.255.0")
    assert hccn.parse_hccn_link(node.tool(HCCN, "-i", "3", "-link", "-g").stdout) == "UP"
    health = hccn.parse_hccn_net_health(node.tool(HCCN, "-i", "3", "-net_health", "-g").stdout)
    assert health.status == "Init"  # no netdetect address yet
    assert hccn.parse_hccn_netdetect(node.tool(HCCN, "-i", "3", "-netdetect", "-g").stdout) == "0.0.0.0"
    gateway = hccn.parse_hccn_gateway(node.tool(HCCN, "-i", "3", "-gateway", "-g").stdout)
    assert (gateway.gateway, gateway.ifname) == ("10.201.3.1", "eth3")
    tls = hccn.parse_hccn_tls(node.tool(HCCN, "-i", "3", "-tls", "-g").stdout)
    assert (tls.dev_id, tls.enabled, tls.alarm_threshold_days) == (3, False, 60)
    assert hccn.parse_hccn_fec(node.tool(HCCN, "-i", "3", "-fec", "-g").stdout) == "rs FEC mode"
    stat = hccn.parse_hccn_link_stat(node.tool(HCCN, "-i", "3", "-link_stat", "-g").stdout)
    assert stat.device == 3 and stat.records[0][1] == "LINK UP"
    assert "Chassis ID TLV" in node.tool(HCCN, "-i", "3", "-lldp", "-g").stdout


def test_a_flapped_port_prints_its_records_as_the_capture_and_doctor_names_it(node: SimRoot) -> None:
    import re
    import time

    from provision.doctor.catalog import shipped
    from provision.doctor.diagnose import diagnose
    from provision.doctor.probe import collect
    from tests.helpers import probe_section
    from tests.unit.test_doctor_match import EXPECTED, node_probe

    healthy = node.tool(HCCN, "-i", "3", "-link_stat", "-g").stdout
    node.set_faults({"link_flap": {"3": time.time() - 30}})
    out = node.tool(HCCN, "-i", "3", "-link_stat", "-g").stdout
    stat = hccn.parse_hccn_link_stat(out)
    assert stat.link_up_count == 2
    assert [what for _, what in stat.records] == ["LINK UP", "LINK DOWN", "LINK UP"]
    # line for line the shape of the capture (hccn_tool_outputs.txt): prefix, padding, date format
    shape = re.compile(
        r"^\[device 3\](current time        : |link up count       : \d+$|link change records :$|"
        r"    [A-Z][a-z]{2} [A-Z][a-z]{2} [ 1-3]\d \d\d:\d\d:\d\d \d{4}    LINK (UP|DOWN)$)"
    )
    assert all(shape.match(line) for line in out.splitlines()), out
    assert "link up count       : 2" not in healthy
    facts = collect(node_probe(extra=probe_section("link_stat 3", out)))
    found = {f.id: f.evidence for f in diagnose(facts, EXPECTED, shipped())}
    assert found["hccn-link-flapped"][0].startswith("hccn_tool -i 3 -link_stat -g: LINK DOWN at ")
    node.set_faults({"link_flap": None})
    assert hccn.parse_hccn_link_stat(node.tool(HCCN, "-i", "3", "-link_stat", "-g").stdout).link_up_count == 1


def test_hccn_output_lines_match_samples(node: SimRoot) -> None:
    sample = (SAMPLES / "hccn_tool_outputs.txt").read_text()
    assert node.tool(HCCN, "-i", "0", "-link", "-g").stdout.strip() in sample
    assert node.tool(HCCN, "-i", "0", "-net_health", "-g").stdout.strip() in sample
    assert node.tool(HCCN, "-i", "0", "-tls", "-g").stdout.strip() in sample
    assert node.tool(HCCN, "-i", "0", "-fec", "-g").stdout.strip() in sample


def test_hccn_setters_persist_to_hccn_conf(node: SimRoot) -> None:
    for args in (
        ("-i", "2", "-ip", "-s", "address", "192.168.100.12", "netmask", "255.255.0.0"),
        ("-i", "2", "-netdetect", "-s", "address", "192.168.100.1"),
        ("-i", "2", "-gateway", "-s", "gateway", "192.168.100.254"),
    ):
        res = node.tool(HCCN, *args)
        # hicann/driver cmd.c record_result_success_to_log; the MindIE guide's -tls -s capture
        assert (res.returncode, res.stdout) == (0, "Cmd executed successfully!\n")
    conf = node.path("/etc/hccn.conf").read_text().splitlines()
    assert conf == [
        "address_2=192.168.100.12",
        "netmask_2=255.255.0.0",
        "netdetect_2=192.168.100.1",
        "gateway_2=192.168.100.254",
    ]
    ip = hccn.parse_hccn_ip(node.tool(HCCN, "-i", "2", "-ip", "-g").stdout)
    assert (ip.ipaddr, ip.netmask) == ("192.168.100.12", "255.255.0.0")
    assert hccn.parse_hccn_netdetect(node.tool(HCCN, "-i", "2", "-netdetect", "-g").stdout) == "192.168.100.1"
    assert (
        hccn.parse_hccn_gateway(node.tool(HCCN, "-i", "2", "-gateway", "-g").stdout).gateway
        == "192.168.100.254"
    )
    # other devices keep their values
    assert hccn.parse_hccn_ip(node.tool(HCCN, "-i", "1", "-ip", "-g").stdout).ipaddr == "10.201.1.11"


def test_hccn_set_rewrites_its_key_and_survives_a_reboot(node: SimRoot) -> None:
    assert (
        node.tool(
            HCCN, "-i", "1", "-ip", "-s", "address", "10.20.0.11", "netmask", "255.255.255.0"
        ).returncode
        == 0
    )
    assert node.tool(HCCN, "-i", "1", "-gateway", "-s", "gateway", "10.20.0.1").returncode == 0
    assert (
        node.tool(
            HCCN, "-i", "1", "-ip", "-s", "address", "10.20.0.12", "netmask", "255.255.255.0"
        ).returncode
        == 0
    )
    # the old lines go, the new ones are appended (hicann/driver cfg.c)
    assert node.path("/etc/hccn.conf").read_text().splitlines() == [
        "gateway_1=10.20.0.1",
        "address_1=10.20.0.12",
        "netmask_1=255.255.255.0",
    ]
    assert node.reboot().returncode == 0
    ip = hccn.parse_hccn_ip(node.tool(HCCN, "-i", "1", "-ip", "-g").stdout)
    assert (ip.ipaddr, ip.netmask) == ("10.20.0.12", "255.255.255.0")
    assert hccn.parse_hccn_gateway(node.tool(HCCN, "-i", "1", "-gateway", "-g").stdout).gateway == "10.20.0.1"


@pytest.mark.parametrize(
    ("args", "stderr"),
    [
        # NPU 3 already has 10.201.3.11
        (("-i", "2", "-ip", "-s", "address", "10.201.3.11", "netmask", "255.255.255.0"), "conflicted"),
        (("-i", "2", "-ip", "-s", "address", "192.168.1.20", "netmask", "255.255.255.0"), "conflicted"),
        (
            ("-i", "2", "-gateway", "-s", "gateway", "10.99.0.1"),
            "doesn't match that of the configured ip adress",
        ),
    ],
    ids=["address-of-another-npu", "vnic-segment", "gateway-outside-segment"],
)
def test_hccn_set_refusals_follow_the_vendor_tool(node: SimRoot, args: tuple[str, ...], stderr: str) -> None:
    before = node.path("/etc/hccn.conf").read_text() if node.path("/etc/hccn.conf").exists() else ""
    res = node.tool(HCCN, *args)
    assert res.returncode == 1
    assert stderr in res.stderr and res.stdout == ""
    after = node.path("/etc/hccn.conf").read_text() if node.path("/etc/hccn.conf").exists() else ""
    assert after == before


@pytest.mark.parametrize(
    "args",
    [
        ("-i", "9", "-ip", "-g"),
        ("-i", "0", "-ip", "-s", "address", "1.2.3"),
        ("-i", "0", "-ip", "-s", "address", "1.2.3.4"),
        ("-i", "0", "-bogus", "-g"),
        ("-i", "0", "-link", "-s", "up", "1"),
        ("-i", "0", "-ping", "-g", "address", "not-an-ip"),
        ("-ip", "-g"),
    ],
)
def test_hccn_bad_arguments(node: SimRoot, args: tuple[str, ...]) -> None:
    res = node.tool(HCCN, *args)
    assert res.returncode == 1 and res.stdout


def test_hccn_link_down_knob(node: SimRoot) -> None:
    node.set_faults({"link_down": [4]})
    assert hccn.parse_hccn_link(node.tool(HCCN, "-i", "4", "-link", "-g").stdout) == "DOWN"
    assert hccn.parse_hccn_link(node.tool(HCCN, "-i", "3", "-link", "-g").stdout) == "UP"
    assert not hccn.parse_hccn_net_health(node.tool(HCCN, "-i", "4", "-net_health", "-g").stdout).ok
    ping = hccn.parse_hccn_ping(node.tool(HCCN, "-i", "4", "-ping", "-g", "address", "127.0.0.1").stdout)
    assert not ping.success and ping.timeouts == 3 and ping.loss_pct == 100.0
    node.set_faults({"net_health": {"3": "Receive timeout"}})
    assert hccn.parse_hccn_net_health(node.tool(HCCN, "-i", "3", "-net_health", "-g").stdout).code == 2


@pytest.mark.skipif(not icmp_allowed(), reason="no ICMP socket permitted here")
def test_hccn_ping_really_sends_icmp(node: SimRoot) -> None:
    res = node.tool(HCCN, "-i", "0", "-ping", "-g", "address", "127.0.0.1", "pkt", "2")
    assert res.returncode == 0
    ping = hccn.parse_hccn_ping(res.stdout)
    assert ping.success and (ping.transmitted, ping.received) == (2, 2) and ping.target == "127.0.0.1"
    assert "0.00% packet loss" in res.stdout
    assert node.tool(HCCN, "-i", "0", "-netdetect", "-s", "address", "127.0.0.1").returncode == 0
    assert hccn.parse_hccn_net_health(node.tool(HCCN, "-i", "0", "-net_health", "-g").stdout).ok


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare")
def test_hccn_ping_unreachable_in_an_empty_namespace(node: SimRoot) -> None:
    cmd = [
        "unshare",
        "--net",
        sys.executable,
        str(node.path(HCCN)),
        "-i",
        "0",
        "-ping",
        "-g",
        "address",
        "10.201.0.12",
    ]
    res = subprocess.run(cmd, env=node.env(), capture_output=True, text=True, timeout=30, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("recv time out seq=") == 3
    assert "3 packets transmitted, 0 received, 100.00% packet loss" in res.stdout
    assert not hccn.parse_hccn_ping(res.stdout).success


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare")
@pytest.mark.skipif(not icmp_allowed(), reason="no ICMP socket permitted here")
def test_hccn_ping_runs_in_the_npu_fabric_namespace(node: SimRoot) -> None:
    # 127.0.0.1 answers in this namespace ...
    assert hccn.parse_hccn_ping(
        node.tool(HCCN, "-i", "0", "-ping", "-g", "address", "127.0.0.1").stdout
    ).success
    # ... but not in a fresh namespace (loopback down) standing in for the NPU fabric
    holder = subprocess.Popen(["unshare", "--net", "sleep", "60"])
    try:
        link = node.path("/run/provision-sim/npu-netns")
        for _ in range(100):
            ns = Path(f"/proc/{holder.pid}/ns/net")
            if ns.exists() and os.readlink(ns) != os.readlink("/proc/self/ns/net"):
                break
            subprocess.run(["sleep", "0.05"], check=True)
        link.symlink_to(f"/proc/{holder.pid}/ns/net")
        res = node.tool(HCCN, "-i", "0", "-ping", "-g", "address", "127.0.0.1", "pkt", "1")
        assert res.returncode == 0, res.stdout
        assert not hccn.parse_hccn_ping(res.stdout).success
        node.tool(HCCN, "-i", "0", "-netdetect", "-s", "address", "127.0.0.1")
        assert not hccn.parse_hccn_net_health(node.tool(HCCN, "-i", "0", "-net_health", "-g").stdout).ok
    finally:
        holder.kill()
        holder.wait()


def test_hccn_without_loaded_driver(tmp_path: Path) -> None:
    sim = SimRoot.create(tmp_path)
    res = sim.engine("hccn_tool", "-i", "0", "-link", "-g")
    assert res.returncode == 1 and "ret is -8020" in res.stdout
