#!/usr/bin/env python3
"""Where the time of a converge goes: a no-op `provision apply` (the records path) and `apply --full`.

Usage (root, on a running simulated cluster whose nodes are converged and recorded, e.g. after
`benchmarks/converge.py --keep` or `provision sim up --from-snapshot DIR` and one apply):

    .venv/bin/python benchmarks/profile_converge.py --name bench [--nodes 10] [--skip-full]

Each run is timed from outside, with nothing of provision or its checks changed:
- wall and controller CPU (user + system of provision and every process it started: ansible-playbook, its
  workers, ssh; the nodes' own processes are not in it), and the controller's peak memory (RSS summed over
  that process tree);
- each Ansible run (verify: converged.yml, apply: site.yml, record: record.yml) from its events
  (ansible-runner's job_events of the run directory): the time before its first event (provision itself,
  the inventory and fingerprints, then ansible-playbook's start: imports, plugins), from its first event
  to its first task (playbook and inventory parsing), and its tasks;
- per task: its window (first host started to last host done), the controller CPU spent in that window
  (the process tree's CPU sampled every 50 ms: tasks run one after the other on all hosts, in both
  strategies), and the seconds each host spent in it; grouped into fact gathering, templating, the record
  comparison (converged_state), the health gate and the rest;
- per node: SSH client invocations (every ssh/sftp/scp Ansible starts goes through a counting wrapper named
  by ANSIBLE_SSH_EXECUTABLE, ANSIBLE_SFTP_EXECUTABLE, ANSIBLE_SCP_EXECUTABLE: one invocation is at least one
  round trip over the connection), how many of those found no live ControlMaster (a new TCP connection and
  key exchange), and the connections the node's sshd accepted (its journal), counted for real.
SSH masters are closed before each run (a cold start, like a fresh CLI invocation). The load average
(1 min) is printed beside every run: on a shared machine, compare within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from provision_sim.cluster import Cluster

BIN = Path(sys.executable).parent
TICK = os.sysconf("SC_CLK_TCK")
SAMPLE_S = 0.05

WRAPPER = """#!/bin/bash
# Counts each {tool} Ansible starts (profile_converge.py), then runs the real one.
master=new
for word in "$@"; do
  for ip in {ips}; do
    if [[ "$word" == "$ip" || "$word" == *"@$ip" || "$word" == "$ip:"* ]]; then
      [[ -S "{control_dir}/$ip" ]] && master=live
      printf '%s {tool} %s %s\\n' "$EPOCHREALTIME" "$ip" "$master" >> {log}
      exec {real} "$@"
    fi
  done
done
printf '%s {tool} ? %s\\n' "$EPOCHREALTIME" "$master" >> {log}
exec {real} "$@"
"""

RESULTS = ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable")
CATEGORIES = (
    ("fact gathering", ("gather_facts", "setup")),
    ("templating", ("template",)),
    ("record comparison", ("converged_state",)),
    ("health gate", ("vllm_health",)),
)


# -- the controller's process tree --------------------------------------------------------------------------


def _stat(pid: str) -> tuple[int, float, int] | None:
    """(ppid, CPU seconds of the process and its reaped children, RSS bytes) of one /proc entry."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    # fields[0] is state (field 3): utime 14, stime 15, cutime 16, cstime 17, rss 24 (1-based)
    cpu = sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICK
    return int(fields[1]), cpu, int(fields[21]) * os.sysconf("SC_PAGE_SIZE")


