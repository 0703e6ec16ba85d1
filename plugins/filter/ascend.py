"""Filters of the ``ascend_driver`` and ``cann`` roles: the version lock, vendor outputs, install plans.

Parsing is :mod:`provision.ascend`'s (one parser per vendor format); this file only turns its results into
plain data for Ansible and decides, as pure functions that unit tests cover, what a node needs:

* ``ascend_locked_version('driver', provision_stack)`` — a version of the lock (provision/data/versions.yml).
* ``ascend_file_checksum(file, pins, variable, mirror)`` — what a download of a vendor file is checked
  against: the inventory's pin, the lock's, else the mirror's ``sha256sums.txt``.
* ``ascend_npu_smi_board(stdout)`` — ``npu-smi info -t board -i N`` as a dict (loaded driver, flashed
  firmware).
* ``ascend_install_result(stdout, rc, component)`` — an installer run: success, errors, the documented fix.
* ``ascend_driver_steps(state, driver, firmware, ...)`` — which ``.run`` to run, in which order, with which
  flags (fresh install: driver then firmware; upgrade/overwrite: firmware then driver).
* ``ascend_driver_reboot_needed(state, driver, firmware, installed_now)`` — must the node reboot, and why.
* ``ascend_cann_install_info(text)`` — a CANN ``ascend_toolkit_install.info`` as a dict.
* ``ascend_cann_layout(version, arch, base)`` — file names and paths of a CANN version (<= 8.3 and >= 8.5).
* ``ascend_cann_installed(find_files, base)`` — the CANN packages a ``find`` of the install path shows.
* ``ascend_cann_steps(installed, fact, version, nnal_version, ...)`` — toolkit -> ops/kernels -> NNAL.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# provision.ascend is imported inside the filters that parse: Ansible loads every filter file in each worker
# process that templates before the controller has, and this file should cost those workers nothing.

DEFAULT_BASE = "/usr/local/Ascend"  # provision.ascend.files.DEFAULT_BASE, not imported at load (above)
DKMS_TREE = "/var/lib/dkms/davinci_ascend"
FIRMWARE_OK_RCS = (0, 2)  # 0: installed, the same version already flashed; 2: installed, reboot needed
DRIVER_NOT_LOADED = "-8020"  # `dcmi module initialize failed. ret is -8020`: no driver loaded since boot
# /etc/ascend_install.info's Driver_Install_Status once the driver installer finished: its install.sh
# (statusUpdate) writes it last; without it npu-smi info warns the driver "may not be completely installed"
INSTALL_COMPLETE = "complete"
REPOS_HINT = "run playbooks/repos.yml (role openeuler_repos) or install them from your OS mirror"


# ------------------------------------------------------------------------------------------------
# the version lock
# ------------------------------------------------------------------------------------------------


def ascend_locked_version(key: str, stack: str | None = None) -> str:
    """``lock.stacks[stack][key]`` (the lock's default stack when ``stack`` is empty)."""
    from provision.ascend import lock

    return lock.locked_version(key, stack)


def ascend_file_checksum(
    file: str, pins: Mapping[str, Any] | None, variable: str, mirror: str
) -> dict[str, Any]:
    """``get_url``'s ``checksum`` for vendor ``file`` and where it comes from: ``{checksum, source, pinned}``.

    The inventory's pin (``pins``, named ``variable``) wins, then the version lock's; without either, the
    ``sha256sums.txt`` of the folder ``mirror`` (which says only that the file is the one the mirror
    meant to serve: the same server could change both).
    """
    from provision.ascend import lock

    pin = lock.file_pin(str(file), pins or {}, variable)
    if pin.sha256 is None:
        return {
            "checksum": f"sha256:{mirror.rstrip('/')}/sha256sums.txt",
            "source": "from sha256sums.txt on the mirror",
            "pinned": False,
        }
    return {"checksum": f"sha256:{pin.sha256}", "source": f"pinned in {pin.source}", "pinned": True}


def ascend_stack_report(local: Mapping[str, Any] | None, stack: str | None = None) -> dict[str, Any]:
    """A node's ``ansible_local`` versions against the lock: ``{stack, running, locked, differences, line}``
    (:func:`provision.ascend.lock.stack_report`)."""
    from provision.ascend import lock

    return lock.stack_report(local, stack)


# ------------------------------------------------------------------------------------------------
# vendor outputs
# ------------------------------------------------------------------------------------------------


def ascend_npu_smi_board(text: str) -> dict[str, Any]:
    """``npu-smi info -t board -i N`` → ``{ok, error, software_version, firmware_version, compatible}``.

    ``software_version`` is the LOADED driver, ``firmware_version`` the firmware flashed in the chip (the
    ``version.info`` files only say what is installed on disk). DCMI failures (no driver loaded) and any
    text that is not board output give ``ok: false`` with the tool's words in ``error``.
    """
    empty: dict[str, Any] = {
        "ok": False,
        "error": None,
        "software_version": None,
        "firmware_version": None,
        "compatible": None,
    }
    from provision.ascend.npu_smi import ParseError, parse_npu_smi_board

    try:
        board = parse_npu_smi_board(text or "")
    except ParseError as exc:
        lines = (text or "").strip().splitlines()
        return {**empty, "error": lines[-1] if lines else str(exc)}
    return {
        "ok": True,
        "error": None,
        "software_version": board.software_version,
        "firmware_version": board.firmware_version,
        "compatible": board.compatible,
    }


def ascend_cann_install_info(text: str) -> dict[str, Any]:
    """CANN ``ascend_toolkit_install.info`` → ``{version, package_name, arch, path}``."""
    from provision.ascend.versions import parse_cann_install_info

    info = parse_cann_install_info(text)
    return {"version": info.version, "package_name": info.package_name, "arch": info.arch, "path": info.path}


# Known installer failures (FACTS.md §3 and the installers' own messages) → what to do about them.
_HINTS: tuple[tuple[str, str], ...] = (
    (
        r"The list of missing tools: *(?P<tools>[\w,]+)",
        "install the missing tools (lspci: pciutils, ifconfig: net-tools): " + REPOS_HINT,
    ),
    (
        r"Dkms install failed",
        f"the driver's kernel module did not build: remove {DKMS_TREE} (rm -rf), make sure dkms, gcc, make "
        "and the kernel headers of the running kernel (openEuler: kernel-devel-$(uname -r) "
        "kernel-headers-$(uname -r); Ubuntu: linux-headers-$(uname -r)) are installed, then apply again; "
        f"build log: {DKMS_TREE}/1.0/build/make.log",
    ),
    (
        r"running user .* does not exist",
        "create the HwHiAiUser user and group (the ascend_driver role does) or set ascend_driver_user",
    ),
    (
        r"Not enough space left|No space left on device",
        "free disk space where the installer unpacks (TMPDIR, default /tmp) and under the install path",
    ),
    (r"Error in SHA256 checksums", "the .run file is corrupted: download it again (check the mirror)"),
    (
        r"partially installed|interrupted",
        "the package is half installed: run its uninstall.sh (e.g. /usr/local/Ascend/driver/script/"
        "uninstall.sh) and apply again",
    ),
    (
        r"driver package is not installed",
        "install the driver before the firmware (ascend_driver does it in this order)",
    ),
    (r"already installed .* Use --upgrade", "an older CANN is installed: upgrade it with --upgrade"),
    (r"toolkit is not installed", "install the CANN toolkit first (the cann role does it in this order)"),
    (
        r"architecture of the package .* does not match",
        "the mirror holds packages of another CPU architecture; put the <arch> packages there",
    ),
    (r"Permission denied", "the installer must run as root (become: true)"),
)


def ascend_install_result(stdout: str, rc: int, component: str = "driver") -> dict[str, Any]:
    """An installer run → ``{ok, reboot, errors, message, hint, dkms_failed, missing_tools}``.

    ``ok`` follows the documented exit codes (firmware: 0 or 2; every other package: 0). ``message`` is
    one line for a human: what failed and what to do (``hint``) — the last ``[ERROR]`` line, else the
    last line of output.
    """
    text = stdout or ""
    ok_rcs = FIRMWARE_OK_RCS if component == "firmware" else (0,)
    ok = int(rc) in ok_rcs
    from provision.ascend.npu_smi import ParseError
    from provision.ascend.versions import parse_install_log

    try:
        log = parse_install_log(text)
        errors = [e.message for e in log.errors]
        mentions_reboot = log.mentions_reboot
    except ParseError:
        errors, mentions_reboot = [], False
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    detail = errors[-1] if errors else (lines[-1] if lines else f"exit code {rc}, no output")
    hint = next((fix for pattern, fix in _HINTS if re.search(pattern, text)), None)
    missing = re.search(r"The list of missing tools: *([\w,]+)", text)
    message = "" if ok else f"{component} installer failed (exit code {rc}): {detail}"
    if hint and not ok:
        message += f" -> {hint}"
    return {
        "ok": ok,
        "rc": int(rc),
        "reboot": ok and ((component == "firmware" and int(rc) == 2) or mentions_reboot),
        "errors": errors,
        "message": message,
        "hint": hint,
        "dkms_failed": not ok and "Dkms install failed" in text,
        "missing_tools": [t for t in missing.group(1).split(",") if t] if missing else [],
    }


# ------------------------------------------------------------------------------------------------
# driver + firmware plan
# ------------------------------------------------------------------------------------------------


def ascend_driver_files(
    driver: str, firmware: str, *, arch: str = "aarch64", chip: str = "910b"
) -> dict[str, str]:
    """The vendor's file names of a driver and a firmware version
    (:func:`provision.ascend.files.driver_files`)."""
    from provision.ascend.files import driver_files

    return driver_files(driver, firmware, arch=arch, chip=chip)


def _needed(installed: str | None, loaded: str | None, recorded: str | None, wanted: str) -> bool:
    """Install unless the files are at ``wanted`` AND (provision recorded that install OR it is running)."""
    return installed != wanted or (recorded != wanted and loaded != wanted)


def _driver_incomplete(state: Mapping[str, Any], driver: str) -> bool:
    """Whether the wanted ``driver`` is on disk from an install that did not finish and provision did not
    record (see :func:`ascend_driver_steps`)."""
    return (
        "driver_install_status" in state
        and state.get("installed_driver") == driver
        and state.get("driver_install_status") != INSTALL_COMPLETE
        and state.get("recorded_driver") != driver
    )


def ascend_driver_steps(
    state: Mapping[str, Any],
    driver: str,
    firmware: str,
    *,
    arch: str = "aarch64",
    chip: str = "910b",
    install_path: str = DEFAULT_BASE,
    install_for_all: bool = True,
    user: str = "HwHiAiUser",
    group: str = "HwHiAiUser",
) -> list[dict[str, Any]]:
    """The installer runs a node needs, in order.

    ``state`` keys (``None`` when unknown): ``installed_driver``/``installed_firmware`` (``version.info``),
    ``loaded_driver``/``flashed_firmware`` (``npu-smi info -t board``), ``recorded_driver``/
    ``recorded_firmware`` (provision's local fact), ``driver_install_status`` (``Driver_Install_Status`` of
    ``/etc/ascend_install.info``; when the key is given). Fresh install (no driver on disk): driver then
    firmware. Otherwise (upgrade, or overwrite of a broken install): firmware then driver. Each step:
    ``component, version, file, flags, action (install|upgrade|overwrite), ok_rcs``.

    A driver install cut short (a power loss, a killed installer) is overwritten even when its
    ``version.info`` already says ``driver`` and the driver loads: the installer copies ``version.info``
    near its end and writes ``Driver_Install_Status=complete`` last, and npu-smi itself warns "The driver
    package may not be completely installed ... Please reinstall it" without it. A driver provision recorded
    is trusted as before (a driver package that never writes the status is not reinstalled on every run).
    """
    files = ascend_driver_files(driver, firmware, arch=arch, chip=chip)
    d_installed = state.get("installed_driver")
    f_installed = state.get("installed_firmware")
    need_driver = _needed(d_installed, state.get("loaded_driver"), state.get("recorded_driver"), driver)
    need_driver = need_driver or _driver_incomplete(state, driver)
    need_firmware = _needed(
        f_installed, state.get("flashed_firmware"), state.get("recorded_firmware"), firmware
    )
    path_flags = [f"--install-path={install_path}"] if install_path.rstrip("/") != DEFAULT_BASE else []
    user_flags = (
        [f"--install-username={user}", f"--install-usergroup={group}"]
        if (user, group) != ("HwHiAiUser", "HwHiAiUser")
        else []
    )
    tail = ["--quiet", "--nox11"]

    def driver_step(action: str) -> dict[str, Any]:
        op = "--upgrade" if action == "upgrade" else "--full"
        flags = [op, *(["--install-for-all"] if install_for_all else []), *path_flags, *user_flags, *tail]
        return _step("driver", driver, files["driver"], flags, action, (0,))

    def firmware_step(action: str) -> dict[str, Any]:
        op = "--upgrade" if action == "upgrade" else "--full"
        return _step("firmware", firmware, files["firmware"], [op, *tail], action, FIRMWARE_OK_RCS)

    if d_installed is None:
        steps = [driver_step("install")] if need_driver else []
        if need_firmware:
            steps.append(firmware_step("install" if f_installed is None else "upgrade"))
        return steps
    steps = []
    if need_firmware:
        if f_installed is None:
            steps.append(firmware_step("install"))
        else:
            steps.append(firmware_step("upgrade" if f_installed != firmware else "overwrite"))
    if need_driver:
        steps.append(driver_step("upgrade" if d_installed != driver else "overwrite"))
    return steps


def _step(
    component: str, version: str, file: str, flags: list[str], action: str, ok_rcs: Sequence[int]
) -> dict[str, Any]:
    return {
        "component": component,
        "version": version,
        "file": file,
        "flags": flags,
        "action": action,
        "ok_rcs": list(ok_rcs),
    }


def ascend_driver_reboot_needed(
    state: Mapping[str, Any], driver: str, firmware: str, installed_now: bool
) -> dict[str, Any]:
    """Whether the node must reboot to run ``driver``/``firmware``, and why (``{needed, reason}``).

    After an install in this run: yes. Otherwise only when the files are at the wanted versions but what
    runs differs (an earlier run installed and never rebooted): the loaded driver or the flashed
    firmware differs, or npu-smi says no driver is loaded (DCMI ``-8020``). Other npu-smi failures
    (e.g. ``-8005``, device busy) are not reasons to reboot a node.
    """
    if installed_now:
        return {"needed": True, "reason": f"installed driver {driver} / firmware {firmware} in this run"}
    if state.get("installed_driver") != driver or state.get("installed_firmware") != firmware:
        return {"needed": False, "reason": "the wanted versions are not installed"}
    error = str(state.get("npu_smi_error") or "")
    if DRIVER_NOT_LOADED in error:
        return {"needed": True, "reason": f"driver {driver} is installed but not loaded ({error.strip()})"}
    loaded, flashed = state.get("loaded_driver"), state.get("flashed_firmware")
    if loaded is not None and loaded != driver:
        return {"needed": True, "reason": f"driver {loaded} is loaded, {driver} is installed"}
    if flashed is not None and flashed != firmware:
        return {"needed": True, "reason": f"firmware {flashed} is flashed, {firmware} is installed"}
    return {"needed": False, "reason": "the installed driver and firmware are running"}


# ------------------------------------------------------------------------------------------------
# CANN
# ------------------------------------------------------------------------------------------------


def _numbers(version: str) -> tuple[int, ...]:
    from provision.ascend.files import version_numbers

    return version_numbers(version)


def ascend_cann_layout(
    version: str, arch: str = "aarch64", base: str = DEFAULT_BASE, chip: str = "910b"
) -> dict[str, Any]:
    """Where CANN ``version`` installs and what its packages are called
    (:func:`provision.ascend.files.cann_layout`)."""
    from provision.ascend.files import cann_layout

    return cann_layout(version, arch, base, chip)


def ascend_cann_installed(files: Sequence[Mapping[str, Any]], base: str = DEFAULT_BASE) -> dict[str, Any]:
    """What a ``find`` of ``<base>`` (install-info files, depth <= 4) shows is installed.

    ``{toolkits: [v...], ops: [v...], kernels: [v...], nnal: [v...]}``; versions come from the paths
    (``cann-<v>/`` or ``ascend-toolkit/<v>/``, ``nnal/atb/<v>/``), sorted.
    """
    base = re.escape(base.rstrip("/"))
    toolkit_dir = rf"^{base}/(?:cann-(?P<new>[^/]+)|ascend-toolkit/(?P<old>[^/]+))/[^/]+-linux/"
    found: dict[str, set[str]] = {"toolkits": set(), "ops": set(), "kernels": set(), "nnal": set()}
    for item in files:
        path = str(item.get("path", ""))
        m = re.match(toolkit_dir + r"ascend_(?P<what>toolkit|ops|kernels)_install\.info$", path)
        if m:
            version = m.group("new") or m.group("old")
            if version != "latest":
                what = m.group("what")
                found["toolkits" if what == "toolkit" else what].add(version)
            continue
        m = re.match(rf"^{base}/nnal/atb/(?P<v>[^/]+)/version\.info$", path)
        if m and m.group("v") != "latest":
            found["nnal"].add(m.group("v"))
    return {key: sorted(values, key=_numbers) for key, values in found.items()}


def ascend_cann_steps(
    installed: Mapping[str, Sequence[str]],
    recorded: Mapping[str, Any] | None,
    version: str,
    nnal_version: str | None = None,
    *,
    arch: str = "aarch64",
    chip: str = "910b",
    install_path: str = DEFAULT_BASE,
    install_for_all: bool = True,
    nnal: bool = True,
) -> list[dict[str, Any]]:
    """The CANN installer runs a node needs, in order: toolkit → ops (>= 8.5) / kernels (<= 8.3) → NNAL.

    A package is (re)installed unless its files are at the wanted version AND the local fact records that
    install. The toolkit is upgraded with ``--upgrade`` when another version is installed (CANN >= 8.5
    refuses ``--install`` over an older toolkit); a toolkit step is followed by the operator package.
    """
    recorded = recorded or {}
    layout = ascend_cann_layout(version, arch, install_path, chip)
    nnal_version = nnal_version or version
    ops = str(layout["ops_component"])
    common = [
        *(["--install-for-all"] if install_for_all else []),
        *([f"--install-path={install_path}"] if install_path.rstrip("/") != DEFAULT_BASE else []),
        "--quiet",
    ]
    toolkits = list(installed.get("toolkits") or [])
    steps: list[dict[str, Any]] = []
    if version not in toolkits or recorded.get("toolkit") != version:
        others = [v for v in toolkits if v != version]
        action = "upgrade" if others else ("overwrite" if version in toolkits else "install")
        flag = "--upgrade" if others else "--install"
        steps.append(_step("toolkit", version, str(layout["toolkit_file"]), [flag, *common], action, (0,)))
    if steps or version not in (installed.get(ops) or []) or recorded.get("ops") != version:
        steps.append(_step(ops, version, str(layout["ops_file"]), ["--install", *common], "install", (0,)))
    if nnal and (nnal_version not in (installed.get("nnal") or []) or recorded.get("nnal") != nnal_version):
        from provision.ascend.files import nnal_file

        file = nnal_file(nnal_version, arch)
        steps.append(_step("nnal", nnal_version, file, ["--install", *common], "install", (0,)))
    return steps


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "ascend_stack_report": ascend_stack_report,
            "ascend_locked_version": ascend_locked_version,
            "ascend_file_checksum": ascend_file_checksum,
            "ascend_npu_smi_board": ascend_npu_smi_board,
            "ascend_install_result": ascend_install_result,
            "ascend_driver_files": ascend_driver_files,
            "ascend_driver_steps": ascend_driver_steps,
            "ascend_driver_reboot_needed": ascend_driver_reboot_needed,
            "ascend_cann_install_info": ascend_cann_install_info,
            "ascend_cann_layout": ascend_cann_layout,
            "ascend_cann_installed": ascend_cann_installed,
            "ascend_cann_steps": ascend_cann_steps,
        }
