"""``provision doctor``'s matcher on real captures: a healthy Atlas 800 A2 node built from verbatim tool
outputs (tests/fixtures/samples), then one real fault at a time, each named with its evidence.

Log lines are quoted verbatim from the public reports ``failures.yml`` cites (:data:`REAL_LINES`); the
probe's own scripts run for real here where they can (no NPUs on this machine).
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from provision.doctor.catalog import shipped
from provision.doctor.conditions import Expected
from provision.doctor.diagnose import diagnose
from provision.doctor.probe import DISK_PATHS, collect, npu_pids, probe_command
from tests.helpers import SAMPLES, fault_logs, probe_section, sample, without_comments

pytestmark = pytest.mark.unit

CATALOG = shipped()
DRIVER = "25.0.rc1.1"  # what the sample version.info says
EXPECTED = Expected(driver=DRIVER, cann="9.1.0", nnal="9.1.0", npu_count=8)

# failure id -> (a line quoted verbatim from the public report, the report's URL)
REAL_LINES: dict[str, tuple[str, str]] = {
    "npu-busy-8005": (
        "dcmi module initialize failed. ret is -8005",
        "https://github.com/vllm-project/vllm-ascend/issues/2698",
    ),
    "npu-shared-507008": (
        "ERROR 08-26 03:01:18 [engine.py:458]         [Init][Version]init soc version failed, ret = 507008"
        "[FUNC:ReportInnerError][FILE:log_inner.cpp][LINE:145]",
        "https://github.com/vllm-project/vllm-ascend/issues/2542",
    ),
    "hccl-socket-timeout-ei0006": (
        "[PID: 749] 2025-12-29-03:16:15.787.356 Get_Socket_Timeout(EI0006): Getting socket times out. "
        "Reason: 1. The remote does not initiate a connect request. some NPUs in the cluster are abnormal.",
        "https://github.com/vllm-project/vllm-ascend/issues/5461",
    ),
    "hccl-link-establish-timeout": (
        "[ERROR] HCCL(106335,):2026-05-21-21:39:58.705.534 [hccl_socket_manager.cc:796] [128655][Wait]"
        "[LinkEstablish]wait socket establish timeout, role[0] rank[0] timeout[120 s]",
        "https://github.com/vllm-project/vllm-ascend/issues/9447",
    ),
    "hccl-transport-init-ei0009": (
        "[rank1]: EI0009: [PID: 2225827] 2025-09-24-20:59:48.119.066 Transport init error. Reason: "
        "[Create][DestLink]Create Dest error! createLink para:rank[1]-localUserrank[1]-"
        "localIpAddr[172.16.0.114], dst_rank[0]-remoteUserrank[0]-remote_ip_addr[172.16.0.114]",
        "https://github.com/vllm-project/vllm-ascend/issues/3162",
    ),
    "visible-devices-mismatch": (
        "[ERROR] RUNTIME(42,mindie_llm_backend_connector):2025-11-18-09:33:13.673.818 [api_error.cc:2350]58 "
        "SetDevice:Set visible device failed, invalid device=0, input visible devices:4",
        "https://github.com/gpustack/gpustack/issues/3352",
    ),
    "ascend-runtime-hook-failed": (
        "Error response from daemon: failed to create task for container: failed to create shim task: "
        "OCI runtime create failed: runc create failed: unable to start container process: "
        "error during container init: "
        "error running prestart hook #0: exit status 255, stdout: , stderr: runc start prestart-hook ...",
        "https://github.com/google-deepmind/alphafold/issues/1073",
    ),
    "platform-not-activated": (
        "INFO 02-19 16:03:08 __init__.py:187] No platform detected, vLLM is running on UnspecifiedPlatform",
        "https://github.com/vllm-project/vllm-ascend/issues/115",
    ),
    "hbm-out-of-memory": (
        "RuntimeError: NPU out of memory. Tried to allocate 3.47 GiB (NPU 0; 60.97 GiB total capacity; "
        "58.92 GiB already allocated; 58.92 GiB current active; 1.66 GiB free; "
        "58.95 GiB reserved in total by PyTorch)",
        "https://github.com/vllm-project/vllm-ascend/issues/1987",
    ),
    "engine-ready-timeout": (
        "TimeoutError: Timed out waiting for engines to send initial message on input socket.",
        "https://github.com/vllm-project/vllm/pull/35616",
    ),
    "device-lost": (
        "[PID: 379] 2026-05-01-10:59:07.429.194 Device_Absent/Abnormal(EL0001): Device not found or invalid.",
        "https://github.com/vllm-project/vllm-ascend/issues/8186",
    ),
    "no-space-left": (
        "(EngineCore pid=308) ERROR 06-12 09:59:13 [core.py:1136] OSError: [Errno 28] "
        "No space left on device",
        "https://github.com/vllm-project/vllm-ascend/issues/10363",
    ),
}
# Lines of a working vllm-ascend start (https://github.com/vllm-project/vllm-ascend/issues/19), verbatim.
HEALTHY_ENGINE = [
    "INFO 03-06 01:16:37 __init__.py:42] plugin ascend loaded.",
    "INFO 03-06 01:16:37 __init__.py:187] No platform detected, vLLM is running on UnspecifiedPlatform",
    "WARNING 03-06 01:16:37 _custom_ops.py:19] Failed to import from vllm._C with "
    "ModuleNotFoundError(\"No module named 'vllm._C'\")",
    "INFO 03-06 01:16:37 __init__.py:174] Platform plugin ascend is activated",
]
UNITS = ("docker.service", "vllm-chat.service")


def _hccn_line(prefix: str) -> str:
    """The verbatim line of the real hccn_tool captures that starts with ``prefix``."""
    text = without_comments((SAMPLES / "hccn_tool_real_captures.txt").read_text(encoding="utf-8"))
    return next(line.strip() for line in text.splitlines() if line.strip().startswith(prefix))


def _show(unit: str, **state: str) -> str:
    values = {
        "Id": unit,
        "LoadState": "loaded",
        "ActiveState": "active",
        "SubState": "running",
        "MainPID": "4242",
        "NRestarts": "0",
        "Result": "success",
        "UnitFileState": "enabled",
        **state,
    }
    return "\n".join(f"{k}={v}" for k, v in values.items())


def node_probe(
    *,
    npu_smi: str | None = None,
    npu_smi_rc: str = "0",
    engine: list[str] | None = None,
    docker_journal: list[str] | None = None,
    units: dict[str, dict[str, str]] | None = None,
    link: dict[int, str] | None = None,
    tls: dict[int, int] | None = None,
    net_health: dict[int, str] | None = None,
    devnodes: list[str] | None = None,
    daemon: dict[str, Any] | None = None,
    dkms_tree: list[str] | None = None,
    free_mb: int = 40960,
    driver: str = DRIVER,
    extra: str = "",
) -> str:
    """The text a healthy node's probe prints (real captures), with the given parts replaced."""
    driver_info = (SAMPLES / "driver_version_info.txt").read_text().split("# Same source")[0]
    driver_info = without_comments(driver_info).replace("Version=25.0.rc1.1", f"Version={driver}")
    free = "\n".join(f"{p} /dev/sda2 104857600 10 {free_mb * 1024} 1% /" for p in DISK_PATHS)
    out = (
        probe_section("pci", sample("lspci_d802.txt"))
        + probe_section(
            "npu-smi /usr/local/bin/npu-smi", npu_smi or sample("npu_smi_info_910b4_8npu_idle_full.txt")
        )
        + probe_section("npu-smi-rc", npu_smi_rc)
        + probe_section("file /usr/local/Ascend/driver/version.info", driver_info)
        + probe_section("df", free)
        + probe_section("os", 'NAME="openEuler"\nVERSION_ID="22.03"\nID="openEuler"')
        + probe_section("uname", "Linux 5.10.0-182.0.0.95.oe2203sp3.aarch64 aarch64")
        + probe_section(
            "devnodes",
            "\n".join(
                devnodes
                if devnodes is not None
                else [
                    *(f"/dev/davinci{i}" for i in range(8)),
                    "/dev/davinci_manager",
                    "/dev/devmm_svm",
                    "/dev/hisi_hdc",
                ]
            ),
        )
        + probe_section("fact cann", json.dumps({"toolkit": "9.1.0", "nnal": "9.1.0"}))
        + probe_section(
            "daemon.json",
            json.dumps(
                daemon
                if daemon is not None
                else {
                    "runtimes": {
                        "ascend": {"path": "/usr/local/Ascend/Ascend-Docker-Runtime/ascend-docker-runtime"}
                    },
                    "default-runtime": "ascend",
                }
            ),
        )
        + probe_section("units", "vllm-chat.service")
        + probe_section("show", "\n\n".join(_show(u, **(units or {}).get(u, {})) for u in UNITS))
        + probe_section("journal docker.service", "\n".join(docker_journal or []))
        + probe_section(
            "journal vllm-chat.service", "\n".join(engine if engine is not None else HEALTHY_ENGINE)
        )
        + probe_section("tool /usr/local/Ascend/driver/tools/hccn_tool", "")
    )
    ip = _hccn_line("ipaddr:")
    tls_line = _hccn_line("dev_id:3, tls switch")
    for npu in range(8):
        state = (link or {}).get(npu, "UP")
        switch = (tls or {}).get(npu, 0)
        out += probe_section(f"hccn {npu} link 0", f"link status: {state}")
        health = _hccn_line("net health status:")
        if npu in (net_health or {}):
            health = f"net health status: {(net_health or {})[npu]}"
        out += probe_section(f"hccn {npu} net_health 0", health)
        out += probe_section(f"hccn {npu} ip 0", f"{ip}\nnetmask:255.255.255.0")
        out += probe_section(f"hccn {npu} tls 0", tls_line.replace("tls switch[0]", f"tls switch[{switch}]"))
    if dkms_tree is not None:
        out += probe_section("dkms-tree", "\n".join(f"/var/lib/dkms/davinci_ascend/{d}" for d in dkms_tree))
    return out + extra


