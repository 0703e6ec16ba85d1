"""The boot-time unit ``provision-sim-hardware.service``: PCI view + "driver load".

Runs once per boot, before ``sysinit.target`` (so before sshd):

1. writes the fake PCI tree to ``/run/provision-sim/sysfs/bus/pci`` and bind-mounts it over
   ``/sys/bus/pci`` (skipped under ``$PROVISION_SIM_ROOT``);
2. "flashes" a staged firmware package: when ``/usr/local/Ascend/firmware/version.info`` differs
   from the firmware recorded in ``/var/lib/provision-sim/state.json``, the new one becomes active;
3. "loads" the installed driver — only a COMPLETE install (``driver/version.info`` present and the
   DKMS module built) loads: it writes ``/run/provision-sim/driver.json`` and creates
   ``/dev/davinci0..N-1``, ``/dev/davinci_manager``, ``/dev/devmm_svm``, ``/dev/hisi_hdc`` as real
   character devices (mknod works in systemd-nspawn; when it does not, plain files stand in and
   ``driver.json`` says ``"device_kind": "file"``).

``/run`` and ``/dev`` are fresh tmpfs on every boot of an nspawn node, so a reboot naturally
"unloads" the old driver; an upgrade therefore becomes visible (``npu-smi info``) after a reboot.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

from . import common, pcisim

DEV_MAJORS = {"davinci": 236, "davinci_manager": 237, "devmm_svm": 238, "hisi_hdc": 239}


def _log(msg: str) -> None:
    print(f"provision-sim-hardware: {msg}", flush=True)


def driver_complete(base: str) -> str | None:
    """The installed driver version when the install is complete and its DKMS module was built."""
    version = common.read_key_equals(common.host_path(base + "/driver/version.info")).get("Version")
    if not version:
        return None
    module_dir = common.host_path(f"{common.DKMS_TREE}/{common.DKMS_VERSION}/{os.uname().release}")
    if not module_dir.is_dir():
        return None
    return version


def _mknod(path: Path, major: int, minor: int, mode: int, uid: int, gid: int) -> str:
    path.unlink(missing_ok=True)
    try:
        os.mknod(path, stat.S_IFCHR | mode, os.makedev(major, minor))
        kind = "char"
    except OSError:
        path.write_bytes(b"")
        kind = "file"
    os.chmod(path, mode)
    with contextlib.suppress(OSError):
        os.chown(path, uid, gid)
    return kind


def make_devices(npus: int, *, user: str, group: str, for_all: bool) -> str:
    """Create the device nodes; returns ``"char"`` or ``"file"``."""
    dev = common.host_path("/dev")
    dev.mkdir(parents=True, exist_ok=True)
    uid = common.db_id(common.host_path("/etc/passwd"), user) or 0
    gid = common.db_id(common.host_path("/etc/group"), group) or 0
    mode = 0o666 if for_all else 0o660
    kinds = set()
    for i in range(npus):
        kinds.add(_mknod(dev / f"davinci{i}", DEV_MAJORS["davinci"], i, mode, uid, gid))
    for name in ("davinci_manager", "devmm_svm", "hisi_hdc"):
        kinds.add(_mknod(dev / name, DEV_MAJORS[name], 0, mode, uid, gid))
    return "file" if "file" in kinds else "char"


def remove_devices() -> None:
    dev = common.host_path("/dev")
    if not dev.is_dir():
        return
    for p in dev.glob("davinci*"):
        p.unlink(missing_ok=True)
    for name in ("devmm_svm", "hisi_hdc"):
        (dev / name).unlink(missing_ok=True)


def mount_pci(tree: Path) -> None:
    if common.sim_root():
        return
    target = Path("/sys/bus/pci")
    if not target.is_dir():
        _log("/sys/bus/pci does not exist; PCI view not mounted")
        return
    subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)
    res = subprocess.run(
        ["mount", "--bind", str(tree), str(target)], capture_output=True, text=True, check=False
    )
    if res.returncode != 0:
        _log(f"bind mount of the PCI view failed: {res.stderr.strip()}")


def boot(*, mount: bool = True) -> int:
    config = common.load_config()
    if config is None:
        _log(f"{common.HW_CONFIG} missing: no simulated hardware on this node")
        return 0
    npus = len(config["npus"])

    # 2. firmware staged by an installer becomes the flashed firmware
    state = common.load_state()
    flashed = state.get("firmware_flashed") or config.get("factory_firmware")
    staged = common.installed_firmware_version()
    if staged and staged != flashed:
        _log(f"firmware {flashed} -> {staged}")
        flashed = staged
    state["firmware_flashed"] = flashed
    state["boots"] = int(state.get("boots", 0)) + 1
    common.save_state(state)

    # 3. driver load
    base = common.driver_base()
    version = driver_complete(base)
    loaded_path = common.host_path(common.DRIVER_LOADED)
    loaded_path.unlink(missing_ok=True)
    remove_devices()
    if version:
        info = common.install_info()
        vinfo = common.read_key_equals(common.host_path(base + "/driver/version.info"))
        fw_range = [
            p.strip() for p in vinfo.get("compatible_version_fw", "").strip("[]").split(",") if p.strip()
        ]
        user = info.get("UserName", "HwHiAiUser")
        group = info.get("UserGroup", "HwHiAiUser")
        kind = make_devices(npus, user=user, group=group, for_all=info.get("Driver_Install_For_All") == "yes")
        common.write_json(
            common.DRIVER_LOADED,
            {
                "driver_version": version,
                "firmware_version": flashed,
                "compatible_fw": fw_range,
                "install_path": base,
                "npus": npus,
                "device_kind": kind,
                "loaded_at": time.strftime("%Y-%m-%d %H:%M:%S"),
            },
        )
        _log(f"driver {version} loaded, firmware {flashed}, {npus} NPUs, devices: {kind}")
    elif common.host_path(base + "/driver").exists():
        _log("driver directory present but the installation is incomplete: driver not loaded")
    else:
        _log("no driver installed")

    # 1. PCI view (the driver link shows in `lspci -k` once loaded)
    tree = common.host_path(common.SYSFS_TREE)
    common.remove_path(tree)
    pcisim.write_tree(tree, pcisim.devices_of(config), driver_loaded=version is not None)
    if mount:
        mount_pci(tree)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    return boot(mount="--no-mount" not in args)
