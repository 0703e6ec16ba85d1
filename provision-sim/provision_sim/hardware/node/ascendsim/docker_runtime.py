"""MindCluster Ascend Docker Runtime, simulated: the ``.run`` package's installer and the OCI runtime.

Installer (``Ascend-docker-runtime_<v>_linux-<arch>.run``), after MindCluster's ``run_main.sh`` and the Go
``ascend-docker-plugin-install-helper`` (component/ascend-docker-runtime in Ascend/mind-cluster):

* flags ``--install``, ``--upgrade``, ``--uninstall``, ``--install-path=<abs>`` (the runtime goes to
  ``<path>/Ascend-Docker-Runtime``, default ``/usr/local/Ascend/Ascend-Docker-Runtime``),
  ``--install-scene=docker|containerd|crio|isula`` (default docker; the simulator implements docker and
  refuses the others with an ``[ERROR]`` line), ``--install-type=<A500|A500A2|A200|A200ISoC|A200IA2>``,
  ``--injection-mode=cdi|legacy``, ``--version``; a repeated flag, an unknown one (``[ERROR] failed,
  unsupported parameters: X`` and the usage text) or ``--install-path``/``--install-scene`` without an
  operation exit 1. Not root: ``[ERROR] failed, please run with root permission``, exit 1.
* ``--install``/``--upgrade`` first ask ``Do you accept the EULA to install Ascend-docker-runtime?[Y/N]`` on
  stdin: ``y`` goes on, ``n`` cancels with exit 0 (as the real script does), end of input stops with exit 1
  (the real script would ask forever).
* the package's arch must be the machine's (``[ERROR] platform(x86_64) mismatch for ...``, exit 1).
* ``--install`` copies the binaries, writes ``/etc/ascend-docker-runtime.d/base.list`` (the driver files
  the runtime mounts into containers) and MERGES ``/etc/docker/daemon.json`` like the helper: every key
  is kept, ``runtimes.ascend.path`` is set (``runtimeArgs: []`` added when missing) and
  ``default-runtime`` becomes ``ascend``; the file is rewritten with 8-space indentation and sorted
  keys (Go's ``json.MarshalIndent`` of a map), mode 0600. Without a daemon.json the helper's template
  is written. A daemon.json that is not JSON, a symbolic link, or writable by group/other fails the
  install (exit 1) AFTER the binaries were copied, as on a real host. ``--upgrade`` replaces the
  binaries only (daemon.json untouched); ``--uninstall`` removes ``ascend`` from ``runtimes``, and
  ``default-runtime`` when it is ``ascend``.
* the install record ``<path>/ascend_docker_runtime_install.info`` (``version=v26.1.0``, ``path=``, ...),
  the log ``/var/log/ascend-docker-runtime/installer.log``.

OCI runtime (``ascend-docker-runtime``, registered in daemon.json): on ``create`` it reads the bundle's
``config.json``, takes ``ASCEND_VISIBLE_DEVICES`` from the container's environment (``0,1``, ``0-3``,
``Ascend910-0``; empty or ``void``: no NPU) and adds exactly those ``/dev/davinciN`` plus
``/dev/davinci_manager``, ``/dev/devmm_svm``, ``/dev/hisi_hdc`` as devices with device-cgroup allow rules,
read-only bind mounts of the existing files of ``base.list`` (npu-smi, driver lib64, version.info,
``/etc/ascend_install.info``, dcmi), and ``ASCEND_DOCKER_RUNTIME=True``; then it execs ``runc`` with the
original arguments (every other command goes straight to runc). The real runtime does the mounts in a
prestart hook (legacy mode) or edits the spec directly (``--injection-mode=cdi``); the simulator always
edits the spec. Errors use the real texts (``failed to get /dev/davinci9 info : lstat /dev/davinci9: no
such file or directory``, ``invalid single device parameter: x``) and go to stderr and, like runc, as a
JSON line to the ``--log`` file the shim reads, so ``docker run`` shows them.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import common

RT = "ascend-docker-runtime"
RT_FIRST = "Ascend-docker-runtime"
INSTALL_DIR_NAME = "Ascend-Docker-Runtime"
CONFIG_DIR = "/etc/ascend-docker-runtime.d"
BASE_LIST = f"{CONFIG_DIR}/base.list"
DAEMON_JSON = "/etc/docker/daemon.json"
LOG_DIR = "/var/log/ascend-docker-runtime"
INSTALLER_LOG = f"{LOG_DIR}/installer.log"
RUNTIME_LOG = f"{LOG_DIR}/runtime-run.log"
INFO_NAME = "ascend_docker_runtime_install.info"
TOOLS = (
    "ascend-docker-hook",
    "ascend-docker-cli",
    "ascend-docker-destroy",
    "ascend-docker-plugin-install-helper",
)
SCENES = ("docker", "containerd", "crio", "isula")
INSTALL_TYPES = ("A500", "A500A2", "A200", "A200ISoC", "A200IA2")
BASE_LIST_LINES = (
    "/usr/local/Ascend/driver/lib64",
    "/usr/local/Ascend/driver/include",
    "/usr/local/Ascend/driver/version.info",
    "/etc/ascend_install.info",
    "/usr/local/dcmi",
    "/usr/local/bin/npu-smi",
    "/usr/local/sbin/npu-smi",
)
"""What the simulated runtime mounts (read-only) into a container with NPUs, when present on the host."""
MANAGER_DEVICES = ("davinci_manager", "devmm_svm", "hisi_hdc")
MAX_DEVICE = 128
VOID = "void"
# ascend-docker-plugin-install-helper's template for a host without daemon.json (whitespace verbatim).
COMMON_TEMPLATE = """{
        "runtimes":     {
                "ascend":       {
                        "path": "%s",
                        "runtimeArgs":  []
                }
        },
        "default-runtime":      "ascend"
}"""
SIMULATED = "simulated by provision sim (ascendsim)"


class Failed(Exception):
    def __init__(self, code: int = 1) -> None:
        super().__init__(code)
        self.code = code


# ------------------------------------------------------------------------------------------------
# installer
# ------------------------------------------------------------------------------------------------


class InstallerLog:
    """``$1 $2`` on stdout and ``$1 [date] [uid: N] [ip] [ascend-docker-runtime] $2`` in installer.log."""

    def __init__(self) -> None:
        self.path = common.host_path(INSTALLER_LOG)

    def __call__(self, level: str, msg: str) -> None:
        print(f"[{level}] {msg}", flush=True)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
        ip = (os.environ.get("SSH_CLIENT") or "").split(" ")[0] or "localhost"
        with self.path.open("a", encoding="utf-8") as fh:
            stamp = time.strftime("%Y/%m/%d %H:%M:%S")
            fh.write(f"[{level}] [{stamp}] [uid: {os.geteuid()}] [{ip}] [{RT}] {msg}\n")

    def fail(self, msg: str, code: int = 1) -> Failed:
        self("ERROR", msg)
        return Failed(code)


@dataclass
class InstallArgs:
    op: str = ""
    path: str = f"{common.ASCEND_BASE}/{INSTALL_DIR_NAME}"
    scene: str = "docker"
    install_type: str = ""
    injection_mode: str = ""
    version_only: bool = False
    seen: set[str] = field(default_factory=set)


def usage(version: str, arch: str) -> str:
    return (
        "Error input\n"
        f"Usage: ./{RT_FIRST}_{version}_linux-{arch}.run [options]\n"
        "Options:\n"
        "  --help | -h                   Print this message\n"
        "  --install                     Install into this system\n"
        "  --install-path                Specify the installation path, which must be absolute path\n"
        f"  --uninstall                   Uninstall the installed {RT_FIRST} tool\n"
        f"  --upgrade                     Upgrade the installed {RT_FIRST} tool\n"
        "  --install-type=<type>         Only A500, A500A2, A200ISoC, A200IA2 and A200 need to specify\n"
        f"  --version                     Query {RT_FIRST} version\n"
        "  --install-scene=<scene>       Installation scenario, only docker, containerd, crio or isula"
        "(eg: --install-scene=docker, default: docker)\n"
        "  --injection-mode=<mode>       Injection mode for NPU devices, cdi or legacy (default: legacy)\n"
    )


def parse_install_args(argv: Sequence[str], manifest: dict[str, Any], log: InstallerLog) -> InstallArgs:
    a = InstallArgs()
    ops = {"--install": "install", "--upgrade": "upgrade", "--uninstall": "uninstall"}
    wanted: set[str] = set()
    for arg in argv:
        key, eq, value = arg.partition("=")
        name = key if eq else arg
        if name in a.seen and name != "--version":
            raise log.fail(f"failed, '{name}' Repeat parameter!")
        a.seen.add(name)
        if arg in ops:
            wanted.add(ops[arg])
        elif key == "--install-path" and eq:
            a.path = (value.rstrip("/") or "") + f"/{INSTALL_DIR_NAME}"
        elif key == "--install-scene" and eq:
            if value not in SCENES:
                raise log.fail("failed, please check the parameter of --install-scene=<scene>")
            a.scene = value
        elif key == "--install-type" and eq:
            if value not in INSTALL_TYPES:
                raise log.fail("failed, please check the parameter of --install-type=<type>")
            a.install_type = value
        elif key == "--injection-mode" and eq:
            if value not in ("cdi", "legacy"):
                raise log.fail(
                    "failed, please check the parameter of --injection-mode=<mode>, "
                    "only cdi or legacy are supported"
                )
            a.injection_mode = value
        elif arg == "--version":
            a.version_only = True
        else:
            log("ERROR", f"failed, unsupported parameters: {arg}")
            print(usage(str(manifest["version"]), str(manifest["arch"])), end="")
            raise Failed(1)
    # run_main.sh checks --install, then --uninstall, then --upgrade
    a.op = next((op for op in ("install", "uninstall", "upgrade") if op in wanted), "")
    if "--install-path" in a.seen and not a.op:
        raise log.fail(
            "failed, only input <install_path> command. When use --install-path you also need input "
            "--install or --uninstall or --upgrade"
        )
    if "--install-scene" in a.seen and not a.op:
        raise log.fail(
            "failed, only input <install-scene> command. When use --install-scene you also need input "
            "--install or --uninstall or --upgrade"
        )
    return a


def eula(log: InstallerLog) -> bool:
    """``True`` when accepted; ``False`` when declined (the caller exits 0)."""
    question = f"Do you accept the EULA to install {RT_FIRST}?[Y/N]"
    while True:
        print(question, flush=True)
        line = sys.stdin.readline()
        if not line:
            raise log.fail(
                "no answer to the EULA question (end of input); answer y on stdin "
                "(the real installer keeps asking)"
            )
        answer = line.strip()
        if answer in ("y", "Y"):
            log("INFO", "user accepted EULA")
            return True
        if answer in ("n", "N"):
            log("INFO", "install cancelled, user declined EULA")
            return False


def check_path_permission(path: Path, shown: str) -> str | None:
    """The real installer's ``check_path_permission``: no link, owned by root, no group/other write."""
    if path.is_symlink():
        return f"{shown} is soft link"
    st = path.stat()
    if not common.sim_root() and (st.st_uid != 0 or st.st_gid != 0):
        return f"user or group of {shown} is not root"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"group or other of {shown} has write permission"
    return None


