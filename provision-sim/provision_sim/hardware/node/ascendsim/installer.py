"""The body of every simulated vendor ``.run`` installer (what the makeself header runs after unpacking).

``python3 -m ascendsim install <payload>/package.json [flags]`` — ``package.json`` is the manifest
written by ``provision_sim.mirror.run_files`` (component, version, arch, ...). Installed packages keep a copy
of their manifest (with ``install_path``) next to their ``uninstall.sh`` so that script works later.

Components and their flags (anything else → ``[ERROR]Unsupported parameter``, exit 1):

* ``driver``: ``--full|--run|--devel`` (install/overwrite), ``--upgrade``, ``--uninstall``,
  ``--install-path=``, ``--install-for-all``, ``--install-username= --install-usergroup=``, ``--quiet``,
  ``--nox11``. Needs ``lspci`` and ``ifconfig`` on PATH, the running user/group (default
  ``HwHiAiUser``), and for the DKMS build ``dkms`` (else no residue), ``gcc``, ``make`` and kernel
  headers in ``/lib/modules/$(uname -r)/build`` or ``/usr/src/kernels/$(uname -r)`` (else the residue
  ``/var/lib/dkms/davinci_ascend`` with ``1.0/build/make.log`` stays and every retry fails until it is
  removed). Takes effect after a reboot. Exit 0 on success, 1 on failure.
* ``firmware``: ``--full``, ``--upgrade``, ``--uninstall``, ``--quiet``, ``--nox11``. Needs an installed
  driver. Exit 2 = installed, reboot needed (the staged version differs from the flashed one);
  exit 0 = installed, the same version is already flashed; 1 = failure.
* ``toolkit``, ``ops`` (CANN >= 8.5), ``kernels`` (CANN <= 8.3), ``nnal``: ``--install|--full``,
  ``--upgrade``, ``--uninstall``, ``--install-path=``, ``--install-for-all``, ``--quiet`` (without it the
  installer asks to accept the EULA on stdin; EOF or anything but y refuses), ``--nox11``.
* ``docker-runtime`` (MindCluster Ascend Docker Runtime): its own contract and messages, see
  ``docker_runtime.py`` (``--install [--install-scene=docker]``, ``--upgrade``, ``--uninstall``, EULA on
  stdin).

Fault knobs read from ``hardware.json``: ``faults.installer_crash`` = ``{"<component>": <percent>}``
(or ``{"<component>": {"percent": 40, "mode": "exit"|"kill"}}`` or a list of components, meaning 40 %):
the installer writes the files of the stages before that percentage, logs the percentage and an
``[ERROR]`` line, and exits 1 (``mode: kill``: SIGKILL without the error line).
``faults.installer_slow`` = ``{"<component>": <seconds>}``: after each percentage line but the last the
installer waits that long, as a real driver ``.run`` spends about a minute in its stages (DKMS build, copy,
device start-up), so that a power loss can land in the middle of an install.

The driver install keeps the real installer's order (the driver package's ``install.sh`` and
``run_driver_install.sh``): ``/etc/ascend_install.info`` gets the install parameters first, the files are
written stage by stage, ``version.info`` is copied last, and only a finished install adds
``Driver_Install_Status=complete`` (without it the real ``npu-smi info`` warns "The driver package may not be
completely installed"). An install cut short therefore leaves a partial ``driver/`` folder, no
``version.info`` (or one without the completion status) and no ``Driver_Install_Status``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from . import common, docker_runtime

TAGS = {
    "driver": "Driver",
    "firmware": "Firmware",
    "toolkit": "Toolkit",
    "ops": "Ops",
    "kernels": "Kernels",
    "nnal": "NNAL",
    "docker-runtime": "Ascend-Docker-Runtime",
}
PACKAGE_NAMES = {
    "toolkit": "Ascend-cann-toolkit",
    "ops": "Ascend-cann-910b-ops",
    "kernels": "Ascend-cann-kernels-910b",
    "nnal": "Ascend-cann-nnal",
}
OPERATIONS: dict[str, dict[str, str]] = {
    "driver": {
        "--full": "install",
        "--run": "install",
        "--devel": "install",
        "--upgrade": "upgrade",
        "--uninstall": "uninstall",
    },
    "firmware": {"--full": "install", "--upgrade": "upgrade", "--uninstall": "uninstall"},
    "docker-runtime": {"--install": "install", "--upgrade": "upgrade", "--uninstall": "uninstall"},
}
CANN_OPERATIONS = {
    "--install": "install",
    "--full": "install",
    "--upgrade": "upgrade",
    "--uninstall": "uninstall",
}
SIMULATED = "simulated by provision sim (ascendsim)\n"
DEFAULT_CRASH_PERCENT = 40


class Failed(Exception):
    def __init__(self, code: int = 1) -> None:
        super().__init__(code)
        self.code = code


@dataclass
class Options:
    op: str
    install_path: str
    for_all: bool = False
    username: str | None = None
    usergroup: str | None = None
    quiet: bool = False
    scene: str = "docker"


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


class Log:
    """``[Driver] [2025-07-17 10:35:21] [INFO]message`` to stdout and the install log."""

    def __init__(self, component: str) -> None:
        self.tag = TAGS[component]
        self.path = common.host_path(common.INSTALL_LOG)

    def _file(self, line: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    def line(self, level: str, msg: str) -> None:
        text = f"[{self.tag}] [{_now()}] [{level}]{msg}"
        print(text, flush=True)
        self._file(text)

    def info(self, msg: str) -> None:
        self.line("INFO", msg)

    def warning(self, msg: str) -> None:
        self.line("WARNING", msg)

    def error(self, msg: str) -> None:
        self.line("ERROR", msg)

    def detail(self, msg: str) -> None:
        """Only in the log file (tool output the real installer captures there)."""
        self._file(f"[{self.tag}] [{_now()}] [INFO]{msg}")

    def fail(self, msg: str, code: int = 1) -> NoReturn:
        self.error(msg)
        raise Failed(code)

    def operation(self, op: str, manifest: dict[str, Any], result: str) -> None:
        path = common.host_path(common.OPERATION_LOG)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
        with path.open("a", encoding="utf-8") as fh:
            fh.write(
                f"[{self.tag}] [{_now()}] [INFO]{op} {manifest['name']} {manifest['version']} {result}\n"
            )


# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------


def parse_args(component: str, argv: Sequence[str], log: Log) -> Options:
    ops = OPERATIONS.get(component, CANN_OPERATIONS)
    found: list[str] = []
    opts = Options(op="", install_path=common.ASCEND_BASE)
    for arg in argv:
        key, eq, value = arg.partition("=")
        if arg in ops:
            found.append(ops[arg])
        elif arg in ("--quiet", "-q"):
            opts.quiet = True
        elif arg in ("--nox11", "--pylocal", "--force"):
            pass
        elif key == "--install-path" and eq and component != "firmware":
            if not value.startswith("/"):
                log.fail(f"The install path {value} is invalid, it must be an absolute path.")
            opts.install_path = value.rstrip("/") or "/"
        elif arg == "--install-for-all" and component not in ("firmware", "docker-runtime"):
            opts.for_all = True
        elif key == "--install-username" and eq and component not in ("docker-runtime",):
            opts.username = value
        elif key == "--install-usergroup" and eq and component not in ("docker-runtime",):
            opts.usergroup = value
        elif key == "--install-scene" and eq and component == "docker-runtime":
            opts.scene = value
        elif key == "--whitelist" and eq and component in PACKAGE_NAMES:
            pass
        else:
            log.fail(f"Unsupported parameter: {arg}")
    if not found:
        log.fail(f"No operation is specified, please use one of: {', '.join(sorted(ops))}")
    if len(set(found)) > 1:
        log.fail(f"Only one operation can be specified, got: {', '.join(a for a in argv if a in ops)}")
    opts.op = found[0]
    return opts


def stage_seconds(component: str) -> float:
    """How long each stage of ``component``'s install takes (``installer_slow``; 0: at once)."""
    knob = common.faults(common.load_config() or {}).get("installer_slow")
    value = knob.get(component) if isinstance(knob, dict) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def crash_point(component: str) -> tuple[int, str] | None:
    config = common.load_config() or {}
    knob = common.faults(config).get("installer_crash")
    if not knob:
        return None
    if isinstance(knob, list):
        return (DEFAULT_CRASH_PERCENT, "exit") if component in knob else None
    if not isinstance(knob, dict) or component not in knob:
        return None
    value = knob[component]
    if isinstance(value, dict):
        return int(value.get("percent", DEFAULT_CRASH_PERCENT)), str(value.get("mode", "exit"))
    if value is True:
        return DEFAULT_CRASH_PERCENT, "exit"
    return int(value), "exit"


