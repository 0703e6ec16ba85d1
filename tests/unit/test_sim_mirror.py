"""The local mirror's vendor artifacts: Huawei file names, sha256sums.txt, several versions per folder."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from provision.errors import ProvisionError
from provision.sim import mirror

pytestmark = pytest.mark.unit


def test_names_for_cann_9(tmp_path: Path) -> None:
    built = mirror.build_artifacts(tmp_path)
    assert [p.name for p in built] == [
        "Ascend-hdk-910b-npu-driver_25.5.1_linux-aarch64.run",
        "Ascend-hdk-910b-npu-firmware_7.8.0.6.201.run",
        "Ascend-cann-toolkit_9.1.0_linux-aarch64.run",
        "Ascend-cann-910b-ops_9.1.0_linux-aarch64.run",
        "Ascend-cann-nnal_9.1.0_linux-aarch64.run",
        "Ascend-docker-runtime_7.1.RC1_linux-aarch64.run",
    ]
    assert all(p.stat().st_mode & 0o777 == 0o755 for p in built)
    assert all(p.read_bytes().startswith(b"#!/bin/sh\n") for p in built)


def test_names_for_cann_8_3_use_the_kernels_package(tmp_path: Path) -> None:
    specs = mirror.artifact_specs(arch="x86_64", driver="25.0.rc1.1", cann="8.3.RC2", nnal="8.3.RC1")
    names = [s.name for s in specs]
    assert "Ascend-cann-kernels-910b_8.3.RC2_linux-x86_64.run" in names
    assert "Ascend-cann-nnal_8.3.RC1_linux-x86_64.run" in names
    assert not any("910b-ops" in n for n in names)
    kernels = next(s for s in specs if "kernels" in s.name)
    assert kernels.manifest["component"] == "kernels"
    driver = next(s for s in specs if "driver" in s.name)
    assert driver.manifest["compatible_fw"] == ["7.0.0", "7.7.99"]


def test_sha256sums_cover_every_version_in_the_folder(tmp_path: Path) -> None:
    first = mirror.build_artifacts(tmp_path, components=["driver", "firmware"])
    second = mirror.build_artifacts(
        tmp_path, driver="25.0.rc1.1", firmware="7.7.0.1.231", components=["driver", "firmware"]
    )
    assert len(first) == len(second) == 2
    lines = (tmp_path / "sha256sums.txt").read_text().splitlines()
    runs = sorted(tmp_path.glob("*.run"))
    assert len(runs) == 4
    assert lines == [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}" for p in runs]
    if shutil.which("sha256sum"):
        res = subprocess.run(
            ["sha256sum", "-c", "sha256sums.txt"], cwd=tmp_path, capture_output=True, text=True
        )
        assert res.returncode == 0, res.stdout + res.stderr


def test_builds_are_deterministic(tmp_path: Path) -> None:
    a = mirror.build_artifacts(tmp_path / "a", components=["toolkit"])
    b = mirror.build_artifacts(tmp_path / "b", components=["toolkit"])
    assert a[0].read_bytes() == b[0].read_bytes()


def test_invalid_requests(tmp_path: Path) -> None:
    with pytest.raises(ProvisionError, match="arch"):
        mirror.build_artifacts(tmp_path, arch="riscv64")
    with pytest.raises(ProvisionError, match="unknown components"):
        mirror.build_artifacts(tmp_path, components=["bios"])
    with pytest.raises(ProvisionError, match="invalid driver version"):
        mirror.build_artifacts(tmp_path, driver="25.5.1; rm -rf /")
    assert not list(tmp_path.glob("*.run"))


def test_payload_is_a_makeself_style_archive(tmp_path: Path) -> None:
    (run,) = mirror.build_artifacts(tmp_path, components=["nnal"])
    res = subprocess.run(["sh", str(run), "--list"], capture_output=True, text=True, check=True)
    names = {line.split()[-1] for line in res.stdout.splitlines()}
    assert {"install.sh", "package.json", "ascendsim/installer.py", "ascendsim/npusmi.py"} <= names
    assert subprocess.run(["sh", str(run), "--version"], capture_output=True, text=True).stdout == "9.1.0\n"
