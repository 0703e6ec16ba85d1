"""The vendor's ``.run`` file names and install paths of a driver, firmware and CANN version: one home.

The roles read them through the collection's filters (``ascend_driver_files``, ``ascend_cann_layout``,
``ascend_cann_steps`` in ``plugins/filter/ascend.py``), ``provision bundle`` to know which files an
apply fetches from the mirror. The names of the NPU lines of provision/data/hardware.yml come from it.
"""

from __future__ import annotations

import re
from typing import Any

from provision.ascend.hardware import model_for_line

DEFAULT_BASE = "/usr/local/Ascend"


def version_numbers(version: str) -> tuple[int, ...]:
    """The numbers of a vendor version (``8.3.RC2`` -> ``(8, 3, 2)``), to order and compare them."""
    return tuple(int(n) for n in re.findall(r"\d+", version))


def driver_files(driver: str, firmware: str, *, arch: str = "aarch64", chip: str = "910b") -> dict[str, str]:
    """The vendor's file names of a driver and a firmware version: ``{driver, firmware}``.

    ``chip`` is the NPU line (``910b``, ``a3``, ``310p``): its names come from provision/data/hardware.yml
    (an A3's are ``Atlas-A3-hdk-npu-driver_<v>_linux-<arch>.run``); another line keeps the A2 pattern.
    """
    model = model_for_line(chip)
    if model is not None:
        return {"driver": model.driver_file(driver, arch), "firmware": model.firmware_file(firmware)}
    return {
        "driver": f"Ascend-hdk-{chip}-npu-driver_{driver}_linux-{arch}.run",
        "firmware": f"Ascend-hdk-{chip}-npu-firmware_{firmware}.run",
    }


def cann_layout(
    version: str, arch: str = "aarch64", base: str = DEFAULT_BASE, chip: str = "910b"
) -> dict[str, Any]:
    """Where CANN ``version`` installs and what its packages are called.

    CANN <= 8.3: ``<base>/ascend-toolkit/<v>/``, ``set_env.sh`` at ``<base>/ascend-toolkit/set_env.sh``,
    operator package ``Ascend-cann-kernels-<chip>_<v>_linux-<arch>.run``. CANN >= 8.5: ``<base>/cann-<v>/``,
    ``set_env.sh`` at ``<base>/cann/set_env.sh``, operator package
    ``Ascend-cann-<chip>-ops_<v>_linux-<arch>.run``. The names of the lines of provision/data/hardware.yml
    come from it (A3: ``Ascend-cann-A3-ops_…``, before 8.5 ``Atlas-A3-cann-kernels_…``).
    """
    base = base.rstrip("/") or "/"
    new = version_numbers(version)[:2] >= (8, 5)
    model = model_for_line(chip)
    home = f"{base}/cann-{version}" if new else f"{base}/ascend-toolkit/{version}"
    ops = "ops" if new else "kernels"
    return {
        "version": version,
        "new_layout": new,
        "home": home,
        "install_info": f"{home}/{arch}-linux/ascend_toolkit_install.info",
        "ops_component": ops,
        "ops_info": f"{home}/{arch}-linux/ascend_{ops}_install.info",
        "set_env": f"{base}/cann/set_env.sh" if new else f"{base}/ascend-toolkit/set_env.sh",
        "toolkit_file": f"Ascend-cann-toolkit_{version}_linux-{arch}.run",
        "ops_file": (
            model.cann_ops_file(version, arch, new_layout=new)
            if model is not None
            else f"Ascend-cann-{chip}-ops_{version}_linux-{arch}.run"
            if new
            else f"Ascend-cann-kernels-{chip}_{version}_linux-{arch}.run"
        ),
    }


def nnal_file(version: str, arch: str = "aarch64") -> str:
    """The NNAL (ATB) package of ``version``."""
    return f"Ascend-cann-nnal_{version}_linux-{arch}.run"


def cann_files(
    version: str,
    nnal_version: str | None = None,
    *,
    arch: str = "aarch64",
    chip: str = "910b",
    nnal: bool = True,
) -> list[tuple[str, str, str]]:
    """``(component, version, file)`` of every CANN package a node with nothing installed runs, in order:
    toolkit, ops (>= 8.5) / kernels (<= 8.3), NNAL (with ``nnal``)."""
    layout = cann_layout(version, arch, DEFAULT_BASE, chip)
    files = [
        ("toolkit", version, str(layout["toolkit_file"])),
        (str(layout["ops_component"]), version, str(layout["ops_file"])),
    ]
    if nnal:
        files.append(("nnal", nnal_version or version, nnal_file(nnal_version or version, arch)))
    return files


def docker_runtime_file(version: str, arch: str = "aarch64") -> str:
    """The Ascend Docker Runtime installer (roles/container_runtime/vars/main.yml names it the same)."""
    return f"Ascend-docker-runtime_{version}_linux-{arch}.run"


def pin_variable(name: str) -> str:
    """The inventory variable that pins the sha256 of vendor file ``name`` (the role that installs it)."""
    if name.startswith(("Ascend-cann", "Atlas-A3-cann")):
        return "cann_checksums"
    if name.startswith("Ascend-docker-runtime"):
        return "container_runtime_checksums"
    return "ascend_driver_checksums"
