"""The Ascend hardware models (``provision/data/hardware.yml``): one typed view for every reader.

A *model* is a server class (``a2``, ``a3``, ``300i-duo``) with its PCI device id, its NPU and chip counts
and the vendor file names the roles install; a *chip* is what npu-smi's Name column prints (``910B3``,
``Ascend910``, ``310P3``). :func:`model_for_chip` and :func:`model_for_pci_id` go from what a node shows
to its model.
"""

from __future__ import annotations

from functools import cache

import yaml
from pydantic import BaseModel, ConfigDict, Field

from provision.errors import ProvisionError
from provision.paths import data_dir

__all__ = [
    "ChipSpec",
    "HardwareData",
    "HardwareModel",
    "load_hardware",
    "model",
    "model_for_chip",
    "model_for_line",
    "model_for_pci_id",
    "pci_families",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ChipSpec(_Frozen):
    """One chip name of a model: its memory and the SoC name CANN compiles for."""

    hbm_mb: int = Field(ge=0)
    ddr_mb: int = Field(default=0, ge=0)
    soc_version: str


class HardwareModel(_Frozen):
    name: str = ""
    product: str
    family: str
    pci_device_id: str
    npus: int = Field(ge=1)
    chips_per_npu: int = Field(ge=1)
    chips: dict[str, ChipSpec]
    image_soc_version: str
    driver_run: str
    firmware_run: str
    cann_ops_run: str
    cann_kernels_run: str
    base_image_tag: str
    serving_image_suffix: str
    npu_port_gbps: float | None = Field(default=None, gt=0)
    """Nominal speed of one NPU network port (Gbit/s); None where no public figure exists."""
    k8s_resource: str
    """The extended resource the Kubernetes device plugin advertises for one chip of this line."""

    @property
    def chip_count(self) -> int:
        """Chips per node (one ``/dev/davinciN`` and one hccn_tool port each)."""
        return self.npus * self.chips_per_npu

    @property
    def pci_id(self) -> int:
        return int(self.pci_device_id, 16)

    def driver_file(self, version: str, arch: str) -> str:
        return self.driver_run.format(version=version, arch=arch)

    def firmware_file(self, version: str) -> str:
        return self.firmware_run.format(version=version)

    def cann_ops_file(self, version: str, arch: str, *, new_layout: bool) -> str:
        """The operator package: ``*-ops`` from CANN 8.5 on, ``*-kernels`` before."""
        pattern = self.cann_ops_run if new_layout else self.cann_kernels_run
        return pattern.format(version=version, arch=arch)

    def device_nodes(self) -> tuple[str, ...]:
        """``/dev/davinci0`` .. one per chip of a full node, then the shared nodes."""
        chips = tuple(f"/dev/davinci{n}" for n in range(self.chip_count))
        return chips + load_hardware().shared_device_nodes


class HardwareData(_Frozen):
    pci_device_ids: dict[str, str]
    shared_device_nodes: tuple[str, ...]
    models: dict[str, HardwareModel]


@cache
def load_hardware() -> HardwareData:
    with (data_dir() / "hardware.yml").open(encoding="utf-8") as fh:
        raw = yaml.safe_load(fh)
    raw["models"] = {name: {**spec, "name": name} for name, spec in raw["models"].items()}
    return HardwareData.model_validate(raw)


def pci_families() -> dict[int, str]:
    """PCI device id (vendor 0x19e5) → chip family: ``{0xd802: "910B", 0xd803: "910_93", ...}``."""
    return {int(k, 16): v for k, v in load_hardware().pci_device_ids.items()}


def model(name: str) -> HardwareModel:
    models = load_hardware().models
    if name not in models:
        raise ProvisionError(f"unknown hardware model {name!r}; known: {', '.join(models)}")
    return models[name]


def model_for_chip(chip: str) -> HardwareModel | None:
    """The model whose npu-smi chip name is ``chip`` (case-insensitive: ``910b3`` finds ``a2``)."""
    want = chip.strip().lower()
    return next(
        (m for m in load_hardware().models.values() if any(c.lower() == want for c in m.chips)),
        None,
    )


def model_for_line(line: str) -> HardwareModel | None:
    """The model of an NPU line as the roles and image tags name it: ``910b``, ``a3``, ``310p``."""
    want = line.strip().lower()
    return next((m for m in load_hardware().models.values() if m.base_image_tag == want), None)


def model_for_pci_id(device_id: int | None) -> HardwareModel | None:
    if device_id is None:
        return None
    return next((m for m in load_hardware().models.values() if m.pci_id == device_id), None)