class Progress:
    """``upgradePercentage:N%`` lines (driver without a space, firmware with one: verbatim)."""

    def __init__(self, component: str, log: Log, *, show: bool) -> None:
        self.component = component
        self.log = log
        self.show = show
        self.crash = crash_point(component)
        self.pause = stage_seconds(component)

    def at(self, pct: int) -> None:
        if self.show:
            sep = " " if self.component == "firmware" else ""
            self.log.info(f"upgradePercentage:{sep}{pct}%")
        if self.crash and pct >= self.crash[0]:
            if self.crash[1] == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            self.log.fail(
                f"{TAGS[self.component]} package install failed at {pct}%: the installation process was "
                "interrupted, the package is partially installed. Uninstall it and install again."
            )
        if self.pause and pct < 100:
            time.sleep(self.pause)


def write(path: str, text: str, mode: int = 0o644) -> None:
    common.write_text_atomic(common.host_path(path), text, mode)


def start(log: Log) -> None:
    log.info(f"Start time: {_now()}")
    log.info(f"LogFile: {common.INSTALL_LOG}")
    log.info(f"OperationLogFile: {common.OPERATION_LOG}")


def end(log: Log) -> None:
    log.info(f"End time: {_now()}")


def require_root(log: Log) -> None:
    """Real installers refuse non-root users; unit tests in a ``$PROVISION_SIM_ROOT`` may run unprivileged."""
    if os.geteuid() != 0 and not common.sim_root():
        log.fail("Permission denied, the package must be installed by the root user.")