def check_path(node_path: str) -> str | None:
    """``check_path``: the nearest existing path and every parent up to ``/`` pass the permission check."""
    current = node_path
    while (
        current != "/"
        and not common.host_path(current).exists()
        and not common.host_path(current).is_symlink()
    ):
        current = os.path.dirname(current)
    while current != "/":
        problem = check_path_permission(common.host_path(current), current)
        if problem:
            return problem
        current = os.path.dirname(current)
    return None


def merge_daemon_json(existing: str | None, runtime_path: str, *, reserve_default: bool = False) -> str:
    """The helper's ``add``: ``existing`` daemon.json text (None: no file) → the new text.

    Raises ``ValueError`` with the helper's message when the existing text is not a JSON object or its
    ``runtimes``/``runtimes.ascend`` are not objects.
    """
    if existing is None:
        if reserve_default:
            return COMMON_TEMPLATE.replace(',\n        "default-runtime":      "ascend"', "") % runtime_path
        return COMMON_TEMPLATE % runtime_path
    try:
        daemon = json.loads(existing)
    except ValueError as exc:
        raise ValueError(f"load daemon.json failed, err: {exc}") from exc
    if not isinstance(daemon, dict):
        raise ValueError("load daemon.json failed, err: json: cannot unmarshal into a map")
    runtimes = daemon.setdefault("runtimes", {})
    if not isinstance(runtimes, dict):
        raise ValueError("extract runtime failed")
    ascend = runtimes.setdefault("ascend", {})
    if not isinstance(ascend, dict):
        raise ValueError("extract runtime config failed")
    ascend["path"] = runtime_path
    ascend.setdefault("runtimeArgs", [])
    if not reserve_default:
        daemon["default-runtime"] = "ascend"
    return json.dumps(daemon, indent=8, sort_keys=True)


