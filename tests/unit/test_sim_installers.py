"""The simulated vendor ``.run`` installers, run for real (makeself header + payload) in a temporary node
root: flags, documented failures, exit codes, files written, log lines, and driver activation at reboot."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from provision.ascend import npu_smi, versions
from provision_sim import hardware
from provision_sim.hardware.node.ascendsim import installer
from provision_sim.hardware.testroot import SimRoot
from provision_sim.mirror import run_files as mirror
from tests.helpers import sample_segments

pytestmark = pytest.mark.unit

ARCH = os.uname().machine
OTHER_ARCH = "aarch64" if ARCH == "x86_64" else "x86_64"
NPU_SMI = "/usr/local/bin/npu-smi"
LOG_LINE = re.compile(
    r"^\[(Driver|Firmware|Toolkit|Ops|Kernels|NNAL|Ascend-Docker-Runtime)\] "
    r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] \[(INFO|WARNING|ERROR)\]"
)
DKMS_FAILED = "[ERROR]Dkms install failed, details in : var/log/ascend_seclog/ascend_install.log."


class Mirror:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.paths: dict[str, Path] = {}

    def build(self, **kwargs: object) -> list[Path]:
        built = mirror.build_artifacts(self.root, **kwargs)  # type: ignore[arg-type]
        for p in built:
            self.paths[p.name] = p
        return built

    def __getitem__(self, name: str) -> Path:
        return self.paths[name]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Mirror:
    m = Mirror(tmp_path_factory.mktemp("mirror"))
    m.build(arch=ARCH)  # 25.5.1 / 7.8.0.6.201 / CANN 9.1.0
    m.build(
        arch=ARCH,
        driver="25.0.rc1.1",
        firmware="7.7.0.1.231",
        cann="8.3.RC2",
        components=["driver", "firmware", "toolkit", "ops", "nnal"],
    )
    m.build(arch=OTHER_ARCH, components=["driver"])
    return m


DRIVER = f"Ascend-hdk-910b-npu-driver_25.5.1_linux-{ARCH}.run"
DRIVER_OLD = f"Ascend-hdk-910b-npu-driver_25.0.rc1.1_linux-{ARCH}.run"
FIRMWARE = "Ascend-hdk-910b-npu-firmware_7.8.0.6.201.run"
FIRMWARE_OLD = "Ascend-hdk-910b-npu-firmware_7.7.0.1.231.run"
TOOLKIT = f"Ascend-cann-toolkit_9.1.0_linux-{ARCH}.run"
TOOLKIT_OLD = f"Ascend-cann-toolkit_8.3.RC2_linux-{ARCH}.run"
OPS = f"Ascend-cann-910b-ops_9.1.0_linux-{ARCH}.run"
KERNELS_OLD = f"Ascend-cann-kernels-910b_8.3.RC2_linux-{ARCH}.run"
NNAL = f"Ascend-cann-nnal_9.1.0_linux-{ARCH}.run"
RUNTIME = f"Ascend-docker-runtime_26.1.0_linux-{ARCH}.run"


@pytest.fixture
def sim(tmp_path: Path) -> SimRoot:
    return SimRoot.create(tmp_path / "node")


def install_log(sim: SimRoot) -> str:
    return sim.path("/var/log/ascend_seclog/ascend_install.log").read_text()


def ok(res: subprocess.CompletedProcess[str]) -> None:
    assert res.returncode == 0, res.stdout + res.stderr


# ------------------------------------------------------------------------------------------------
# driver
# ------------------------------------------------------------------------------------------------


def test_driver_full_install_writes_the_documented_files(sim: SimRoot, repo: Mirror) -> None:
    res = sim.run([repo[DRIVER], "--full", "--install-for-all"])
    ok(res)
    lines = res.stdout.splitlines()
    assert lines[0] == "Verifying archive integrity...  100%   SHA256 checksums are OK. All good."
    assert lines[1] == "Uncompressing ASCEND DRIVER RUN PACKAGE  100%  "
    assert all(LOG_LINE.match(line) for line in lines[2:]), res.stdout
    log = versions.parse_install_log(res.stdout)
    assert log.component == "Driver" and log.succeeded and log.mentions_reboot
    assert log.install_type == "DKMS" and log.last_percentage == 100
    messages = [e.message for e in log.entries]
    assert messages[1] == "LogFile: /var/log/ascend_seclog/ascend_install.log"
    assert "set username and usergroup, HwHiAiUser:HwHiAiUser" in messages
    info = versions.parse_driver_version_info(sim.path("/usr/local/Ascend/driver/version.info").read_text())
    assert (info.version, info.package_version) == ("25.5.1", "25.5.1")
    assert info.compatible_firmware == (("7.0.0", "7.8.99"),)
    inst = versions.parse_ascend_install_info(sim.path("/etc/ascend_install.info").read_text())
    assert (inst.driver_install_path, inst.user_name, inst.user_group) == (
        "/usr/local/Ascend",
        "HwHiAiUser",
        "HwHiAiUser",
    )
    assert inst.raw["Driver_Install_For_All"] == "yes"
    for path in (
        "/usr/local/Ascend/driver/tools/hccn_tool",
        "/usr/local/Ascend/driver/script/uninstall.sh",
        "/usr/local/bin/npu-smi",
        "/usr/local/dcmi/libdcmi.so",
        "/usr/local/Ascend/driver/lib64/driver/libascend_hal.so",
    ):
        assert sim.path(path).is_file(), path
    assert os.access(sim.path("/usr/local/bin/npu-smi"), os.X_OK)
    assert sim.path(f"/var/lib/dkms/davinci_ascend/1.0/{os.uname().release}").is_dir()
    # the same lines went to the install log, plus the operation log
    assert log.entries[-1].message in install_log(sim)
    assert (
        "Install Ascend-hdk-910b-npu-driver_25.5.1"
        in sim.path("/var/log/ascend_seclog/operation.log").read_text()
    )


def test_driver_is_active_only_after_a_reboot(sim: SimRoot, repo: Mirror) -> None:
    ok(sim.run([repo[DRIVER], "--full", "--install-for-all", "--quiet"]))
    before = sim.tool(NPU_SMI, "info")
    assert before.returncode == 1
    assert npu_smi.dcmi_error_code(before.stdout) == -8020
    assert not list(sim.path("/dev").glob("davinci*"))
    ok(sim.reboot())
    after = sim.tool(NPU_SMI, "info")
    ok(after)
    assert npu_smi.parse_npu_smi_info(after.stdout).driver_version == "25.5.1"
    assert sim.path("/dev/davinci_manager").exists() and sim.path("/dev/davinci7").exists()


def test_driver_upgrade_takes_effect_after_reboot(sim: SimRoot, repo: Mirror) -> None:
    res = sim.run([repo[DRIVER], "--upgrade", "--quiet"])
    assert res.returncode == 1 and "not installed, upgrade is not supported" in res.stdout
    ok(sim.run([repo[DRIVER_OLD], "--full", "--quiet"]))
    ok(sim.reboot())
    assert npu_smi.parse_npu_smi_info(sim.tool(NPU_SMI, "info").stdout).driver_version == "25.0.rc1.1"
    res = sim.run([repo[DRIVER], "--upgrade", "--quiet"])
    ok(res)
    assert "Driver package upgraded successfully!" in res.stdout
    assert "The installed driver version is 25.0.rc1.1" in res.stdout
    # new tools, old driver still loaded
    info = npu_smi.parse_npu_smi_info(sim.tool(NPU_SMI, "info").stdout)
    assert (info.version, info.driver_version) == ("25.5.1", "25.0.rc1.1")
    board = npu_smi.parse_npu_smi_board(sim.tool(NPU_SMI, "info", "-t", "board", "-i", "0").stdout)
    assert board.software_version == "25.0.rc1.1"
    ok(sim.reboot())
    assert npu_smi.parse_npu_smi_info(sim.tool(NPU_SMI, "info").stdout).driver_version == "25.5.1"


def test_driver_refuses_without_hwhiaiuser(tmp_path: Path, repo: Mirror) -> None:
    sim = SimRoot.create(tmp_path, hwhiaiuser=False)
    res = sim.run([repo[DRIVER], "--full", "--install-for-all", "--quiet"])
    assert res.returncode == 1
    assert "[ERROR]The running user HwHiAiUser or user group HwHiAiUser does not exist" in res.stdout
    assert not sim.path("/usr/local/Ascend/driver").exists()
    # an existing running user given explicitly is accepted
    res = sim.run([repo[DRIVER], "--full", "--install-username=root", "--install-usergroup=root", "--quiet"])
    ok(res)
    assert "set username and usergroup, root:root" in res.stdout
    inst = versions.parse_ascend_install_info(sim.path("/etc/ascend_install.info").read_text())
    assert (inst.user_name, inst.user_group) == ("root", "root")
    res = sim.run([repo[DRIVER], "--full", "--install-username=root", "--quiet"])
    assert res.returncode == 1 and "must be used together" in res.stdout


@pytest.mark.parametrize(
    ("missing", "listed"), [(("lspci", "ifconfig"), "lspci,ifconfig,"), (("ifconfig",), "ifconfig,")]
)
def test_driver_lists_missing_tools(
    sim: SimRoot, repo: Mirror, missing: tuple[str, ...], listed: str
) -> None:
    for tool in missing:
        sim.remove_tool(tool)
    res = sim.run([repo[DRIVER], "--full", "--install-for-all", "--quiet"])
    assert res.returncode == 1
    assert f"[ERROR]The list of missing tools: {listed}" in res.stdout
    assert f"The list of missing tools: {listed}" in install_log(sim)
    assert not sim.path("/usr/local/Ascend").exists()
    for tool in missing:  # pciutils / net-tools installed in /usr/sbin or /sbin count too
        sim.add_tool(tool, "/sbin")
    ok(sim.run([repo[DRIVER], "--full", "--install-for-all", "--quiet"]))


def test_dkms_failure_leaves_residue_until_removed(sim: SimRoot, repo: Mirror) -> None:
    sim.remove_tool("gcc")
    res = sim.run([repo[DRIVER], "--full", "--install-for-all", "--quiet"])
    assert res.returncode == 1
    assert DKMS_FAILED in res.stdout
    make_log = sim.path("/var/lib/dkms/davinci_ascend/1.0/build/make.log")
    assert "gcc: No such file or directory" in make_log.read_text()
    assert not sim.path("/usr/local/Ascend/driver/version.info").exists()
    # the prerequisite is fixed but the residue still breaks the retry, as on a real host
    sim.add_tool("gcc")
    res = sim.run([repo[DRIVER], "--full", "--install-for-all", "--quiet"])
    assert res.returncode == 1 and DKMS_FAILED in res.stdout
    assert "Error! DKMS tree already contains: davinci_ascend-1.0" in install_log(sim)
    # rm -rf /var/lib/dkms/davinci_ascend, then it works
    shutil.rmtree(sim.path("/var/lib/dkms/davinci_ascend"))
    ok(sim.run([repo[DRIVER], "--full", "--install-for-all", "--quiet"]))


def test_dkms_without_kernel_headers_or_dkms(tmp_path: Path, repo: Mirror) -> None:
    sim = SimRoot.create(tmp_path / "a", kernel_headers=False)
    res = sim.run([repo[DRIVER], "--full", "--quiet"])
    assert res.returncode == 1 and DKMS_FAILED in res.stdout
    kver = os.uname().release
    make_log = sim.path("/var/lib/dkms/davinci_ascend/1.0/build/make.log").read_text()
    assert f"/lib/modules/{kver}/build: No such file or directory" in make_log
    # openEuler's kernel-devel location is accepted as well
    shutil.rmtree(sim.path("/var/lib/dkms/davinci_ascend"))
    sim.path(f"/usr/src/kernels/{kver}").mkdir(parents=True)
    ok(sim.run([repo[DRIVER], "--full", "--quiet"]))
    # no dkms at all: fails without residue (nothing could register the module)
    other = SimRoot.create(tmp_path / "b", tools=("lspci", "ifconfig", "gcc", "make"))
    res = other.run([repo[DRIVER], "--full", "--quiet"])
    assert res.returncode == 1 and DKMS_FAILED in res.stdout
    assert "dkms: command not found" in install_log(other)
    assert not other.path("/var/lib/dkms").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--install"], "[ERROR]Unsupported parameter: --install"),
        (["--quiet"], "[ERROR]No operation is specified"),
        (["--full", "--uninstall"], "[ERROR]Only one operation can be specified"),
        (["--full", "--install-path=relative"], "must be an absolute path"),
        (["--full", "--bogus"], "[ERROR]Unsupported parameter: --bogus"),
    ],
)
def test_driver_bad_flags(sim: SimRoot, repo: Mirror, args: list[str], message: str) -> None:
    res = sim.run([repo[DRIVER], *args])
    assert res.returncode == 1
    assert message in res.stdout


def test_header_options(sim: SimRoot, repo: Mirror, tmp_path: Path) -> None:
    res = sim.run([repo[DRIVER], "--check"])
    assert (res.returncode, res.stdout) == (
        0,
        "Verifying archive integrity...  100%   SHA256 checksums are OK. All good.\n",
    )
    assert not sim.path("/usr/local/Ascend").exists()
    assert sim.run([repo[DRIVER], "--version"]).stdout == "25.5.1\n"
    listing = sim.run([repo[DRIVER], "--list"])
    assert (
        listing.returncode == 0 and "install.sh" in listing.stdout and "ascendsim/npusmi.py" in listing.stdout
    )
    assert "--install-for-all" in sim.run([repo[DRIVER], "--help"]).stdout
    assert "ASCEND DRIVER RUN PACKAGE" in sim.run([repo[DRIVER], "--info"]).stdout
    target = tmp_path / "unpacked"
    ok(sim.run([repo[DRIVER], "--noexec", "--target", str(target)]))
    assert json.loads((target / "package.json").read_text())["component"] == "driver"
    quiet = sim.run([repo[DRIVER], "--full", "--quiet"])
    ok(quiet)
    assert "Verifying" not in quiet.stdout and "Uncompressing" not in quiet.stdout


def test_corrupted_run_file_is_refused(sim: SimRoot, repo: Mirror, tmp_path: Path) -> None:
    data = bytearray(repo[DRIVER].read_bytes())
    data[-100] ^= 0xFF
    bad = tmp_path / DRIVER
    bad.write_bytes(bytes(data))
    bad.chmod(0o755)
    for args in (["--check"], ["--full"]):
        res = sim.run([bad, *args])
        assert res.returncode == 1
        assert "Error in SHA256 checksums:" in res.stderr
    assert not sim.path("/usr/local/Ascend").exists()


def test_driver_install_path_and_uninstall(sim: SimRoot, repo: Mirror) -> None:
    ok(sim.run([repo[DRIVER], "--full", "--install-path=/opt/Ascend", "--quiet"]))
    assert sim.path("/opt/Ascend/driver/version.info").is_file()
    assert not sim.path("/usr/local/Ascend/driver").exists()
    inst = versions.parse_ascend_install_info(sim.path("/etc/ascend_install.info").read_text())
    assert inst.driver_install_path == "/opt/Ascend"
    ok(sim.reboot())
    assert sim.tool(NPU_SMI, "info").returncode == 0
    assert (sim.path("/dev/davinci0").stat().st_mode & 0o777) == 0o660  # not --install-for-all
    res = sim.run(["sh", sim.path("/opt/Ascend/driver/script/uninstall.sh")])
    ok(res)
    assert "Driver package uninstalled successfully!" in res.stdout
    for path in (
        "/opt/Ascend/driver",
        "/usr/local/bin/npu-smi",
        "/usr/local/dcmi",
        "/var/lib/dkms/davinci_ascend",
    ):
        assert not sim.path(path).exists(), path
    assert not sim.path("/etc/ascend_install.info").exists()
    ok(sim.reboot())
    assert not list(sim.path("/dev").glob("davinci*"))
    assert "no driver installed" in sim.reboot().stdout
    res = sim.run([repo[DRIVER], "--uninstall"])
    assert res.returncode == 1 and "not installed" in res.stdout


def test_driver_run_uninstall_flag(sim: SimRoot, repo: Mirror) -> None:
    ok(sim.run([repo[DRIVER], "--full", "--quiet"]))
    ok(sim.run([repo[DRIVER], "--uninstall", "--quiet"]))
    assert not sim.path("/usr/local/Ascend/driver").exists()


def test_installer_slow_lets_a_power_loss_cut_the_driver_install_short(sim: SimRoot, repo: Mirror) -> None:
    """A driver install killed (as by a power loss) in its 40 % stage: the parameters are in
    /etc/ascend_install.info, the files of the earlier stages on disk, no version.info and no completion
    status (the real installer writes version.info near its end, Driver_Install_Status=complete last)."""
    sim.set_faults({"installer_slow": {"driver": 1}})
    log = sim.path("/var/log/ascend_seclog/ascend_install.log")
    started = time.monotonic()
    with subprocess.Popen(
        [str(repo[DRIVER]), "--full", "--install-for-all", "--quiet"],
        env=sim.env(),
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    ) as installer:
        while "upgradePercentage:40%" not in (log.read_text() if log.exists() else ""):
            assert installer.poll() is None and time.monotonic() - started < 30, "no 40 % stage"
            time.sleep(0.05)
        os.killpg(installer.pid, signal.SIGKILL)
    assert time.monotonic() - started >= 2  # the 10 % and 30 % stages took a second each
    assert sim.path("/usr/local/Ascend/driver/lib64/driver/libdcmi.so").is_file()
    assert not sim.path("/usr/local/Ascend/driver/version.info").exists()
    info = versions.parse_ascend_install_info(sim.path("/etc/ascend_install.info").read_text())
    assert info.driver_install_path == "/usr/local/Ascend" and info.driver_install_status is None
    assert "installation is incomplete" in sim.reboot().stdout
    # cut short after version.info: the version is on disk, the completion status is not
    sim.set_faults({"installer_slow": None, "installer_crash": {"driver": 100}})
    assert sim.run([repo[DRIVER], "--full", "--install-for-all", "--quiet"]).returncode == 1
    assert versions.parse_driver_version_info(sim.path("/usr/local/Ascend/driver/version.info").read_text())
    info = versions.parse_ascend_install_info(sim.path("/etc/ascend_install.info").read_text())
    assert info.driver_install_status is None
    sim.set_faults({"installer_crash": None})
    ok(sim.run([repo[DRIVER], "--full", "--install-for-all", "--quiet"]))
    info = versions.parse_ascend_install_info(sim.path("/etc/ascend_install.info").read_text())
    assert info.driver_install_status == "complete"
    assert "driver 25.5.1 loaded" in sim.reboot().stdout


def test_installer_crash_knob(sim: SimRoot, repo: Mirror) -> None:
    sim.set_faults({"installer_crash": {"driver": 40}})
    res = sim.run([repo[DRIVER], "--full", "--install-for-all", "--quiet"])
    assert res.returncode == 1
    log = versions.parse_install_log(res.stdout)
    assert log.last_percentage == 40 and log.errors and not log.succeeded
    assert "interrupted" in log.errors[0].message
    # partial: libraries and the uninstall script, no version.info, no npu-smi, no install info
    assert sim.path("/usr/local/Ascend/driver/lib64/driver/libdcmi.so").is_file()
    assert sim.path("/usr/local/Ascend/driver/script/uninstall.sh").is_file()
    assert not sim.path("/usr/local/Ascend/driver/version.info").exists()
    assert not sim.path(NPU_SMI).exists()
    assert "installation is incomplete" in sim.reboot().stdout
    assert not list(sim.path("/dev").glob("davinci*"))
    sim.set_faults({"installer_crash": {"driver": {"percent": 90, "mode": "kill"}}})
    res = sim.run([repo[DRIVER], "--full", "--quiet"])
    assert res.returncode == 137
    assert "[ERROR]" not in res.stdout and "upgradePercentage:90%" in res.stdout
    sim.set_faults({"installer_crash": None})
    ok(sim.run([repo[DRIVER], "--full", "--install-for-all", "--quiet"]))
    ok(sim.reboot())
    assert sim.tool(NPU_SMI, "info").returncode == 0


def test_disk_full_knob(sim: SimRoot, repo: Mirror) -> None:
    sim.set_faults({"disk_full": True})
    for run in (DRIVER, TOOLKIT, FIRMWARE):
        res = sim.run([repo[run], "--full"])
        assert res.returncode == 1
        assert re.search(r"Not enough space left in \S+ \(0 KB\) to decompress \S+ \(\d+ KB\)", res.stderr), (
            res.stderr
        )
    res = sim.run([repo[DRIVER], "--full", "--nodiskspace"])
    assert res.returncode == 1 and "No space left on device" in res.stderr
    assert not sim.path("/usr/local/Ascend").exists()
    sim.set_faults({"disk_full": None})
    ok(sim.run([repo[DRIVER], "--full", "--quiet"]))


def test_package_for_another_architecture_is_refused(sim: SimRoot, repo: Mirror) -> None:
    res = sim.run([repo[f"Ascend-hdk-910b-npu-driver_25.5.1_linux-{OTHER_ARCH}.run"], "--full"])
    assert res.returncode == 1
    assert (
        f"The architecture of the package ({OTHER_ARCH}) does not match the architecture of the system "
        f"({ARCH})" in res.stdout
    )


# ------------------------------------------------------------------------------------------------
# firmware
# ------------------------------------------------------------------------------------------------


def test_firmware_needs_driver_and_returns_2_when_a_reboot_is_needed(sim: SimRoot, repo: Mirror) -> None:
    res = sim.run([repo[FIRMWARE], "--full"])
    assert res.returncode == 1 and "The driver package is not installed" in res.stdout
    ok(sim.run([repo[DRIVER], "--full", "--quiet"]))
    res = sim.run([repo[FIRMWARE], "--full"])
    assert res.returncode == 2, res.stdout
    assert res.stdout.splitlines()[1] == "Uncompressing ASCEND-HDK-910B-NPU FIRMWARE RUN PACKAGE  100%  "
    log = versions.parse_install_log(res.stdout)
    assert log.component == "Firmware" and log.succeeded and log.chips_upgraded == 8
    assert "[INFO]upgradePercentage: 100%" in res.stdout
    assert (
        "Reboot now or after driver installation for the installation/upgrade to take effect." in res.stdout
    )
    fw = versions.parse_firmware_version_info(sim.path("/usr/local/Ascend/firmware/version.info").read_text())
    assert (fw.version, fw.package_version) == ("7.8.0.6.201", "25.5.1")
    inst = versions.parse_ascend_install_info(sim.path("/etc/ascend_install.info").read_text())
    assert (
        inst.firmware_install_path == "/usr/local/Ascend" and inst.driver_install_path == "/usr/local/Ascend"
    )
    ok(sim.reboot())
    board = npu_smi.parse_npu_smi_board(sim.tool(NPU_SMI, "info", "-t", "board", "-i", "0").stdout)
    assert board.firmware_version == "7.8.0.6.201" and board.compatible
    # the same version again: already flashed, exit 0
    assert sim.run([repo[FIRMWARE], "--full", "--quiet"]).returncode == 0
    # an older firmware is staged (exit 2) and only active after the reboot
    assert sim.run([repo[FIRMWARE_OLD], "--upgrade", "--quiet"]).returncode == 2
    board = npu_smi.parse_npu_smi_board(sim.tool(NPU_SMI, "info", "-t", "board", "-i", "0").stdout)
    assert board.firmware_version == "7.8.0.6.201"
    ok(sim.reboot())
    board = npu_smi.parse_npu_smi_board(sim.tool(NPU_SMI, "info", "-t", "board", "-i", "0").stdout)
    assert board.firmware_version == "7.7.0.1.231"
    # uninstalling the package does not un-flash the chips
    ok(sim.run(["sh", sim.path("/usr/local/Ascend/firmware/script/uninstall.sh")]))
    assert not sim.path("/usr/local/Ascend/firmware").exists()
    ok(sim.reboot())
    board = npu_smi.parse_npu_smi_board(sim.tool(NPU_SMI, "info", "-t", "board", "-i", "0").stdout)
    assert board.firmware_version == "7.7.0.1.231"


def test_incompatible_firmware_shows_nok(tmp_path: Path) -> None:
    m = Mirror(tmp_path / "m")
    m.build(arch=ARCH, components=["driver"], driver_compatible_fw=("7.0.0", "7.1.99"))
    sim = SimRoot.create(tmp_path / "n")  # factory firmware 7.7.0.1.231
    ok(sim.run([m[DRIVER], "--full", "--quiet"]))
    ok(sim.reboot())
    board = npu_smi.parse_npu_smi_board(sim.tool(NPU_SMI, "info", "-t", "board", "-i", "0").stdout)
    assert board.compatible is False and board.compatibility == "NOK"


# ------------------------------------------------------------------------------------------------
# CANN
# ------------------------------------------------------------------------------------------------


def test_cann_9_layout_toolkit_ops_nnal(sim: SimRoot, repo: Mirror) -> None:
    res = sim.run([repo[TOOLKIT], "--install"])
    assert res.returncode == 1 and "EULA" in res.stdout  # non-interactive without --quiet
    res = sim.run([repo[OPS], "--install", "--quiet"])
    assert res.returncode == 1 and "Ascend-cann-toolkit 9.1.0 is not installed" in res.stdout
    res = sim.run([repo[NNAL], "--install", "--quiet"])
    assert res.returncode == 1 and "toolkit is not installed" in res.stdout
    res = sim.run([repo[TOOLKIT], "--install"], input="y\n")
    ok(res)
    assert "source /usr/local/Ascend/cann/set_env.sh" in res.stdout
    info_path = sim.path(f"/usr/local/Ascend/cann-9.1.0/{ARCH}-linux/ascend_toolkit_install.info")
    info = versions.parse_cann_install_info(info_path.read_text())
    assert (info.version, info.arch, info.path) == (
        "9.1.0",
        ARCH,
        f"/usr/local/Ascend/cann-9.1.0/{ARCH}-linux",
    )
    assert os.readlink(sim.path("/usr/local/Ascend/cann")) == "cann-9.1.0"
    set_env = sim.path("/usr/local/Ascend/cann/set_env.sh").read_text()
    assert "export ASCEND_TOOLKIT_HOME=/usr/local/Ascend/cann" in set_env
    assert sim.path(f"/usr/local/Ascend/cann/{ARCH}-linux/ascend_toolkit_install.info").is_file()
    ok(sim.run([repo[OPS], "--install", "--quiet"]))
    assert sim.path(f"/usr/local/Ascend/cann-9.1.0/{ARCH}-linux/ascend_ops_install.info").is_file()
    assert sim.path(
        "/usr/local/Ascend/cann-9.1.0/opp/built-in/op_impl/ai_core/tbe/kernel/ascend910b"
    ).is_dir()
    ok(sim.run([repo[NNAL], "--install", "--quiet"]))
    assert "export ATB_HOME_PATH" in sim.path("/usr/local/Ascend/nnal/atb/set_env.sh").read_text()
    assert os.readlink(sim.path("/usr/local/Ascend/nnal/atb/latest")) == "9.1.0"
    assert all(LOG_LINE.match(line) for line in install_log(sim).splitlines())
    # uninstall through the installed scripts
    ok(sim.run(["sh", sim.path(f"/usr/local/Ascend/cann-9.1.0/{ARCH}-linux/script/ops/uninstall.sh")]))
    assert not sim.path(f"/usr/local/Ascend/cann-9.1.0/{ARCH}-linux/ascend_ops_install.info").exists()
    ok(sim.run([repo[NNAL], "--uninstall"]))
    assert not sim.path("/usr/local/Ascend/nnal/atb/set_env.sh").exists()
    ok(sim.run(["sh", sim.path(f"/usr/local/Ascend/cann-9.1.0/{ARCH}-linux/script/uninstall.sh")]))
    assert (
        not sim.path("/usr/local/Ascend/cann-9.1.0").exists()
        and not sim.path("/usr/local/Ascend/cann").is_symlink()
    )


def test_cann_8_3_layout_then_upgrade_to_9(sim: SimRoot, repo: Mirror) -> None:
    ok(sim.run([repo[TOOLKIT_OLD], "--install", "--quiet", "--install-for-all"]))
    vdir = "/usr/local/Ascend/ascend-toolkit/8.3.RC2"
    info = versions.parse_cann_install_info(
        sim.path(f"{vdir}/{ARCH}-linux/ascend_toolkit_install.info").read_text()
    )
    assert info.version == "8.3.RC2" and info.path == f"{vdir}/{ARCH}-linux"
    assert os.readlink(sim.path("/usr/local/Ascend/ascend-toolkit/latest")) == "8.3.RC2"
    assert sim.path(
        f"/usr/local/Ascend/ascend-toolkit/latest/{ARCH}-linux/ascend_toolkit_install.info"
    ).is_file()
    assert "ascend-toolkit/latest" in sim.path("/usr/local/Ascend/ascend-toolkit/set_env.sh").read_text()
    ok(sim.run([repo[KERNELS_OLD], "--install", "--quiet"]))
    assert sim.path(f"{vdir}/{ARCH}-linux/ascend_kernels_install.info").is_file()
    # >= 8.5 over an older toolkit needs --upgrade (or uninstall first)
    res = sim.run([repo[TOOLKIT], "--install", "--quiet"])
    assert res.returncode == 1
    assert (
        "Ascend-cann-toolkit 8.3.RC2 is already installed in /usr/local/Ascend. Use --upgrade" in res.stdout
    )
    ok(sim.run([repo[TOOLKIT], "--upgrade", "--quiet"]))
    assert not sim.path(vdir).exists()
    assert os.readlink(sim.path("/usr/local/Ascend/cann")) == "cann-9.1.0"


def test_cann_install_path(sim: SimRoot, repo: Mirror) -> None:
    ok(sim.run([repo[TOOLKIT], "--install", "--quiet", "--install-path=/opt/ascend"]))
    assert sim.path(f"/opt/ascend/cann-9.1.0/{ARCH}-linux/ascend_toolkit_install.info").is_file()
    ok(sim.run([repo[OPS], "--install", "--quiet", "--install-path=/opt/ascend"]))
    res = sim.run([repo[TOOLKIT], "--full", "--upgrade"])
    assert res.returncode == 1 and "Only one operation" in res.stdout


# ------------------------------------------------------------------------------------------------
# Ascend Docker Runtime
# ------------------------------------------------------------------------------------------------


def test_docker_runtime_merges_daemon_json(sim: SimRoot, repo: Mirror) -> None:
    daemon = sim.path("/etc/docker/daemon.json")
    daemon.parent.mkdir(parents=True)
    daemon.write_text(
        json.dumps({"data-root": "/data/docker", "runtimes": {"other": {"path": "/usr/bin/x"}}})
    )
    res = sim.run([repo[RUNTIME], "--install"], input="y\n")
    ok(res)
    assert "[INFO] /etc/docker/daemon.json modify success" in res.stdout
    data = json.loads(daemon.read_text())
    runtime = "/usr/local/Ascend/Ascend-Docker-Runtime/ascend-docker-runtime"
    assert data["data-root"] == "/data/docker"
    assert data["runtimes"]["other"] == {"path": "/usr/bin/x"}
    assert data["runtimes"]["ascend"] == {"path": runtime, "runtimeArgs": []}
    assert data["default-runtime"] == "ascend"
    assert os.access(sim.path(runtime), os.X_OK)
    ok(sim.run([repo[RUNTIME], "--install"], input="y\n"))  # idempotent
    assert json.loads(daemon.read_text()) == data
    ok(sim.run(["sh", sim.path("/usr/local/Ascend/Ascend-Docker-Runtime/script/uninstall.sh")]))
    assert json.loads(daemon.read_text()) == {
        "data-root": "/data/docker",
        "runtimes": {"other": {"path": "/usr/bin/x"}},
    }
    assert not sim.path(runtime).exists()


def test_docker_runtime_without_daemon_json_and_failures(sim: SimRoot, repo: Mirror) -> None:
    ok(sim.run([repo[RUNTIME], "--install", "--install-scene=docker"], input="y\n"))
    assert json.loads(sim.path("/etc/docker/daemon.json").read_text())["default-runtime"] == "ascend"
    res = sim.run([repo[RUNTIME], "--install", "--install-scene=containerd"], input="y\n")
    assert res.returncode == 1 and "containerd" in res.stdout
    sim.path("/etc/docker/daemon.json").write_text("{not json")
    res = sim.run([repo[RUNTIME], "--install"], input="y\n")
    assert res.returncode == 1 and "ascend-docker-plugin-install-helper add" in res.stdout
    assert sim.path("/etc/docker/daemon.json").read_text() == "{not json"
    res = sim.run([repo[RUNTIME], "--full"])
    assert res.returncode == 1 and "[ERROR] failed, unsupported parameters: --full" in res.stdout


def test_crash_knob_for_cann_packages(sim: SimRoot, repo: Mirror) -> None:
    sim.set_faults({"installer_crash": ["toolkit"]})
    res = sim.run([repo[TOOLKIT], "--install", "--quiet"])
    assert res.returncode == 1 and "[ERROR]Toolkit package install failed at 50%" in res.stdout
    assert sim.path("/usr/local/Ascend/cann-9.1.0/lib64/libascendcl.so").is_file()
    assert not sim.path(f"/usr/local/Ascend/cann-9.1.0/{ARCH}-linux/ascend_toolkit_install.info").exists()
    sim.set_faults({"installer_crash": None})
    ok(sim.run([repo[TOOLKIT], "--install", "--quiet"]))


# ------------------------------------------------------------------------------------------------
# formats against the verbatim samples
# ------------------------------------------------------------------------------------------------


def test_version_files_match_samples() -> None:
    driver_a, firmware_a, _driver_b, _firmware_b, cann_85, cann_82 = sample_segments(
        "driver_version_info.txt"
    )
    driver = {
        "version": "25.0.rc1.1",
        "compatible_fw": ["7.0.0", "7.7.99"],
        "innerversion": "V100R001C21SPC002B220",
    }
    assert installer.driver_version_info(driver) == driver_a
    assert (
        installer.firmware_version_info({"version": "7.7.0.1.231", "package_version": "25.0.rc1.1"})
        == firmware_a
    )
    toolkit = {"component": "toolkit", "name": "Ascend-cann-toolkit_8.5.0_linux-aarch64", "arch": "aarch64"}
    assert (
        installer.cann_info({**toolkit, "version": "8.5.0"}, "/usr/local/Ascend/cann-8.5.0/aarch64-linux")
        == cann_85
    )
    old = {**toolkit, "version": "8.2.RC1", "innerversion": "V100R001C22SPC001B231"}
    assert installer.cann_info(old, "/usr/local/Ascend/ascend-toolkit/8.2.RC1/aarch64-linux") == cann_82


def _messages(text: str) -> list[str]:
    return [
        re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "T", e.message)
        for e in versions.parse_install_log(text).entries
    ]


def test_install_output_follows_the_sample_logs(sim: SimRoot, repo: Mirror) -> None:
    driver_sample, firmware_sample = sample_segments("driver_firmware_install_logs.txt")
    res = sim.run(
        [repo[DRIVER], "--full", "--install-username=root", "--install-usergroup=root", "--install-for-all"]
    )
    ok(res)
    assert res.stdout.splitlines()[0] == driver_sample.splitlines()[0]  # Verifying archive integrity...
    want, got = _messages(driver_sample), _messages(res.stdout)
    assert got[:10] == want[:10]  # Start time ... upgradePercentage:90%
    assert got[10] == "upgradePercentage:100%" and got[-1] == want[-1]  # End time
    # the simulated driver is loaded at the next boot (the sample's driver loaded immediately)
    assert (
        got[11]
        == "Driver package installed successfully! Reboot needed for installation/upgrade to take effect!"
    )
    res = sim.run([repo[FIRMWARE], "--full"])
    assert res.returncode == 2
    want, got = _messages(firmware_sample), _messages(res.stdout)
    assert got[:5] == want[:5]
    assert got[-3:] == want[-3:]  # chips upgraded, installed successfully, End time


def test_npu_smi_in_sbin(sim: SimRoot, repo: Mirror) -> None:
    path = sim.path(hardware.HW_CONFIG)
    config = json.loads(path.read_text())
    config["npu_smi_path"] = "/usr/local/sbin/npu-smi"
    path.write_text(json.dumps(config))
    ok(sim.run([repo[DRIVER], "--full", "--quiet"]))
    assert sim.path("/usr/local/sbin/npu-smi").is_file() and not sim.path(NPU_SMI).exists()
    ok(sim.reboot())
    ok(sim.tool("/usr/local/sbin/npu-smi", "info"))
    ok(sim.run([repo[DRIVER], "--uninstall"]))
    assert not sim.path("/usr/local/sbin/npu-smi").exists()
