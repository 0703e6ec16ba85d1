"""The hardware models (provision/data/hardware.yml): their values, the vendor file names the roles get
from them, and the other readers (PCI map, image SoC names) agreeing with them."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.ascend import hardware, pci
from provision.errors import ProvisionError
from provision.image import spec
from tests.helpers import load_module

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
F = load_module("provision_filter_ascend_hw", ROOT / "plugins/filter/ascend.py")


def test_the_three_models() -> None:
    a2, a3, duo = (hardware.model(n) for n in ("a2", "a3", "300i-duo"))
    assert (a2.family, a2.pci_id, a2.npus, a2.chips_per_npu, a2.chip_count) == ("910B", 0xD802, 8, 1, 8)
    assert (a3.family, a3.pci_id, a3.npus, a3.chips_per_npu, a3.chip_count) == ("910_93", 0xD803, 8, 2, 16)
    assert (duo.family, duo.pci_id, duo.chips_per_npu) == ("310P", 0xD500, 2)
    assert sorted(a2.chips) == ["910B1", "910B2", "910B2C", "910B3", "910B4"]
    assert (a2.chips["910B4"].hbm_mb, a3.chips["Ascend910"].hbm_mb, duo.chips["310P3"].ddr_mb) == (
        32768,
        65536,
        44280,
    )
    assert (a2.image_soc_version, a3.image_soc_version, duo.image_soc_version) == (
        "ascend910b1",
        "ascend910_9391",
        "ascend310p1",
    )
    assert [m.serving_image_suffix for m in (a2, a3, duo)] == ["", "-a3", "-310p"]
    assert a3.device_nodes()[-4:] == (
        "/dev/davinci15",
        "/dev/davinci_manager",
        "/dev/devmm_svm",
        "/dev/hisi_hdc",
    )


def test_lookups() -> None:
    a2, a3 = hardware.model_for_chip("910b3"), hardware.model_for_chip("ASCEND910")
    assert (a2 and a2.name, a3 and a3.name) == ("a2", "a3")
    assert hardware.model_for_chip("H100") is None
    found = hardware.model_for_pci_id(0xD803)
    assert found is not None and found.name == "a3"
    assert hardware.model_for_pci_id(0xD801) is None  # the old 910 is a chip family, no supported model
    assert hardware.model_for_pci_id(None) is None
    line = hardware.model_for_line("310P")
    assert line is not None and line.name == "300i-duo"
    with pytest.raises(ProvisionError, match="unknown hardware model 'a5'; known: a2, a3, 300i-duo"):
        hardware.model("a5")


def test_vendor_file_names_equal_the_vendors_examples() -> None:
    # The examples cited in hardware.yml: [a3ops] and [310p] install guides.
    a3, duo = hardware.model("a3"), hardware.model("300i-duo")
    assert a3.driver_file("25.0.rc1.3", "aarch64") == "Atlas-A3-hdk-npu-driver_25.0.rc1.3_linux-aarch64.run"
    assert a3.firmware_file("7.7.0.3.228") == "Atlas-A3-hdk-npu-firmware_7.7.0.3.228.run"
    assert (
        a3.cann_ops_file("8.5.0", "aarch64", new_layout=True) == "Ascend-cann-A3-ops_8.5.0_linux-aarch64.run"
    )
    assert (
        a3.cann_ops_file("8.3.RC1", "aarch64", new_layout=False)
        == "Atlas-A3-cann-kernels_8.3.RC1_linux-aarch64.run"
    )
    assert duo.driver_file("25.5.1", "aarch64") == "Ascend-hdk-310p-npu-driver_25.5.1_linux-aarch64.run"
    assert duo.firmware_file("7.8.0.6.201") == "Ascend-hdk-310p-npu-firmware_7.8.0.6.201.run"
    assert (
        duo.cann_ops_file("8.5.0", "aarch64", new_layout=True)
        == "Ascend-cann-310p-ops_8.5.0_linux-aarch64.run"
    )


@pytest.mark.parametrize(
    ("chip", "driver", "firmware"),
    [
        (
            "910b",
            "Ascend-hdk-910b-npu-driver_25.5.1_linux-aarch64.run",
            "Ascend-hdk-910b-npu-firmware_7.8.0.6.201.run",
        ),
        (
            "a3",
            "Atlas-A3-hdk-npu-driver_25.5.1_linux-aarch64.run",
            "Atlas-A3-hdk-npu-firmware_7.8.0.6.201.run",
        ),
        (
            "310p",
            "Ascend-hdk-310p-npu-driver_25.5.1_linux-aarch64.run",
            "Ascend-hdk-310p-npu-firmware_7.8.0.6.201.run",
        ),
        (
            "910",
            "Ascend-hdk-910-npu-driver_25.5.1_linux-aarch64.run",
            "Ascend-hdk-910-npu-firmware_7.8.0.6.201.run",
        ),
    ],
)
def test_driver_role_file_names_per_line(chip: str, driver: str, firmware: str) -> None:
    assert F.ascend_driver_files("25.5.1", "7.8.0.6.201", chip=chip) == {
        "driver": driver,
        "firmware": firmware,
    }


def test_cann_role_operator_package_per_line() -> None:
    assert (
        F.ascend_cann_layout("9.1.0", chip="a3")["ops_file"] == "Ascend-cann-A3-ops_9.1.0_linux-aarch64.run"
    )
    assert (
        F.ascend_cann_layout("8.3.RC2", chip="a3")["ops_file"]
        == "Atlas-A3-cann-kernels_8.3.RC2_linux-aarch64.run"
    )
    assert F.ascend_cann_layout("9.1.0")["ops_file"] == "Ascend-cann-910b-ops_9.1.0_linux-aarch64.run"
    assert F.ascend_cann_layout("8.3.RC2")["ops_file"] == "Ascend-cann-kernels-910b_8.3.RC2_linux-aarch64.run"


def test_other_readers_agree_with_the_data() -> None:
    families = {m.pci_id: m.family for m in hardware.load_hardware().models.values()}
    assert {k: pci.ASCEND_MODELS[k] for k in families} == families
    assert pci.ascend_model(0xD803) == "910_93"
    # provision/image/spec.py reads its SoC table from the data: every model's line, nothing else.
    assert sorted(spec.SOCS) == sorted(m.base_image_tag for m in hardware.load_hardware().models.values())
    for line, soc in spec.SOCS.items():
        model = hardware.model_for_line(line)
        assert model is not None and model.image_soc_version == soc
