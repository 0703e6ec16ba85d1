"""Follow ``provision apply``'s inventory argument through the calls, and count how often it climbs back up.

Runs ``provision apply INVENTORY`` in this process on a one-host localhost inventory, with
``ansible_runner.run`` replaced by a stand-in that answers every playbook with scripted events (the converged
check says the host drifted, so site.yml and record.yml run too: the whole converge engine is walked; no
host is contacted, nothing is changed). A profiler (``sys.setprofile``) sees every call into provision's
code that is given the inventory: its path, the list of its sources, the loaded ``Inventory``, the resolved
view, its hosts mapping, one host's variables or one of their values (a container or a string, by identity).

The walk is the sequence of rooms (provision's subpackages: cli, converge, runner, inventory, ...) those
calls enter, a room repeated in a row counted once. Floors, top down: cli; converge; runner and the other
services; inventory; ascend; the base modules (paths, errors, scripts, systemd). A **climb** is a step of
the walk to a higher floor than the step before; a **revisit** is a step into a room the walk had left.

    .venv/bin/python benchmarks/inventory_walk.py            # this tree
    .venv/bin/python benchmarks/inventory_walk.py --ref main  # and another commit (a git worktree of it)

Prints the walk, its climbs and revisits; ``--max-climbs N`` exits 1 when this tree's walk climbs more.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

FLOORS = {
    "provision.cli": 5,
    "provision.converge": 4,
    "provision.runner": 3,
    "provision.serving": 3,
    "provision.doctor": 3,
    "provision.bench": 3,
    "provision.bundle": 3,
    "provision.image": 3,
    "provision.bootstrap": 3,
    "provision.inventory": 2,
    "provision.ascend": 1,
}
"""Every other module of provision (paths, errors, scripts, systemd, ansible_config) is on floor 0."""


def room(module: str) -> str:
    return ".".join(module.split(".")[:2])


def floor(name: str) -> int:
    return FLOORS.get(name, 0)


class _FakeRunner:
    """Stands in for ansible-runner's ``Runner``: what ``run_playbook`` reads of it."""

    def __init__(self, rc: int) -> None:
        self.rc = rc
        self.status = "successful"


def fake_run(**kwargs: Any) -> _FakeRunner:
    """``ansible_runner.run``: the scripted events of each playbook on host ``localhost``."""
    handler: Callable[[Mapping[str, Any]], Any] = kwargs["event_handler"]
    playbook = Path(str(kwargs.get("playbook", ""))).stem

    def ok(action: str, res: Mapping[str, Any]) -> None:
        handler(
            {"event": "runner_on_ok", "event_data": {"host": "localhost", "task_action": action, "res": res}}
        )

    if playbook == "converged":
        ok("provision.ascend.converged_state", {"converged": False, "drift": ["/etc/x: sha1 a -> b"]})
    elif playbook == "site":
        ok("ansible.builtin.template", {"dest": "/etc/x", "changed": True})
    handler(
        {"event": "playbook_on_stats", "event_data": {"ok": {"localhost": 1}, "processed": {"localhost": 1}}}
    )
    return _FakeRunner(0)


def _followed(value: Any) -> bool:
    """A value followed by identity: a container or a string of the inventory (not a shared small scalar)."""
    return isinstance(value, dict | list | str) and not (isinstance(value, str) and len(value) < 2)


