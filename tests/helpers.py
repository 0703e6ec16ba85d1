"""Shared by the integration tests: the `provision` CLI with its --json summary, a completion request."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml


@dataclass
class Run:
    """One ``provision ... --json`` run: exit code, the JSON summary, stderr (the progress), duration."""

    rc: int
    summary: dict[str, Any]
    stderr: str
    seconds: float

    @property
    def run_dir(self) -> Path:
        return Path(self.summary["run_dir"])

    def changed(self) -> dict[str, int]:
        return {host: stats["changed"] for host, stats in self.summary["hosts"].items()}

    def changes(self, host: str) -> list[dict[str, Any]]:
        return [change for change in self.summary["changes"] if change["host"] == host]

    def tasks(self, host: str) -> list[str]:
        """Names of the tasks that changed (would change, in check mode) something on ``host``."""
        return [change["task"] for change in self.changes(host)]

    def diff(self, host: str, task: str) -> str:
        diffs = [change["diff"] for change in self.changes(host) if change["task"] == task]
        assert diffs, f"{host}: no change {task!r} in {self.tasks(host)}"
        return "\n".join(diffs)

    def failures(self) -> dict[str, str]:
        return {f["host"]: f"{f['task']}: {f['message']}" for f in self.summary["failures"]}

    def events(self, task: str) -> dict[str, dict[str, Any]]:
        """host -> ``event_data`` of the task's last ``runner_on_ok`` (from the run directory)."""
        found: dict[str, dict[str, Any]] = {}
        paths = self.run_dir.glob("artifacts/*/job_events/*.json")
        for path in sorted(paths, key=lambda p: int(p.name.split("-", 1)[0])):
            event = json.loads(path.read_text())
            data = event.get("event_data") or {}
            name = f"{data['role']} : {data.get('task')}" if data.get("role") else data.get("task")
            if event.get("event") == "runner_on_ok" and name == task:
                found[data["host"]] = data
        return found

    def results(self, task: str) -> dict[str, dict[str, Any]]:
        """host -> ``res`` of the task's last ``runner_on_ok``."""
        return {host: data.get("res") or {} for host, data in self.events(task).items()}

    def explain(self) -> str:
        shown = {key: self.summary.get(key) for key in ("hosts", "failures")}
        return json.dumps(shown, indent=1) + "\n" + self.stderr[-3000:]


def provision(verb: str, inventory: Path, *args: str, timeout: float = 900) -> Run:
    """`provision VERB INVENTORY ARGS --json`, runs kept beside the inventory; no JSON fails the test."""
    env = {**os.environ, "CI": "1", "PROVISION_RUNS_DIR": str(inventory.parent / "runs")}
    argv = [sys.executable, "-m", "provision", verb, str(inventory), "--json", *args]
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    seconds = time.monotonic() - started
    try:
        summary = json.loads(done.stdout)
    except ValueError:
        pytest.fail(
            f"provision {verb} {' '.join(args)} printed no JSON (rc {done.returncode}):\n{done.stderr}"
        )
    return Run(done.returncode, summary, done.stderr, seconds)


def complete(
    url: str, *, api_key: str | None = None, prompt: str = "The capital of France is", timeout: float = 60.0
) -> str:
    """The text of a real completion (4 tokens, greedy) from the SmolLM2 endpoint at ``url``."""
    body = json.dumps({"model": "smollm2", "prompt": prompt, "max_tokens": 4, "temperature": 0}).encode()
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(f"{url}/v1/completions", data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        text: str = json.load(response)["choices"][0]["text"]
    return text


def host_vars(inventory: Path, host: str, values: Mapping[str, Any] | None) -> None:
    """Write ``host_vars/<host>.yml`` beside the inventory, or remove it (``None``)."""
    path = inventory.parent / "host_vars" / f"{host}.yml"
    if values is None:
        path.unlink(missing_ok=True)
    else:
        path.parent.mkdir(exist_ok=True)
        path.write_text(yaml.safe_dump(dict(values)))


VALIDATE_INI = "[npu_nodes]\nnode1 ansible_host=192.0.2.11\n"


def validate(tmp_path: Path, group_vars: str, monkeypatch: pytest.MonkeyPatch) -> int:
    """`provision validate` (in this process) of a one-host inventory whose group_vars are ``group_vars``
    (dedented YAML); returns the exit code."""
    from provision.cli import main

    (tmp_path / "group_vars").mkdir(exist_ok=True)
    (tmp_path / "group_vars" / "npu_nodes.yml").write_text(textwrap.dedent(group_vars))
    (tmp_path / "inventory.ini").write_text(VALIDATE_INI)
    monkeypatch.setattr("sys.argv", ["provision", "validate", str(tmp_path / "inventory.ini")])
    with pytest.raises(SystemExit) as exit_info:
        main()
    code = exit_info.value.code
    return int(code) if isinstance(code, int) else 0
