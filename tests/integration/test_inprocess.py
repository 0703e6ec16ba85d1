"""The in-process runner (provision/runner/inprocess.py) against ansible-playbook, for real, on this machine.

The same play (a module run over the local connection, a registered result read by the next task's
condition, a skipped task, a failure that ends the host's play) runs once through ansible-playbook and once
in a provision process; what the rest of provision reads of a run (exit code, per-host recap, failures, the
events' outcomes in order) must be the same. The records path runs converged.yml this way on every apply
(the simulated cluster tests cover that over SSH).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
TIMEOUT_S = 300

PLAY = """\
- name: Parity of the in-process runner
  hosts: npu_nodes
  gather_facts: false
  tasks:
    - name: Say hello
      ansible.builtin.command: echo hello {{ inventory_hostname }}
      register: hello
      changed_when: false
    - name: Read what the first task registered
      ansible.builtin.debug:
        msg: "{{ hello.stdout }} again"
      when: hello.stdout.startswith('hello')
    - name: Skipped on every host
      ansible.builtin.debug:
        msg: never
      when: hello.stdout == 'bye'
    - name: Fail on one host
      ansible.builtin.fail:
        msg: "failed after {{ hello.stdout }}"
      when: inventory_hostname == 'second'
    - name: Only the host still in the play
      ansible.builtin.command: echo still here
      changed_when: true
"""

DRIVER = """\
import json, sys
from pathlib import Path
from provision.ansible_config import use_run_config
use_run_config()
from provision.inventory.load import load_inventory
from provision.runner.inprocess import run_in_process
from provision.runner.run import run_playbook

playbook, inventory, verbosity = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
def summary(result, events):
    return {
        "rc": result.rc,
        "hosts": {h: [s.ok, s.changed, s.failed, s.unreachable, s.skipped] for h, s in result.hosts.items()},
        "failures": [[f.host, f.task, f.message] for f in result.failures],
        # per host, in order: the hosts of one task finish in any order under ansible-playbook's workers
        "events": {h: [[e["event"], e["event_data"]["task"]] for e in events
                       if e["event"].startswith("runner_on_") and e["event"] != "runner_on_start"
                       and e["event_data"].get("host") == h] for h in ("first", "second")},
        # task by task (linear): the tasks in the order their results came, each once
        "tasks": [t for i, t in enumerate(ts) if i == 0 or ts[i - 1] != t] if (ts := [
            e["event_data"]["task"] for e in events
            if e["event"].startswith("runner_on_") and e["event"] != "runner_on_start"]) else [],
        "ran_ansible_playbook": (next(result.run_dir.glob("artifacts/*/command"), None) is not None),
    }
out = {}
for name, run in (("ansible-playbook", run_playbook), ("in-process", run_in_process)):
    events = []
    kwargs = {"loaded": load_inventory(inventory)} if run is run_in_process else {}
    result = run(playbook, inventory, verb="parity", verbosity=verbosity, observer=events.append, **kwargs)
    out[name] = summary(result, events)
print(json.dumps(out))
"""


def run_both(tmp_path: Path, *, verbosity: int = 0) -> dict[str, dict[str, object]]:
    playbook = tmp_path / "parity.yml"
    playbook.write_text(PLAY)
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(
        "[npu_nodes]\n"
        f"first ansible_connection=local ansible_python_interpreter={sys.executable}\n"
        f"second ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(playbook), str(inventory), str(verbosity)],
        capture_output=True, text=True, timeout=TIMEOUT_S, cwd=tmp_path,
        env={**os.environ, "PROVISION_RUNS_DIR": str(tmp_path / "runs")},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result: dict[str, dict[str, object]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_in_process_run_reads_as_ansible_playbooks(tmp_path: Path) -> None:
    both = run_both(tmp_path)
    stock, here = both["ansible-playbook"], both["in-process"]
    assert stock["ran_ansible_playbook"] is True and here["ran_ansible_playbook"] is False
    assert stock["rc"] == here["rc"] == 2
    # first: ok 3 (one changed), skipped 2; second: ok 2, skipped 1, failed 1, and not the last task
    assert here["hosts"] == stock["hosts"] == {"first": [3, 1, 0, 0, 2], "second": [2, 0, 1, 0, 1]}
    assert here["failures"] == stock["failures"]
    assert here["failures"] == [["second", "Fail on one host", "failed after hello second"]]
    assert here["events"] == stock["events"]
    assert here["events"]["second"][-1] == ["runner_on_failed", "Fail on one host"]
    order = [
        "Say hello",
        "Read what the first task registered",
        "Skipped on every host",
        "Fail on one host",
        "Only the host still in the play",
    ]
    assert here["tasks"] == stock["tasks"] == order


def test_verbose_run_goes_through_ansible_playbook(tmp_path: Path) -> None:
    both = run_both(tmp_path, verbosity=1)
    assert both["in-process"]["ran_ansible_playbook"] is True
    assert both["in-process"]["hosts"] == both["ansible-playbook"]["hosts"]