def walk(inventory: Path, args: list[str]) -> list[tuple[str, str]]:
    """The (room, function) of every call given the inventory, in order, while ``provision apply`` runs."""
    import ansible_runner

    from provision.cli import main

    ansible_runner.run = fake_run
    tracked: set[int] = set()
    calls: list[tuple[str, str]] = []

    def track(value: Any) -> None:
        kind = type(value).__name__
        if kind == "Inventory" and isinstance(getattr(value, "hosts", None), dict):  # once built
            tracked.add(id(value.hosts))
            for variables in value.hosts.values():
                tracked.add(id(variables))
                tracked.update(id(v) for v in variables.values() if _followed(v))
        elif kind == "Resolved" and isinstance(getattr(value, "hosts", None), dict):
            for host in value.hosts.values():
                tracked.add(id(host.variables))
                tracked.update(id(v) for v in host.variables.values() if _followed(v))

    def carried(value: Any) -> bool:
        if isinstance(value, Path):
            return value == inventory
        if isinstance(value, list | tuple) and value and all(isinstance(v, Path) for v in value):
            return inventory in value
        if type(value).__name__ in ("Inventory", "Resolved", "ResolvedHost"):
            track(value)
            return True
        return id(value) in tracked

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        module = str(frame.f_globals.get("__name__", ""))
        if not module.startswith("provision.") or frame.f_code.co_name.startswith("<"):
            return
        code = frame.f_code
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        if any(carried(frame.f_locals.get(name)) for name in names):
            calls.append((room(module), f"{module}.{code.co_qualname}"))

    sys.argv = ["provision", "apply", str(inventory), *args]
    sys.setprofile(profile)
    try:
        main()
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise RuntimeError(f"provision apply exited {exc.code}") from None
    finally:
        sys.setprofile(None)
    return calls


def summary(calls: list[tuple[str, str]]) -> dict[str, Any]:
    steps: list[tuple[str, str]] = []
    for call in calls:
        if not steps or steps[-1][0] != call[0]:
            steps.append(call)
    climbs = [
        f"{before[1]} -> {after[1]}"
        for before, after in itertools.pairwise(steps)
        if floor(after[0]) > floor(before[0])
    ]
    left: set[str] = set()
    revisits = 0
    for before, after in itertools.pairwise(steps):
        left.add(before[0])
        revisits += after[0] in left
    return {
        "walk": [name for name, _ in steps],
        "climbs": len(climbs),
        "climbed_by": climbs,
        "revisits": revisits,
        "calls": len(calls),
    }


def measure(tree: Path) -> dict[str, Any]:
    """The walk of ``tree``'s provision (a fresh interpreter with it first on the path)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(tree / "provision-sim")])}
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--in-process"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        cwd=tree,
    )
    if done.returncode != 0:
        raise SystemExit(f"{tree}: the walk failed:\n{done.stdout}{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _in_process() -> None:
    with tempfile.TemporaryDirectory(prefix="provision-walk-") as folder:
        base = Path(folder)
        os.environ["PROVISION_RUNS_DIR"] = str(base / "runs")
        (base / "group_vars").mkdir()
        settings = {"preflight_require_npus": False, "preflight_allow_unsupported_os": True}
        (base / "group_vars" / "npu_nodes.yml").write_text(json.dumps(settings))
        inventory = base / "inventory.ini"
        inventory.write_text(
            f"[npu_nodes]\nlocalhost ansible_connection=local ansible_python_interpreter={sys.executable}\n"
        )
        calls = walk(inventory, ["--json"])
    print(json.dumps(summary(calls)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ref", help="also walk this commit's tree (a git worktree of it)")
    parser.add_argument("--max-climbs", type=int, help="exit 1 when this tree's walk climbs more often")
    parser.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.in_process:
        _in_process()
        return 0
    trees = [("this tree", ROOT)]
    if args.ref:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from reftree import worktree

        trees.append((args.ref, worktree(args.ref)))
    results = {name: measure(tree) for name, tree in trees}
    for name, result in results.items():
        counts = (
            f"{result['climbs']} climb(s) back up, {result['revisits']} revisit(s), {result['calls']} calls"
        )
        print(f"== {name}: {counts}")
        print("   walk: " + " -> ".join(r.removeprefix("provision.") for r in result["walk"]))
        for step in result["climbed_by"]:
            print(f"   climbs: {step}")
    if args.max_climbs is not None and results["this tree"]["climbs"] > args.max_climbs:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
