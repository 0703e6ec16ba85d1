"""Progress displays and recap from ansible-runner events (synthetic events of the real shape)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console as RichConsole

from provision.cli.version import versions
from provision.runner.progress import LineProgress, LiveProgress, recap_table
from provision.runner.run import HostStats, RunResult, _Collector, failure_message, render_diff

pytestmark = pytest.mark.unit


def ev(
    kind: str, host: str | None = None, task: str = "", role: str = "", **extra: object
) -> dict[str, object]:
    data: dict[str, object] = {"task": task, "role": role, **extra}
    if host:
        data["host"] = host
    return {"event": kind, "event_data": data}


EVENTS = [
    ev("playbook_on_play_start", name="Preflight"),
    ev("playbook_on_task_start", task="Check OS", role="preflight"),
    ev("runner_on_start", "n1", "Check OS", "preflight"),
    ev("runner_on_ok", "n1", "Check OS", "preflight", res={"changed": False}),
    ev(
        "runner_on_ok",
        "n2",
        "Write file",
        "preflight",
        res={"changed": True, "diff": {"before": "a\n", "after": "b\n"}},
    ),
    ev("runner_on_failed", "n3", "Check disk", "preflight", res={"msg": "/var has 1 MiB free"}),
    ev(
        "runner_on_unreachable",
        "n4",
        "Gathering Facts",
        res={
            "msg": "EOF on stream; last 100 lines received:\n"
            "ssh: connect to host 10.0.0.4 port 22: Connection refused"
        },
    ),
    ev("playbook_on_stats", ok={"n1": 1, "n2": 1}, changed={"n2": 1}, failures={"n3": 1}, dark={"n4": 1}),
]


def test_line_progress_prints_banners_and_non_ok_results() -> None:
    out = io.StringIO()
    with LineProgress(out) as progress:
        for event in EVENTS:
            progress(event)
    lines = out.getvalue().splitlines()
    assert lines == [
        "PLAY Preflight",
        "  n2               changed     preflight : Write file",
        "  n3               failed      preflight : Check disk",
        "  n4               unreachable Gathering Facts (connection refused)",
    ]


def test_line_progress_prints_debug_messages_and_provision_info_lines_only() -> None:
    out = io.StringIO()
    with LineProgress(out) as progress:
        progress(ev("runner_on_ok", "n1", "Say", task_action="ansible.builtin.debug", res={"msg": "hello"}))
        progress(ev("runner_on_ok", "n1", "Compare", res={"msg": "as recorded", "provision_info": "stack x"}))
        progress(ev("runner_on_ok", "n2", "Other", res={"msg": "a module's message"}))
        progress(
            ev("runner_on_ok", "n2", "Say", task_action="ansible.builtin.debug", res={"provision_info": "y"})
        )
    assert out.getvalue().splitlines() == [
        "  n1               info        hello",
        "  n1               info        stack x",
    ]


def test_live_progress_table_has_a_row_per_host_with_counts() -> None:
    console = RichConsole(file=io.StringIO(), width=120, force_terminal=False)
    live = LiveProgress(console)
    for event in EVENTS:
        live(event)
    table = live._table()
    hosts = list(table.columns[0].cells)
    assert hosts == ["n1", "n2", "n3", "n4"]
    assert list(table.columns[2].cells)[1] == "[yellow]1[/]"  # n2 changed
    assert list(table.columns[3].cells)[2] == "[red]1[/]"  # n3 failed
    assert list(table.columns[4].cells)[3] == "[red]1[/]"  # n4 unreachable
    assert list(table.columns[5].cells)[3] == "UNREACHABLE: connection refused"


def test_collector_builds_stats_failures_and_changes() -> None:
    collector = _Collector(None)
    for event in EVENTS:
        collector.handle(event)
    assert collector.hosts["n2"] == HostStats(ok=1, changed=1)
    assert collector.hosts["n4"].unreachable == 1
    assert [(f.host, f.unreachable) for f in collector.failures] == [("n3", False), ("n4", True)]
    assert collector.failures[1].message == (
        "connection refused: ssh: connect to host 10.0.0.4 port 22: Connection refused"
    )
    assert collector.changes[0].diff.splitlines()[-2:] == ["-a", "+b"]


def test_recap_and_json_summary() -> None:
    result = RunResult("site", 2, "failed", Path("/tmp/r"), 1.0, False)
    result.hosts = {"n1": HostStats(ok=3), "n3": HostStats(ok=1, failed=1)}
    assert result.exit_code == 1
    summary = result.to_json()
    assert json.loads(json.dumps(summary))["hosts"]["n3"]["failed"] == 1
    console = RichConsole(file=io.StringIO(), width=100)
    console.print(recap_table(result, ascii_only=True))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "| n3   |  1 |       0 |      1 |" in text and "FAILED" in text


def test_bad_input_exit_code_only_when_no_host_was_reached() -> None:
    syntax = RunResult("site", 4, "failed", Path("/tmp/r"), 0.1, False)
    assert syntax.exit_code == 2
    unreachable = RunResult(
        "site", 4, "failed", Path("/tmp/r"), 0.1, False, hosts={"n": HostStats(unreachable=1)}
    )
    assert unreachable.exit_code == 4
    assert unreachable.to_json()["unreachable"] == {"n": ""}
    assert unreachable.to_json()["hosts"]["n"]["result"] == "unreachable"
    both = RunResult(
        "site", 2, "failed", Path("/tmp/r"), 0.1, False,
        hosts={"n": HostStats(unreachable=1), "m": HostStats(ok=1, failed=1)},
    )  # fmt: skip
    assert both.exit_code == 1  # a failed host is not fixed by waiting for the unreachable one
    assert both.to_json()["failed"] == ["m"]


def test_failure_message_of_loops_names_items() -> None:
    res = {
        "msg": "One or more items failed",
        "results": [{"failed": True, "msg": "no", "_ansible_item_label": "/var"}],
    }
    assert failure_message(res) == "[/var] no"
    assert render_diff({"diff": [{"prepared": "+ pkg foo"}]}) == "+ pkg foo"


def test_version_reports_the_pinned_stack() -> None:
    info = versions()
    stack = info["stack"]
    assert isinstance(stack, dict)
    assert stack["vllm_ascend"] == "0.23.0" and stack["cann"] == "9.1.0"
    assert str(info["ansible-core"]).startswith("2.")


def _gate_event(host: str, state: str, ready: bool, api_key: bool = False) -> dict[str, object]:
    item = {
        "pool": "chat",
        "url": f"http://{host}:8000",
        "model": "smollm2",
        "state": state,
        "ready": ready,
        "api_key": api_key,
    }
    return ev("runner_on_ok", host, "Wait for the instances", "vllm_serve", res={"endpoints": [item]})


def test_endpoints_keep_the_last_gate_verdict_and_the_report_says_how_to_query() -> None:
    from provision.cli._playbook import report
    from provision.cli.console import Console

    collector = _Collector(None)
    for event in (
        _gate_event("10.0.0.2", "loading", False),
        _gate_event("10.0.0.2", "ready", True, api_key=True),
        _gate_event("10.0.0.1", "failed", False),
    ):
        collector.handle(event)
    result = RunResult("site", 0, "successful", Path("/tmp/r"), 1.0, False)
    result.endpoints = [collector.endpoints[key] for key in sorted(collector.endpoints)]
    assert [(e.host, e.state) for e in result.endpoints] == [("10.0.0.1", "failed"), ("10.0.0.2", "ready")]
    assert json.loads(json.dumps(result.to_json()))["endpoints"][1]["url"] == "http://10.0.0.2:8000"

    out = io.StringIO()
    report(result, Console.for_stream(out), Path("/site/inventory.ini"))
    text = out.getvalue()
    assert "  10.0.0.1/chat  failed      http://10.0.0.1:8000  model smollm2" in text
    assert (
        "curl -s http://10.0.0.2:8000/v1/completions -H 'Content-Type: application/json'"
        ' -H "Authorization: Bearer $VLLM_API_KEY" -d \'{"model": "smollm2"'
    ) in text
    assert "provision serve status /site/inventory.ini" in text


def test_the_report_of_failed_and_unreachable_hosts_names_doctor_on_them() -> None:
    from provision.cli._playbook import report
    from provision.cli.console import Console

    collector = _Collector(None)
    for event in EVENTS:
        collector.handle(event)
    result = RunResult("site", 2, "failed", Path("/tmp/r"), 1.0, False)
    result.hosts, result.failures = collector.hosts, collector.failures
    out = io.StringIO()
    report(result, Console.for_stream(out), Path("/site/my inventory.ini"))
    lines = out.getvalue().splitlines()
    assert "UNREACHABLE n4: Gathering Facts" in lines
    assert "unreachable, not reached (1):" in lines
    assert "  n4  connection refused: ssh: connect to host 10.0.0.4 port 22: Connection refused" in lines
    assert lines[-2:] == [
        "failed: n3; unreachable: n4 (exit 1); run directory: /tmp/r",
        "what is wrong there and how to fix it: provision doctor '/site/my inventory.ini' --limit n3,n4",
    ]
    healthy = RunResult("site", 0, "successful", Path("/tmp/r"), 1.0, False)
    healthy.hosts = {"n1": HostStats(ok=1)}
    out = io.StringIO()
    report(healthy, Console.for_stream(out), Path("/site/inventory.ini"))
    assert "provision doctor" not in out.getvalue()


def test_a_change_without_a_diff_keeps_its_message_and_plan_shows_it() -> None:
    from provision.cli.console import Console
    from provision.cli.plan import show_plan

    collector = _Collector(None)
    collector.handle(
        ev(
            "runner_on_ok",
            "n1",
            "Packages to install once the sources are in place",
            "openeuler_repos",
            task_action="ansible.builtin.debug",
            res={"changed": True, "msg": "would install: dkms, gcc, pciutils"},
        )
    )
    collector.handle(ev("playbook_on_stats", ok={"n1": 1}, changed={"n1": 1}))
    (change,) = collector.changes
    assert (change.diff, change.detail) == ("", "would install: dkms, gcc, pciutils")
    result = RunResult("site", 0, "successful", Path("/tmp/r"), 1.0, True, hosts=collector.hosts)
    result.changes = collector.changes
    out = io.StringIO()
    show_plan(result, Console.for_stream(out))
    assert out.getvalue().splitlines() == [
        "n1: 1 change(s)",
        "  ~ openeuler_repos : Packages to install once the sources are in place",
        "      would install: dkms, gcc, pciutils",
    ]


def test_plan_says_unreachable_and_failed_hosts_were_not_planned() -> None:
    from provision.cli.console import Console
    from provision.cli.plan import show_plan

    collector = _Collector(None)
    for event in EVENTS:
        collector.handle(event)
    result = RunResult("site", 4, "failed", Path("/tmp/r"), 1.0, True)
    result.hosts, result.failures, result.changes = collector.hosts, collector.failures, collector.changes
    out = io.StringIO()
    show_plan(result, Console.for_stream(out))
    lines = out.getvalue().splitlines()
    assert "n1: no changes" in lines
    assert "n3: no changes (FAILED: the changes after the failed task are unknown)" in lines
    assert (
        "n4: UNREACHABLE, not planned (connection refused: ssh: connect to host 10.0.0.4 port 22: "
        "Connection refused)"
    ) in lines
    assert not [line for line in lines if line.startswith("n4: no changes")]
