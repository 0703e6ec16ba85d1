"""ansible-playbook's habits on provision's verbs: the inventory from Ansible's configuration when none is
given, ``-c``/``-T``/``--become-user``/``--list-hosts``/``--list-tasks``/``--start-at-task`` with their
meanings, ``-h``, argparse-style metavars, one meaning per short option, separate environment variables for
``bootstrap --parallel`` and ``--forks``, ``-v`` output as ansible-playbook prints it, and the heartbeat line
off a terminal."""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import Any

import pytest

from provision.cli import command
from provision.runner.progress import LineProgress
from tests.unit.test_cli_ansible_options import EXAMPLES, run_cli, runner  # noqa: F401  (fixture)

pytestmark = pytest.mark.unit


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    folder = tmp_path / "inventory"
    shutil.copytree(EXAMPLES, folder)
    return folder / "inventory.ini"


def _verbs(group: Any, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = []
    for name, sub in (getattr(group, "commands", None) or {}).items():
        found.append(((*prefix, name), sub))
        found += _verbs(sub, (*prefix, name))
    return found


def test_every_verb_takes_h_and_shows_no_python_types(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    verbs = _verbs(command())
    assert len(verbs) > 15
    for path, _ in verbs:
        code, output = run_cli([*path, "-h"], monkeypatch, capsys)
        assert code == 0, (path, output)
        assert "Usage: provision " + " ".join(path) in output, path
        for python in ("<str>", "<list[", "<int", "<float", "<path>", "<Path"):
            options = output.split("Options:", 1)[-1]
            assert python not in options, (path, python, options)
    code, output = run_cli(["apply", "-h"], monkeypatch, capsys)
    assert "-e, --extra-vars EXTRA_VARS" in output and "-c, --connection CONNECTION" in output


def test_each_short_option_means_one_thing_across_verbs() -> None:
    meanings: dict[str, set[str]] = {}
    for _, verb in _verbs(command()):
        for param in getattr(verb, "params", []):
            for opt in [*param.opts, *param.secondary_opts]:
                if len(opt) == 2 and opt.startswith("-"):
                    longest = max(param.opts, key=len)
                    meanings.setdefault(opt, set()).add(longest)
    shared = {opt: sorted(longs) for opt, longs in meanings.items() if len(longs) > 1}
    assert shared == {}
    assert meanings["-p"] == {"--playbook"}


def test_ansible_playbook_options_reach_the_run_with_their_meaning(
    inventory: Path,
    runner: list[dict[str, Any]],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, output = run_cli(
        ["apply", str(inventory), "-c", "local", "-T", "30", "--become-user", "svc", "--list-hosts",
         "--list-tasks", "--start-at-task", "Check free disk space"],
        monkeypatch, capsys,
    )  # fmt: skip
    assert code == 0, output
    [call] = runner  # --list-*: site.yml once, not the record check first
    args = call["args"]
    assert args[args.index("--connection") + 1] == "local"
    assert args[args.index("--timeout") + 1] == "30"
    assert args[args.index("--become-user") + 1] == "svc"
    assert args[args.index("--start-at-task") + 1] == "Check free disk space"
    assert "--list-hosts" in args and "--list-tasks" in args
    assert call["playbook"].endswith("site.yml")


def test_start_at_task_runs_site_yml_plainly(
    inventory: Path,
    runner: list[dict[str, Any]],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, output = run_cli(["apply", str(inventory), "--start-at-task", "X"], monkeypatch, capsys)
    assert code == 0, output
    assert [Path(c["playbook"]).name for c in runner] == ["site.yml"]  # no converged.yml, no record.yml


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["-c", "nosuchplugin"], "-c/--connection nosuchplugin: no such connection plugin; ansible-core's "),
        (["-T", "0"], "Invalid value for '--timeout' / '-T'"),
    ],
)
def test_a_bad_connection_or_timeout_exits_2_before_any_run(
    args: list[str],
    expected: str,
    inventory: Path,
    runner: list[dict[str, Any]],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, output = run_cli(["plan", str(inventory), *args], monkeypatch, capsys)
    assert code == 2
    assert expected in output
    assert runner == []


def test_the_inventory_comes_from_ansible_inventory_then_ansible_cfg(
    inventory: Path,
    tmp_path: Path,
    runner: list[dict[str, Any]],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.chdir(site)
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    monkeypatch.setenv("ANSIBLE_INVENTORY", str(inventory))
    code, output = run_cli(["plan"], monkeypatch, capsys)
    assert code == 0, output
    assert runner[-1]["inventory"] == [str(inventory.resolve())]

    monkeypatch.delenv("ANSIBLE_INVENTORY")
    (site / "ansible.cfg").write_text(f"[defaults]\ninventory = {inventory}\n")
    code, output = run_cli(["validate"], monkeypatch, capsys)
    assert code == 0, output
    assert output.startswith(f"{inventory}: ok (")

    (site / "ansible.cfg").write_text("[defaults]\nforks = 5\n")
    code, output = run_cli(["validate"], monkeypatch, capsys)
    assert code == 2
    assert "set ANSIBLE_INVENTORY or [defaults] inventory in your ansible.cfg" in output


def test_bootstrap_port_has_no_short_option_and_parallel_its_own_variable(
    inventory: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, output = run_cli(["bootstrap", "-i", str(inventory), "-p", "2222", "n1"], monkeypatch, capsys)
    assert code == 2 and "No such option: -p" in output
    monkeypatch.setenv("PROVISION_PARALLEL", "0")
    code, output = run_cli(["bootstrap", "-i", str(inventory), "n1"], monkeypatch, capsys)
    assert code == 2 and "'--parallel' (env var: 'PROVISION_PARALLEL')" in output


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _event(kind: str, host: str | None = None, task: str = "", **data: Any) -> dict[str, Any]:
    return {"event": kind, "event_data": {"task": task, **({"host": host} if host else {}), **data}}


def test_off_a_terminal_a_heartbeat_says_what_waits_how_long_and_its_budget() -> None:
    clock, out = _Clock(), io.StringIO()
    gate = "Wait until the instance answers a completion, vllm-chat.service, up to 900 s"
    progress = LineProgress(out, heartbeat_s=60, clock=clock)
    progress(_event("runner_on_start", "node1", gate, role="vllm_serve"))
    progress(_event("runner_on_start", "node2", gate, role="vllm_serve"))
    clock.now += 30
    progress.beat()
    assert out.getvalue() == ""  # not yet a heartbeat long
    clock.now += 95
    progress.beat()
    assert out.getvalue().splitlines() == [
        f"  waiting     125 s of a 900 s budget: vllm_serve : {gate} on node1, node2"
    ]
    progress(_event("runner_on_ok", "node1", gate, role="vllm_serve", res={}))
    progress(_event("runner_on_ok", "node2", gate, role="vllm_serve", res={}))
    clock.now += 120
    progress.beat()
    assert len(out.getvalue().splitlines()) == 1  # nothing waits any more


def test_the_heartbeat_thread_writes_while_a_task_runs() -> None:
    out = io.StringIO()
    with LineProgress(out, heartbeat_s=0.05) as progress:
        progress(_event("runner_on_start", "node1", "Reboot the node"))
        for _ in range(100):
            if "waiting" in out.getvalue():
                break
            import time

            time.sleep(0.02)
    assert "Reboot the node on node1" in out.getvalue()


def test_verbose_shows_ansible_playbook_s_own_output() -> None:
    out = io.StringIO()
    progress = LineProgress(out, verbose=True, heartbeat_s=0)
    progress(
        {"event": "playbook_on_task_start", "stdout": "\nTASK [preflight : Check OS] ****", "event_data": {}}
    )
    progress(
        {
            "event": "runner_on_ok",
            "stdout": 'ok: [node1] => {"changed": false, "msg": "ok"}',
            "event_data": {"host": "node1", "task": "Check OS", "res": {}},
        }
    )
    assert (
        out.getvalue()
        == '\nTASK [preflight : Check OS] ****\nok: [node1] => {"changed": false, "msg": "ok"}\n'
    )
