"""Paths, the node's hardware configuration and the simulator's state (node side, stdlib only).

Files inside a node (all under ``$PROVISION_SIM_ROOT`` when that is set, which only unit tests do):

* ``/etc/provision-sim/hardware.json`` — the node's hardware and fault knobs (read on every call,
  so a fault written at runtime applies to the next tool invocation);
* ``/var/lib/provision-sim/state.json`` — persistent simulator state (the firmware flashed into the
  chips, which survives reboots and package removal);
* ``/run/provision-sim/driver.json`` — the LOADED driver (written by the boot unit; ``/run`` is a
  tmpfs, so a reboot forgets it exactly like a reboot unloads kernel modules);
* ``/run/provision-sim/sysfs/bus/pci`` — the fake PCI sysfs tree bind-mounted over ``/sys/bus/pci``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

ROOT_ENV = "PROVISION_SIM_ROOT"
ENGINE_DIR = "/usr/lib/provision-sim"
HW_CONFIG = "/etc/provision-sim/hardware.json"
STATE_FILE = "/var/lib/provision-sim/state.json"
RUN_DIR = "/run/provision-sim"
DRIVER_LOADED = "/run/provision-sim/driver.json"
SYSFS_TREE = "/run/provision-sim/sysfs/bus/pci"
ASCEND_BASE = "/usr/local/Ascend"
INSTALL_INFO = "/etc/ascend_install.info"
LOG_DIR = "/var/log/ascend_seclog"
INSTALL_LOG = "/var/log/ascend_seclog/ascend_install.log"
OPERATION_LOG = "/var/log/ascend_seclog/operation.log"
HCCN_CONF = "/etc/hccn.conf"
DKMS_TREE = "/var/lib/dkms/davinci_ascend"
DKMS_VERSION = "1.0"

JsonDict = dict[str, Any]


def sim_root() -> str:
    """The root prefix (``""`` on a real simulated node)."""
    return os.environ.get(ROOT_ENV, "").rstrip("/")


def host_path(path: str | Path) -> Path:
    """Map an absolute node path to where it lives (under ``$PROVISION_SIM_ROOT`` in unit tests)."""
    p = str(path)
    if not p.startswith("/"):
        raise ValueError(f"expected an absolute path, got {p!r}")
    return Path(sim_root() + p)


def node_path(path: Path) -> str:
    """Inverse of :func:`host_path`: the absolute path as the node sees it."""
    root = sim_root()
    s = str(path)
    if root and s.startswith(root + "/"):
        return s[len(root) :]
    return s


def which(command: str) -> str | None:
    """``command -v`` inside the node (``$PATH`` entries are resolved under the root prefix)."""
    default = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    path = os.environ.get("PATH", default)
    dirs = path.split(":")
    if sim_root():
        # In a test root only the node's own directories count, never the test machine's.
        dirs = default.split(":")
    for d in dirs:
        if not d:
            continue
        candidate = host_path(d) / command
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(Path(d) / command)
    return None


def read_json(path: str) -> JsonDict | None:
    p = host_path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return data


def write_text_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Write ``text`` to ``path`` (a host path) atomically, creating parent directories."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: str, data: JsonDict) -> None:
    write_text_atomic(host_path(path), json.dumps(data, indent=2, sort_keys=True) + "\n")


def load_config() -> JsonDict | None:
    """The node's ``hardware.json`` (None when the node has no simulated hardware)."""
    return read_json(HW_CONFIG)


def faults(config: JsonDict) -> JsonDict:
    f = config.get("faults") or {}
    return f if isinstance(f, dict) else {}


def load_state() -> JsonDict:
    return read_json(STATE_FILE) or {}


def save_state(state: JsonDict) -> None:
    write_json(STATE_FILE, state)


def loaded_driver() -> JsonDict | None:
    """What the boot unit loaded (None: no driver loaded since the last boot)."""
    return read_json(DRIVER_LOADED)


def read_key_equals(path: Path) -> dict[str, str]:
    """``key=value`` lines of a host path (missing file → ``{}``), keeping order."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            k, _, v = line.partition("=")
            out[k.strip()] = v.strip()
    return out


def write_key_equals(path: Path, data: dict[str, str], mode: int = 0o644) -> None:
    write_text_atomic(path, "".join(f"{k}={v}\n" for k, v in data.items()), mode)


def install_info() -> dict[str, str]:
    return read_key_equals(host_path(INSTALL_INFO))


def driver_base() -> str:
    """``Driver_Install_Path_Param`` from ``/etc/ascend_install.info`` (default ``/usr/local/Ascend``)."""
    return install_info().get("Driver_Install_Path_Param") or ASCEND_BASE


def firmware_base() -> str:
    return install_info().get("Firmware_Install_Path_Param") or ASCEND_BASE


def installed_driver_version() -> str | None:
    return read_key_equals(host_path(driver_base() + "/driver/version.info")).get("Version")


def installed_firmware_version() -> str | None:
    return read_key_equals(host_path(firmware_base() + "/firmware/version.info")).get("Version")


def version_tuple(version: str) -> tuple[int, ...]:
    """Numeric parts of a version (``"25.0.rc1.1"`` → ``(25, 0, 1, 1)``; ``"8.3.RC2"`` → ``(8, 3, 2)``)."""
    return tuple(int(n) for n in re.findall(r"\d+", version))


def remove_path(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def user_exists(name: str) -> bool:
    return _db_has(host_path("/etc/passwd"), name)


def group_exists(name: str) -> bool:
    return _db_has(host_path("/etc/group"), name)


def _db_has(path: Path, name: str) -> bool:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return False
    return any(line.split(":", 1)[0] == name for line in lines)


def db_id(path: Path, name: str) -> int | None:
    """uid/gid of ``name`` in a passwd/group file (third field)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return None
    for line in lines:
        fields = line.split(":")
        if len(fields) > 2 and fields[0] == name and fields[2].isdigit():
            return int(fields[2])
    return None
