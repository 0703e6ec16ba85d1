"""Multi-node serving groups through status, apply's endpoints and the rolling upgrade: batches that
keep each group whole (provision.serving.multinode.rolling_batches, and playbooks/upgrade.yml run for real
with local connections), the hccn_gate refusal of a group split by a play's own serial, which groups of a
node go back after a failed head (group_outcomes), and the status / endpoint views of headless workers."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from provision.cli import _playbook
from provision.cli import serve as serve_cli
from provision.cli.console import Console
from provision.inventory.profiles import ProfileError
from provision.runner.run import RunResult, ServedEndpoint, ansible_env
from provision.serving.multinode import batch_size, group_outcomes, rolling_batches

pytestmark = pytest.mark.unit

ROOT = Path(__file__).parents[2]
DS = "deepseek-r1-w8a8-2node"
POOL_LINE = (
    "npu_pools_list:\n  - {name: ds, devices: [0, 1, 2, 3, 4, 5, 6, 7], port: 8000, profile: " + DS + "}\n"
)


# ------------------------------------------------------------------------------------------- batches


@pytest.mark.parametrize(
    ("hosts", "groups", "batch", "sizes"),
    [
        (["a", "b", "c"], [], 1, [1, 1, 1]),
        (["a", "b", "c", "d", "e"], [], 2, [2, 2, 1]),
        (["a", "g1", "g2", "b"], [["g1", "g2"]], 1, [1, 2, 1]),
        # a batch that would cut a group grows to its last node
        (["a", "g1", "g2", "b"], [["g1", "g2"]], 2, [3, 1]),
        # interleaved: the batch spans from the group's first node to its last
        (["g1", "x", "g2", "b"], [["g1", "g2"]], 1, [3, 1]),
        # a host in two groups (two multi-node pools) chains them into one batch
        (["g1", "h", "g2", "h2"], [["g1", "h"], ["h", "g2"]], 1, [3, 1]),
        # --limit: members outside the play are ignored (the HCCN gate refuses the group)
        (["a", "g1", "b"], [["g1", "g2"]], 1, [1, 1, 1]),
        (["a", "b", "c", "d"], [["b", "c"]], "50%", [3, 1]),
        ([], [["g1", "g2"]], 1, [1]),
    ],
)
def test_rolling_batches_keep_each_group_whole(
    hosts: list[str], groups: list[list[str]], batch: int | str, sizes: list[int]
) -> None:
    assert rolling_batches(hosts, groups, batch) == sizes
    assert sum(sizes) == len(hosts) or not hosts


@pytest.mark.parametrize(("batch", "count", "size"), [(1, 9, 1), ("3", 9, 3), ("25%", 9, 2), ("10%", 3, 1)])
def test_batch_size(batch: int | str, count: int, size: int) -> None:
    assert batch_size(batch, count) == size


@pytest.mark.parametrize("batch", [0, "-1", "two", ""])
def test_batch_size_refuses_nonsense(batch: int | str) -> None:
    with pytest.raises(ProfileError, match="vllm_serve_upgrade_batch"):
        batch_size(batch, 4)


def _inventory(tmp_path: Path, hosts: list[str], grouped: list[str]) -> Path:
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "inventory.ini").write_text(
        "[npu_nodes]\n" + "\n".join(hosts) + "\n[npu_nodes:vars]\nansible_connection=local\n"
    )
    for host in grouped:
        (tmp_path / "host_vars" / f"{host}.yml").write_text(POOL_LINE)
    return tmp_path / "inventory.ini"


def _playbook_run(inventory: Path, playbook: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **ansible_env()}
    argv = [
        str(Path(sys.executable).with_name("ansible-playbook")),
        "-i",
        str(inventory),
        str(playbook),
        *args,
    ]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)


def _batches(stdout: str, play: str) -> list[list[str]]:
    """The hosts of each run of ``play`` (one PLAY banner per serial batch), from the default callback."""
    out: list[list[str]] = []
    current: list[str] | None = None
    for line in stdout.splitlines():
        if line.startswith("PLAY "):
            current = [] if line.startswith(f"PLAY [{play}]") else None
            if current is not None:
                out.append(current)
        elif current is not None:
            found = re.match(r"(?:ok|changed|skipping|fatal): \[([^\]]+)\]", line)
            if found and found.group(1) not in current:
                current.append(found.group(1))
    return out


def test_upgrade_playbook_puts_each_group_in_one_batch(tmp_path: Path) -> None:
    """playbooks/upgrade.yml for real (local connections; only the roles' argument checks run, tagged always):
    batch 1 over a, g1, x, g2, b with the 2-node group g1+g2 runs a, then g1 x g2 together, then b."""
    inventory = _inventory(tmp_path, ["a", "g1", "x", "g2", "b"], ["g1", "g2"])
    done = _playbook_run(inventory, ROOT / "playbooks/upgrade.yml", "--tags", "no_such_tag")
    assert done.returncode == 0, done.stdout + done.stderr
    batches = _batches(done.stdout, "Rolling upgrade of the vLLM instances")
    assert [sorted(b) for b in batches] == [["a"], ["g1", "g2", "x"], ["b"]], done.stdout

    limited = _playbook_run(
        inventory,
        ROOT / "playbooks/upgrade.yml",
        "--tags",
        "no_such_tag",
        "--limit",
        "a,g1,g2,b",
        "-e",
        "vllm_serve_upgrade_batch=2",
    )
    assert limited.returncode == 0, limited.stdout + limited.stderr
    batches = _batches(limited.stdout, "Rolling upgrade of the vLLM instances")
    assert [sorted(b) for b in batches] == [["a", "g1", "g2"], ["b"]], limited.stdout


def test_hccn_gate_refuses_a_group_split_by_the_plays_own_serial(tmp_path: Path) -> None:
    inventory = _inventory(tmp_path, ["g1", "g2"], ["g1", "g2"])
    play = tmp_path / "split.yml"
    play.write_text(
        "- hosts: npu_nodes\n  gather_facts: false\n  serial: 1\n"
        "  roles:\n    - role: provision.ascend.hccn_gate\n"
    )
    done = _playbook_run(inventory, play, "--tags", "hccn_gate_groups")
    assert done.returncode != 0, done.stdout
    text = " ".join(done.stdout.split())
    assert (
        "serving group ds (profile deepseek-r1-w8a8-2node: head g1, workers g2) is split across batches of "
        "this rolling play: g2 not in this batch (g1)." in text
    ), done.stdout
    assert "use playbooks/upgrade.yml" in text


# ------------------------------------------------------------------------------------ group outcomes


def _instances(host: str, role: str) -> list[dict[str, Any]]:
    group = {
        "index": 0 if role == "head" else 1,
        "role": role,
        "group": "ds",
        "head": "n1",
        "hosts": ["n1", "n2"],
    }
    return [
        {"pool": "ds", "start": role, "multinode": group},
        {"pool": "chat", "start": "single", "multinode": None},
    ]


def _facts(**per_host: dict[str, Any]) -> Any:
    return lambda host, name: per_host.get(host, {}).get(name)


FAILED = {"ds": {"ready": False, "unit": "vllm-ds.service", "message": "boom"}}


def test_a_failed_changed_group_goes_back_on_every_node() -> None:
    facts = _facts(
        n1={
            "__vllm_serve_head_verdicts": FAILED,
            "__vllm_serve_group_restart": ["ds"],
            "__vllm_serve_snapshot": ["ds"],
        },
        n2={"__vllm_serve_group_restart": ["ds"], "__vllm_serve_snapshot": []},
    )
    for host, role in (("n1", "head"), ("n2", "worker")):
        [(pool, outcome)] = group_outcomes(_instances(host, role), facts, rollback=True).items()
        assert (pool, outcome["rollback"], outcome["why_not"], outcome["hosts"]) == (
            "ds",
            True,
            "",
            ["n1", "n2"],
        )
        assert outcome["verdict"]["message"] == "boom"
        assert outcome["restore"] is (host == "n1"), (
            "only a node whose configuration changed restores previous/"
        )


@pytest.mark.parametrize(
    ("n1", "n2", "rollback", "why"),
    [
        (
            {"__vllm_serve_group_restart": ["ds"], "__vllm_serve_snapshot": ["ds"]},
            {},
            False,
            "vllm_serve_rollback is off",
        ),
        (
            {"__vllm_serve_group_restart": [], "__vllm_serve_snapshot": []},
            {},
            True,
            "no previous configuration",
        ),
        (
            {"__vllm_serve_group_restart": ["ds"], "__vllm_serve_snapshot": ["ds"]},
            {"__vllm_serve_new": ["ds"]},
            True,
            "no previous configuration on n2 (new there)",
        ),
    ],
)
def test_a_failed_group_that_cannot_go_back(
    n1: dict[str, Any], n2: dict[str, Any], rollback: bool, why: str
) -> None:
    facts = _facts(n1={**n1, "__vllm_serve_head_verdicts": FAILED}, n2=n2)
    outcome = group_outcomes(_instances("n2", "worker"), facts, rollback=rollback)["ds"]
    assert outcome["rollback"] is False and outcome["why_not"].startswith(why)


def test_a_ready_or_ungated_head_fails_nothing() -> None:
    ready = _facts(n1={"__vllm_serve_head_verdicts": {"ds": {"ready": True}}})
    assert group_outcomes(_instances("n2", "worker"), ready, rollback=True) == {}
    assert group_outcomes(_instances("n2", "worker"), _facts(), rollback=True) == {}


# ---------------------------------------------------------------------------------- status, endpoints


def _row(host: str, state: str, role: str = "single") -> dict[str, Any]:
    return {
        "host": host,
        "pool": "ds",
        "url": "-" if role == "worker" else f"http://{host}:8000",
        "state": state,
        "role": role,
        "model": "m",
        "reason": "worker of n1/ds (serving group ds: n1, n2; ...)" if role == "worker" else state,
    }


@pytest.mark.parametrize(
    ("rows", "ready"),
    [
        ([_row("n1", "ready", "head"), _row("n2", "worker", "worker")], True),
        ([_row("n1", "loading", "head"), _row("n2", "worker", "worker")], False),
        ([_row("n2", "worker", "worker")], False),  # no API at all to answer
        ([_row("n1", "ready"), _row("n3", "unreachable")], False),
    ],
)
def test_status_verdict_counts_heads_and_single_instances(rows: list[dict[str, Any]], ready: bool) -> None:
    assert serve_cli.ready(rows) is ready


def test_status_table_shows_workers_apart(capsys: pytest.CaptureFixture[str]) -> None:
    serve_cli._inventory_table([_row("n1", "ready", "head"), _row("n2", "worker", "worker")])
    out = capsys.readouterr().out
    assert (
        "n2    ds    -               worker  m      worker of n1/ds (serving group ds: n1, n2; ...)" in out
    ), out
    assert out.rstrip().endswith(
        "1/1 ready on 2 host(s) (+ 1 multi-node worker(s), answered for by their head)"
    )


def test_apply_lists_the_head_with_its_group_and_never_a_worker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def served(host: str, role: str, ready: bool) -> ServedEndpoint:
        url = "-" if role == "worker" else f"http://{host}:8000"
        state = "worker" if role == "worker" else "ready"
        return ServedEndpoint(host, "ds", url, "m", state, ready, False, role, ["n1", "n2"])

    result = RunResult("serve.yml", 0, "successful", tmp_path, 1.0, False)
    result.endpoints = [served("n2", "worker", True), served("n1", "head", True)]
    _playbook.endpoints(result, Console.for_stream(sys.stdout), tmp_path / "inventory.ini")
    out = capsys.readouterr().out
    assert "  n1/ds  ready       http://n1:8000  model m  (serving group: n1, n2)" in out, out
    assert "n2/ds" not in out
    assert "curl -s http://n1:8000/v1/completions" in out


def test_a_looped_head_gate_reports_each_head_as_an_endpoint() -> None:
    """group_gate.yml gates heads in a loop: each item's verdict (runner_item_on_ok) is an endpoint."""
    from provision.runner.run import _Collector

    item = {"pool": "ds", "url": "http://n1:8000", "model": "m", "state": "ready", "ready": True}
    collector = _Collector(None)
    collector.handle(
        {
            "event": "runner_item_on_ok",
            "event_data": {
                "host": "n1",
                "task": "gate",
                "res": {"endpoints": [{**item, "role": "head", "hosts": ["n1", "n2"]}]},
            },
        }
    )
    [served] = collector.endpoints.values()
    assert (served.host, served.role, served.hosts, served.ready) == ("n1", "head", ["n1", "n2"], True)