def tree_usage(root: int) -> tuple[float, int]:
    """CPU seconds (live processes, and what they reaped) and RSS bytes of ``root`` and its descendants."""
    table: dict[int, tuple[int, float, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(entry)
            if stat is not None:
                table[int(entry)] = stat
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (ppid, _, _) in table.items():
        children[ppid].append(pid)
    cpu, rss, todo = 0.0, 0, [root]
    while todo:
        pid = todo.pop()
        if pid in table:
            cpu += table[pid][1]
            rss += table[pid][2]
        todo += children.get(pid, [])
    return cpu, rss


class Sampler(threading.Thread):
    """Samples the process tree of ``pid`` every :data:`SAMPLE_S`: (time, CPU seconds so far, RSS)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.samples: list[tuple[float, float, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            cpu, rss = tree_usage(self.pid)
            self.samples.append((time.time(), cpu, rss))
            self.stop.wait(SAMPLE_S)

    def cpu_between(self, start: float, end: float) -> float:
        """CPU seconds of the tree between two times (the nearest samples)."""

        def at(moment: float) -> float:
            best = 0.0
            for when, cpu, _ in self.samples:
                if when > moment:
                    break
                best = max(best, cpu)
            return best

        return max(0.0, at(end) - at(start))

    def peak_rss(self) -> int:
        return max((rss for _, _, rss in self.samples), default=0)


# -- one profiled run -------------------------------------------------------------------------------------


@dataclass
class Task:
    name: str
    action: str
    start: float
    end: float
    hosts: dict[str, float] = field(default_factory=dict)


@dataclass
class Play:
    playbook: str
    start: float
    first_task: float
    end: float
    tasks: list[Task]


def sampled(argv: list[str], env: dict[str, str]) -> tuple[str, float, Sampler]:
    """Run ``argv``, its process tree sampled (:class:`Sampler`): (stdout, wall seconds, the sampler).
    A failed run ends the benchmark with its output."""
    started = time.monotonic()
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = Sampler(process.pid)
    sampler.start()
    stdout, stderr = process.communicate()
    seconds = time.monotonic() - started
    sampler.stop.set()
    sampler.join()
    if process.returncode != 0:
        sys.exit(f"failed: {shlex.join(argv)}\n{stdout[-3000:]}\n{stderr[-3000:]}")
    return stdout, seconds, sampler


def _when(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def read_runs(runs_dir: Path) -> list[Play]:
    """Every Ansible run of one provision invocation, from the events ansible-runner kept."""
    plays = []
    for run_dir in sorted(p for p in runs_dir.iterdir() if p.is_dir()):
        events = []
        for path in run_dir.glob("artifacts/*/job_events/*.json"):
            events.append(json.loads(path.read_text()))
        if not events:
            continue
        events.sort(key=lambda e: e.get("counter", 0))
        tasks: dict[str, Task] = {}
        for event in events:
            data = event.get("event_data") or {}
            uuid = str(data.get("task_uuid") or "")
            if event["event"] == "playbook_on_task_start":
                moment = _when(event["created"])
                tasks[uuid] = Task(
                    str(data.get("task") or data.get("name")), str(data.get("task_action")), moment, moment
                )
            elif event["event"] in (
                "runner_on_ok",
                "runner_on_failed",
                "runner_on_skipped",
                "runner_on_unreachable",
            ):
                task = tasks.get(uuid)
                if task is None:
                    continue
                task.end = max(task.end, _when(str(data.get("end") or event["created"])))
                task.hosts[str(data.get("host"))] = float(data.get("duration") or 0.0)
        starts = [_when(e["created"]) for e in events]
        ordered = sorted(tasks.values(), key=lambda t: t.start)
        playbook = run_dir.name.rpartition("-")[2]
        plays.append(
            Play(
                playbook=playbook,
                start=min(starts),
                first_task=ordered[0].start if ordered else min(starts),
                end=max(starts),
                tasks=ordered,
            )
        )
    return plays


def ssh_counts(log: Path) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    if log.exists():
        for line in log.read_text().splitlines():
            _, tool, host, master = line.split()
            counts[host][tool] += 1
            counts[host]["new master"] += master == "new"
    return counts


def accepted(cluster: Cluster, names: list[str], since: float) -> dict[str, int]:
    """Connections each node's sshd accepted since ``since`` (its journal)."""
    out = {}
    for name in names:
        done = cluster.exec(name, ["journalctl", "-q", "-o", "cat", "--since", f"@{since:.0f}"], timeout=30)
        out[name] = sum(line.startswith("Accepted publickey") for line in done.stdout.splitlines())
    return out


@dataclass
class Profile:
    label: str
    wall: float
    cpu: float
    peak_rss: int
    load: tuple[float, float]
    plays: list[Play]
    """The Ansible runs, named by their verb (verify: converged.yml, apply: site.yml, record: record.yml)."""
    sampler: Sampler
    ssh: dict[str, dict[str, int]]
    sshd: dict[str, int]
    started: float
    stdout: str


def profile(
    label: str, argv: list[str], env: dict[str, str], cluster: Cluster, names: list[str], tools: Path
) -> Profile:
    for socket in cluster.control_dir.glob("*"):
        subprocess.run(["ssh", "-O", "exit", "-o", f"ControlPath={socket}", "x"], capture_output=True)
    runs_dir = Path(tempfile.mkdtemp(prefix=f"profile-{label.strip('-')}-"))
    log = tools / "ssh.log"
    log.unlink(missing_ok=True)
    run_env = {
        **env,
        "PROVISION_RUNS_DIR": str(runs_dir),
        "ANSIBLE_SSH_EXECUTABLE": str(tools / "ssh"),
        "ANSIBLE_SFTP_EXECUTABLE": str(tools / "sftp"),
        "ANSIBLE_SCP_EXECUTABLE": str(tools / "scp"),
    }
    before_load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.time()
    stdout, wall, sampler = sampled(argv, run_env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Profile(
        label=label,
        wall=wall,
        cpu=cpu,
        peak_rss=sampler.peak_rss(),
        load=(before_load, os.getloadavg()[0]),
        plays=read_runs(runs_dir),
        sampler=sampler,
        ssh=ssh_counts(log),
        sshd=accepted(cluster, names, started - 1),
        started=started,
        stdout=stdout,
    )


def category(action: str) -> str:
    short = action.rsplit(".", 1)[-1]
    for name, actions in CATEGORIES:
        if short in actions:
            return name
    return "other tasks"


def report(p: Profile, hosts: list[str], top: int) -> None:
    rss = p.peak_rss / 2**20
    print(
        f"\n== {p.label}: {p.wall:.1f} s wall, controller CPU {p.cpu:.1f} s, peak RSS {rss:.0f} MiB"
        f"  (load {p.load[0]:.1f} -> {p.load[1]:.1f}, {os.cpu_count()} CPUs)"
    )
    mark = p.started
    print(f"  {'phase':<44} {'wall s':>7} {'CPU s':>7}")
    for play in p.plays:
        rows = [
            (f"to the {play.playbook} run's first event", mark, play.start),
            ("  its first event to its first task", play.start, play.first_task),
            ("  its tasks", play.first_task, play.end),
        ]
        for name, a, b in rows:
            print(f"  {name:<44} {b - a:>7.2f} {p.sampler.cpu_between(a, b):>7.2f}")
        mark = play.end
    end = p.started + p.wall
    print(
        f"  {'provision after the last run':<44} {end - mark:>7.2f} {p.sampler.cpu_between(mark, end):>7.2f}"
    )

    tasks = [t for play in p.plays for t in play.tasks]
    groups: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    for task in tasks:
        g = groups[category(task.action)]
        g[0] += task.end - task.start
        g[1] += p.sampler.cpu_between(task.start, task.end)
        g[2] += sum(task.hosts.values())
        g[3] += 1
    print(f"\n  {'by kind of task':<30} {'tasks':>5} {'wall s':>7} {'CPU s':>7} {'host-s':>7}")
    for name, (wall, cpu, host_s, count) in sorted(groups.items(), key=lambda kv: -kv[1][0]):
        print(f"  {name:<30} {count:>5} {wall:>7.2f} {cpu:>7.2f} {host_s:>7.2f}")

    n = max(1, len(hosts))
    print(f"\n  top {top} tasks by controller CPU (CPU/host: the task's CPU over its {n} host(s))")
    print(f"  {'task':<58} {'action':<18} {'wall s':>7} {'CPU s':>6} {'CPU/host':>8} {'host s med/max':>15}")
    ranked = sorted(tasks, key=lambda t: -p.sampler.cpu_between(t.start, t.end))
    for task in ranked[:top]:
        cpu = p.sampler.cpu_between(task.start, task.end)
        durations = list(task.hosts.values()) or [0.0]
        print(
            f"  {task.name[:58]:<58} {task.action.rsplit('.', 1)[-1][:18]:<18} {task.end - task.start:>7.2f} "
            f"{cpu:>6.2f} {cpu / max(1, len(task.hosts)):>8.3f} "
            f"{statistics.median(durations):>7.2f}/{max(durations):<7.2f}"
        )

    print("\n  per node: seconds in tasks, SSH client invocations (round trips), new masters, sshd accepts")
    head = ("node", "task s", "ssh", "sftp", "scp", "new master", "sshd accepted")
    print("  {:<8} {:>7} {:>5} {:>5} {:>5} {:>10} {:>13}".format(*head))
    host_seconds: dict[str, float] = defaultdict(float)
    for task in tasks:
        for host, seconds in task.hosts.items():
            host_seconds[host] += seconds
    for host in hosts:
        ip = host_ips[host]
        c = p.ssh.get(ip, {})
        print(
            f"  {host:<8} {host_seconds[host]:>7.2f} {c.get('ssh', 0):>5} {c.get('sftp', 0):>5} "
            f"{c.get('scp', 0):>5} {c.get('new master', 0):>10} {p.sshd.get(host, 0):>13}"
        )
    total = sum(c.get("ssh", 0) + c.get("sftp", 0) + c.get("scp", 0) for c in p.ssh.values())
    print(f"  SSH client invocations in all: {total} ({total / n:.1f} per node)")


host_ips: dict[str, str] = {}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--name", default="bench", help="the running simulated cluster (default bench)")
    parser.add_argument("--nodes", type=int, help="profile node1..nodeN (default: every node)")
    parser.add_argument("--skip-full", action="store_true", help="profile the no-op only")
    parser.add_argument("--top", type=int, default=12, help="tasks listed by CPU (default 12)")
    args = parser.parse_args()

    cluster = Cluster.load(args.name)
    if cluster is None:
        sys.exit(f"no simulated cluster {args.name!r}: start one (see this script's help)")
    nodes = cluster.nodes[: args.nodes] if args.nodes else cluster.nodes
    names = [node.name for node in nodes]
    host_ips.update({node.name: node.ip for node in nodes})
    tools = Path(tempfile.mkdtemp(prefix="profile-ssh-"))
    for tool in ("ssh", "sftp", "scp"):
        real = subprocess.run(["which", tool], capture_output=True, text=True, check=True).stdout.strip()
        wrapper = tools / tool
        wrapper.write_text(
            WRAPPER.format(
                tool=tool,
                ips=" ".join(node.ip for node in cluster.nodes),
                control_dir=cluster.control_dir,
                log=tools / "ssh.log",
                real=real,
            )
        )
        wrapper.chmod(0o755)

    env = {**os.environ, "CI": "1"}
    provision = [str(BIN / "provision"), "apply", str(cluster.inventory_path), "--limit", ",".join(names)]
    noop = profile("no-op (records)", [*provision, "--json"], env, cluster, names, tools)
    summary = json.loads(noop.stdout)
    if sorted(summary["verified"]) != sorted(names):
        sys.exit(f"not a no-op: verified {summary['verified']}, drift {summary['drift']}: apply once first")
    report(noop, names, args.top)
    if not args.skip_full:
        full = profile("apply --full", [*provision, "--full"], env, cluster, names, tools)
        report(full, names, args.top)


if __name__ == "__main__":
    main()