def remove_from_daemon_json(existing: str) -> str:
    """The helper's ``rm``: drop ``runtimes.ascend`` and ``default-runtime`` when it is ``ascend``."""
    daemon = json.loads(existing)
    if not isinstance(daemon, dict):
        raise ValueError("load daemon.json failed, err: json: cannot unmarshal into a map")
    runtimes = daemon.get("runtimes")
    if isinstance(runtimes, dict):
        runtimes.pop("ascend", None)
    if daemon.get("default-runtime") == "ascend":
        del daemon["default-runtime"]
    return json.dumps(daemon, indent=8, sort_keys=True)


def runtime_script(version: str) -> str:
    return (
        "#!/usr/bin/python3\n"
        f"# ascend-docker-runtime {version} - {SIMULATED}\n"
        "import os\nimport sys\n\n"
        f'sys.path.insert(0, os.environ.get("PROVISION_SIM_ROOT", "") + "{common.ENGINE_DIR}")\n'
        "from ascendsim.docker_runtime import oci_main  # noqa: E402\n\n"
        "sys.exit(oci_main())\n"
    )


def uninstall_script(manifest_path: str) -> str:
    return (
        f"#!/bin/sh\n# {RT} uninstall - {SIMULATED}\n"
        'ROOT="${PROVISION_SIM_ROOT:-}"\n'
        f'PYTHONPATH="$ROOT{common.ENGINE_DIR}" exec python3 -m ascendsim uninstall "$ROOT{manifest_path}" '
        '--uninstall "$@"\n'
    )


