"""The converged record (provision/converge/record.py) and the apply using it (provision/converge/engine.py).

The node script runs here for real (this machine's python3, files under tmp_path); the apply's three
playbook runs are replaced by a recording fake, so which hosts run site.yml and which get recorded is
asserted without Ansible. The same path over real SSH is tested in tests/integration/test_site.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from provision.ascend import lock
from provision.ascend.facts import facts_from_probe
from provision.converge.engine import converge, fast_path_refusal
from provision.converge.record import (
    Keys,
    drift,
    fingerprint,
    keys_of_result,
    new_record,
    npu_summary,
    observe_command,
    parse_observation,
    probe_output,
    reads_outside,
    serving_closure,
    write_command,
)
from provision.inventory.load import Inventory
from provision.inventory.validate import VALIDATED_VARS, resolve
from provision.runner.run import HostStats, RunResult, ServedEndpoint
from tests.helpers import load_module

pytestmark = pytest.mark.unit

PYTHON = "/usr/bin/python3"
ROOT = Path(__file__).parents[2]
HEALTHY = {"count": 2, "driver_version": "25.2.0", "health": {"0": "OK", "1": "OK"}}


# -- keys from task results ------------------------------------------------------------------------------


def test_keys_come_from_what_the_tasks_wrote_and_read() -> None:
    assert keys_of_result("ansible.builtin.template", {"dest": "/etc/a.conf", "changed": True}).paths == {
        "/etc/a.conf"
    }
    looped = {
        "results": [{"path": "/etc/x"}, {"path": "/etc/y", "skipped": True}, {"failed": True, "path": "/z"}]
    }
    assert keys_of_result("file", looped).paths == {"/etc/x"}
    line = {"invocation": {"module_args": {"path": "/etc/dnf/dnf.conf", "line": "x"}}}
    assert keys_of_result("lineinfile", line).paths == {"/etc/dnf/dnf.conf"}
    assert keys_of_result("stat", {"stat": {"exists": False, "path": "/opt/x"}}).paths == {"/opt/x"}
    assert keys_of_result("find", {"files": [{"path": "/etc/systemd/system/vllm-a.service"}]}).paths == {
        "/etc/systemd/system/vllm-a.service"
    }
    state = {"stats": {"/etc/docker/daemon.json": {}}, "files": [{"path": "/usr/local/Ascend/x.info"}]}
    assert keys_of_result("ascend_state", state).paths == {
        "/etc/docker/daemon.json",
        "/usr/local/Ascend/x.info",
    }
    assert keys_of_result("ansible.builtin.systemd_service", {"name": "docker"}).units == {"docker.service"}
    dnf = {"invocation": {"module_args": {"name": ["gcc", "kernel-devel-5.10.0-1", "*"], "state": "present"}}}
    assert keys_of_result("dnf", dnf).packages == {"gcc", "kernel-devel-5.10.0-1"}
    absent = {"invocation": {"module_args": {"name": ["podman"], "state": "absent"}}}
    assert keys_of_result("apt", absent).packages == set()
    hold = {"invocation": {"module_args": {"name": "linux-image-generic", "selection": "hold"}}}
    assert keys_of_result("dpkg_selections", hold).packages == {"linux-image-generic"}
    assert keys_of_result("user", {"name": "HwHiAiUser"}).users == {"HwHiAiUser"}
    assert keys_of_result("group", {"name": "HwHiAiUser"}).groups == {"HwHiAiUser"}
    assert len(keys_of_result("command", {"cmd": "x", "changed": True})) == 0
    assert len(keys_of_result("set_fact", {"ansible_facts": {"path": "/etc/x"}})) == 0


# -- the node script, run here ----------------------------------------------------------------------------


def sh(command: str) -> str:
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def record_here(tmp_path: Path, keys: Keys, fp: str = "fp-1", npus: Mapping[str, Any] = HEALTHY) -> Path:
    record = tmp_path / "state" / "converged.json"
    observation = parse_observation(sh(observe_command(PYTHON, keys=keys, union=True, record=str(record))))
    sh(
        write_command(
            PYTHON, new_record(fp, observation, npus, "2026-11-30T12:00:00+00:00"), record=str(record)
        )
    )
    return record


def compare_here(record: Path, fp: str = "fp-1", npus: Mapping[str, Any] = HEALTHY) -> list[str]:
    observation = parse_observation(sh(observe_command(PYTHON, keys=None, record=str(record))))
    return drift(observation.record, observation.observed, npus, fp)


@pytest.fixture
def managed(tmp_path: Path) -> tuple[Path, Keys]:
    conf = tmp_path / "etc" / "daemon.json"
    conf.parent.mkdir()
    conf.write_text('{"default-runtime": "ascend"}\n')
    conf.chmod(0o644)
    keys = Keys(
        paths={str(conf), str(tmp_path / "etc"), str(tmp_path / "gone")}, users={"root"}, groups={"root"}
    )
    return conf, keys


def test_a_node_as_recorded_has_no_drift(tmp_path: Path, managed: tuple[Path, Keys]) -> None:
    _, keys = managed
    record = record_here(tmp_path, keys)
    assert oct(record.stat().st_mode & 0o777) == "0o600"
    assert compare_here(record) == []


def test_content_mode_and_removal_are_drift(tmp_path: Path, managed: tuple[Path, Keys]) -> None:
    conf, keys = managed
    record = record_here(tmp_path, keys)
    conf.write_text('{"default-runtime": "runc"}\n')
    (reason,) = compare_here(record)
    assert reason.startswith(f"{conf}: sha1 ")
    conf.chmod(0o600)
    assert f"{conf}: mode 0644 -> 0600; sha1" in compare_here(record)[0]
    conf.unlink()
    assert compare_here(record) == [f"{conf}: was file, now absent"]
    (tmp_path / "gone").write_text("x")  # recorded as absent
    assert f"{tmp_path / 'gone'}: was absent, now file" in compare_here(record)


def test_keys_accumulate_over_records(tmp_path: Path, managed: tuple[Path, Keys]) -> None:
    conf, keys = managed
    record = record_here(tmp_path, keys)
    extra = tmp_path / "etc" / "pool.env"
    extra.write_text("A=1\n")
    record_here(tmp_path, Keys(paths={str(extra)}))  # a later apply's roles named only this file
    conf.write_text("changed\n")  # what the first apply wrote is still watched
    extra.write_text("A=2\n")
    reasons = compare_here(record)
    assert [r.split(":")[0] for r in reasons] == [str(conf), str(extra)]


def test_inputs_npus_and_missing_records(tmp_path: Path, managed: tuple[Path, Keys]) -> None:
    _, keys = managed
    record = record_here(tmp_path, keys)
    assert compare_here(record, fp="fp-2") == [
        "the inputs changed since the last apply (inventory variables, playbooks, roles or provision)"
    ]
    sick = {**HEALTHY, "health": {"0": "OK", "1": "Warning"}}
    assert compare_here(record, npus=sick) == ["NPU health: NPU 1 Warning"]
    older = {**HEALTHY, "driver_version": "24.1.0"}
    assert compare_here(record, npus=older) == ["NPUs driver_version: 25.2.0 -> 24.1.0"]
    assert compare_here(tmp_path / "none.json") == ["no record of a converged apply on this node"]
    record.write_text("{not json")
    assert compare_here(record) == ["no record of a converged apply on this node"]


def test_units_and_packages_are_observed_through_systemctl_and_the_package_db(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    state = tmp_path / "active"
    state.write_text("active")
    (bin_dir / "systemctl").write_text(
        f'#!/bin/sh\necho LoadState=loaded; echo "ActiveState=$(cat {state})"; echo UnitFileState=enabled\n'
    )
    (bin_dir / "systemctl").chmod(0o755)
    keys = Keys(units={"docker.service"}, packages={"bash", "no-such-package-here"})
    path = f"PATH={bin_dir}:{os.environ['PATH']}"
    record = tmp_path / "r.json"
    observation = parse_observation(sh(f"{path} {observe_command(PYTHON, keys=keys, record=str(record))}"))
    assert observation.observed["units"] == {
        "docker.service": {"LoadState": "loaded", "ActiveState": "active", "UnitFileState": "enabled"}
    }
    assert (
        observation.observed["packages"]["bash"]
        and observation.observed["packages"]["no-such-package-here"] is None
    )
    sh(write_command(PYTHON, new_record("fp", observation, HEALTHY, "t"), record=str(record)))
    state.write_text("inactive")
    again = parse_observation(sh(f"{path} {observe_command(PYTHON, keys=None, record=str(record))}"))
    assert drift(again.record, again.observed, HEALTHY, "fp") == [
        "unit docker.service: ActiveState active -> inactive"
    ]


def test_npu_summary_keeps_what_must_not_change() -> None:
    facts = {**HEALTHY, "chips": [{"temp_c": 40}], "model": "910B3", "bus_ids": ["0000:c1:00.0"]}
    summary = npu_summary(facts)
    assert "chips" not in summary and summary["model"] == "910B3" and summary["health"] == HEALTHY["health"]


# -- fingerprint -----------------------------------------------------------------------------------------


def test_the_fingerprint_follows_the_host_variables_and_the_playbook() -> None:
    base = {"ansible_host": "10.0.0.1", "npu_pools_list": [{"name": "a", "devices": [0]}]}
    same = {"npu_pools_list": [{"devices": [0], "name": "a"}], "ansible_host": "10.0.0.1"}
    assert fingerprint(base, playbook="site") == fingerprint(same, playbook="site")
    assert fingerprint(base, playbook="site") != fingerprint(
        {**base, "ansible_host": "10.0.0.2"}, playbook="site"
    )
    assert fingerprint(base, playbook="site") != fingerprint(base, playbook="serve")


def test_variables_reading_outside_the_inventory_are_named() -> None:
    assert reads_outside({"a": "plain", "b": "{{ other_var }}"}) is None
    assert reads_outside({"vllm_serve_api_key": "{{ lookup('env', 'KEY') }}"}) == "vllm_serve_api_key"
    assert reads_outside({"x": {"nested": ["{{ query('file', '/k') }}"]}}) == "x"


def test_serving_closure_pulls_in_whole_groups() -> None:
    groups = [["node1", "node2"], ["node3", "node4"]]
    assert serving_closure({"node2"}, groups) == {"node1", "node2"}
    assert serving_closure({"node5"}, groups) == {"node5"}
    assert serving_closure(set(), groups) == set()


def test_only_a_plain_apply_of_site_keeps_records() -> None:
    plain = {"tags": None, "skip_tags": None, "extra_vars": [], "check": False}
    assert fast_path_refusal("site", **plain) is None
    assert fast_path_refusal("site.yml", **plain) is None
    assert "serve" in str(fast_path_refusal("serve", **plain))
    assert "tags" in str(fast_path_refusal("site", **{**plain, "tags": "vllm_serve"}))
    assert "extra-vars" in str(fast_path_refusal("site", **{**plain, "extra_vars": ["a=1"]}))
    assert "check" in str(fast_path_refusal("site", **{**plain, "check": True}))


# -- the apply: which hosts run site.yml, which are recorded ----------------------------------------------


class FakeRuns:
    """Stands in for run_playbook: the verify run answers from ``states``; site.yml fails ``failing``."""

    def __init__(self, states: Mapping[str, Mapping[str, Any]], failing: Sequence[str] = ()) -> None:
        self.states, self.failing = states, set(failing)
        self.calls: list[tuple[str, str | None, list[str]]] = []

    def __call__(self, playbook: str, inventory: Path, **kwargs: Any) -> RunResult:
        limit = kwargs.get("limit")
        self.calls.append((playbook, limit, list(kwargs.get("extra_vars") or [])))
        hosts = sorted(limit.split(",")) if limit else sorted(self.states)
        observer = kwargs["observer"]
        result = RunResult(playbook, 0, "successful", inventory.parent, 1.0, False)
        for host in hosts:
            failed = playbook == "site" and host in self.failing
            result.hosts[host] = HostStats(ok=3, failed=int(failed))
            if playbook == "converged":
                observer(event(host, "converged_state", self.states[host]))
                result.endpoints.append(
                    ServedEndpoint(host, "p", f"http://{host}:8000", "m", "ready", True, False)
                )
            elif playbook == "site" and not failed:
                observer(
                    event(host, "ansible.builtin.template", {"dest": f"/etc/{host}.conf", "changed": True})
                )
        if playbook == "site" and self.failing & set(hosts):
            result.rc = 2
        return result


def event(host: str, action: str, res: Mapping[str, Any]) -> dict[str, Any]:
    return {"event": "runner_on_ok", "event_data": {"host": host, "task_action": action, "res": dict(res)}}


def inventory_of(*hosts: str) -> Inventory:
    return Inventory(
        Path("inv.ini"), hosts={h: {"ansible_host": h} for h in hosts}, groups={"npu_nodes": list(hosts)}
    )


CONVERGED = {"converged": True, "drift": [], "written_at": "T"}


def apply_with(fake: FakeRuns, inventory: Inventory, tmp_path: Path, **kwargs: Any) -> RunResult:
    return converge(
        resolve(inventory), tmp_path / "inv.ini", scratch=tmp_path, limit=None, forks=None, verbosity=0,
        observer=None, run=fake, in_process=fake, **kwargs,
    )  # fmt: skip


def test_every_node_verified_runs_no_site(tmp_path: Path) -> None:
    fake = FakeRuns({"node1": CONVERGED, "node2": CONVERGED})
    result = apply_with(fake, inventory_of("node1", "node2"), tmp_path)
    assert [call[0] for call in fake.calls] == ["converged"]
    assert (
        result.verified == {"node1": "as recorded at T", "node2": "as recorded at T"} and result.drift == {}
    )
    assert [e.host for e in result.endpoints] == ["node1", "node2"]


def test_a_drifted_node_alone_runs_site_and_is_recorded_with_its_keys(tmp_path: Path) -> None:
    drifted = {"converged": False, "drift": ["/etc/docker/daemon.json: sha1 a -> b"]}
    fake = FakeRuns({"node1": CONVERGED, "node2": drifted, "node3": CONVERGED})
    result = apply_with(fake, inventory_of("node1", "node2", "node3"), tmp_path)
    assert [(c[0], c[1]) for c in fake.calls] == [("converged", None), ("site", "node2"), ("record", "node2")]
    keys_file = Path(fake.calls[2][2][1].removeprefix("@"))
    assert '"node2": {"paths": ["/etc/node2.conf"]' in keys_file.read_text()
    assert result.drift == {"node2": ["/etc/docker/daemon.json: sha1 a -> b"]}
    assert sorted(result.verified) == ["node1", "node3"] and result.recorded == ["node2"]
    assert sorted(result.hosts) == ["node1", "node2", "node3"]


def test_a_failed_node_is_not_recorded(tmp_path: Path) -> None:
    missing = {"converged": False, "drift": ["no record of a converged apply on this node"]}
    fake = FakeRuns({"node1": missing, "node2": missing}, failing=["node2"])
    result = apply_with(fake, inventory_of("node1", "node2"), tmp_path)
    assert [(c[0], c[1]) for c in fake.calls][1:] == [("site", "node1,node2"), ("record", "node1")]
    assert result.recorded == ["node1"] and not result.ok


def test_full_runs_site_everywhere_then_records(tmp_path: Path) -> None:
    fake = FakeRuns({"node1": CONVERGED, "node2": CONVERGED})
    result = apply_with(fake, inventory_of("node1", "node2"), tmp_path, full=True)
    assert [(c[0], c[1]) for c in fake.calls] == [("site", None), ("record", "node1,node2")]
    assert result.verified == {} and result.recorded == ["node1", "node2"]


def test_a_drifted_member_takes_its_whole_serving_group(tmp_path: Path) -> None:
    profile = {"model": "/models/m", "nodes": 2, "tensor_parallel_size": 1, "data_parallel_size": 2}
    pool = {"name": "big", "devices": [0], "port": 8000, "profile": "dp2"}
    hosts = {
        h: {"ansible_host": f"10.0.0.{i}", "npu_pools_list": [pool], "vllm_serve_profiles": {"dp2": profile}}
        for i, h in enumerate(("node1", "node2", "node3"), start=1)
    }
    hosts["node3"] = {"ansible_host": "10.0.0.3"}
    inventory = Inventory(Path("inv.ini"), hosts=hosts, groups={"npu_nodes": ["node1", "node2", "node3"]})
    drifted = {"converged": False, "drift": ["unit vllm-big.service: ActiveState active -> failed"]}
    fake = FakeRuns({"node1": CONVERGED, "node2": drifted, "node3": CONVERGED})
    result = apply_with(fake, inventory, tmp_path)
    assert fake.calls[1][:2] == ("site", "node1,node2")
    assert result.drift["node1"] == ["a member of its serving group runs site.yml"]
    assert list(result.verified) == ["node3"]


def test_a_host_reading_outside_the_inventory_always_runs_site(tmp_path: Path) -> None:
    inventory = inventory_of("node1")
    inventory.hosts["node1"]["vllm_serve_api_key"] = "{{ lookup('env', 'KEY') }}"
    fake = FakeRuns({"node1": CONVERGED})
    result = apply_with(fake, inventory, tmp_path)
    assert result.drift["node1"][0].startswith("variable vllm_serve_api_key reads outside the inventory")
    assert fake.calls[1][:2] == ("site", "node1")


def test_output_through_a_terminal_parses_too() -> None:
    """ssh -tt (become, sudo) ends lines with CR LF: the marker and the NPU probe's part still split."""
    text = sh(observe_command(PYTHON, keys=Keys(users={"root"}), record="/nonexistent/r.json"))
    crlf = ("\n@@@provision pci\n01:00.0 1200: 19e5:d802 (rev 20)\n" + text).replace("\n", "\r\n")
    assert parse_observation(crlf).observed["users"] == {"root": 0}
    assert probe_output(crlf).strip().splitlines() == ["@@@provision pci", "01:00.0 1200: 19e5:d802 (rev 20)"]


