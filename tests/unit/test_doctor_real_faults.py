"""The failures ``provision doctor`` learnt from real reports: every block of
tests/fixtures/samples/ascend_fault_logs.txt (verbatim lines, each with its public source) is named with its
fix, a near miss is not, and the peer a line blames is named.
"""

from __future__ import annotations

import pytest

from provision.doctor.catalog import shipped
from provision.doctor.diagnose import diagnose, npu_addresses
from provision.doctor.probe import collect
from tests.helpers import FaultLog, fault_logs
from tests.unit.test_doctor_match import EXPECTED, HEALTHY_ENGINE, REAL_LINES, node_probe

pytestmark = pytest.mark.unit

CATALOG = shipped()
ENTRIES = {f.id: f for f in CATALOG.failures}
BLOCKS = fault_logs()

# Lines close to a failure that are not it: each must leave its entry silent. Quoted lines come from the
# same reports (their advice text, a healthy neighbour line); the rest are ordinary log lines that happen
# to carry the code as a number (a PID, a size) or the same words in another sense.
NEAR_MISSES: dict[str, list[str]] = {
    "hccl-notify-wait-timeout-ei0002": [
        # lmdeploy#3354: the EI0002 advice text, on a line of its own
        "        Possible Cause: 1. An exception occurs during the execution on some NPUs in the cluster. "
        "As a result, collective communication operation failed.2. The execution speed on some NPU in the "
        "cluster is too slow to complete a communication operation within the timeout interval. (default "
        "1800s, You can set the interval by using HCCL_EXEC_TIMEOUT.)",
    ],
    "hccl-watchdog-timeout": [
        # vllm-ascend#382: the line after the watchdog's, which alone says nothing of a timeout's cause
        "[rank1]:[E324 13:00:25.428107952 compiler_depend.ts:634] To avoid data inconsistency, we are taking "
        "the entire process down.",
    ],
    "hccl-task-timeout": [
        # lmdeploy#3354
        "        The 0 stuck notify wait context info:(context_id=13, notify_id=17)."
        "[FUNC:ProcessStarsHcclFftsPlusTimeoutErrorInfo][FILE:device_error_proc.cc][LINE:1664]",
    ],
    "hccl-internal-task-timeout-507048": [
        "(EngineCore_DP0 pid=507048) INFO 09-24 20:59:57 [core.py:90] started"
    ],
    "stream-sync-timeout-ee1002": ["export HCCL_EXEC_TIMEOUT=17340"],  # Ascend/pytorch#48
    "hccl-rank-args-mismatch-ei0005": [REAL_LINES["hccl-transport-init-ei0009"][0]],
    "hccp-init-ej0001": [
        "INFO 10-11 15:09:30 [parallel_state.py:1102] HCCP and HCCL initialised for rank 24"
    ],
    "roce-error-cqe-ei0013": [
        # lmdeploy#3354: the EI0002 advice names the grep, not an error CQE
        "3.Check whether the completion queue element (CQE) of the error exists in the plog(grep -rn 'error "
        "cqe'). If so, check the network connection status.",
    ],
    "npu-device-count-failed": ["INFO 11-18 09:33:10 [platform.py:120] NPU device count: 8"],
    "aicore-timeout-507014": [
        "(Worker_TP0 pid=507014) INFO 12-30 06:20:01 [worker.py:200] aicore freq 1800 MHz",
    ],
    "vector-core-timeout-507034": ["(Worker_TP1 pid=507034) INFO 06-10 17:10:44 [model_runner.py:88] loaded"],
    "vector-core-exception-507035": ["(Worker_TP2 pid=507035) INFO 08-28 02:33:28 [logger.py:41] request"],
    "hbm-alloc-failed-el0004": ["malloc(): Failed to allocate memory for the host staging buffer, retrying"],
    "hbm-free-below-utilization": ["INFO 09-03 11:03:30 [gpu_worker.py:170] Free memory on device: 60.1 GiB"],
    "aicore-exception-ez9999": [
        # the device report of an AI core timeout (hw-native-sys/PTOAS#704, its first line cut after the
        # error code): the timeout's entry names it
        "EZ9999[PID: 1625540] 2026-06-01-15:43:13.842.354 (EZ9999):  The error from device(chipId:2, "
        "dieId:1), serial number is 560, there is an exception of aicore error, core id is 2, error code = 0",
        "       Kernel task happen error, retCode=0x25, [aicore timeout].[FUNC:PreCheckTaskErr]"
        "[FILE:davinci_kernel_task.cc][LINE:1729]",
    ],
}