def install_files(m: dict[str, Any], a: InstallArgs) -> None:
    version = str(m["version"])
    write = common.write_text_atomic
    write(common.host_path(f"{a.path}/{RT}"), runtime_script(version), 0o550)
    for tool in TOOLS:
        write(
            common.host_path(f"{a.path}/{tool}"),
            f"#!/bin/sh\n# {tool} {version} - {SIMULATED}\nexit 0\n",
            0o550,
        )
    write(
        common.host_path(f"{a.path}/README.md"), f"# Ascend Docker Runtime {version}\n\n{SIMULATED}\n", 0o640
    )
    manifest_path = f"{a.path}/script/.package.json"
    write(common.host_path(manifest_path), json.dumps({**m, "install_path": a.path}, indent=2) + "\n", 0o640)
    write(common.host_path(f"{a.path}/script/uninstall.sh"), uninstall_script(manifest_path), 0o500)
    write(common.host_path(BASE_LIST), "\n".join(BASE_LIST_LINES) + "\n", 0o440)


def save_install_args(m: dict[str, Any], a: InstallArgs) -> None:
    arch = os.uname().machine
    flags = {t.lower(): "y" if a.install_type == t else "n" for t in INSTALL_TYPES}
    lines = {
        "version": f"v{m['version']}",
        "arch": arch,
        "os": "linux",
        "path": a.path,
        "build": f"{RT_FIRST}_{m['version']}-{arch}",
        **flags,
        "install-scene": a.scene,
        "config-file-path": "",
        "injection-mode": a.injection_mode,
    }
    common.write_key_equals(common.host_path(f"{a.path}/{INFO_NAME}"), lines, 0o640)


def check_platform(m: dict[str, Any], log: InstallerLog) -> None:
    plat = os.uname().machine
    if str(m.get("arch", plat)) != plat:
        print(f"[ERROR] platform({plat}) mismatch for {m['name']}.run, please check it", flush=True)
        raise log.fail("install failed, run package and os not matched in arch")
    print(f"[INFO] platform({plat}) matched!", flush=True)