def test_the_local_facts_come_back_for_the_stack_report(tmp_path: Path) -> None:
    facts = tmp_path / "facts.d"
    facts.mkdir()
    (facts / "ascend.fact").write_text('{"driver": "25.5.1"}')
    (facts / "broken.fact").write_text("{")
    (facts / "notes.txt").write_text("x")
    command = observe_command(PYTHON, keys=None, record=str(tmp_path / "r.json"), facts=str(facts))
    assert parse_observation(sh(command)).local == {
        "ascend": {"driver": "25.5.1"},
        "broken": "error loading fact - please check content",
    }
    missing = observe_command(
        PYTHON, keys=None, record=str(tmp_path / "r.json"), facts=str(tmp_path / "none")
    )
    assert parse_observation(sh(missing)).local == {}


# -- the converged_state action, its node commands run here -----------------------------------------------

ACTION = load_module("provision_action_converged_state", ROOT / "plugins/action/converged_state.py")


def node_at_stack(tmp_path: Path, stack: str) -> tuple[Path, Callable[..., dict[str, Any]]]:
    """A node here whose local facts report ``stack``'s versions and whose record is as observed: the
    record's path, and the stand-in for the connection's command (the action's probe + observe command)."""
    versions = {key: str(lock.stack(stack)[key]) for key in lock.REPORTED}
    facts = tmp_path / "facts.d"
    facts.mkdir()
    ascend = {"driver": {"version": versions["driver"]}, "firmware": {"version": versions["firmware"]}}
    (facts / "ascend.fact").write_text(json.dumps(ascend))
    (facts / "cann.fact").write_text(json.dumps({"toolkit": versions["cann"], "nnal": versions["nnal"]}))
    record = tmp_path / "converged.json"
    observe = observe_command(PYTHON, keys=None, union=True, record=str(record), facts=str(facts))

    def execute(command: str, sudoable: bool = True) -> dict[str, Any]:
        # the probe's part as a node without npu-smi prints it (one NPU on its PCI bus), then the observer's
        return {"rc": 0, "stdout": "@@@provision pci\n01:00.0 1200: 19e5:d802 (rev 20)\n" + sh(observe)}

    observed = execute("")["stdout"]
    npus = npu_summary(facts_from_probe(probe_output(observed))["ascend_npus"])
    content = new_record("fp-1", parse_observation(observed), npus, "2026-12-07T00:00:00+00:00")
    sh(write_command(PYTHON, content, record=str(record)))
    return record, execute