def ids(text: str, holders: str = "", expected: Expected = EXPECTED) -> list[str]:
    return [f.id for f in diagnose(collect(text, holders), expected, CATALOG)]


def evidence(text: str, failure: str, holders: str = "") -> list[str]:
    found = {f.id: f for f in diagnose(collect(text, holders), EXPECTED, CATALOG)}
    assert failure in found, f"{failure} not found; found {sorted(found)}"
    return found[failure].evidence


def test_a_healthy_node_from_real_captures_is_ok() -> None:
    node = collect(node_probe())
    assert node["npus"]["count"] == 8 and node["npus"]["all_healthy"] is True
    assert node["hccn"]["npus"]["7"]["link"] == "UP" and node["hccn"]["npus"]["7"]["tls"] == 0
    assert node["units"]["vllm-chat.service"]["ActiveState"] == "active"
    assert diagnose(node, EXPECTED, CATALOG) == []


@pytest.mark.parametrize("failure", sorted(REAL_LINES))
def test_each_real_log_line_is_named_with_its_fix(failure: str) -> None:
    line, url = REAL_LINES[failure]
    entry = next(f for f in CATALOG.failures if f.id == failure)
    assert url in [s.url for s in entry.sources], "the quoted line must come from a source the entry cites"
    outputs = entry.signature.outputs
    if "engine_log" in outputs:
        text = node_probe(engine=[*HEALTHY_ENGINE[:1], line])
        where = "vllm-chat.service"
    elif "npu_smi" in outputs:
        text = node_probe(
            npu_smi=f"DrvMngGetConsoleLogLevel failed. (g_conLogLevel=3)\n{line}", npu_smi_rc="255"
        )
        where = "npu-smi info"
    else:
        pytest.fail(f"{failure}: no output to plant the line in")
    found = evidence(text, failure)
    assert found[0] == f"{where}: {line.strip()}"
    # an entry whose line names the other end adds where that is (test_doctor_real_faults.py)
    assert all(e.startswith("  peer: ") for e in found[1:])


