"""What ``provision doctor`` collects beyond tool outputs, run for real with stand-ins for journalctl and
systemctl: a unit's journal window keeps the first error block and its context above a long traceback, then
the last lines; the plog's error lines and the NPU driver's kernel lines are searched; every part stays
bounded, and the support bundle carries them redacted.
"""

from __future__ import annotations

import os
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest

from provision.doctor.bundle import NodeBundle, write_bundle
from provision.doctor.catalog import shipped
from provision.doctor.diagnose import diagnose
from provision.doctor.probe import (
    ERROR_AFTER,
    ERROR_BEFORE,
    JOURNAL_SCAN,
    LINE_CHARS,
    WINDOW_GAP,
    collect,
    probe_command,
)
from tests.helpers import fault_logs, probe_section
from tests.unit.test_doctor_match import EXPECTED, node_probe

pytestmark = pytest.mark.unit

CATALOG = shipped()
BLOCKS = fault_logs()


def test_plog_error_lines_and_kernel_lines_are_searched() -> None:
    cqe = next(b for b in BLOCKS if b.failure == "roce-error-cqe-ei0013")
    plog = "/root/ascend/log/debug/plog/plog-3448331_20251204215908.log"
    node = collect(
        node_probe(
            extra=probe_section(f"plog-errors {plog}", cqe.lines[1])
            + probe_section("kernel boot", "2026-12-03T10:00:01+0000 node1 kernel: drv_devmng_host loaded")
        )
    )
    assert node["kernel_log"] == ["2026-12-03T10:00:01+0000 node1 kernel: drv_devmng_host loaded"]
    found = {f.id: f.evidence for f in diagnose(node, EXPECTED, CATALOG)}
    assert found["roce-error-cqe-ei0013"] == [f"{plog}: {cqe.lines[1].strip()}"]