def install(m: dict[str, Any], a: InstallArgs, log: InstallerLog) -> int:
    if not eula(log):
        return 0
    print(f"[INFO] installing {RT}", flush=True)
    check_platform(m, log)
    if not a.path.startswith("/"):
        print(f"[ERROR]: install path: {a.path} is a relative path, please use absolute path", flush=True)
        raise Failed(1)
    problem = check_path(a.path)
    if problem:
        print(f"[ERROR] {problem}", flush=True)
        raise log.fail(f"install failed, {a.path} is invalid")
    install_files(m, a)
    print("[INFO] install executable files success", flush=True)
    if a.scene not in ("docker", "isula"):
        raise log.fail(
            f"install failed, --install-scene={a.scene} is not simulated by provision sim (only docker)"
        )
    print("[INFO] install scene is 'docker'.", flush=True)
    config_dir = "/etc/isulad" if a.scene == "isula" else "/etc/docker"
    daemon = f"{config_dir}/daemon.json"
    problem = check_path(daemon)
    if problem:
        print(f"[ERROR] {problem}", flush=True)
        raise log.fail(f"install failed, {daemon} is invalid")
    path = common.host_path(daemon)
    runtime = f"{a.path}/{RT}"
    try:
        text = merge_daemon_json(
            path.read_text(encoding="utf-8") if path.exists() else None,
            runtime,
            reserve_default=a.scene == "isula",
        )
    except ValueError:
        tmp = f"{daemon}.{os.getppid()}"
        helper = f"./ascend-docker-plugin-install-helper add {daemon} {tmp} {runtime} no {a.scene}"
        raise log.fail(f"install failed, '{helper} ' return non-zero") from None
    common.write_text_atomic(path, text, 0o600)
    log("INFO", f"{daemon} modify success")
    save_install_args(m, a)
    print(f"[INFO] {RT} has been installed in: {a.path}", flush=True)
    print(f"[INFO] The version of {RT} is: {m['version']}", flush=True)
    print("[INFO] please reboot daemon and container engine to take effect", flush=True)
    log("INFO", f"{RT} install success")
    return 0


def upgrade(m: dict[str, Any], a: InstallArgs, log: InstallerLog) -> int:
    if not eula(log):
        return 0
    print(f"[INFO] upgrading {RT}", flush=True)
    check_platform(m, log)
    if not common.host_path(a.path).is_dir():
        raise log.fail("upgrade failed, the specified install path does not exist, stopping upgrading")
    if not common.host_path(CONFIG_DIR).is_dir():
        raise log.fail("upgrade failed, the configuration directory does not exist")
    old = common.read_key_equals(common.host_path(f"{a.path}/{INFO_NAME}"))
    a.scene = old.get("install-scene") or a.scene
    a.injection_mode = a.injection_mode or old.get("injection-mode", "")
    install_files(m, a)
    save_install_args(m, a)
    print(f"[INFO] {RT} has been installed in: {a.path}", flush=True)
    print(f"[INFO] upgrade {RT} success", flush=True)
    print(f"[INFO] The version of {RT} is: v{m['version']}", flush=True)
    log("INFO", f"{RT} upgrade success")
    return 0


def uninstall(m: dict[str, Any], a: InstallArgs, log: InstallerLog) -> int:
    print(f"[INFO] uninstalling {RT} {m['version']}", flush=True)
    if m.get("install_path"):
        a.path = str(m["install_path"])
    root = common.host_path(a.path)
    if not root.is_dir():
        log("WARNING", "uninstall skipping, the specified install path does not exist")
        return 0
    scene = common.read_key_equals(root / INFO_NAME).get("install-scene") or a.scene
    daemon = common.host_path("/etc/isulad/daemon.json" if scene == "isula" else DAEMON_JSON)
    if daemon.exists():
        try:
            common.write_text_atomic(
                daemon, remove_from_daemon_json(daemon.read_text(encoding="utf-8")), 0o600
            )
        except ValueError:
            raise log.fail(f"uninstall failed, '{a.path}/script/uninstall.sh' return non-zero") from None
    common.remove_path(root)
    common.remove_path(common.host_path(CONFIG_DIR))
    log("INFO", f"{RT} uninstall success")
    return 0


def run_package(manifest: dict[str, Any], argv: Sequence[str]) -> int:
    """The ``.run``'s ``install.sh`` for the docker-runtime component (``--quiet`` is the header's)."""
    log = InstallerLog()
    try:
        if os.geteuid() != 0 and not common.sim_root():
            raise log.fail("failed, please run with root permission")
        a = parse_install_args([x for x in argv if x not in ("--quiet", "-q", "--nox11")], manifest, log)
        if a.version_only:
            print(f"{RT} version: {manifest['version']}")
            return 0
        if a.op == "install":
            return install(manifest, a, log)
        if a.op == "upgrade":
            return upgrade(manifest, a, log)
        if a.op == "uninstall":
            return uninstall(manifest, a, log)
        print(usage(str(manifest["version"]), str(manifest["arch"])), end="")
        return 0
    except Failed as exc:
        return exc.code