def test_every_regex_entry_has_a_real_line_tested() -> None:
    regex_ids = {f.id for f in CATALOG.failures if f.signature.regex is not None}
    assert regex_ids == set(REAL_LINES) | {block.failure for block in fault_logs()}


def test_platform_line_is_no_fault_when_the_plugin_activated() -> None:
    assert "platform-not-activated" not in ids(node_probe(engine=HEALTHY_ENGINE))
    assert "platform-not-activated" in ids(node_probe(engine=HEALTHY_ENGINE[:3]))


def test_npu_smi_8005_on_the_host() -> None:
    text = node_probe(npu_smi=REAL_LINES["npu-busy-8005"][0], npu_smi_rc="255")
    assert ids(text) == ["npu-busy-8005"]


# A process row of the real `npu-smi info` of https://github.com/vllm-project/vllm-ascend/issues/12980
# ("| 0       0                 | 632268        | python3.1 ..."), in the 910B table's columns.
PROCESS_ROW = (
    "| 0       0                 | 632268        | python3.1                | 197                     |"
)


def _with_process(npu: int) -> str:
    table = sample("npu_smi_info_910b4_8npu_idle_full.txt")
    row = f"| No running processes found in NPU {npu}"
    line = next(line for line in table.splitlines() if line.startswith(row))
    return table.replace(line, PROCESS_ROW.replace("| 0       0 ", f"| {npu}       0 "))


