"""The ``ascend`` filters (plugins/filter/ascend.py): install plans, reboots, vendor outputs, layouts.

These pure functions decide what the ``ascend_driver`` and ``cann`` roles do on a node, so each rule of
FACTS.md §3 is pinned here: fresh install = driver then firmware, upgrade = firmware then driver, firmware
exit code 0 or 2 = success, the documented failures get their documented fix, both CANN layouts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.ascend import lock
from tests.helpers import SAMPLES, load_module

pytestmark = pytest.mark.unit
ROOT = Path(__file__).parents[2]
LOCKED = lock.default_stack()
OLD = {"driver": "25.0.rc1.1", "firmware": "7.7.0.1.231", "cann": "8.2.RC1"}


F = load_module("provision_filter_ascend", ROOT / "plugins/filter/ascend.py")


def state(**values: Any) -> dict[str, Any]:
    keys = (
        "installed_driver",
        "installed_firmware",
        "loaded_driver",
        "flashed_firmware",
        "recorded_driver",
        "recorded_firmware",
        "npu_smi_error",
    )
    return {key: values.get(key) for key in keys}


def plan(current: dict[str, Any], **kwargs: Any) -> list[tuple[str, str, list[str]]]:
    steps = F.ascend_driver_steps(current, LOCKED["driver"], LOCKED["firmware"], **kwargs)
    return [(s["component"], s["action"], s["flags"]) for s in steps]


# -- the version lock -----------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["driver", "firmware", "cann", "nnal"])
def test_locked_version_is_the_lock(key: str) -> None:
    assert F.ascend_locked_version(key) == str(LOCKED[key])
    assert F.ascend_locked_version(key, "") == str(LOCKED[key])
    assert F.ascend_locked_version(key, LOCKED["name"]) == str(LOCKED[key])


def test_locked_version_of_an_unknown_stack_says_which_exist() -> None:
    with pytest.raises(ValueError, match=r"provision_stack '0\.1\.0' is not in the version lock"):
        F.ascend_locked_version("driver", "0.1.0")


@pytest.mark.parametrize(
    ("role", "variable", "key"),
    [
        ("ascend_driver", "ascend_driver_version", "driver"),
        ("ascend_driver", "ascend_driver_firmware_version", "firmware"),
        ("cann", "cann_version", "cann"),
        ("cann", "cann_nnal_version", "nnal"),
    ],
)
def test_role_defaults_read_the_lock(role: str, variable: str, key: str) -> None:
    defaults = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())
    lookup = f"'{key}' | provision.ascend.ascend_locked_version(provision_stack | default(''))"
    assert defaults[variable] == f"{{{{ {lookup} }}}}"


# -- driver + firmware plan ------------------------------------------------------------------------------


def test_fresh_install_is_driver_then_firmware() -> None:
    assert plan(state()) == [
        ("driver", "install", ["--full", "--install-for-all", "--quiet", "--nox11"]),
        ("firmware", "install", ["--full", "--quiet", "--nox11"]),
    ]


def test_upgrade_is_firmware_then_driver() -> None:
    old = state(
        installed_driver=OLD["driver"],
        installed_firmware=OLD["firmware"],
        loaded_driver=OLD["driver"],
        flashed_firmware=OLD["firmware"],
        recorded_driver=OLD["driver"],
        recorded_firmware=OLD["firmware"],
    )
    assert plan(old) == [
        ("firmware", "upgrade", ["--upgrade", "--quiet", "--nox11"]),
        ("driver", "upgrade", ["--upgrade", "--install-for-all", "--quiet", "--nox11"]),
    ]


def test_file_names_follow_the_vendor() -> None:
    steps = F.ascend_driver_steps(state(), "25.5.1", "7.8.0.6.201", arch="aarch64")
    assert [s["file"] for s in steps] == [
        "Ascend-hdk-910b-npu-driver_25.5.1_linux-aarch64.run",
        "Ascend-hdk-910b-npu-firmware_7.8.0.6.201.run",
    ]
    assert [s["ok_rcs"] for s in steps] == [[0], [0, 2]]


def test_converged_node_needs_nothing() -> None:
    done = state(
        installed_driver=LOCKED["driver"],
        installed_firmware=LOCKED["firmware"],
        loaded_driver=LOCKED["driver"],
        flashed_firmware=LOCKED["firmware"],
        recorded_driver=LOCKED["driver"],
        recorded_firmware=LOCKED["firmware"],
    )
    assert plan(done) == []


def test_installed_but_not_rebooted_needs_no_reinstall() -> None:
    """An earlier run installed and recorded the versions; the node only waits for its reboot."""
    pending = state(
        installed_driver=LOCKED["driver"],
        installed_firmware=LOCKED["firmware"],
        recorded_driver=LOCKED["driver"],
        recorded_firmware=LOCKED["firmware"],
        npu_smi_error="dcmi module initialize failed. ret is -8020",
    )
    assert plan(pending) == []
    reboot = F.ascend_driver_reboot_needed(pending, LOCKED["driver"], LOCKED["firmware"], False)
    assert reboot["needed"] and "not loaded" in reboot["reason"]


def test_running_install_without_a_fact_is_adopted() -> None:
    """Installed by hand at the wanted versions and running: record it, do not reinstall (no reboot)."""
    by_hand = state(
        installed_driver=LOCKED["driver"],
        installed_firmware=LOCKED["firmware"],
        loaded_driver=LOCKED["driver"],
        flashed_firmware=LOCKED["firmware"],
    )
    assert plan(by_hand) == []


def test_unrecorded_and_not_running_install_is_overwritten_firmware_first() -> None:
    """Files at the wanted version but neither recorded nor running: an interrupted install; overwrite."""
    broken = state(installed_driver=LOCKED["driver"], installed_firmware=LOCKED["firmware"])
    assert plan(broken) == [
        ("firmware", "overwrite", ["--full", "--quiet", "--nox11"]),
        ("driver", "overwrite", ["--full", "--install-for-all", "--quiet", "--nox11"]),
    ]


def test_a_driver_install_cut_short_after_its_version_info_is_overwritten() -> None:
    """version.info already says the wanted driver and it loads after the power came back, but the installer
    never wrote Driver_Install_Status=complete and provision recorded nothing: reinstall, do not adopt."""
    cut_short = {
        **state(
            installed_driver=LOCKED["driver"],
            installed_firmware=LOCKED["firmware"],
            loaded_driver=LOCKED["driver"],
            flashed_firmware=LOCKED["firmware"],
        ),
        "driver_install_status": None,
    }
    assert plan(cut_short) == [("driver", "overwrite", ["--full", "--install-for-all", "--quiet", "--nox11"])]
    assert plan({**cut_short, "driver_install_status": "complete"}) == []  # adopted, as by hand
    # recorded by provision: trusted (a driver package that never writes the status is not reinstalled)
    recorded = {**cut_short, "recorded_driver": LOCKED["driver"], "recorded_firmware": LOCKED["firmware"]}
    assert plan(recorded) == []
    # an older driver cut short is upgraded as any older driver
    older = {**cut_short, "installed_driver": OLD["driver"], "loaded_driver": OLD["driver"]}
    assert plan(older) == [("driver", "upgrade", ["--upgrade", "--install-for-all", "--quiet", "--nox11"])]


def test_only_the_firmware_differs() -> None:
    half = state(
        installed_driver=LOCKED["driver"],
        installed_firmware=OLD["firmware"],
        loaded_driver=LOCKED["driver"],
        recorded_driver=LOCKED["driver"],
    )
    assert plan(half) == [("firmware", "upgrade", ["--upgrade", "--quiet", "--nox11"])]


def test_driver_without_firmware_installs_the_firmware_fully() -> None:
    no_firmware = state(installed_driver=OLD["driver"], loaded_driver=OLD["driver"])
    assert [(c, a) for c, a, _ in plan(no_firmware)] == [("firmware", "install"), ("driver", "upgrade")]


def test_install_options_become_flags() -> None:
    steps = plan(
        state(),
        install_path="/opt/Ascend",
        install_for_all=False,
        user="npu",
        group="npu",
    )
    assert steps[0] == (
        "driver",
        "install",
        [
            "--full",
            "--install-path=/opt/Ascend",
            "--install-username=npu",
            "--install-usergroup=npu",
            "--quiet",
            "--nox11",
        ],
    )
    # The firmware package takes none of them.
    assert steps[1][2] == ["--full", "--quiet", "--nox11"]


# -- reboot decision ----------------------------------------------------------------------------------------


def test_reboot_after_an_install_in_this_run() -> None:
    assert F.ascend_driver_reboot_needed(state(), "25.5.1", "7.8.0.6.201", True)["needed"]


def test_no_reboot_when_the_running_versions_are_the_wanted_ones() -> None:
    running = state(
        installed_driver="25.5.1",
        installed_firmware="7.8.0.6.201",
        loaded_driver="25.5.1",
        flashed_firmware="7.8.0.6.201",
    )
    assert not F.ascend_driver_reboot_needed(running, "25.5.1", "7.8.0.6.201", False)["needed"]


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"loaded_driver": "25.0.rc1.1"}, "driver 25.0.rc1.1 is loaded"),
        ({"flashed_firmware": "7.7.0.1.231"}, "firmware 7.7.0.1.231 is flashed"),
    ],
)
def test_reboot_when_an_old_version_still_runs(changes: dict[str, str], reason: str) -> None:
    current = {
        **state(
            installed_driver="25.5.1",
            installed_firmware="7.8.0.6.201",
            loaded_driver="25.5.1",
            flashed_firmware="7.8.0.6.201",
        ),
        **changes,
    }
    decision = F.ascend_driver_reboot_needed(current, "25.5.1", "7.8.0.6.201", False)
    assert decision["needed"]
    assert reason in decision["reason"]


def test_a_busy_device_is_no_reason_to_reboot() -> None:
    busy = state(
        installed_driver="25.5.1",
        installed_firmware="7.8.0.6.201",
        npu_smi_error="dcmi module initialize failed. ret is -8005",
    )
    assert not F.ascend_driver_reboot_needed(busy, "25.5.1", "7.8.0.6.201", False)["needed"]


# -- vendor outputs -----------------------------------------------------------------------------------------


def _sample_block(name: str, start: str) -> str:
    """The first block of a sample file after the line starting with ``start`` (comments dropped)."""
    lines = (SAMPLES / name).read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith(start))
    block = []
    for line in lines[index + 1 :]:
        if line.startswith("#"):
            break
        block.append(line)
    return "\n".join(block).strip("\n") + "\n"


def test_board_output_gives_the_loaded_driver_and_flashed_firmware() -> None:
    board = F.ascend_npu_smi_board(_sample_block("npu_smi_info_t_board_i_0.txt", "#   const boardOutput"))
    assert board == {
        "ok": True,
        "error": None,
        "software_version": "25.5.1",
        "firmware_version": "7.8.0.6.201",
        "compatible": True,
    }


def test_board_without_a_driver_is_not_ok() -> None:
    text = "DrvMngGetConsoleLogLevel failed. (g_conLogLevel=3)\ndcmi module initialize failed. ret is -8020\n"
    board = F.ascend_npu_smi_board(text)
    assert not board["ok"]
    assert board["error"] == "dcmi module initialize failed. ret is -8020"
    assert F.ascend_npu_smi_board("")["ok"] is False


def test_real_install_logs_succeed() -> None:
    text = (SAMPLES / "driver_firmware_install_logs.txt").read_text()
    driver_part, firmware_part = text.split("# $ ./Ascend-hdk-910b-npu-firmware")
    driver = F.ascend_install_result(driver_part, 0, "driver")
    assert (driver["ok"], driver["errors"], driver["message"]) == (True, [], "")
    firmware = F.ascend_install_result(firmware_part, 2, "firmware")
    assert firmware["ok"] and firmware["reboot"]


@pytest.mark.parametrize(("rc", "ok"), [(0, True), (2, True), (1, False), (137, False)])
def test_firmware_exit_codes(rc: int, ok: bool) -> None:
    assert F.ascend_install_result("", rc, "firmware")["ok"] is ok


def test_driver_exit_code_2_is_a_failure() -> None:
    assert not F.ascend_install_result("", 2, "driver")["ok"]


LOG = "[Driver] [2026-11-30 10:00:00] [{level}]{message}\n"


@pytest.mark.parametrize(
    ("message", "fix"),
    [
        ("The list of missing tools: lspci,ifconfig,", "pciutils"),
        ("Dkms install failed, details in : var/log/ascend_seclog/ascend_install.log.", "rm -rf"),
        (
            "The running user HwHiAiUser or user group HwHiAiUser does not exist. Create them first",
            "create the HwHiAiUser user",
        ),
        (
            "Driver package install failed at 40%: the installation process was interrupted, the package is "
            "partially installed. Uninstall it and install again.",
            "uninstall.sh",
        ),
        ("Permission denied, the package must be installed by the root user.", "root"),
    ],
)
def test_documented_failures_get_their_fix(message: str, fix: str) -> None:
    result = F.ascend_install_result(
        LOG.format(level="INFO", message="Start time: now") + LOG.format(level="ERROR", message=message),
        1,
        "driver",
    )
    assert not result["ok"]
    assert result["message"].startswith(f"driver installer failed (exit code 1): {message}")
    assert fix in result["hint"]
    assert fix in result["message"]


def test_missing_tools_are_listed() -> None:
    result = F.ascend_install_result(
        LOG.format(level="ERROR", message="The list of missing tools: lspci,"), 1
    )
    assert result["missing_tools"] == ["lspci"]
    assert not result["dkms_failed"]


def test_dkms_failure_is_recognised_for_the_residue_fix() -> None:
    text = LOG.format(level="ERROR", message="Dkms install failed, details in : var/log/ascend_seclog/x.log.")
    assert F.ascend_install_result(text, 1, "driver")["dkms_failed"]
    assert not F.ascend_install_result(text, 0, "driver")["dkms_failed"]


def test_makeself_errors_without_installer_lines() -> None:
    text = "Not enough space left in /tmp (0 KB) to decompress ./x.run (120 KB)\nUse --nodiskspace option\n"
    result = F.ascend_install_result(text, 1, "toolkit")
    assert result["message"].startswith("toolkit installer failed (exit code 1): Use --nodiskspace option")
    assert "free disk space" in result["message"]


# -- CANN ---------------------------------------------------------------------------------------------------


def test_cann_layouts() -> None:
    new = F.ascend_cann_layout("9.1.0", "aarch64")
    assert new == {
        "version": "9.1.0",
        "new_layout": True,
        "home": "/usr/local/Ascend/cann-9.1.0",
        "install_info": "/usr/local/Ascend/cann-9.1.0/aarch64-linux/ascend_toolkit_install.info",
        "ops_component": "ops",
        "ops_info": "/usr/local/Ascend/cann-9.1.0/aarch64-linux/ascend_ops_install.info",
        "set_env": "/usr/local/Ascend/cann/set_env.sh",
        "toolkit_file": "Ascend-cann-toolkit_9.1.0_linux-aarch64.run",
        "ops_file": "Ascend-cann-910b-ops_9.1.0_linux-aarch64.run",
    }
    old = F.ascend_cann_layout("8.3.RC2", "x86_64", "/opt/Ascend/")
    assert old["home"] == "/opt/Ascend/ascend-toolkit/8.3.RC2"
    assert old["set_env"] == "/opt/Ascend/ascend-toolkit/set_env.sh"
    assert old["ops_file"] == "Ascend-cann-kernels-910b_8.3.RC2_linux-x86_64.run"
    assert F.ascend_cann_layout("8.5.0")["new_layout"]


def test_cann_install_info_sample() -> None:
    text = _sample_block("driver_version_info.txt", "# Same doc, CANN install info")
    assert F.ascend_cann_install_info(text) == {
        "version": "8.5.0",
        "package_name": "Ascend-cann-toolkit",
        "arch": "aarch64",
        "path": "/usr/local/Ascend/cann-8.5.0/aarch64-linux",
    }


def _found(*paths: str) -> list[dict[str, str]]:
    return [{"path": p} for p in paths]


def test_cann_installed_from_find_results() -> None:
    base = "/usr/local/Ascend"
    found = F.ascend_cann_installed(
        _found(
            f"{base}/cann-9.1.0/x86_64-linux/ascend_toolkit_install.info",
            f"{base}/cann-9.1.0/x86_64-linux/ascend_ops_install.info",
            f"{base}/ascend-toolkit/8.2.RC1/x86_64-linux/ascend_toolkit_install.info",
            f"{base}/ascend-toolkit/8.2.RC1/x86_64-linux/ascend_kernels_install.info",
            f"{base}/ascend-toolkit/latest/x86_64-linux/ascend_toolkit_install.info",
            f"{base}/nnal/atb/9.1.0/version.info",
            f"{base}/nnal/atb/8.2.RC1/version.info",
            f"{base}/driver/version.info",
            f"{base}/firmware/version.info",
        ),
        base,
    )
    assert found == {
        "toolkits": ["8.2.RC1", "9.1.0"],
        "ops": ["9.1.0"],
        "kernels": ["8.2.RC1"],
        "nnal": ["8.2.RC1", "9.1.0"],
    }


NOTHING: dict[str, list[str]] = {"toolkits": [], "ops": [], "kernels": [], "nnal": []}


def cann_plan(installed: dict[str, list[str]], recorded: dict[str, str], version: str) -> list[Any]:
    steps = F.ascend_cann_steps(installed, recorded, version, version, arch="aarch64")
    return [(s["component"], s["action"], s["flags"][0]) for s in steps]


def test_cann_fresh_install_order() -> None:
    assert cann_plan(NOTHING, {}, "9.1.0") == [
        ("toolkit", "install", "--install"),
        ("ops", "install", "--install"),
        ("nnal", "install", "--install"),
    ]
    assert [s[0] for s in cann_plan(NOTHING, {}, "8.2.RC1")] == ["toolkit", "kernels", "nnal"]


def test_cann_flags() -> None:
    steps = F.ascend_cann_steps(NOTHING, {}, "9.1.0", "9.1.0", arch="aarch64", install_path="/opt/Ascend")
    assert steps[0]["flags"] == ["--install", "--install-for-all", "--install-path=/opt/Ascend", "--quiet"]
    assert steps[0]["file"] == "Ascend-cann-toolkit_9.1.0_linux-aarch64.run"
    assert steps[2]["file"] == "Ascend-cann-nnal_9.1.0_linux-aarch64.run"


def test_cann_upgrade_from_the_old_layout() -> None:
    old = {"toolkits": ["8.2.RC1"], "ops": [], "kernels": ["8.2.RC1"], "nnal": ["8.2.RC1"]}
    recorded = {"toolkit": "8.2.RC1", "ops": "8.2.RC1", "nnal": "8.2.RC1"}
    assert cann_plan(old, recorded, "9.1.0") == [
        ("toolkit", "upgrade", "--upgrade"),
        ("ops", "install", "--install"),
        ("nnal", "install", "--install"),
    ]


def test_cann_converged_needs_nothing_and_unrecorded_is_reinstalled() -> None:
    done = {"toolkits": ["9.1.0"], "ops": ["9.1.0"], "kernels": [], "nnal": ["9.1.0"]}
    assert cann_plan(done, {"toolkit": "9.1.0", "ops": "9.1.0", "nnal": "9.1.0"}, "9.1.0") == []
    assert [s[:2] for s in cann_plan(done, {}, "9.1.0")] == [
        ("toolkit", "overwrite"),
        ("ops", "install"),
        ("nnal", "install"),
    ]


def test_cann_missing_nnal_only() -> None:
    partial = {"toolkits": ["9.1.0"], "ops": ["9.1.0"], "kernels": [], "nnal": []}
    recorded = {"toolkit": "9.1.0", "ops": "9.1.0"}
    assert cann_plan(partial, recorded, "9.1.0") == [("nnal", "install", "--install")]
    steps = F.ascend_cann_steps(partial, recorded, "9.1.0", "9.1.0", nnal=False)
    assert steps == []


def test_stack_report_against_the_lock() -> None:
    pinned = lock.default_stack()
    local = {
        "ascend": {"driver": {"version": pinned["driver"]}, "firmware": {"version": pinned["firmware"]}},
        "cann": {"toolkit": pinned["cann"], "nnal": pinned["nnal"]},
    }
    report = F.ascend_stack_report(local)
    assert report["stack"] == pinned["name"] and report["differences"] == []
    assert report["line"] == (
        f"stack {pinned['name']}: driver {pinned['driver']}, firmware {pinned['firmware']}, "
        f"CANN {pinned['cann']}, NNAL {pinned['nnal']}; matches the lock"
    )
    local["cann"] = {"toolkit": "8.2.RC1", "nnal": ""}
    differing = F.ascend_stack_report(local)
    assert differing["differences"] == [
        f"cann 8.2.RC1 (lock {pinned['cann']})",
        f"nnal none (lock {pinned['nnal']})",
    ]
    assert differing["line"].endswith(
        f"CANN 8.2.RC1, NNAL none; differs from the lock: cann 8.2.RC1 (lock {pinned['cann']}), "
        f"nnal none (lock {pinned['nnal']})"
    )
    assert F.ascend_stack_report(None)["running"]["driver"] == ""
    unreadable = {"ascend": "error loading fact - please check content", "cann": {"toolkit": pinned["cann"]}}
    read = F.ascend_stack_report(unreadable)  # a fact file Ansible could not load: its versions read as none
    assert read["running"] == {"driver": "", "firmware": "", "cann": pinned["cann"], "nnal": ""}


@pytest.mark.parametrize("chip", ["910b", "a3", "310p", "910c"])
@pytest.mark.parametrize("version", ["8.3.RC2", "9.1.0"])
def test_the_filters_name_files_as_provision_ascend_files_does(chip: str, version: str) -> None:
    """One home for the vendor's file names: the roles' filters and ``provision bundle`` (which reads
    provision.ascend.files) name the same packages, a fresh node's CANN steps being exactly its files."""
    from provision.ascend import files

    assert F.ascend_driver_files("25.5.1", "7.8.0.6.201", chip=chip) == files.driver_files(
        "25.5.1", "7.8.0.6.201", chip=chip
    )
    assert F.ascend_cann_layout(version, "x86_64", "/opt/A", chip) == files.cann_layout(
        version, "x86_64", "/opt/A", chip
    )
    steps = F.ascend_cann_steps(NOTHING, {}, version, "8.5.0", arch="x86_64", chip=chip)
    assert [(s["component"], s["version"], s["file"]) for s in steps] == files.cann_files(
        version, "8.5.0", arch="x86_64", chip=chip
    )
    assert files.cann_files(version, arch="x86_64", chip=chip, nnal=False) == [
        (s["component"], s["version"], s["file"])
        for s in F.ascend_cann_steps(NOTHING, {}, version, arch="x86_64", chip=chip, nnal=False)
    ]


