"""The simulated Atlas A3 and Atlas 300I Duo: their npu-smi and lspci outputs equal the real captures
(tests/fixtures/samples, sources in its README) and parse, with the product's parsers, to the values the
node was configured with."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from provision.ascend import hardware as models
from provision.ascend import hccn, npu_smi, pci
from provision.errors import InputError, ProvisionError
from provision_sim import cluster, hardware
from provision_sim.hardware.node.ascendsim import npusmi
from provision_sim.hardware.testroot import SimRoot
from provision_sim.mirror import run_files as mirror
from tests.helpers import sample_captures, sample_segments

pytestmark = pytest.mark.unit

ARCH = os.uname().machine
NPU_SMI = "/usr/local/bin/npu-smi"
A3_BUS = ["9D", "9F", "99", "9B", "95", "97", "91", "93", "8D", "8F", "89", "8B", "85", "87", "81", "83"]


def stripped(text: str) -> list[str]:
    return [line.strip() for line in text.strip().splitlines()]


# ------------------------------------------------------------------------------------------------
# renderers == captures
# ------------------------------------------------------------------------------------------------


def test_a3_info_matches_capture() -> None:
    (expected,) = sample_segments("npu_smi_info_910_93_a3.txt")
    power: list[float | str] = [161.8, 167.2, 159.7, 161.4, 163.9, 170.9, 164.7, 169.0]
    temp = [36, 36, 36, 36, 37, 36, 36, 36, 37, 36, 36, 36, 38, 37, 37, 38]
    hbm = [3122, 2891, 3124, 2888, 3117, 2885, 3109, 2890, 3113, 2876, 3106, 2888, 3108, 2885, 3120, 2879]
    rows = [
        {"id": i, "npu_id": i // 2, "chip_id": i % 2, "phy_id": i, "name": "Ascend910", "health": "OK",
         "power_w": power[i // 2] if i % 2 == 0 else "-", "temp_c": temp[i],
         "bus_id": f"0000:{A3_BUS[i]}:00.0", "hbm_used_mb": hbm[i], "hbm_total_mb": 65536}
        for i in range(16)
    ]  # fmt: skip
    assert npusmi.render_info("25.2.1", "25.2.1", rows, chip_phy=True) == expected


def test_300i_duo_info_matches_capture() -> None:
    (expected,) = sample_segments("npu_smi_info_310p3_duo.txt")
    rows = [
        {"id": c, "npu_id": 2, "chip_id": c, "name": "310P3", "health": "OK", "temp_c": t,
         "bus_id": "0000:01:00.0", "memory_used_mb": used, "memory_total_mb": total}
        for c, t, used, total in ((0, 45, 1529, 44280), (1, 43, 1412, 43693))
    ]  # fmt: skip
    assert npusmi.render_info_310p("25.2.0", "25.2.0", rows, process_table=False) == expected


def test_300i_duo_common_and_usages_match_captures_modulo_indentation() -> None:
    captured = sample_captures("npu_smi_multichip_key_values.txt")
    chips = [
        {"chip_id": c, "family": "310P", "memory_pct": 3, "aicore_freq_mhz": 1080, "aicore_cur_freq_mhz": 960,
         "temp_c": t, "memory_total_mb": ddr, "ctrlcpu_pct": cpu, "ddr_bw_pct": 51}
        for c, t, ddr, cpu in ((0, 60, 44280, 2), (1, 59, 43693, 3))
    ]  # fmt: skip
    common = npusmi.render_common_chips(1, chips, {"temp_c": 48, "power_w": 45.2})
    assert stripped(common) == stripped(captured["common_310p_duo"])
    assert stripped(npusmi.render_usages_chips(1, chips)) == stripped(captured["usages_310p_duo"])


# ------------------------------------------------------------------------------------------------
# configuration
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "npu_smi_name"),
    [("910b3", "910B3"), ("910_93", "Ascend910"), ("Ascend910", "Ascend910"), ("310p3", "310P3")],
)
def test_model_names(name: str, npu_smi_name: str) -> None:
    assert hardware.resolve_model(name) == npu_smi_name


def test_a3_and_duo_layouts() -> None:
    a3 = hardware.node_config(name="a", index=1, npus=16, model="910_93")
    assert (a3["hardware_model"], a3["chips_per_npu"], a3["pci"]["device"]) == ("a3", 2, "0xd803")
    assert [(n["npu_id"], n["chip_id"]) for n in a3["npus"][:4]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [n["bus_id"] for n in a3["npus"]] == [f"0000:{b}:00.0" for b in A3_BUS]
    duo = hardware.node_config(name="d", index=2, npus=4, model="310p3")
    assert (duo["hardware_model"], duo["pci"]["device"]) == ("300i-duo", "0xd500")
    assert [n["bus_id"] for n in duo["npus"]] == ["0000:01:00.0"] * 2 + ["0000:03:00.0"] * 2
    assert [n["pci_address"] for n in duo["npus"]] == [f"0000:0{i}:00.0" for i in range(1, 5)]
    assert [n["memory_total_mb"] for n in duo["npus"][:2]] == [44280, 43693]
    assert models.model("a3").chip_count == 16
    with pytest.raises(ProvisionError, match="multiple of 2"):
        hardware.node_config(name="x", index=1, npus=3, model="910_93")
    with pytest.raises(ProvisionError, match="unknown NPU model 'H100'"):
        hardware.resolve_model("H100")


def test_sim_up_model_list_is_used_in_turn_and_checked() -> None:
    # what `provision sim up --model ...` hands each node, checked before anything is created
    assert cluster._parse_models("910b3, 910_93,310p3", 4, 16) == ["910B3", "Ascend910", "310P3", "910B3"]
    assert cluster._parse_models("", 2, 8) == ["910B3", "910B3"]
    with pytest.raises(InputError, match="--model: unknown NPU model 'H100'; known: 910B1"):
        cluster._parse_models("910b3,H100", 2, 8)
    with pytest.raises(
        InputError, match=r"--npus 3: an Atlas 800I A3 / Atlas 800T A3 node has 2 chips per NPU"
    ):
        cluster._parse_models("910_93", 1, 3)


# ------------------------------------------------------------------------------------------------
# booted nodes: the product's parsers read back the configured values
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    paths = mirror.build_artifacts(tmp_path_factory.mktemp("mirror"), arch=ARCH)
    return {p.name.split("_")[0]: p for p in paths}


def booted(root: Path, artifacts: dict[str, Path], *, npus: int, model: str) -> SimRoot:
    # The mirror builds the A2 file names only; the simulated driver does not check the chip.
    sim = SimRoot.create(root, index=1, npus=npus, model=model)
    assert (
        sim.run(
            [artifacts["Ascend-hdk-910b-npu-driver"], "--full", "--install-for-all", "--quiet"]
        ).returncode
        == 0
    )
    assert sim.run([artifacts["Ascend-hdk-910b-npu-firmware"], "--full", "--quiet"]).returncode == 2
    assert sim.reboot().returncode == 0
    return sim


def chips_of(sim: SimRoot) -> list[dict[str, object]]:
    config = json.loads(sim.path(hardware.HW_CONFIG).read_text())
    chips: list[dict[str, object]] = config["npus"]
    return chips


def smi(sim: SimRoot, *args: str) -> str:
    res = sim.tool(NPU_SMI, *args)
    assert res.returncode == 0, res.stdout
    return res.stdout


def test_a3_node_outputs_parse_to_its_configuration(tmp_path: Path, artifacts: dict[str, Path]) -> None:
    sim = booted(tmp_path / "a3", artifacts, npus=16, model="910_93")
    chips = chips_of(sim)
    info = npu_smi.parse_npu_smi_info(smi(sim, "info"))
    assert info.npu_ids == tuple(range(8)) and len(info.npus) == 16
    for status, want in zip(info.npus, chips, strict=True):
        assert (status.id, status.chip_id, status.chip_device, status.name) == (
            want["npu_id"], want["chip_id"], want["id"], "Ascend910"
        )  # fmt: skip
        assert (status.bus_id, status.hbm_total_mb, status.temp_c) == (want["bus_id"], 65536, want["temp_c"])
        assert status.power_w == (want["power_w"] if want["chip_id"] == 0 else None)
    listing = npu_smi.parse_npu_smi_list(smi(sim, "info", "-l"))
    assert (listing.total_count, listing.chip_total) == (8, 16)
    rows = npu_smi.parse_npu_smi_chip_map(smi(sim, "info", "-m"))
    assert [(r.npu_id, r.chip_id, r.chip_phy_id) for r in rows][:3] == [(0, 0, 0), (0, 1, 1), (1, 0, 2)]
    board = npu_smi.parse_npu_smi_board(smi(sim, "info", "-t", "board", "-i", "3"))
    assert (board.npu_id, board.chip_count, board.pci_device_id, board.pcie_bus_info) == (
        3,
        2,
        0xD803,
        "0000:91:00.0",
    )
    die = npu_smi.parse_npu_smi_board(smi(sim, "info", "-t", "board", "-i", "3", "-c", "1"))
    assert (die.chip_id, die.pcie_bus_info, die.raw.get("NPU Name")) == (1, "0000:93:00.0", "Ascend910")
    usages = npu_smi.parse_npu_smi_usages(smi(sim, "info", "-t", "usages", "-i", "3"))
    assert [(u.chip_id, u.hbm_capacity_mb) for u in usages.chips] == [(0, 65536), (1, 65536)]
    common = npu_smi.parse_npu_smi_common(smi(sim, "info", "-t", "common", "-i", "3"))
    assert [(c.chip_id, c.temp_c, c.power_w) for c in common.chips] == [
        (0, chips[6]["temp_c"], chips[6]["power_w"]),
        (1, chips[7]["temp_c"], chips[7]["power_w"]),
    ]
    power = npu_smi.parse_npu_smi_power(smi(sim, "info", "-t", "power", "-i", "3"))
    assert [p.power_w for p in power.chips] == [chips[6]["power_w"], chips[7]["power_w"]]
    temp = npu_smi.parse_npu_smi_temp(smi(sim, "info", "-t", "temp", "-i", "3"))
    assert [t.npu_temp_c for t in temp.chips] == [chips[6]["temp_c"], chips[7]["temp_c"]]
    one = npu_smi.parse_npu_smi_info(smi(sim, "info", "-i", "3"))
    assert [(n.id, n.chip_id) for n in one.npus] == [(3, 0), (3, 1)]
    res = sim.tool(NPU_SMI, "info", "-t", "board", "-i", "3", "-c", "2")
    assert res.returncode == 1 and "chip id 2 is invalid" in res.stdout


def test_300i_duo_node_outputs_parse_to_its_configuration(tmp_path: Path, artifacts: dict[str, Path]) -> None:
    sim = booted(tmp_path / "duo", artifacts, npus=4, model="310p3")
    chips = chips_of(sim)
    info = npu_smi.parse_npu_smi_info(smi(sim, "info"))
    assert [(n.id, n.chip_id, n.chip_device, n.name) for n in info.npus] == [
        (0, 0, 0, "310P3"), (0, 1, 1, "310P3"), (1, 0, 2, "310P3"), (1, 1, 3, "310P3")
    ]  # fmt: skip
    assert [(n.memory_total_mb, n.hbm_total_mb, n.power_w) for n in info.npus[:2]] == [
        (44280, None, None),
        (43693, None, None),
    ]
    assert info.process_table and not info.processes
    usages = npu_smi.parse_npu_smi_usages(smi(sim, "info", "-t", "usages", "-i", "1"))
    assert [(u.chip_id, u.ddr_capacity_mb) for u in usages.chips] == [(0, 44280), (1, 43693)]
    common = npu_smi.parse_npu_smi_common(smi(sim, "info", "-t", "common", "-i", "1"))
    assert [(c.chip_id, c.temp_c, c.power_w) for c in common.chips] == [
        (0, chips[2]["temp_c"], None),
        (1, chips[3]["temp_c"], None),
    ]
    power = npu_smi.parse_npu_smi_power(smi(sim, "info", "-t", "power", "-i", "1"))
    assert (power.key, power.chips) == ("Power Dissipation(W)", ())
    assert power.power_w == common.power_w  # the card's power, from its MCU
    board = npu_smi.parse_npu_smi_board(smi(sim, "info", "-t", "board", "-i", "1"))
    assert (board.chip_count, board.pci_device_id, board.product_name) == (2, 0xD500, None)


@pytest.mark.skipif(shutil.which("lspci") is None, reason="pciutils (lspci) not installed on this machine")
@pytest.mark.parametrize(("model", "npus", "device"), [("910_93", 16, 0xD803), ("310p3", 4, 0xD500)])
def test_real_lspci_sees_one_function_per_chip(
    tmp_path: Path, artifacts: dict[str, Path], model: str, npus: int, device: int
) -> None:
    sim = booted(tmp_path / "n", artifacts, npus=npus, model=model)
    tree = sim.path("/run/provision-sim/sysfs/bus/pci")
    out = subprocess.run(
        ["lspci", "-n", "-d", "19e5:", "-A", "linux-sysfs", "-O", f"sysfs.path={tree}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    npus_seen = pci.ascend_devices(pci.parse_lspci(out))
    assert {d.device_id for d in npus_seen} == {device}
    assert len(npus_seen) == npus
    family = models.model_for_pci_id(device)
    assert family is not None and pci.ascend_model(device) == family.family


def test_sim_hccn_tool_prints_the_real_ping_and_gateway_formats(
    tmp_path: Path, artifacts: dict[str, Path]
) -> None:
    sim = booted(tmp_path / "a2", artifacts, npus=2, model="910b3")
    tool = "/usr/local/Ascend/driver/tools/hccn_tool"
    gateway = sim.tool(tool, "-i", "1", "-gateway", "-g").stdout
    assert gateway == "default gateway:10.201.1.1, Iface:eth1\n"  # as hccn_tool_real_captures.txt
    sim.set_faults({"link_down": [1]})  # no packet leaves: deterministic without ICMP rights
    out = sim.tool(tool, "-i", "1", "-ping", "-g", "address", "10.201.1.12", "pkt", "3").stdout
    assert out.splitlines()[0] == "device 1 PING 10.201.1.12"
    ping = hccn.parse_hccn_ping(out)
    assert (ping.device, ping.target, ping.success, ping.timeouts, ping.loss_pct) == (
        1,
        "10.201.1.12",
        False,
        3,
        100.0,
    )
