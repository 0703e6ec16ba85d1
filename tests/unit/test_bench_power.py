"""Energy per token: scripted power samples integrated over a run's window; the npu-smi sampler's output
parsed with the house's ``-t power`` parser, on the real format (tests/fixtures/samples)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from provision.bench.power import (
    NpuSmiSampler,
    energy,
    integrate,
    not_measured,
    parse_samples,
    sampler_script,
)
from tests.helpers import sample_segments

pytestmark = pytest.mark.unit


def _power_sample() -> str:
    """The real ``npu-smi info -t power -i 0`` output (telegraf's fixture, in npu_smi_info_misc.txt)."""
    segment = next(
        s for s in sample_segments("npu_smi_info_misc.txt") if "Real-time Power" in s and "MCU" in s
    )
    return segment[segment.index("MCU") + 4 :]


def test_trapezoids_over_the_window() -> None:
    flat = [(float(t), 100.0) for t in range(11)]
    assert integrate(flat, 0.0, 10.0) == pytest.approx((1000.0, 10.0))
    ramp = [(0.0, 0.0), (10.0, 100.0)]
    # the edges are interpolated: 20 W at t=2, 80 W at t=8, a trapezoid of 6 s
    assert integrate(ramp, 2.0, 8.0) == pytest.approx((300.0, 6.0))
    uneven = [(0.0, 100.0), (1.0, 200.0), (4.0, 200.0)]
    assert integrate(uneven, 0.0, 4.0) == pytest.approx((150.0 + 600.0, 4.0))


def test_nothing_is_assumed_outside_the_samples() -> None:
    assert integrate([(5.0, 100.0), (10.0, 100.0)], 0.0, 10.0) == pytest.approx((500.0, 5.0))
    assert integrate([(5.0, 100.0)], 0.0, 10.0) == (0.0, 0.0)
    assert integrate([], 0.0, 10.0) == (0.0, 0.0)


def test_joules_per_token_sums_the_npus() -> None:
    trace = {
        "node1 NPU 0": [(float(t), 100.0) for t in range(11)],
        "node1 NPU 1": [(float(t), 300.0) for t in range(11)],
    }
    got = energy(trace, 0.0, 10.0, output_tokens=800, source="npu-smi")
    assert got.joules == pytest.approx(4000.0)
    assert got.j_per_token == pytest.approx(5.0)
    assert got.interval_s == pytest.approx(1.0)
    assert got.as_dict()["energy_note"] == "2 NPU(s), sampled every 1.00 s"
    assert got.as_dict()["power_source"] == "npu-smi"


def test_an_almost_covered_run_takes_the_mean_power_for_the_rest() -> None:
    trace = {"n NPU 0": [(0.5 + t * 0.5, 100.0) for t in range(20)]}  # 0.5 .. 10.0: 95 % of [0, 10]
    got = energy(trace, 0.0, 10.0, output_tokens=100)
    assert got.coverage == pytest.approx(0.95)
    assert got.joules == pytest.approx(1000.0)


def test_a_poorly_covered_run_gives_no_figure_and_says_why() -> None:
    got = energy({"n NPU 0": [(5.0, 100.0), (10.0, 100.0)]}, 0.0, 10.0, output_tokens=100)
    assert got.joules is None and got.j_per_token is None
    assert got.note == "power samples cover 50% of the run (need 90%): run longer, or sample faster"
    assert energy({}, 0.0, 1.0, 10).note == "no power samples"
    assert not_measured("because").as_dict()["j_per_output_token"] is None


def test_the_sampler_output_is_parsed_with_the_house_parser() -> None:
    text = _power_sample()
    assert "NPU Real-time Power(W)         : 103.5" in text
    stdout = f"@@ 1700000000.25 0\n{text}@@ 1700000001.25 0\n{text.replace('103.5', '110.5')}"
    trace, problems = parse_samples("node1", stdout)
    assert trace == {"node1 NPU 0": [(1700000000.25, 103.5), (1700000001.25, 110.5)]}
    assert problems == []


def test_npu_smi_failures_become_one_problem_per_npu() -> None:
    stdout = (
        "@@ 1.0 3\ndcmi module initialize failed. ret is -8005\n"
        "@@ 2.0 3\ndcmi module initialize failed. ret is -8005\n"
        "@@ 2.0 4\n        NPU Real-time Power(W)         : NA\n"
    )
    trace, problems = parse_samples("node2", stdout)
    assert trace == {}
    assert problems == [
        "node2 NPU 3: npu-smi failed: dcmi module initialize failed. ret is -8005 "
        "(device is already occupied by another container)",
        "node2 NPU 4: npu-smi printed no power (NA)",
    ]


def test_the_sampler_script_is_a_bounded_loop_ansible_can_pass_as_a_free_form_command() -> None:
    script = sampler_script([0, 1], 0.5, "/tmp/provision-bench-x.stop", 1700000600)
    assert "=" not in script  # an ad-hoc command's name=value words would be read as module arguments
    assert "npu-smi info -t power -i" in script and "for d in 0 1;" in script
    assert "[ ! -e /tmp/provision-bench-x.stop ]" in script and "-lt 1700000600 ]" in script
    assert "sleep 0.5;" in script


FAKE_NPU_SMI = """#!/bin/sh
# npu-smi info -t power -i N, in the real format (telegraf's fixture): NPU N draws 90 + N W
printf '        NPU ID                         : %s\\n        Chip Count                     : 1\\n\\n' "$5"
printf '        NPU Real-time Power(W)         : %s\\n' "$((90 + $5))"
printf '        Chip ID                        : 0\\n'
"""


@pytest.mark.slow
def test_the_npu_smi_sampler_runs_over_ansible_and_covers_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real sampler over ansible-runner (a local connection, a fake npu-smi first on PATH)."""
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "npu-smi").write_text(FAKE_NPU_SMI)
    (tools / "npu-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(
        f"[npu_nodes]\nlocalhost ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    )
    sampler = NpuSmiSampler(inventory, {"localhost": [0, 3]}, interval_s=0.2, max_s=120)
    sampler.start()
    t0 = time.time()
    time.sleep(1.5)
    t1 = time.time()
    trace, problems = sampler.stop()
    assert problems == []
    assert set(trace) == {"localhost NPU 0", "localhost NPU 3"}
    got = energy(trace, t0, t1, output_tokens=100)
    assert got.coverage == 1.0
    assert got.joules == pytest.approx((90 + 93) * (t1 - t0), rel=0.01)
    assert got.interval_s is not None and 0.2 <= got.interval_s < 1.0
    assert sampler.source == "npu-smi info -t power (localhost NPU 0,3)"