# ------------------------------------------------------------------------------ what a download is checked by


def test_a_download_is_checked_by_the_inventorys_pin_then_the_locks_then_the_mirrors_sums(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = f"Ascend-hdk-910b-npu-driver_{LOCKED['driver']}_linux-aarch64.run"
    mirror = "http://mirror.lan/ascend/"
    var = "ascend_driver_checksums"
    vendor, site = "a" * 64, "b" * 64
    assert F.ascend_file_checksum(name, {}, var, mirror) == {
        "checksum": "sha256:http://mirror.lan/ascend/sha256sums.txt",
        "source": "from sha256sums.txt on the mirror",
        "pinned": False,
    }
    monkeypatch.setattr(lock, "sha256_pins", lambda: {name: vendor})
    assert F.ascend_file_checksum(name, {}, var, mirror) == {
        "checksum": f"sha256:{vendor}",
        "source": "pinned in the version lock, provision/data/versions.yml",
        "pinned": True,
    }
    assert F.ascend_file_checksum(name, {name: site}, var, mirror) == {
        "checksum": f"sha256:{site}",
        "source": "pinned in ascend_driver_checksums",
        "pinned": True,
    }
    # another file of the node keeps the mirror's list
    other = f"Ascend-hdk-910b-npu-firmware_{LOCKED['firmware']}.run"
    assert F.ascend_file_checksum(other, None, var, mirror)["pinned"] is False


@pytest.mark.parametrize("role", ["ascend_driver", "cann"])
def test_the_fetch_tasks_take_their_checksum_and_message_from_the_filter(role: str) -> None:
    """The roles hold no second copy of the rule: get_url's checksum and the refusal's source are the
    filter's (its behaviour is tested above; a mismatch refusal on the cluster in test_driver.py)."""
    tasks = yaml.safe_load((ROOT / f"roles/{role}/tasks/fetch.yml").read_text())
    download = next(t for t in tasks if "ansible.builtin.get_url" in t)
    assert "provision.ascend.ascend_file_checksum" in download["ansible.builtin.get_url"]["checksum"]
    check = next(t for t in tasks if t.get("name") == "Check every .run file arrived intact")
    assert f"__{role}_pin.source" in check["ansible.builtin.assert"]["fail_msg"]
    assert "provision.ascend.ascend_file_checksum" in check["vars"][f"__{role}_pin"]