def _stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def long_journal(tmp_path: Path) -> tuple[Path, list[str]]:
    """A vLLM unit whose decisive line sits above 3000 lines of other processes' output."""
    cqe = next(b for b in BLOCKS if b.failure == "roce-error-cqe-ei0013").lines[0]
    lines = [f"INFO 12-04 21:58:{i % 60:02d} [loader.py:1] shard {i} loaded" for i in range(200)]
    lines += [cqe]
    lines += [f"(Worker_TP{i % 8}) Traceback frame {i} " + "x" * 3000 for i in range(3000)]
    journal = tmp_path / "journal.txt"
    journal.write_text("\n".join(lines) + "\n")
    kernel = tmp_path / "kernel.txt"
    kernel.write_text(
        "2026-12-03T10:00:00+0000 node1 kernel: Linux version 5.10.0\n"
        "2026-12-03T10:00:01+0000 node1 kernel: drv_devmng_host: loading out-of-tree module\n"
        "2026-12-03T10:00:02+0000 node1 kernel: e1000e: eth0 NIC Link is Up\n"
        "2026-12-03T10:00:03+0000 node1 kernel: input: Power Button as /devices/LNXSYSTM:00/input/input0\n"
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _stub(
        bin_dir,
        "journalctl",
        f'case " $* " in *" -k "*) cat {kernel} ;;'
        f' *" -u vllm-chat.service "*) tail -n {JOURNAL_SCAN} {journal} ;; esac\n',
    )
    _stub(
        bin_dir,
        "systemctl",
        'case "$1" in list-units) echo "vllm-chat.service loaded failed failed vLLM" ;; is-active) exit 3 ;;'
        " esac\n",
    )
    return bin_dir, lines


def _probe(bin_dir: Path) -> str:
    """The doctor probe's output with the stub tools of ``bin_dir`` first on PATH, 40 journal lines."""
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(
        ["sh", "-c", probe_command([], journal_lines=40)], capture_output=True, text=True, env=env, check=True
    ).stdout


def test_the_journal_window_keeps_the_first_error_block_and_the_last_lines(
    long_journal: tuple[Path, list[str]],
) -> None:
    bin_dir, lines = long_journal
    out = _probe(bin_dir)
    node = collect(out)
    journal = node["journals"]["vllm-chat.service"]
    first_error = lines.index(next(line for line in lines if "EI0013" in line))
    kept_before = lines[first_error - ERROR_BEFORE : first_error]
    assert journal[:ERROR_BEFORE] == kept_before
    assert journal[ERROR_BEFORE] == lines[first_error]
    assert journal[ERROR_BEFORE + ERROR_AFTER + 1] == WINDOW_GAP
    assert len(journal) == ERROR_BEFORE + 1 + ERROR_AFTER + 1 + 40
    assert journal[-1] == lines[-1][:LINE_CHARS]
    assert max(len(line) for line in journal) <= LINE_CHARS
    assert len(out) < 300_000  # 3 MB of journal: a bounded probe output
    found = {f.id: f.evidence for f in diagnose(node, EXPECTED, CATALOG)}
    assert found["roce-error-cqe-ei0013"][0] == f"vllm-chat.service: {lines[first_error]}"
    # the driver's kernel lines, and no other
    assert (
        node["kernel_log"]
        == ["2026-12-03T10:00:01+0000 node1 kernel: drv_devmng_host: loading out-of-tree module"] * 2
    )  # once as a line of the boot, once as one of the last hours


def test_a_later_failure_after_an_older_error_and_a_long_shutdown_is_still_seen(
    long_journal: tuple[Path, list[str]],
) -> None:
    # The unit's journal holds an older run's error first; the decisive line of the last failure comes
    # after that block, and the engine's shutdown prints more than the last lines kept after it.
    bin_dir, _ = long_journal
    journal_file = next(
        line for line in (bin_dir / "journalctl").read_text().split() if "journal.txt" in line
    )
    old = "ERROR 12-04 20:00:00 [engine.py:1] EngineCore failed to start (an older run)"
    decisive = next(b for b in BLOCKS if b.failure == "roce-error-cqe-ei0013").lines[0]
    lines = [old] + [f"INFO older line {i}" for i in range(100)] + [decisive]
    lines += [f"INFO 12-04 21:59:{i % 60:02d} [shutdown.py:1] closing {i}" for i in range(500)]
    Path(journal_file).write_text("\n".join(lines) + "\n")
    out = _probe(bin_dir)
    node = collect(out)
    journal = node["journals"]["vllm-chat.service"]
    assert journal[0] == old and journal[ERROR_AFTER + 1] == WINDOW_GAP  # the block: the line, 60 after
    assert journal[ERROR_AFTER + 2] == decisive and len(journal) == 1 + ERROR_AFTER + 1 + 1 + 40
    found = {f.id: f.evidence for f in diagnose(node, EXPECTED, CATALOG)}
    assert found["roce-error-cqe-ei0013"][0] == f"vllm-chat.service: {decisive}"


def test_the_bundle_carries_the_new_sections_redacted(tmp_path: Path) -> None:
    cqe = next(b for b in BLOCKS if b.failure == "roce-error-cqe-ei0013").lines[1]
    probe = node_probe(
        extra=probe_section("plog-errors /root/ascend/log/debug/plog/plog-1.log", cqe)
        + probe_section("kernel boot", "node1 kernel: drv_hdc_host: probe done token=tk-5566778899")
    )
    bundle = tmp_path / "support.tar.gz"
    write_bundle(bundle, [NodeBundle("node1", probe=probe, facts=collect(probe))])
    with tarfile.open(bundle) as tar:
        member = tar.extractfile("node1/probe.txt")
        assert member is not None
        text = member.read().decode()
    assert cqe.strip() in text and "@@@provision kernel boot" in text
    assert "drv_hdc_host: probe done token=[REDACTED]" in text and "tk-5566778899" not in text
