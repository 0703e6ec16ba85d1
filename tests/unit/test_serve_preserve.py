"""The serving role's pre-serve checks (provision.serving.preserve) and post-start smoke
(provision.serving.smoke).

npu-smi outputs are the real 910B4 capture of tests/fixtures/samples, with one row of the real process table
of vllm-ascend#5606 where a test needs a process on an NPU; the probe script runs for real on a temporary
model folder; the smoke's command runs for real against the simulated cluster's torch_npu stand-in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from provision import systemd
from provision.ascend.npu_smi import parse_npu_smi_info
from provision.serving import preserve, smoke
from provision.serving.preserve import Probe, Problem
from provision_sim import hardware
from provision_sim.hardware.node.ascendsim import npusmi
from tests.helpers import sample

pytestmark = pytest.mark.unit

CAPTURE = "npu_smi_info_910b4_8npu_idle_full.txt"  # 8 x 910B4, 32768 MB HBM, ~2650 MB used each
# vllm-ascend#5606 (npu-smi 25.2.2), verbatim: a vLLM worker holding NPU 0
ROW_5606 = (
    "| 0       0                 | 19334         | VLLMWorker_TP            | 58472                   |"
)
MODEL = "/models/chat"
GIB = 1 << 30


def npu_smi(*, held: bool = False, health: str = "OK") -> Any:
    """The capture; ``held``: NPU 0 held by the process of vllm-ascend#5606, its HBM use as that issue's
    (61825 of 65536 MB there: 29057 of this NPU's 32768)."""
    text = sample(CAPTURE)
    if held:
        text = text.replace(f"| {'No running processes found in NPU 0':<95}|", ROW_5606, 1)
        text = text.replace("2654 / 32768", "29057/ 32768", 1)
        assert ROW_5606 in text
    if health != "OK":
        first = next(line for line in text.splitlines() if line.startswith("| 1     910B4"))
        text = text.replace(first, first.replace("| OK            |", f"| {health:<14}|"), 1)
    return parse_npu_smi_info(text)


def profile(**fields: Any) -> dict[str, Any]:
    return {"chat": {"model": MODEL, "tensor_parallel_size": 1, **fields}}


def instance(devices: list[int] | None = None) -> dict[str, Any]:
    return {
        "pool": "chat",
        "profile": "chat",
        "unit": "vllm-chat.service",
        "devices": devices or [0],
        "model": MODEL,
    }


def weights(**entry: Any) -> dict[str, dict[str, Any]]:
    return {MODEL: {"exists": True, "bytes": 270 * (1 << 20), **entry}}


def probe(
    info: Any = None,
    *,
    devnodes: tuple[int, ...] = tuple(range(8)),
    containers: list[dict[str, Any]] | None = None,
    models: dict[str, dict[str, Any]] | None = None,
) -> Probe:
    return Probe(
        npu_smi=info if info is not None else npu_smi(),
        npu_smi_error=None,
        devnodes=frozenset(devnodes),
        invocations={},
        containers=containers,
        weights=models if models is not None else weights(),
    )


def check(
    the_probe: Probe,
    profiles: dict[str, Any] | None = None,
    unit_of: dict[int, str | None] | None = None,
    devices: list[int] | None = None,
) -> tuple[list[Problem], list[str]]:
    return preserve.problems([instance(devices)], profiles or profile(), the_probe, unit_of or {})


def lines(found: list[Problem]) -> list[str]:
    return [problem.line("node1") for problem in found]


# -------------------------------------------------------------------------------------------------- NPUs


def test_an_idle_node_with_small_weights_may_serve() -> None:
    assert check(probe()) == ([], [])


def test_a_foreign_process_is_refused_naming_host_pool_npu_pid_unit_and_the_fix() -> None:
    found, _ = check(probe(npu_smi(held=True)), unit_of={19334: "train-job.service"})
    assert [p.check for p in found] == ["foreign", "hbm"]  # and what it holds is not free
    assert lines(found)[0] == (
        "node1 pool chat NPU 0: process 19334 (VLLMWorker_TP, unit train-job.service) holds it with 58472 MB "
        "of HBM (npu-smi's process table). Fix: stop it (`systemctl stop train-job.service`), or give the "
        "pool other NPUs."
    )


def test_the_pools_own_running_instance_is_not_foreign_and_gives_its_hbm_back() -> None:
    # its unit (service mode), or the docker scope of its container (container mode): a second apply passes
    assert check(probe(npu_smi(held=True)), unit_of={19334: "vllm-chat.service"}) == ([], [])
    mine = [
        {"Name": "/vllm-chat", "Id": "abc123", "HostConfig": {"Devices": [{"PathOnHost": "/dev/davinci0"}]}}
    ]
    assert check(probe(npu_smi(held=True), containers=mine), unit_of={19334: "docker-abc123.scope"}) == (
        [],
        [],
    )


def test_another_pools_instance_on_the_npu_is_foreign() -> None:
    found, _ = check(probe(npu_smi(held=True)), unit_of={19334: "vllm-other.service"})
    assert "process 19334 (VLLMWorker_TP, unit vllm-other.service)" in lines(found)[0]


def test_a_process_outside_systemd_is_named_by_pid_with_kill_as_the_fix() -> None:
    found, _ = check(probe(npu_smi(held=True)))
    assert "(VLLMWorker_TP, no systemd unit)" in found[0].message and "`kill 19334`" in found[0].message


@pytest.mark.parametrize(
    "container",
    [
        {"HostConfig": {"Devices": [{"PathOnHost": "/dev/davinci2"}]}},
        {"Config": {"Env": ["PATH=/bin", "ASCEND_VISIBLE_DEVICES=0-3"]}},
        {"Config": {"Env": ["ASCEND_VISIBLE_DEVICES=2,5"]}},
    ],
    ids=["--device", "runtime range", "runtime list"],
)
def test_another_container_given_the_npu_is_refused(container: dict[str, Any]) -> None:
    found, _ = check(probe(containers=[{"Name": "/bench", "Id": "f00", **container}]), devices=[2])
    assert lines(found) == [
        "node1 pool chat NPU 2: container bench has it. Fix: `docker stop bench` (two containers cannot "
        "share an NPU: -8005), or give the pool other NPUs."
    ]


def test_a_container_on_other_npus_is_no_problem() -> None:
    other = {"Name": "/bench", "Id": "f00", "HostConfig": {"Devices": [{"PathOnHost": "/dev/davinci7"}]}}
    assert check(probe(containers=[other]), devices=[2]) == ([], [])


def test_an_unhealthy_missing_or_nodeless_npu_is_refused() -> None:
    found, _ = check(probe(npu_smi(health="Critical"), devnodes=(0, 2)), devices=[1, 2, 9])
    assert [(p.npus, p.check) for p in found] == [((1,), "npu"), ((1,), "npu"), ((9,), "npu")]
    assert found[0].message.startswith("npu-smi Health is Critical. Fix: `npu-smi info -t health -i 1`")
    assert found[1].message.startswith("/dev/davinci1 is missing. Fix: reload the NPU driver")
    assert found[2].message.startswith("not in npu-smi info (it lists NPU 0, 1, 2, 3, 4, 5, 6, 7).")


def test_without_npu_smi_the_npu_checks_are_skipped_saying_so() -> None:
    bare = Probe(None, "npu-smi not found", frozenset(), {}, None, weights())
    found, notes = check(bare, profile(weights_quantization="w8a8", quantization="ascend"))
    assert [p.check for p in found] == ["quantization"]
    assert notes == [
        "NPU checks skipped: npu-smi not found (the NPU driver's tool; install the driver first)"
    ]


# --------------------------------------------------------------------------------------------------- HBM


def test_weights_that_do_not_fit_the_reservation_are_refused_with_the_formula() -> None:
    # 64 GiB of tensors (the index's total_size), TP 2: 32768 MB per NPU >= 0.9 x 32768 MB
    models = weights(index={"total_size": 64 * GIB})
    found, _ = check(probe(models=models), profile(tensor_parallel_size=2), devices=[0, 1])
    assert [(p.npus, p.check) for p in found] == [((0,), "hbm"), ((1,), "hbm")]
    assert found[0].message.startswith(
        "the weights do not fit its HBM: 32768 MB per NPU (model.safetensors.index.json metadata.total_size "
        "65536 MB / TP x PP 2) >= gpu_memory_utilization 0.9 x 32768 MB = 29491 MB, nothing left for the KV "
        "cache (profile chat). Fix: "
    )
    assert "vllm_serve_preserve_force: true starts it anyway." in found[0].message
    # TP 4 halves the share: it fits
    assert check(probe(models=models), profile(tensor_parallel_size=4), devices=[0, 1, 2, 3]) == ([], [])


def test_the_folder_size_counts_when_there_is_no_index() -> None:
    found, _ = check(probe(models=weights(bytes=40 * GIB)))
    assert "(the folder's size 40960 MB / TP x PP 1)" in found[0].message


def test_too_little_free_hbm_is_refused_at_the_profiles_utilization() -> None:
    # NPU 0 of the capture: 2654 of 32768 MB used, 30114 MB free
    assert check(probe(), profile(gpu_memory_utilization=0.9)) == ([], [])
    found, _ = check(probe(), profile(gpu_memory_utilization=0.95))
    assert lines(found) == [
        "node1 pool chat NPU 0: 30114 MB of its 32768 MB HBM is free, vLLM reserves gpu_memory_utilization "
        "0.95 x 32768 MB = 31130 MB at start and would refuse it. Fix: a pool of NPUs with more HBM, a "
        "larger tensor_parallel_size (more NPUs), smaller (quantized) weights, or a higher "
        "gpu_memory_utilization; vllm_serve_preserve_force: true starts it anyway."
    ]


# ---------------------------------------------------------------------------------------- quantization

QUANT_OK = [
    (None, None),
    (None, "FLOAT"),
    ("w8a8", "W8A8"),
    ("w8a8", "W8A8_MIX"),
    ("w8a8-dynamic", "W8A8_DYNAMIC"),
    ("w4a8", "W4A8_DYNAMIC"),
    ("w4a4", "W4A4_DYNAMIC"),
]


@pytest.mark.parametrize(("wanted", "described"), QUANT_OK)
def test_weights_whose_description_matches_the_profile_may_serve(
    wanted: str | None, described: str | None
) -> None:
    fields = {"weights_quantization": wanted, "quantization": "ascend"} if wanted else {}
    models = weights(quant={"model_quant_type": described}) if described else weights()
    assert check(probe(models=models), profile(**fields)) == ([], [])


def test_w8a8_weights_under_an_unquantized_profile_are_refused() -> None:
    found, _ = check(probe(models=weights(quant={"model_quant_type": "W8A8"})))
    assert lines(found) == [
        "node1 pool chat NPU 0: the weights in /models/chat are W8A8 (quant_model_description.json "
        "model_quant_type), profile chat says weights_quantization none (unquantized weights). Fix: set "
        "quantization: ascend and weights_quantization to the weights' type in profile chat, or point its "
        "model at the weights it names."
    ]


def test_w4a8_weights_under_a_w8a8_profile_and_unknown_types_are_refused() -> None:
    w8a8 = profile(weights_quantization="w8a8", quantization="ascend")
    found, _ = check(probe(models=weights(quant={"model_quant_type": "W4A8_DYNAMIC"})), w8a8)
    assert "are W4A8_DYNAMIC (quant_model_description.json model_quant_type), profile chat says " in (
        found[0].message
    )
    assert "weights_quantization w8a8." in found[0].message
    found, _ = check(probe(models=weights(quant={"model_quant_type": "W8A16"})), w8a8)
    assert "(W8A16 is not a type vllm-ascend serves with this profile field)" in found[0].message


def test_a_quantized_profile_without_a_description_or_with_a_broken_one_is_refused() -> None:
    w8a8 = profile(weights_quantization="w8a8", quantization="ascend")
    found, _ = check(probe(), w8a8)
    assert found[0].message.startswith(
        "profile chat wants w8a8 weights (msModelSlim), but /models/chat has no quant_model_description.json"
    )
    found, _ = check(
        probe(models=weights(quant={"error": "Expecting value: line 1 column 1 (char 0)"})), w8a8
    )
    assert found[0].message.startswith(
        "/models/chat/quant_model_description.json is unreadable (Expecting value"
    )


def test_a_model_folder_not_on_the_node_yet_is_noted_not_refused() -> None:
    found, notes = check(probe(models={}))
    assert found == [] and notes == [
        "pool chat: weights and quantization not checked, /models/chat is not on the node"
    ]


# ------------------------------------------------------------------------------- the probe, run for real


def test_the_probe_reads_a_model_folder_its_index_and_its_description(tmp_path: Path) -> None:
    model = tmp_path / "w8a8"
    model.mkdir()
    (model / "model-00001-of-00001.safetensors").write_bytes(b"\0" * 4096)
    (model / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 123456789}}))
    # msModelSlim's description (its docs' example, "quant_model_description.json 详解"), shortened
    described = {"model_quant_type": "W8A8", "version": "1.0.0", "group_size": 128}
    (model / "quant_model_description.json").write_text(json.dumps(described))
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "model.safetensors").symlink_to(model / "model-00001-of-00001.safetensors")
    done = subprocess.run(
        [
            "sh",
            "-c",
            preserve.PROBE_SCRIPT,
            "preserve-probe",
            str(model),
            str(linked),
            str(tmp_path / "none"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    seen = preserve.parse_probe(done.stdout, None, "npu-smi not found")
    assert seen.weights[str(model)]["index"] == {"total_size": 123456789}
    assert seen.weights[str(model)]["quant"] == {"model_quant_type": "W8A8"}
    assert preserve.weights_bytes(seen.weights[str(model)]) == (
        123456789,
        "model.safetensors.index.json metadata.total_size",
    )
    assert preserve.weights_bytes(seen.weights[str(linked)]) == (4096, "the folder's size")  # links followed
    assert seen.weights[str(tmp_path / "none")] == {"exists": False}


def test_npu_holders_come_from_their_cgroups() -> None:
    cgroups = [
        ("cgroup 19334", "0::/system.slice/docker-abc123.scope"),
        ("cgroup 4242", "0::/system.slice/provision-sim-foreign-npu3.service"),
        ("cgroup 77", "0::/"),
    ]
    assert preserve.holders(cgroups) == {
        19334: "docker-abc123.scope",
        4242: "provision-sim-foreign-npu3.service",
        77: None,
    }


# ---------------------------------------------------------------------------------------------- smoke

# vllm-ascend#9447 and #19, verbatim
PLUGIN = "INFO 05-21 21:37:08 [__init__.py:239] Platform plugin ascend is activated"
NO_PLATFORM = (
    "INFO 03-06 01:16:37 __init__.py:187] No platform detected, vLLM is running on UnspecifiedPlatform"
)


def test_the_engine_log_tells_whether_vllm_took_the_ascend_platform() -> None:
    # some versions log no platform first, then take the plugin (vllm-ascend#19): the plugin line wins
    assert smoke.read_plugin(f"{NO_PLATFORM}\n{PLUGIN}\n") == smoke.Verdict(ok=True, line=PLUGIN)
    assert smoke.read_plugin(f"{PLUGIN}\n") == smoke.Verdict(ok=True, line=PLUGIN)
    assert smoke.read_plugin(NO_PLATFORM) == smoke.Verdict(line=NO_PLATFORM)  # not yet: it may still come
    assert smoke.read_plugin("INFO loading weights") == smoke.Verdict()
    told = smoke.timeout_message("vllm-chat.service", "vllm-chat", 8, 300, NO_PLATFORM)
    assert told.startswith(
        "post-start smoke: vLLM did not take the Ascend platform within 300 s of the start"
    )
    assert "No platform detected" in told
    silent = smoke.timeout_message("vllm-chat.service", "vllm-chat", 8, 300)
    assert "has no 'Platform plugin ascend is activated' within 300 s" in silent


def test_the_device_count_must_be_the_pools() -> None:
    assert smoke.read_count(0, "warning from torch_npu\n8\n", "", 8, "vllm-chat").ok
    wrong = smoke.read_count(0, "1\n", "", 8, "vllm-chat")
    assert wrong.failed and wrong.message.startswith(
        "post-start smoke: the NPU runtime in vllm-chat sees 1 NPU(s), the pool has 8: the container got "
        "other devices than the pool's"
    )
    # docker answers for a container still being created: ask again, keeping what it said
    absent = smoke.read_count(
        1, "", "Error response from daemon: No such container: vllm-chat", 8, "vllm-chat"
    )
    assert not absent.ok and not absent.failed
    assert absent.message.endswith("in vllm-chat: Error response from daemon: No such container: vllm-chat")
    # over a connection with a terminal both streams arrive in stdout, and ssh says goodbye on stderr
    merged = smoke.read_count(
        1,
        "Error response from daemon: No such container: vllm-chat\r\n",
        "Shared connection to 10.200.0.12 closed.\r\n",
        8,
        "vllm-chat",
    )
    assert not merged.failed and "No such container" in merged.message
    broken = smoke.read_count(1, "ModuleNotFoundError: No module named 'torch_npu'\r\n", "", 8, "vllm-chat")
    assert broken.failed
    assert "failed in vllm-chat: ModuleNotFoundError: No module named 'torch_npu'" in broken.message
    assert smoke.read_count(0, "8\r\n", "Shared connection to 10.200.0.12 closed.\r\n", 8, "vllm-chat").ok
    late = smoke.timeout_message("vllm-chat.service", "vllm-chat", None, 300, absent.message)
    assert late.startswith(
        "post-start smoke: vllm-chat of vllm-chat.service did not answer within 300 s: `import"
    )


def test_an_instance_that_cannot_start_is_left_to_its_health_gate() -> None:
    # `docker run` of an image that cannot start exits at once; Restart=on-failure then waits, and
    # `docker exec` would say "No such container" until the smoke's time ran out, hiding the cause
    answers = iter(
        [
            "ActiveState=activating\nSubState=start-pre\nMainPID=0\nInvocationID=a1\n",  # docker rm first
            "ActiveState=active\nSubState=running\nMainPID=100\nInvocationID=a1\n",
            "ActiveState=activating\nSubState=auto-restart\nMainPID=0\nNRestarts=1\nResult=exit-code\n",
            "ActiveState=failed\nSubState=failed\nMainPID=0\nResult=exit-code\n",
            "ActiveState=active\nSubState=running\nMainPID=200\nInvocationID=b2\n",
        ]
    )
    asked: list[str] = []

    def run(command: str) -> dict[str, Any]:
        asked.append(command)
        return {"rc": 0, "stdout": next(answers)}

    watch = systemd.UnitWatch(run, "vllm-chat.service", every_s=0.0, track_pid=True, extra=smoke.UNIT_EXTRA)
    seen = []
    for _ in range(5):
        watch.refresh()
        seen.append(watch.gone())
    assert "-p InvocationID -p ExecMainStartTimestamp vllm-chat.service" in asked[0]
    assert seen[:2] == ["", ""]  # starting, then running: the smoke asks inside
    assert seen[2] == "vllm-chat.service: activating/auto-restart, 1 restart(s), result exit-code"
    assert seen[3] == "vllm-chat.service: failed/failed, result exit-code"
    assert seen[4] == "vllm-chat.service: active/running, pid 200, restarted since first seen"


def test_the_smoke_command_runs_against_the_simulated_torch_npu(tmp_path: Path) -> None:
    # what `docker exec` runs in the sim's image: its Python, its torch_npu on PYTHONPATH (a bare torch here)
    (tmp_path / "torch.py").write_text("")
    shim = Path(__file__).parents[2] / "provision-sim/provision_sim/serving/engine_shim"
    env = {**os.environ, "VLLM_PYTHON": sys.executable, "PYTHONPATH": f"{shim}:{tmp_path}"}
    env["ASCEND_RT_VISIBLE_DEVICES"] = "3"
    done = subprocess.run(smoke.exec_argv(), capture_output=True, text=True, env=env, timeout=60, check=False)
    nodes = sum(1 for name in os.listdir("/dev") if name == "davinci3")  # none on a machine without NPUs
    verdict = smoke.read_count(done.returncode, done.stdout, done.stderr, 1, "vllm-chat")
    assert verdict.count == nodes, done.stderr
    assert verdict.ok == (nodes == 1)


def test_the_journal_command_reads_this_start_only() -> None:
    command = smoke.journal_command("vllm-chat.service", "Tue 2026-12-01 20:49:17 UTC")
    assert command == (
        "journalctl -u vllm-chat.service -o cat --no-pager --since 'Tue 2026-12-01 20:49:17 UTC' "
        "2>/dev/null | grep -m 20 -e 'Platform plugin ascend is activated' -e 'No platform detected'"
    )


def test_the_sims_hbm_knob_makes_npu_smi_report_a_smaller_part() -> None:
    config = hardware.node_config(name="node1", index=1, npus=8)
    config["faults"] = {"hbm_mb": {"3": 256}}
    node = npusmi.Node(config, {"driver_version": "25.0.rc1.1"})
    info = parse_npu_smi_info(
        npusmi.render_info("25.0.rc1.1", "25.0.rc1.1", [node.row(n) for n in node.npus])
    )
    idle = config["npus"][3]["hbm_used_mb"]
    assert (info.npu(3).hbm_used_mb, info.npu(3).hbm_total_mb) == (round(idle * 256 / 65536), 256)
    assert info.npu(2).hbm_total_mb == 65536
    models = weights(bytes=270 * (1 << 20))
    found, _ = check(probe(info, models=models), devices=[3])
    assert [p.check for p in found] == ["hbm"]  # 270 MB of weights >= 0.9 x 256 MB