# ------------------------------------------------------------------------------------------------
# the OCI runtime
# ------------------------------------------------------------------------------------------------


class SpecError(Exception):
    """An error of the runtime, worded like ascend-docker-runtime's."""


def parse_visible_devices(value: str) -> list[int]:
    """``ASCEND_VISIBLE_DEVICES`` → sorted unique NPU ids (``0,2``, ``0-3``, ``Ascend910-1,Ascend910-2``)."""
    if "Ascend" in value:
        ids = []
        for item in value.split(","):
            name, _, number = item.strip().partition("-")
            if name not in ("Ascend910", "Ascend310", "Ascend310B", "Ascend310P") or not number.isdigit():
                raise SpecError(f"failed to parse ascend device : invalid device format: {item}")
            if name != "Ascend910":
                raise SpecError(f"failed to parse ascend device : chip type not match really: {name[6:]}")
            ids.append(int(number))
        return sorted(set(ids))
    devices: list[int] = []
    for raw in value.split(","):
        item = raw.strip()
        if "-" in item:
            borders = [b.strip() for b in item.split("-")]
            if len(borders) != 2:
                raise SpecError(f"failed to parse device : invalid device range: {item}")
            if not borders[0].isdigit():
                raise SpecError(
                    f"failed to parse device : invalid left boarder range parameter: {borders[0]}"
                )
            if not borders[1].isdigit() or int(borders[1]) > MAX_DEVICE:
                raise SpecError(
                    f"failed to parse device : invalid right boarder range parameter: {borders[1]}"
                )
            left, right = int(borders[0]), int(borders[1])
            if left > right:
                raise SpecError(
                    f"failed to parse device : left boarder ({left}) should not be larger than "
                    f"the right one({right})"
                )
            devices.extend(range(left, right + 1))
        else:
            if not item.lstrip("-").isdigit():
                raise SpecError(f"failed to parse device : invalid single device parameter: {item}")
            devices.append(int(item))
    return sorted(set(devices))


def visible_devices(env: Sequence[str]) -> str:
    """The LAST ``ASCEND_VISIBLE_DEVICES=`` of the process environment (as the runtime reads it)."""
    for line in reversed(env):
        key, eq, value = line.partition("=")
        if eq and key == "ASCEND_VISIBLE_DEVICES":
            return value
    return ""


@dataclass(frozen=True)
class DeviceNode:
    path: str
    type: str
    major: int
    minor: int
    mode: int
    uid: int
    gid: int


def stat_device(path: str) -> DeviceNode:
    """``oci.DeviceFromPath``: a character/block device node of the host (lstat, like containerd)."""
    try:
        st = os.lstat(common.host_path(path))
    except OSError as exc:
        raise SpecError(
            f"failed to get {path} info : lstat {path}: {os.strerror(exc.errno or 2).lower()}"
        ) from None
    if stat.S_ISCHR(st.st_mode):
        kind = "c"
    elif stat.S_ISBLK(st.st_mode):
        kind = "b"
    else:
        raise SpecError(f"failed to get {path} info : not a device node")
    return DeviceNode(
        path, kind, os.major(st.st_rdev), os.minor(st.st_rdev), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid
    )