def engine_call(argv: str) -> str:
    """Shell line running the node's engine (``$PROVISION_SIM_ROOT`` is honoured, for unit tests)."""
    return (
        'ROOT="${PROVISION_SIM_ROOT:-}"\n'
        f'PYTHONPATH="$ROOT{common.ENGINE_DIR}" exec python3 -m ascendsim {argv}\n'
    )


def python_wrapper(module: str, version: str) -> str:
    return (
        "#!/usr/bin/python3\n"
        f"# {module} {version} - {SIMULATED}"
        "import os\nimport sys\n\n"
        f'sys.path.insert(0, os.environ.get("PROVISION_SIM_ROOT", "") + "{common.ENGINE_DIR}")\n'
        f"from ascendsim.{module} import main  # noqa: E402\n\n"
        "sys.exit(main())\n"
    )


def save_manifest(manifest: dict[str, Any], where: str, install_path: str) -> str:
    path = f"{where}/.package.json"
    write(path, json.dumps({**manifest, "install_path": install_path}, indent=2) + "\n")
    return path


def uninstall_script(manifest_path: str) -> str:
    return "#!/bin/sh\n# " + SIMULATED + engine_call(f'uninstall "$ROOT{manifest_path}" --uninstall "$@"')


def set_info_keys(updates: dict[str, str], remove_prefix: str | None = None) -> None:
    path = common.host_path(common.INSTALL_INFO)
    info = common.read_key_equals(path)
    if remove_prefix:
        info = {k: v for k, v in info.items() if not k.startswith(remove_prefix)}
    info.update(updates)
    if not any(k.startswith(("Driver_", "Firmware_")) for k in info):
        path.unlink(missing_ok=True)
        return
    common.write_key_equals(path, info)


def eula(manifest: dict[str, Any], opts: Options, log: Log) -> None:
    if opts.quiet or opts.op == "uninstall":
        return
    print(f"Do you accept the EULA to install {manifest['name']}?[y/n]: ", end="", flush=True)
    answer = sys.stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        log.fail(
            "The EULA is not accepted, the installation is cancelled. "
            "Use --quiet to accept it non-interactively."
        )


# ------------------------------------------------------------------------------------------------
# driver
# ------------------------------------------------------------------------------------------------


def driver_version_info(m: dict[str, Any]) -> str:
    v = m["version"]
    lo, hi = m.get("compatible_fw") or ["7.0.0", "7.99.99"]
    return (
        f"Version={v}\n"
        "ascendhal_version=7.35.23\n"
        "aicpu_version=1.0\n"
        "tdt_version=1.0\n"
        "log_version=1.0\n"
        "prof_version=2.0\n"
        "dvppkernels_version=1.1\n"
        "tsfw_version=1.0\n"
        f"Innerversion={m.get('innerversion', 'V100R001C25SPC001B220')}\n"
        "compatible_version=[V100R001C17],[V100R001C18],[V100R001C19],[V100R001C20],[V100R001C21]\n"
        f"compatible_version_fw=[{lo},{hi}]\n"
        f"package_version={v}\n"
    )