def _found(lines: list[str], npus: dict[str, tuple[str, int]] | None = None) -> dict[str, list[str]]:
    node = collect(node_probe(engine=[*HEALTHY_ENGINE, *lines]))
    return {f.id: f.evidence for f in diagnose(node, EXPECTED, CATALOG, npus)}


def test_the_fixture_documents_every_new_entry_with_a_cited_source() -> None:
    assert len({b.failure for b in BLOCKS}) >= 15
    for block in BLOCKS:
        entry = ENTRIES.get(block.failure)
        assert entry is not None, f"{block.failure}: no such entry in failures.yml"
        assert block.source in [s.url for s in entry.sources], f"{block.failure}: {block.source} not cited"


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: f"{b.failure}@{b.source.rsplit('/', 1)[-1]}")
def test_each_real_block_is_named_with_its_first_matching_line(block: FaultLog) -> None:
    entry = ENTRIES[block.failure]
    found = _found(list(block.lines))
    assert block.failure in found, f"{block.failure} not named; named {sorted(found)}"
    first = next(line.strip() for line in block.lines if entry.search(line))
    assert found[block.failure][0] == f"vllm-chat.service: {first}"


@pytest.mark.parametrize("failure", sorted({b.failure for b in BLOCKS}))
def test_a_near_miss_is_not_named(failure: str) -> None:
    assert NEAR_MISSES.get(failure), f"{failure}: give at least one near miss"
    found = _found(NEAR_MISSES[failure])
    assert failure not in found, f"{failure} named on {found.get(failure)}"


def test_a_rank_argument_mismatch_is_not_blamed_on_the_peer() -> None:
    # The HCCL guide's EI0005 capture ends with "Transport init error ... Create Dest error!", which the
    # transport entry used to read as a fault of the peer's NPU.
    mismatch = next(b for b in BLOCKS if b.failure == "hccl-rank-args-mismatch-ei0005")
    found = _found(list(mismatch.lines))
    assert "hccl-rank-args-mismatch-ei0005" in found
    assert "hccl-transport-init-ei0009" not in found
    assert "parameter[count], local[16512], remote [8320]" in found["hccl-rank-args-mismatch-ei0005"][0]
    # a real transport failure alone still is the peer's (vllm-ascend#3162)
    transport = _found([REAL_LINES["hccl-transport-init-ei0009"][0]])
    assert "hccl-transport-init-ei0009" in transport and "hccl-rank-args-mismatch-ei0005" not in transport


def test_the_peer_a_roce_error_names_is_found_among_the_probed_nodes() -> None:
    cqe = next(b for b in BLOCKS if b.failure == "roce-error-cqe-ei0013")
    peer = collect(node_probe())
    peer["hccn"]["npus"]["1"]["ip"] = "127.10.0.2"
    npus = npu_addresses({"node2": peer})
    assert npus["127.10.0.2"] == ("node2", 1)
    evidence = _found(list(cqe.lines), npus)["roce-error-cqe-ei0013"]
    assert evidence[1] == (
        "  peer: server 127.0.0.2, NPU 1, NPU address 127.10.0.2 (= node2 NPU 1; its port's history: "
        "hccn_tool -i 1 -link_stat -g on node2)"
    )
    # without the peer among the probed nodes: what the line says, nothing guessed
    alone = _found(list(cqe.lines))["roce-error-cqe-ei0013"]
    assert alone[1] == "  peer: server 127.0.0.2, NPU 1, NPU address 127.10.0.2"


def test_a_notify_wait_timeout_names_the_remote_rank() -> None:
    ei0002 = next(b for b in BLOCKS if "issues/3413" in b.source)
    assert _found(list(ei0002.lines))["hccl-notify-wait-timeout-ei0002"][1] == "  peer: rank 24"
    unknown = next(b for b in BLOCKS if b.failure == "hccl-notify-wait-timeout-ei0002" and "3354" in b.source)
    assert (
        len(_found(list(unknown.lines))["hccl-notify-wait-timeout-ei0002"]) == 1
    )  # "remote rank: [unknown]"