def edit_spec(
    spec: dict[str, Any],
    *,
    device: Callable[[str], DeviceNode] = stat_device,
    exists: Callable[[str], bool] | None = None,
    base_list: Sequence[str] = BASE_LIST_LINES,
) -> dict[str, Any]:
    """The runtime's change to an OCI spec (returned; ``spec`` is modified in place too)."""
    exists = exists or (lambda p: common.host_path(p).exists())
    process = spec.get("process")
    if not isinstance(process, dict):
        raise SpecError("failed to check ASCEND_VISIBLE_DEVICES parameter, err: empty process info")
    env = process.setdefault("env", [])
    value = visible_devices(env)
    ids: list[int] = []
    if value and value != VOID:
        try:
            ids = parse_visible_devices(value)
        except SpecError as exc:
            raise SpecError(f"failed to check ASCEND_VISIBLE_DEVICES parameter, err: {exc}") from None
    if ids:
        linux = spec.setdefault("linux", {})
        devices = linux.setdefault("devices", [])
        rules = linux.setdefault("resources", {}).setdefault("devices", [])

        def add(node: DeviceNode) -> None:
            devices.append(
                {
                    "path": node.path,
                    "type": node.type,
                    "major": node.major,
                    "minor": node.minor,
                    "fileMode": node.mode,
                    "uid": node.uid,
                    "gid": node.gid,
                }
            )
            rules.append(
                {"allow": True, "type": node.type, "major": node.major, "minor": node.minor, "access": "rwm"}
            )

        for n in ids:
            try:
                add(device(f"/dev/davinci{n}"))
            except SpecError as exc:
                raise SpecError(
                    f"failed to add device to env: failed to add davinci device to spec: {exc}"
                ) from None
        try:
            add(device("/dev/davinci_manager"))
        except SpecError as exc:
            raise SpecError(
                f"failed to add device to env: failed to add Manager device to spec: "
                f"add davinci_manager to spec error: {exc}"
            ) from None
        for name in MANAGER_DEVICES[1:]:
            try:
                add(device(f"/dev/{name}"))
            except SpecError as exc:
                raise SpecError(
                    "failed to add device to env: failed to add Manager device to spec: "
                    f"add common manage device error: failed to add common manage device to spec : {exc}"
                ) from None
        mounts = spec.setdefault("mounts", [])
        present = {m.get("destination") for m in mounts if isinstance(m, dict)}
        for path in base_list:
            if path and path not in present and exists(path):
                mounts.append(
                    {"destination": path, "type": "bind", "source": path, "options": ["rbind", "ro"]}
                )
    env.append("ASCEND_DOCKER_RUNTIME=True")
    return spec


def _runc() -> str | None:
    for name in ("docker-runc", "runc"):
        found = shutil.which(name)
        if found:
            return os.path.realpath(found)
    for path in ("/usr/sbin/runc", "/usr/bin/runc", "/usr/local/sbin/runc", "/usr/local/bin/runc"):
        if os.access(path, os.X_OK):
            return path
    return None


def _option(argv: Sequence[str], *names: str) -> str | None:
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def _runtime_log(level: str, msg: str) -> None:
    try:
        path = common.host_path(RUNTIME_LOG)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
        with path.open("a", encoding="utf-8") as fh:
            fh.write(f"[{level}] {time.strftime('%Y/%m/%d %H:%M:%S')} {msg}\n")
    except OSError:
        pass


def _report(argv: Sequence[str], msg: str) -> None:
    """To stderr, the runtime log, and (like runc) the shim's ``--log`` file as one JSON line."""
    print(msg, file=sys.stderr, flush=True)
    _runtime_log("ERROR", msg)
    log_file = _option(argv, "--log")
    if log_file:
        try:
            with open(log_file, "a", encoding="utf-8") as fh:
                stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                fh.write(json.dumps({"level": "error", "msg": msg, "time": stamp}) + "\n")
        except OSError:
            pass


def oci_main(argv: Sequence[str] | None = None) -> int:
    """``ascend-docker-runtime [runc global options] <command> [options]``: edit on create, then exec runc."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "create" in args:
        bundle = _option(args, "--bundle", "-b") or os.getcwd()
        spec_path = os.path.join(bundle, "config.json")
        try:
            with open(spec_path, encoding="utf-8") as fh:
                spec = json.load(fh)
            edit_spec(spec)
            with open(spec_path, "w", encoding="utf-8") as fh:
                json.dump(spec, fh)
        except SpecError as exc:
            _report(args, f"failed to modify spec file {spec_path}: {exc}")
            return 1
        except (OSError, ValueError) as exc:
            _report(args, f"failed to modify spec file {spec_path}: {exc}")
            return 1
        devices = [
            d["path"] for d in spec.get("linux", {}).get("devices", []) if "davinci" in d.get("path", "")
        ]
        _runtime_log("INFO", f"container spec {spec_path}: devices {devices}")
    runc = _runc()
    if runc is None:
        _report(args, 'failed to find the path of runc: exec: "runc": executable file not found in $PATH')
        return 1
    os.execv(runc, [runc, *args])
    return 1  # not reached