def compare_with_action(
    monkeypatch: pytest.MonkeyPatch, record: Path, execute: Callable[..., dict[str, Any]], **args: Any
) -> dict[str, Any]:
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    action = ACTION.ActionModule.__new__(ACTION.ActionModule)
    action._task = SimpleNamespace(
        args={"fingerprint": "fp-1", "path": str(record), **args}, check_mode=False
    )
    action._low_level_execute_command = execute
    result: dict[str, Any] = action.run(task_vars={"ansible_python_interpreter": PYTHON})
    return result


def test_the_comparison_reports_the_stack_it_is_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    older = "0.18.0"
    assert older != lock.default_stack_name()
    record, execute = node_at_stack(tmp_path, older)

    on_it = compare_with_action(monkeypatch, record, execute, stack=older)
    assert on_it["converged"] is True, on_it["drift"]
    assert on_it["stack"]["stack"] == older and on_it["stack"]["differences"] == []
    assert on_it["provision_info"] == on_it["stack"]["line"]
    assert on_it["provision_info"].startswith(f"stack {older}: ") and on_it["provision_info"].endswith(
        "; matches the lock"
    )

    default = compare_with_action(monkeypatch, record, execute, stack="")  # provision_stack unset
    assert default["converged"] is True and default["stack"]["stack"] == lock.default_stack_name()
    older_stack, default_stack = lock.stack(older), lock.default_stack()
    expected = [
        f"{key} {older_stack[key]} (lock {default_stack[key]})"
        for key in lock.REPORTED
        if older_stack[key] != default_stack[key]
    ]
    assert expected and default["stack"]["differences"] == expected
    assert default["provision_info"].endswith("; differs from the lock: " + ", ".join(expected))

    with pytest.raises(AnsibleActionFail, match="provision_stack 'no-such' is not in the version lock"):
        compare_with_action(monkeypatch, record, execute, stack="no-such")

    drifted = compare_with_action(monkeypatch, record, execute, stack=older, fingerprint="fp-2")
    assert drifted["converged"] is False and "stack" not in drifted and "provision_info" not in drifted


def test_only_site_yml_is_told_the_inputs_were_checked(tmp_path: Path) -> None:
    """provision_validated (the roles' own argument checks are not made again) reaches site.yml, which runs
    the roles, and only when the CLI says every input was checked."""
    drifted = {"converged": False, "drift": ["not converged"]}
    for validated, site_vars in ((True, [VALIDATED_VARS]), (False, [])):
        fake = FakeRuns({"node1": drifted})
        apply_with(fake, inventory_of("node1"), tmp_path, validated=validated)
        assert [(c[0], c[2]) for c in fake.calls if c[0] == "site"] == [("site", site_vars)]
        assert all(VALIDATED_VARS not in c[2] for c in fake.calls if c[0] != "site")
        fake = FakeRuns({"node1": drifted})
        apply_with(fake, inventory_of("node1"), tmp_path, validated=validated, full=True)
        assert [c[0] for c in fake.calls] == ["site", "record"] and fake.calls[0][2] == site_vars
        assert VALIDATED_VARS not in fake.calls[1][2]