def test_a_process_outside_the_pools_units_holds_an_npu() -> None:
    text = node_probe(npu_smi=_with_process(3))
    assert npu_pids(text) == [632268]
    foreign = "cgroup 632268"
    holders = probe_section(foreign, "0::/system.slice/train-job.service")
    assert evidence(text, "npu-foreign-process", holders) == [
        "NPU 3 chip 0: process 632268 (unit train-job.service)"
    ]
    ours = probe_section(foreign, "0::/system.slice/vllm-chat.service")
    assert "npu-foreign-process" not in ids(text, ours)
    container = probe_section(foreign, "0::/system.slice/docker-" + "ab" * 32 + ".scope")
    containers = probe_section("containers", "ab" * 32 + " vllm-chat Up 2 hours")
    assert "npu-foreign-process" not in ids(text + containers, container)
    other = probe_section("containers", "ab" * 32 + " my-notebook Up 2 hours")
    assert evidence(text + other, "npu-foreign-process", container) == [
        f"NPU 3 chip 0: process 632268 (unit docker-{'ab' * 32}.scope)"
    ]


def test_an_unhealthy_npu() -> None:
    table = sample("npu_smi_info_910b4_8npu_idle_full.txt")
    row = "| 5     910B4               | OK     "
    assert row in table
    text = node_probe(npu_smi=table.replace(row, row.replace("OK    ", "Alarm ")))
    assert evidence(text, "npu-unhealthy") == ["NPU 5 chip 0: Health Alarm"]


def test_link_down_and_mixed_tls() -> None:
    assert evidence(node_probe(link={5: "DOWN"}), "hccn-link-down") == [
        "hccn_tool -i 5 -link -g: link status: DOWN"
    ]
    assert evidence(node_probe(tls={2: 1, 6: 1}), "hccn-tls-mixed") == [
        "TLS enabled on NPU 2, 6, disabled on NPU 0, 1, 3, 4, 5, 7"
    ]


def test_a_port_up_whose_net_health_fails() -> None:
    # "Fault": the status the MindSpore rank-table guide shows for a failed connection; a port that is
    # down says Fault too, and is hccn-link-down's alone; Init (never checked) is no fault
    text = node_probe(net_health={2: "Fault", 5: "Fault", 6: "Init"}, link={5: "DOWN"})
    assert evidence(text, "hccn-net-unhealthy") == ["hccn_tool -i 2 -net_health -g: net health status: Fault"]
    assert evidence(text, "hccn-link-down") == ["hccn_tool -i 5 -link -g: link status: DOWN"]
    unchecked = diagnose(collect(node_probe(net_health={6: "Init"})), EXPECTED, CATALOG)
    assert "hccn-net-unhealthy" not in [f.id for f in unchecked]


def test_driver_off_the_lock() -> None:
    assert evidence(node_probe(driver="24.1.rc2"), "stack-off-lock") == [
        f"driver 24.1.rc2 installed, the lock wants {DRIVER}"
    ]