def dkms_build(log: Log) -> None:
    tree = common.host_path(common.DKMS_TREE)
    kver = os.uname().release
    built = tree / common.DKMS_VERSION / kver
    if tree.exists() and not built.is_dir():
        log.detail(f"Error! DKMS tree already contains: davinci_ascend-{common.DKMS_VERSION}")
        log.detail("You cannot add the same module/version combo more than once.")
        log.fail("Dkms install failed, details in : var/log/ascend_seclog/ascend_install.log.")
    if built.is_dir():
        log.detail(f"dkms remove -m davinci_ascend -v {common.DKMS_VERSION} --all")
        shutil.rmtree(tree)
    if common.which("dkms") is None:
        log.detail("/bin/sh: dkms: command not found")
        log.fail("Dkms install failed, details in : var/log/ascend_seclog/ascend_install.log.")
    headers = next(
        (
            p
            for p in (f"/lib/modules/{kver}/build", f"/usr/src/kernels/{kver}")
            if common.host_path(p).is_dir()
        ),
        None,
    )
    missing = [c for c in ("gcc", "make") if common.which(c) is None]
    build_dir = tree / common.DKMS_VERSION / "build"
    build_dir.mkdir(parents=True, exist_ok=True)
    build = f"{common.DKMS_TREE}/{common.DKMS_VERSION}/build"
    make_cmd = f"make -C {headers or f'/lib/modules/{kver}/build'} M={build} modules"
    lines = [
        f"DKMS make.log for davinci_ascend-{common.DKMS_VERSION} for kernel {kver} ({os.uname().machine})",
        time.strftime("%a %b %d %H:%M:%S %Z %Y"),
        make_cmd,
    ]
    if headers is None or missing:
        if headers is None:
            lines.append(f"make: *** /lib/modules/{kver}/build: No such file or directory.  Stop.")
        elif "make" in missing:
            lines.append("/bin/sh: 1: make: not found")
        else:
            lines.append("make[1]: gcc: No such file or directory")
            lines.append("make[1]: *** [scripts/Makefile.build:250: drv_pcie_host.o] Error 127")
        (build_dir / "make.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
        log.detail(f"Error! Bad return status for module build on kernel: {kver} ({os.uname().machine})")
        log.detail(f"Consult {common.DKMS_TREE}/{common.DKMS_VERSION}/build/make.log for more information.")
        log.fail("Dkms install failed, details in : var/log/ascend_seclog/ascend_install.log.")
    lines.append("make: Leaving directory")
    (build_dir / "make.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    module = built / os.uname().machine / "module"
    module.mkdir(parents=True, exist_ok=True)
    for ko in ("drv_pcie_host.ko", "drv_devmng_host.ko", "drv_devmm_host.ko", "drv_hdc_host.ko"):
        (module / ko).write_text(SIMULATED, encoding="utf-8")
    log.detail(f"dkms install -m davinci_ascend -v {common.DKMS_VERSION} -k {kver}: DKMS: install completed.")


def install_driver(m: dict[str, Any], o: Options, log: Log) -> int:
    start(log)
    log.warning("Do not power off or restart the system during the installation/upgrade")
    require_root(log)
    missing = [t for t in ("lspci", "ifconfig") if common.which(t) is None]
    if missing:
        log.fail("The list of missing tools: " + "".join(f"{t}," for t in missing))
    if (o.username is None) != (o.usergroup is None):
        log.fail("The parameters --install-username and --install-usergroup must be used together.")
    user, group = o.username or "HwHiAiUser", o.usergroup or "HwHiAiUser"
    if not common.user_exists(user) or not common.group_exists(group):
        log.fail(
            f"The running user {user} or user group {group} does not exist. Create them first "
            f"(groupadd {group}; useradd -g {group} -d /home/{user} -m {user} -s /bin/bash) or specify "
            "an existing user with --install-username and --install-usergroup."
        )
    log.info(f"set username and usergroup, {user}:{group}")
    current = common.installed_driver_version()
    if o.op == "upgrade" and current is None:
        log.fail("The driver package is not installed, upgrade is not supported. Use --full to install it.")
    if current:
        log.info(f"The installed driver version is {current}, the package version is {m['version']}.")
    base = o.install_path
    # updateInstallInfo before run_driver_install.sh: the parameters first, the completion status last
    set_info_keys(
        {
            "UserName": user,
            "UserGroup": group,
            "Driver_Install_Type": "full",
            "Driver_Install_Path_Param": base,
            "Driver_Install_For_All": "yes" if o.for_all else "no",
        },
        remove_prefix="Driver_Install_Status",
    )
    progress = Progress("driver", log, show=True)
    log.info("driver install type: DKMS")
    progress.at(10)
    dkms_build(log)
    progress.at(30)
    d = f"{base}/driver"
    manifest_path = save_manifest(m, f"{d}/script", base)
    write(f"{d}/script/uninstall.sh", uninstall_script(manifest_path), 0o755)
    for lib in (
        "common/libc_sec.so",
        "driver/libascend_hal.so",
        "driver/libdcmi.so",
        "driver/libdrvdsmi_host.so",
    ):
        write(f"{d}/lib64/{lib}", SIMULATED)
    progress.at(40)
    config = common.load_config() or {}
    npu_smi = str(config.get("npu_smi_path") or "/usr/local/bin/npu-smi")
    write(f"{d}/tools/hccn_tool", python_wrapper("hccn", m["version"]), 0o755)
    write(npu_smi, python_wrapper("npusmi", m["version"]), 0o755)
    write("/usr/local/dcmi/libdcmi.so", SIMULATED)
    write("/usr/local/dcmi/dcmi_interface_api.h", "/* " + SIMULATED.strip() + " */\n")
    progress.at(90)
    write(f"{d}/version.info", driver_version_info(m), 0o444)
    progress.at(100)
    set_info_keys({"Driver_Install_Status": "complete"})
    verb = "upgraded" if o.op == "upgrade" else "installed"
    log.info(f"Driver package {verb} successfully! Reboot needed for installation/upgrade to take effect! ")
    end(log)
    log.operation(o.op.capitalize(), m, "success")
    return 0


def uninstall_driver(m: dict[str, Any], o: Options, log: Log) -> int:
    start(log)
    require_root(log)
    base = common.driver_base()
    if not common.host_path(f"{base}/driver").exists():
        log.fail("The driver package is not installed.")
    config = common.load_config() or {}
    for path in (
        f"{base}/driver",
        "/usr/local/dcmi",
        common.DKMS_TREE,
        str(config.get("npu_smi_path") or "/usr/local/bin/npu-smi"),
    ):
        common.remove_path(common.host_path(path))
    set_info_keys({}, remove_prefix="Driver_")
    log.info("Driver package uninstalled successfully! Reboot needed for uninstallation to take effect! ")
    end(log)
    log.operation("Uninstall", m, "success")
    return 0


# ------------------------------------------------------------------------------------------------
# firmware
# ------------------------------------------------------------------------------------------------


def firmware_version_info(m: dict[str, Any]) -> str:
    drv = common.version_tuple(str(m.get("package_version", "25.0")))
    known = [(23, 0), (24, 0), (24, 1), (25, 0), (25, 2), (25, 3), (25, 5)]
    lines = ["[23.0.0,23.0.0.]"] + [f"[{a}.{b},{a}.{b}.]" for a, b in known[1:] if (a, b) <= drv[:2]]
    return (
        f"Version={m['version']}\n"
        "firmware_version=1.0\n"
        f"package_version={m.get('package_version', m['version'])}\n"
        f"compatible_version_drv={','.join(lines)}\n"
    )


def install_firmware(m: dict[str, Any], o: Options, log: Log) -> int:
    start(log)
    log.warning("Do not power off or restart the system during the installation/upgrade")
    require_root(log)
    if common.installed_driver_version() is None:
        log.fail("The driver package is not installed. Install the driver package first.")
    if o.op == "upgrade" and common.installed_firmware_version() is None:
        log.fail("The firmware package is not installed, upgrade is not supported. Use --full to install it.")
    config = common.load_config() or {}
    npus = len(config.get("npus") or [])
    progress = Progress("firmware", log, show=True)
    progress.at(0)
    d = f"{o.install_path}/firmware"
    manifest_path = save_manifest(m, f"{d}/script", o.install_path)
    write(f"{d}/script/uninstall.sh", uninstall_script(manifest_path), 0o755)
    write(f"{d}/firmware/Ascend910B-firmware.hpm", SIMULATED)
    progress.at(90)
    write(f"{d}/version.info", firmware_version_info(m), 0o444)
    set_info_keys({"Firmware_Install_Type": "full", "Firmware_Install_Path_Param": o.install_path})
    progress.at(100)
    log.info(f"The firmware of [{npus}] chips are successfully upgraded.")
    verb = "upgraded" if o.op == "upgrade" else "installed"
    log.info(
        f"Firmware package {verb} successfully! Reboot now or after driver installation for the "
        "installation/upgrade to take effect."
    )
    end(log)
    log.operation(o.op.capitalize(), m, "success")
    flashed = common.load_state().get("firmware_flashed") or config.get("factory_firmware")
    return 0 if flashed == m["version"] else 2


def uninstall_firmware(m: dict[str, Any], o: Options, log: Log) -> int:
    start(log)
    require_root(log)
    base = common.firmware_base()
    if not common.host_path(f"{base}/firmware").exists():
        log.fail("The firmware package is not installed.")
    common.remove_path(common.host_path(f"{base}/firmware"))
    set_info_keys({}, remove_prefix="Firmware_")
    log.info("Firmware package uninstalled successfully! Reboot needed for uninstallation to take effect! ")
    end(log)
    log.operation("Uninstall", m, "success")
    return 0


# ------------------------------------------------------------------------------------------------
# CANN: toolkit, ops / kernels, nnal
# ------------------------------------------------------------------------------------------------


def new_layout(version: str) -> bool:
    """CANN >= 8.5 installs to ``cann-<v>`` with a ``cann`` link; older to ``ascend-toolkit/<v>``."""
    return common.version_tuple(version)[:2] >= (8, 5)


def toolkit_dir(base: str, version: str) -> str:
    return f"{base}/cann-{version}" if new_layout(version) else f"{base}/ascend-toolkit/{version}"


def installed_toolkits(base: str) -> dict[str, str]:
    """version → directory of every toolkit installed under ``base``."""
    out: dict[str, str] = {}
    b = common.host_path(base)
    candidates = list(b.glob("cann-*")) + list((b / "ascend-toolkit").glob("*"))
    for d in candidates:
        if d.is_symlink() or not d.is_dir():
            continue
        for info in d.glob("*-linux/ascend_toolkit_install.info"):
            v = common.read_key_equals(info).get("version")
            if v:
                out[v] = common.node_path(d)
    return out


def active_toolkit(base: str) -> str | None:
    """The version the ``cann`` (>= 8.5) or ``ascend-toolkit/latest`` (<= 8.3) link points to."""
    for link in (f"{base}/cann", f"{base}/ascend-toolkit/latest"):
        p = common.host_path(link)
        if p.is_symlink() and p.exists():
            for info in p.glob("*-linux/ascend_toolkit_install.info"):
                v = common.read_key_equals(info).get("version")
                if v:
                    return v
    return None


def relink(link: str, target: str) -> None:
    p = common.host_path(link)
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.is_symlink() or p.is_file():
        p.unlink()
    os.symlink(target, p)


def set_env_text(home: str, m: dict[str, Any]) -> str:
    return (
        "#!/bin/bash\n"
        f"# CANN {m['version']} environment - {SIMULATED}"
        f"export ASCEND_TOOLKIT_HOME={home}\n"
        f"export ASCEND_HOME_PATH={home}\n"
        "export LD_LIBRARY_PATH=${ASCEND_TOOLKIT_HOME}/lib64:${ASCEND_TOOLKIT_HOME}/lib64/plugin/opskernel:"
        "${ASCEND_TOOLKIT_HOME}/lib64/plugin/nnengine:${LD_LIBRARY_PATH}\n"
        "export PYTHONPATH=${ASCEND_TOOLKIT_HOME}/python/site-packages:"
        "${ASCEND_TOOLKIT_HOME}/opp/built-in/op_impl/ai_core/tbe:${PYTHONPATH}\n"
        "export PATH=${ASCEND_TOOLKIT_HOME}/bin:${ASCEND_TOOLKIT_HOME}/compiler/ccec_compiler/bin:${PATH}\n"
        "export ASCEND_AICPU_PATH=${ASCEND_TOOLKIT_HOME}\n"
        "export ASCEND_OPP_PATH=${ASCEND_TOOLKIT_HOME}/opp\n"
        "export TOOLCHAIN_HOME=${ASCEND_TOOLKIT_HOME}/toolkit\n"
    )


def cann_info(m: dict[str, Any], path: str) -> str:
    return (
        f"package_name={PACKAGE_NAMES.get(m['component'], m['name'])}\n"
        f"version={m['version']}\n"
        f"innerversion={m.get('innerversion', 'V100R001C25SPC001B212')}\n"
        "compatible_version=[V100R001C15],[V100R001C18],[V100R001C19],[V100R001C20],[V100R001C21],[V100R001C23]\n"
        f"arch={m['arch']}\n"
        "os=linux\n"
        f"path={path}\n"
    )


def install_toolkit(m: dict[str, Any], o: Options, log: Log) -> int:
    start(log)
    require_root(log)
    eula(m, o, log)
    v, base, arch = m["version"], o.install_path, m["arch"]
    active = active_toolkit(base)
    if o.op == "upgrade" and active is None:
        log.fail(f"Ascend-cann-toolkit is not installed in {base}, upgrade is not supported. Use --install.")
    if o.op == "install" and active and active != v and (new_layout(v) or new_layout(active)):
        log.fail(
            f"Ascend-cann-toolkit {active} is already installed in {base}. "
            "Use --upgrade, or uninstall it first."
        )
    progress = Progress("toolkit", log, show=False)
    if o.op == "upgrade" and active and active != v:
        old = installed_toolkits(base).get(active)
        if old:
            log.info(f"Remove the old version {active} in {old}")
            common.remove_path(common.host_path(old))
        if not new_layout(active) and new_layout(v):
            common.remove_path(common.host_path(f"{base}/ascend-toolkit"))
    vdir = toolkit_dir(base, v)
    log.info(f"Install Ascend-cann-toolkit {v} to {vdir}")
    write(f"{vdir}/lib64/libascendcl.so", SIMULATED)
    write(f"{vdir}/bin/.keep", "")
    # hccl_test ships as sources the site builds against its MPI (make MPI_HOME=...); here already built
    write(f"{vdir}/tools/hccl_test/bin/all_reduce_test", python_wrapper("hccl", v), 0o755)
    progress.at(50)
    manifest_path = save_manifest(m, f"{vdir}/{arch}-linux/script", base)
    write(f"{vdir}/{arch}-linux/script/uninstall.sh", uninstall_script(manifest_path), 0o755)
    if new_layout(v):
        home = f"{base}/cann"
        relink(home, f"cann-{v}")
        write(f"{vdir}/set_env.sh", set_env_text(home, m), 0o755)
    else:
        home = f"{base}/ascend-toolkit/latest"
        relink(home, v)
        write(f"{base}/ascend-toolkit/set_env.sh", set_env_text(home, m), 0o755)
        write(f"{vdir}/set_env.sh", set_env_text(vdir, m), 0o755)
    write(f"{vdir}/{arch}-linux/ascend_toolkit_install.info", cann_info(m, f"{vdir}/{arch}-linux"))
    progress.at(100)
    verb = "upgraded" if o.op == "upgrade" else "installed"
    log.info(f"Ascend-cann-toolkit package {verb} successfully! The new version takes effect immediately.")
    set_env = f"{base}/cann/set_env.sh" if new_layout(v) else f"{base}/ascend-toolkit/set_env.sh"
    log.info(f"Please make sure that the environment variables have been configured: source {set_env}")
    end(log)
    log.operation("Install", m, "success")
    return 0


def install_opp(m: dict[str, Any], o: Options, log: Log) -> int:
    """``ops`` (>= 8.5) and ``kernels`` (<= 8.3): binary operator kernels for 910B into the toolkit."""
    start(log)
    require_root(log)
    eula(m, o, log)
    v, base, arch, comp = m["version"], o.install_path, m["arch"], m["component"]
    vdir = installed_toolkits(base).get(v)
    if vdir is None:
        log.fail(f"Ascend-cann-toolkit {v} is not installed in {base}. Install the toolkit package first.")
    if comp == "ops" and not new_layout(v):
        log.fail(f"{m['name']} requires CANN 8.5 or later; install Ascend-cann-kernels-910b for {v}.")
    if comp == "kernels" and new_layout(v):
        log.fail(f"{m['name']} is for CANN 8.3 or earlier; install Ascend-cann-910b-ops for {v}.")
    progress = Progress(comp, log, show=False)
    kdir = f"{vdir}/opp/built-in/op_impl/ai_core/tbe/kernel/ascend910b"
    write(f"{kdir}/binary_info_config.json", "{}\n")
    progress.at(50)
    manifest_path = save_manifest(m, f"{vdir}/{arch}-linux/script/{comp}", base)
    write(f"{vdir}/{arch}-linux/script/{comp}/uninstall.sh", uninstall_script(manifest_path), 0o755)
    write(f"{vdir}/{arch}-linux/ascend_{comp}_install.info", cann_info(m, f"{vdir}/{arch}-linux"))
    progress.at(100)
    # the package's own name, its NPU line's (Ascend-cann-A3-ops on an Atlas A3)
    package = str(m.get("name") or PACKAGE_NAMES[comp]).split("_")[0]
    log.info(f"{package} package installed successfully! The new version takes effect immediately.")
    end(log)
    log.operation("Install", m, "success")
    return 0


def install_nnal(m: dict[str, Any], o: Options, log: Log) -> int:
    start(log)
    require_root(log)
    eula(m, o, log)
    v, base = m["version"], o.install_path
    if not installed_toolkits(base):
        log.fail(f"Ascend-cann-toolkit is not installed in {base}. Install the toolkit package first.")
    progress = Progress("nnal", log, show=False)
    atb = f"{base}/nnal/atb"
    write(f"{atb}/{v}/atb/cxx_abi_1/lib/libatb.so", SIMULATED)
    write(f"{atb}/{v}/atb/cxx_abi_0/lib/libatb.so", SIMULATED)
    progress.at(50)
    manifest_path = save_manifest(m, f"{atb}/{v}/atb/script", base)
    write(f"{atb}/{v}/atb/script/uninstall.sh", uninstall_script(manifest_path), 0o755)
    write(f"{atb}/{v}/version.info", f"package_name=Ascend-cann-nnal\nversion={v}\n")
    relink(f"{atb}/latest", v)
    write(
        f"{atb}/set_env.sh",
        "#!/bin/bash\n"
        f"# NNAL ATB {v} environment - {SIMULATED}"
        f"export ATB_HOME_PATH={atb}/latest/atb/cxx_abi_1\n"
        "export LD_LIBRARY_PATH=${ATB_HOME_PATH}/lib:${LD_LIBRARY_PATH}\n",
        0o755,
    )
    progress.at(100)
    log.info(f"Ascend-cann-nnal package installed successfully! Use: source {atb}/set_env.sh")
    end(log)
    log.operation("Install", m, "success")
    return 0


def uninstall_cann(m: dict[str, Any], o: Options, log: Log) -> int:
    start(log)
    require_root(log)
    base = str(m.get("install_path") or o.install_path)
    v, comp, arch = m["version"], m["component"], m["arch"]
    if comp == "nnal":
        vdir = common.host_path(f"{base}/nnal/atb/{v}")
        if not vdir.exists():
            log.fail(f"Ascend-cann-nnal {v} is not installed in {base}.")
        common.remove_path(vdir)
        latest = common.host_path(f"{base}/nnal/atb/latest")
        if latest.is_symlink() and not latest.exists():
            latest.unlink()
            common.remove_path(common.host_path(f"{base}/nnal/atb/set_env.sh"))
    else:
        tk = installed_toolkits(base).get(v)
        if tk is None:
            log.fail(f"{PACKAGE_NAMES[comp]} {v} is not installed in {base}.")
        if comp == "toolkit":
            common.remove_path(common.host_path(tk))
            for link in (f"{base}/cann", f"{base}/ascend-toolkit/latest"):
                p = common.host_path(link)
                if p.is_symlink() and not p.exists():
                    p.unlink()
            if not installed_toolkits(base):
                common.remove_path(common.host_path(f"{base}/ascend-toolkit/set_env.sh"))
        else:
            common.remove_path(common.host_path(f"{tk}/opp/built-in/op_impl/ai_core/tbe/kernel/ascend910b"))
            common.remove_path(common.host_path(f"{tk}/{arch}-linux/ascend_{comp}_install.info"))
            common.remove_path(common.host_path(f"{tk}/{arch}-linux/script/{comp}"))
    log.info(f"{PACKAGE_NAMES[comp]} package uninstalled successfully!")
    end(log)
    log.operation("Uninstall", m, "success")
    return 0


# ------------------------------------------------------------------------------------------------
# dispatch
# ------------------------------------------------------------------------------------------------

INSTALL = {
    "driver": install_driver,
    "firmware": install_firmware,
    "toolkit": install_toolkit,
    "ops": install_opp,
    "kernels": install_opp,
    "nnal": install_nnal,
}
UNINSTALL = {
    "driver": uninstall_driver,
    "firmware": uninstall_firmware,
    "toolkit": uninstall_cann,
    "ops": uninstall_cann,
    "kernels": uninstall_cann,
    "nnal": uninstall_cann,
}


def run(manifest_path: str, argv: Sequence[str]) -> int:
    manifest: dict[str, Any] = json.loads(Path(manifest_path).read_text(encoding="utf-8"))
    component = str(manifest["component"])
    if component == "docker-runtime":  # MindCluster's own installer contract
        return docker_runtime.run_package(manifest, argv)
    log = Log(component)
    op = "Install"
    try:
        opts = parse_args(component, argv, log)
        op = opts.op.capitalize()
        if opts.op == "uninstall":
            return UNINSTALL[component](manifest, opts, log)
        machine = os.uname().machine
        if component != "firmware" and manifest.get("arch", machine) != machine:
            log.fail(
                f"The architecture of the package ({manifest['arch']}) does not match the architecture of "
                f"the system ({machine})."
            )
        return INSTALL[component](manifest, opts, log)
    except Failed as exc:
        if component in ("driver", "firmware"):
            log.info(f"End time: {_now()}")
        log.operation(op, manifest, "failed")
        return exc.code


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: python3 -m ascendsim install|uninstall <package.json> [flags]", file=sys.stderr)
        return 1
    return run(args[0], args[1:])
