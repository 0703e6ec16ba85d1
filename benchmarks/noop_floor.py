#!/usr/bin/env python3
"""How far the records path is from its floor: the same node command over plain SSH, without Ansible.

Usage (root, on a running simulated cluster whose nodes are converged and recorded, e.g. after
`benchmarks/converge.py --keep`):

    .venv/bin/python benchmarks/noop_floor.py --name bench [--nodes 10] [--reps 3]

Each rotation times, nodes node1..nodeN, SSH masters closed before each run (a cold start, as converge.py
times the no-op):
- **floor**: what `converged_state` runs on each node (the NPU probe, then the record observer: one
  command), sent by `ssh` (the inventory's key, known hosts and ControlPath; ansible.cfg's ControlMaster and
  ControlPersist) to every node at once from a thread pool of `forks` threads, each answer parsed and compared
  with its record on the controller (:func:`provision.converge.record.drift`, the record's own fingerprint):
  the comparison without Ansible, provision's start or the health gate;
- **floor, live masters**: the same again with the masters the cold run left: the issue's "one round trip
  per node over a live master";
- **provision**: `provision apply INVENTORY --limit ...`, the real no-op (it must verify every node).
Prints the medians, the controller CPU of each (user + system of the process and its children: ssh, and for
provision everything it starts), and the load average around the runs.
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
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from provision.ascend.facts import PROBE_SCRIPT, facts_from_probe
from provision.converge.record import drift, npu_summary, observe_command, parse_observation, probe_output
from provision.paths import RECORD_PATH
from provision_sim.cluster import Cluster

BIN = Path(sys.executable).parent
# ansible.cfg's ssh_args (the records path runs over them)
SSH_ARGS = ("-o", "ControlMaster=auto", "-o", "ControlPersist=300s", "-o", "ServerAliveInterval=15")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def close_masters(cluster: Cluster) -> None:
    for socket in cluster.control_dir.glob("*"):
        subprocess.run(["ssh", "-O", "exit", "-o", f"ControlPath={socket}", "x"], capture_output=True)


def node_command() -> str:
    probe = shlex.join(["sh", "-c", PROBE_SCRIPT, "ascend-probe", "/"])
    return f"{probe}; {observe_command('/usr/bin/python3', keys=None, union=True, record=str(RECORD_PATH))}"


def compare(cluster: Cluster, ip: str, command: str) -> bool:
    """One node: the command over SSH, its answer compared with its record; True when it is as recorded."""
    argv = [
        "ssh",
        *SSH_ARGS,
        "-o",
        f"UserKnownHostsFile={cluster.known_hosts}",
        "-o",
        f"ControlPath={cluster.control_dir}/%h",
        "-i",
        str(cluster.private_key),
        "-o",
        "BatchMode=yes",
        f"root@{ip}",
        command,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"{ip}: {done.stderr.strip()[-300:]}")
    observation = parse_observation(done.stdout)
    npus = npu_summary(facts_from_probe(probe_output(done.stdout))["ascend_npus"])
    record = observation.record or {}
    return not drift(record, observation.observed, npus, str(record.get("fingerprint")))


def floor(cluster: Cluster, ips: list[str], forks: int) -> tuple[float, float]:
    command = node_command()
    cpu = children_cpu() + own_cpu()
    began = time.monotonic()
    with ThreadPoolExecutor(max_workers=forks) as pool:
        verified = list(pool.map(lambda ip: compare(cluster, ip, command), ips))
    seconds = time.monotonic() - began
    if not all(verified):
        raise SystemExit(f"not a no-op: {verified.count(False)} node(s) differ from their records")
    return seconds, children_cpu() + own_cpu() - cpu


def provision_noop(inventory: Path, limit: str, count: int, env: dict[str, str]) -> tuple[float, float]:
    cpu = children_cpu()
    began = time.monotonic()
    done = subprocess.run(
        [str(BIN / "provision"), "apply", str(inventory), "--limit", limit, "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    seconds = time.monotonic() - began
    if done.returncode != 0 or len(json.loads(done.stdout).get("verified") or {}) != count:
        raise SystemExit(f"provision's no-op did not verify {count} node(s): {done.stdout[-500:]}")
    return seconds, children_cpu() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--name", default="bench")
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--forks", type=int, default=50, help="threads of the floor (ansible.cfg's forks)")
    args = parser.parse_args()
    cluster = Cluster.load(args.name)
    if cluster is None:
        sys.exit(f"no simulated cluster {args.name!r}: `benchmarks/converge.py --keep` leaves one up")
    if args.nodes > len(cluster.nodes):
        sys.exit(f"--nodes {args.nodes}: cluster {args.name!r} has {len(cluster.nodes)}")
    ips = [node.ip for node in cluster.nodes[: args.nodes]]
    limit = ",".join(node.name for node in cluster.nodes[: args.nodes])
    env = {**os.environ, "CI": "1", "PROVISION_RUNS_DIR": tempfile.mkdtemp(prefix="floor-runs-")}
    runs: dict[str, list[tuple[float, float]]] = {"floor": [], "floor, live masters": [], "provision": []}
    loads = []
    for _ in range(args.reps):
        loads.append(os.getloadavg()[0])
        close_masters(cluster)
        runs["floor"].append(floor(cluster, ips, args.forks))
        runs["floor, live masters"].append(floor(cluster, ips, args.forks))
        close_masters(cluster)
        runs["provision"].append(provision_noop(cluster.inventory_path, limit, args.nodes, env))
        loads.append(os.getloadavg()[0])
    load = f"load 1 min {min(loads):.1f}-{max(loads):.1f}"
    print(f"no-op of {args.nodes} node(s), medians of {args.reps} ({load})")
    print(f"{'':22} {'wall s':>8} {'controller CPU s':>17}")
    for label, values in runs.items():
        wall = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        print(f"{label:22} {wall:8.2f} {cpu:17.2f}")
    gap = statistics.median(v[0] for v in runs["provision"]) - statistics.median(v[0] for v in runs["floor"])
    print(
        f"provision - floor: {gap:.2f} s (provision's start, ansible-playbook, a worker per node, the gate)"
    )


if __name__ == "__main__":
    main()