def test_missing_device_nodes() -> None:
    nodes = [f"/dev/davinci{i}" for i in range(8)]
    assert evidence(node_probe(devnodes=nodes), "device-nodes-missing") == [
        f"missing: /dev/davinci_manager /dev/devmm_svm /dev/hisi_hdc (driver {DRIVER} installed)"
    ]


def test_docker_runtime_and_docker_state() -> None:
    assert evidence(node_probe(daemon={"log-driver": "json-file"}), "ascend-runtime-unregistered") == [
        '/etc/docker/daemon.json has no "ascend" in "runtimes"'
    ]
    # The journal lines systemd writes, verbatim from https://github.com/docker/for-linux/issues/162
    journal = [
        "docker.service: Start request repeated too quickly.",
        "docker.service: Failed with result 'exit-code'.",
        "Failed to start Docker Application Container Engine.",
    ]
    limit = {"docker.service": {"ActiveState": "failed", "SubState": "failed", "Result": "start-limit-hit"}}
    found = ids(node_probe(units=limit, docker_journal=journal))
    assert "docker-start-limit" in found and "docker-down" not in found
    assert evidence(node_probe(units=limit, docker_journal=journal), "docker-start-limit") == [
        "docker.service: failed/failed, pid 4242, result start-limit-hit",
        "docker.service: Start request repeated too quickly.",
    ]
    stopped = {"docker.service": {"ActiveState": "inactive", "SubState": "dead", "MainPID": "0"}}
    assert evidence(node_probe(units=stopped), "docker-down") == ["docker.service: inactive/dead"]


def test_a_stopped_engine_unit_shows_its_journal() -> None:
    stopped = {"vllm-chat.service": {"ActiveState": "inactive", "SubState": "dead", "MainPID": "0"}}
    line = REAL_LINES["hbm-out-of-memory"][0]
    text = node_probe(units=stopped, engine=[line])
    assert evidence(text, "vllm-unit-down") == ["vllm-chat.service: inactive/dead", f"  {line}"]
    assert ids(text) == ["hbm-out-of-memory", "vllm-unit-down"]


def test_dkms_residue_after_a_kernel_update_or_a_failed_build() -> None:
    running = "5.10.0-182.0.0.95.oe2203sp3.aarch64"
    assert "dkms-residue" not in ids(node_probe(dkms_tree=["1.0/build", f"1.0/{running}"]))
    assert evidence(
        node_probe(dkms_tree=["1.0/build", "1.0/5.10.0-60.18.0.50.oe2203.aarch64"]), "dkms-residue"
    ) == [
        "/var/lib/dkms/davinci_ascend: built for 5.10.0-60.18.0.50.oe2203.aarch64, "
        f"not for the running {running}"
    ]
    failed = node_probe(dkms_tree=["1.0/build"])
    assert evidence(failed, "dkms-residue")[0] == (
        f"/var/lib/dkms/davinci_ascend: no completed build for {running} (a failed build's residue)"
    )


def test_full_disk() -> None:
    assert evidence(node_probe(free_mb=100), "disk-low")[0] == "/: 100 MiB free (below 1024 MiB)"


def test_probe_command_runs_here_and_reads_nothing_it_cannot() -> None:
    out = subprocess.run(
        ["sh", "-c", probe_command([0, 1], journal_lines=5)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    node = collect(out)
    assert node["npus"]["count"] == 0
    assert node["kernel"] and node["arch"]
    assert set(node["disk_free_mb"]) == set(DISK_PATHS)
    assert node["hccn"]["tool_missing"] == "/usr/local/Ascend/driver/tools/hccn_tool"


def test_an_unreadable_npu_smi_output_hides_nothing_else() -> None:
    text = node_probe(npu_smi="| garbled | table |\n| NPU x |", link={1: "DOWN"})
    node = collect(text)
    assert node["npus"]["npu_smi_error"].startswith("unreadable npu-smi output: ")
    assert node["npus"]["count"] == 8
    assert npu_pids(text) == []
    assert "hccn-link-down" in ids(text)
