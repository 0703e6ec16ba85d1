"""`provision apply` / `plan` through ansible-runner for real, against this machine (local connection).

The simulated cluster tests cover SSH and the whole site.yml; these cover the runner seam: line progress,
recap, --json, exit codes, run directories — with the real preflight playbook (this Debian machine is not a
node the later stages support).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import CountingListener, localhost_inventory, provision_cli

pytestmark = pytest.mark.slow
TIMEOUT_S = 300


def local_inventory(tmp_path: Path, **group_vars: object) -> Path:
    """This machine, past the preflight checks it cannot pass (no NPUs, not a supported OS)."""
    settings = {"preflight_require_npus": False, "preflight_allow_unsupported_os": True, **group_vars}
    return localhost_inventory(tmp_path, settings)


def test_apply_json_reports_per_host_counts(tmp_path: Path) -> None:
    inventory = local_inventory(tmp_path)
    done = provision_cli(
        "apply", str(inventory), "-p", "preflight", "--json", runs=tmp_path / "runs", timeout=TIMEOUT_S
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout)
    assert summary["ok"] is True and summary["exit_code"] == 0
    host = summary["hosts"]["localhost"]
    assert host["ok"] >= 5 and host["failed"] == 0 and host["unreachable"] == 0
    run_dir = Path(summary["run_dir"])
    assert run_dir.parent == tmp_path / "runs"
    assert list(run_dir.glob("artifacts/*/job_events/*.json")), "the run directory keeps the events"
    # progress goes to stderr as lines when --json
    assert "PLAY Preflight checks on every NPU node" in done.stderr


def test_apply_failure_exits_1_and_names_host_task_and_reason(tmp_path: Path) -> None:
    inventory = local_inventory(tmp_path, preflight_min_free_mb={"/var": 10**12})
    done = provision_cli(
        "apply", str(inventory), "-p", "preflight", runs=tmp_path / "runs", timeout=TIMEOUT_S
    )
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert "localhost        failed      preflight : Check free disk space" in out
    assert "FAILED localhost: preflight : Check free disk space" in out
    assert "[/var] /var has" in out and "needs 1000000000000 MiB" in out
    assert "| localhost |" in out and "FAILED |" in out


def test_plan_changes_nothing_and_lists_hosts(tmp_path: Path) -> None:
    inventory = local_inventory(tmp_path)
    done = provision_cli("plan", str(inventory), "-p", "preflight", runs=tmp_path / "runs", timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "check mode: nothing is changed" in done.stdout
    assert "localhost: no changes" in done.stdout


def test_limit_and_tags_reach_ansible(tmp_path: Path) -> None:
    inventory = local_inventory(tmp_path)
    done = provision_cli(
        "apply",
        str(inventory),
        "--tags",
        "preflight_system",
        "--limit",
        "localhost",
        "--json",
        runs=tmp_path / "runs",
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    # only the OS/arch/Python checks ran (+ facts, argument spec checks): no NPU probe, no disk check
    events = Path(summary["run_dir"]).glob("artifacts/*/job_events/*.json")
    tasks = {json.loads(p.read_text()).get("event_data", {}).get("task") for p in events}
    assert "Check the operating system, the CPU architecture and Python" in tasks
    assert "Probe NPUs, drivers and disk space" not in tasks
    assert "Check free disk space" not in tasks
    assert "Write one environment file per pool" not in tasks


def test_extra_vars_override(tmp_path: Path) -> None:
    inventory = local_inventory(tmp_path)
    done = provision_cli(
        "apply",
        str(inventory),
        "-e",
        '{"preflight_supported_arch": ["s390x"]}',
        "-e",
        "preflight_allow_unsupported_os=true",
        runs=tmp_path / "runs",
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 1
    assert "is not supported; allowed: s390x" in done.stdout


def test_unreachable_host_exits_4(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.ini"
    # Port 1 on loopback refuses at once: no traffic leaves this machine.
    inventory.write_text("[npu_nodes]\nghost ansible_host=127.0.0.1 ansible_port=1 ansible_user=nobody\n")
    done = provision_cli(
        "apply", str(inventory), "-p", "preflight", "--json", runs=tmp_path / "runs", timeout=TIMEOUT_S
    )
    assert done.returncode == 4
    summary = json.loads(done.stdout)
    assert summary["hosts"]["ghost"]["unreachable"] == 1
    assert summary["failures"][0]["unreachable"] is True
    assert summary["unreachable"] == {
        "ghost": "connection refused: ssh: connect to host 127.0.0.1 port 1: Connection refused"
    }


def _with_ghost(inventory: Path, port: int) -> None:
    """``ghost``, a host whose SSH port closes every connection at once; its interpreter named, as
    bootstrap and the simulator write it (interpreter discovery under Mitogen tries once per candidate)."""
    ghost = f"ghost ansible_host=127.0.0.1 ansible_port={port} ansible_user=nobody "
    inventory.write_text(inventory.read_text() + ghost + "ansible_python_interpreter=/usr/bin/python3\n")


CLOSED = "connection closed before SSH began: kex_exchange_identification: "


def test_plan_and_apply_report_one_reachable_and_one_unreachable_host_contacting_it_once(
    tmp_path: Path,
) -> None:
    inventory = local_inventory(tmp_path)
    with CountingListener() as ghost:
        _with_ghost(inventory, ghost.port)
        plan = provision_cli(
            "plan", str(inventory), "-p", "preflight", runs=tmp_path / "runs", timeout=TIMEOUT_S
        )
        assert plan.returncode == 4, plan.stdout + plan.stderr
        assert ghost.count == 1
        lines = plan.stdout.splitlines()
        assert "localhost: no changes" in lines
        (said,) = [line for line in lines if line.startswith("ghost:")]
        assert said.startswith(f"ghost: UNREACHABLE, not planned ({CLOSED}"), said
        assert "unreachable: ghost (exit 4)" in plan.stdout
        assert "EOF on stream" not in plan.stdout

        apply = provision_cli(
            "apply", str(inventory), "-p", "preflight", "--json", runs=tmp_path / "runs", timeout=TIMEOUT_S
        )
        assert apply.returncode == 4, apply.stdout + apply.stderr
        assert ghost.count == 2
        summary = json.loads(apply.stdout)
        assert (summary["exit_code"], summary["failed"], list(summary["unreachable"])) == (4, [], ["ghost"])
        assert summary["unreachable"]["ghost"].startswith(CLOSED)
        assert {h: s["result"] for h, s in summary["hosts"].items()} == {
            "ghost": "unreachable", "localhost": "ok"
        }  # fmt: skip


def test_apply_of_site_does_not_contact_a_host_the_record_check_could_not_reach(tmp_path: Path) -> None:
    """The record check (converged.yml) finds ghost unreachable: site.yml runs on localhost only (which
    stops at preflight here: this machine is no node), ghost is named unreachable, never converged."""
    inventory = local_inventory(tmp_path, preflight_min_free_mb={"/var": 10**12})
    with CountingListener() as ghost:
        _with_ghost(inventory, ghost.port)
        done = provision_cli("apply", str(inventory), runs=tmp_path / "runs", timeout=TIMEOUT_S)
        assert ghost.count == 1, done.stdout
    assert done.returncode == 1, (
        done.stdout + done.stderr
    )  # localhost failed: waiting for ghost fixes nothing
    out = done.stdout
    assert "converged with site.yml" not in out
    assert "unreachable, not reached (1):" in out and f"  ghost  {CLOSED}" in out
    assert "failed: localhost; unreachable: ghost (exit 1)" in out


def test_list_tasks_and_verbose_output_are_ansible_playbook_s(tmp_path: Path) -> None:
    inventory = local_inventory(tmp_path)
    listed = provision_cli(
        "plan", str(inventory), "-p", "preflight", "--list-tasks", "--list-hosts", runs=tmp_path / "runs",
        timeout=TIMEOUT_S,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "play #1 (npu_nodes): Preflight checks on every NPU node" in listed.stdout
    assert "pattern: ['npu_nodes']\n    hosts (1):\n      localhost" in listed.stdout
    assert "preflight : Check free disk space" in listed.stdout
    assert "localhost: no changes" not in listed.stdout  # nothing ran, nothing planned

    verbose = provision_cli(
        "apply", str(inventory), "-p", "preflight", "-v", runs=tmp_path / "runs", timeout=TIMEOUT_S
    )
    assert verbose.returncode == 0, verbose.stdout + verbose.stderr
    assert "TASK [provision.ascend.preflight : Check free disk space] ***" in verbose.stdout
    assert "ok: [localhost] => " in verbose.stdout  # -v: each result, as ansible-playbook prints it
