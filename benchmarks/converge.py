#!/usr/bin/env python3
"""No-op converge of site.yml: `provision apply` vs stock `ansible-playbook`, at several fleet sizes.

Usage (root, as for `provision sim`):  .venv/bin/python benchmarks/converge.py [--nodes 1,10] [--reps 3]
                                        [--from-snapshot DIR[,DIR]] [--stock-max N]

Brings up a cluster named `bench` of the largest size, converges it once, then times no-op runs (nothing
left to change) of the same playbooks and roles on node1..nodeN for each size N:
  provision  `provision apply INVENTORY --limit ...`: each node is compared with the record its last apply
             left (playbooks/converged.yml: one command per node, which reports the stack; the health gate); a
             node as recorded runs no role (site.yml only; other playbooks run as `--full`)
  --full     `provision apply INVENTORY --full --limit ...`: every task of every role on every node (our
             ansible.cfg: pipelining, ControlPersist 300 s, forks 50, small fact subsets per play;
             Mitogen's mitogen_linear strategy, one Python per node for the whole run)
  stock      `ansible-playbook -i INVENTORY playbooks/site.yml --limit ...` with Ansible's defaults where
             provision changes them: linear strategy, no pipelining, forks 5, ControlPersist 60 s (the
             collections path stays: the playbooks call the collection's roles)
Runs alternate (--full, provision, stock, --full, ...) so machine load affects all alike; SSH masters are
closed before every run (cold start, like a fresh CLI invocation). Prints medians, ratios, the controller's
peak memory (RSS summed over the process tree of the run: provision, ansible-playbook, its workers, ssh),
the memory the nodes hold (their memory cgroups) and the load average (1 min) around each run: the machine
may be shared, and many-node runs measure total CPU.
`--from-snapshot DIR[,DIR]` (see `provision sim snapshot`) starts the nodes already converged, stamped from
the snapshots in turn, so 50 or 100 nodes fit the machine; the "converging once" run then runs site.yml
over converged nodes (nothing changes; the script fails if anything does) and records them.
`--stock-max N` times stock only up to N nodes (100 nodes' stock runs take long on 2 cores): the table then
gives stock above N from a model fitted to the sizes measured, t(N) = a + b * ceil(N / forks) (forks 5:
linear strategy runs each task on 5 hosts at a time), with the model's error at each measured size.
`--playbook NAME` times another playbook of playbooks/ (e.g. `driver`) instead of site.yml.
`--ref COMMIT` also times `--full` and (site.yml) the records path with that commit's provision package and
collection (a git worktree of it, run with this venv), in the same rotation: a change's gain read on one
machine in one hour, where the load moves the figures more than most changes do. The ref's `--full` goes
first in each rotation and records the nodes as its code sees them (the code is in each record's
fingerprint), then the ref's no-op; this tree's --full records them again before this tree's no-op.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from profile_converge import sampled  # benchmarks/, this script's folder
from reftree import tree_env, worktree

from provision.paths import collections_path
from provision_sim import cgroups
from provision_sim.cluster import Cluster

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

STOCK_CFG = """\
[defaults]
collections_path = {collections}
host_key_checking = True
interpreter_python = auto_silent
forks = 5
[inventory]
any_unparsed_is_failed = True
[ssh_connection]
pipelining = False
"""


def run(argv: list[str], env: dict[str, str], verified: int | None = None) -> tuple[float, int, str]:
    """Seconds and the controller's peak RSS of one run; with ``verified``, the run (``--json``) must have
    verified that many nodes."""
    stdout, seconds, sampler = sampled(argv, env)
    if verified is not None:
        summary = json.loads(stdout)
        if len(summary["verified"]) != verified:
            sys.exit(
                f"not a no-op: {verified} node(s) expected verified, got {summary['verified']}, "
                f"drift {summary['drift']}"
            )
    return seconds, sampler.peak_rss(), stdout


def close_masters(cluster_dir: Path) -> None:
    for socket in (cluster_dir / "cp").glob("*"):
        subprocess.run(["ssh", "-O", "exit", "-o", f"ControlPath={socket}", "x"], capture_output=True)


def node_memory(cluster: Cluster, count: int) -> str:
    """What the first ``count`` nodes hold (their memory cgroups), per node."""
    held = [cgroups.memory(node.machine) for node in cluster.nodes[:count]]
    known = [pair for pair in held if pair is not None]
    if not known:
        return "nodes' memory: not accounted (no memory cgroup)"
    anon = statistics.mean(a for a, _ in known) / 2**20
    cache = statistics.mean(c for _, c in known) / 2**20
    per = f"{anon:.0f} MiB anonymous + {cache:.0f} MiB page cache"
    return f"nodes' memory: {per} per node (mean of {len(known)})"


def available_mib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024
    return 0


def fit(points: dict[int, float], forks: int) -> tuple[float, float]:
    """Least squares a, b of t(N) = a + b * ceil(N / forks) over the measured sizes."""
    xs = [math.ceil(n / forks) for n in points]
    ys = list(points.values())
    if len(set(xs)) < 2:
        return ys[0], 0.0
    mx, my = statistics.mean(xs), statistics.mean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def sizes(text: str) -> list[int]:
    try:
        values = sorted({int(word) for word in text.split(",") if word.strip()})
    except ValueError:
        sys.exit(f"--nodes {text!r}: a comma list of node counts, e.g. 1,10,50")
    if not values or values[0] < 1:
        sys.exit(f"--nodes {text!r}: counts from 1")
    return values


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", default="1,10", help="fleet sizes, a comma list (default 1,10)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--name", default="bench")
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    parser.add_argument("--playbook", default="site", help="playbook of playbooks/ to time (default site)")
    parser.add_argument("--ref", help="also time --full with this commit's provision (a git worktree of it)")
    parser.add_argument("--from-snapshot", help="start the nodes converged from these snapshots (DIR[,DIR])")
    parser.add_argument("--stock-max", type=int, help="time stock only up to this many nodes; model above")
    args = parser.parse_args()
    counts = sizes(args.nodes)
    largest = counts[-1]

    provision = [str(BIN / "provision")]
    env = {**os.environ, "CI": "1", "PROVISION_RUNS_DIR": tempfile.mkdtemp(prefix="bench-runs-")}
    subprocess.run([*provision, "sim", "down", "--name", args.name], env=env, check=True, capture_output=True)
    free_before = available_mib()
    how = (
        ["--from-snapshot", args.from_snapshot]
        if args.from_snapshot
        else ["--os", "openeuler-22.03,ubuntu-22.04"]
    )
    subprocess.run(
        [*provision, "sim", "up", "--nodes", str(largest), "--name", args.name, *how], env=env, check=True
    )
    cluster = Cluster.load(args.name)
    assert cluster is not None
    cluster_dir = cluster.dir
    inventory = cluster.inventory_path
    try:
        print("converging once (not timed) ...", flush=True)
        _, _, first = run([*provision, "apply", str(inventory), "-p", args.playbook, "--json"], env)
        if args.from_snapshot:
            changed = {h: s for h, s in json.loads(first)["hosts"].items() if s.get("changed")}
            if changed:
                sys.exit(f"the stamped nodes were not converged: site.yml changed {changed}")
        used = free_before - available_mib()
        print(f"{largest} nodes up and converged: the host's available memory fell by {used} MiB "
              f"({used / largest:.0f} MiB per node); {node_memory(cluster, largest)}")  # fmt: skip
        with tempfile.NamedTemporaryFile("w", suffix=".cfg", delete=False) as cfg:
            cfg.write(STOCK_CFG.format(collections=collections_path()))
        stock_env = {**env, "ANSIBLE_CONFIG": cfg.name}
        playbook = ROOT / "playbooks" / f"{args.playbook.removesuffix('.yml')}.yml"
        stock = [str(BIN / "ansible-playbook"), "-i", str(inventory), str(playbook)]
        ours = [*provision, "apply", str(inventory), "-p", args.playbook]
        site = playbook.stem == "site"
        labels: tuple[str, ...] = ("provision", "--full", "stock") if site else ("--full", "stock")
        ref_label = f"{args.ref} --full" if args.ref else ""
        ref_noop = f"{args.ref} provision" if args.ref and site else ""
        ref_env = tree_env(worktree(args.ref), env) if args.ref else env
        if args.ref:
            labels = (ref_label, ref_noop, *labels) if site else (ref_label, *labels)

        results: dict[tuple[str, int], list[float]] = {}
        memory: dict[tuple[str, int], int] = {}
        loads: dict[int, list[float]] = {}
        for count in counts:
            limit = ",".join(f"node{i}" for i in range(1, count + 1))
            for _ in range(args.reps):
                for label, argv, run_env, verified in (
                    (ref_label, [*ours, "--limit", limit, "--full"], ref_env, None),
                    (ref_noop, [*ours, "--limit", limit, "--json"], ref_env, count),
                    # --full records the nodes as this tree sees them (the ref's run recorded its own view)
                    ("--full", [*ours, "--limit", limit, "--full"], env, None),
                    ("provision", [*ours, "--limit", limit, "--json"], env, count),
                    ("stock", [*stock, "--limit", limit], stock_env, None),
                ):
                    if label not in labels:  # a ref's label is empty without --ref
                        continue
                    if label == "stock" and args.stock_max is not None and count > args.stock_max:
                        continue
                    close_masters(cluster_dir)
                    before = os.getloadavg()[0]
                    seconds, rss, _ = run(argv, run_env, verified)
                    after = os.getloadavg()[0]
                    loads.setdefault(count, []).extend([before, after])
                    results.setdefault((label, count), []).append(seconds)
                    memory[(label, count)] = max(memory.get((label, count), 0), rss)
                    load = f"(load {before:.1f} -> {after:.1f})"
                    mib = f"controller {rss / 2**20:5.0f} MiB"
                    print(f"  {label:<16} {count:>3} node(s): {seconds:6.1f} s  {mib}  {load}", flush=True)

        print(f"\nno-op converge of {playbook.name}, medians of {args.reps} (seconds; controller peak MiB)")
        head = " ".join(f"{label:>22}" for label in labels)
        print(f"{'nodes':>5} {head}   stock/each   load 1 min (median, min-max)")
        med = {key: statistics.median(values) for key, values in results.items()}
        modelled: dict[int, float] = {}
        measured = {n: med[("stock", n)] for n in counts if ("stock", n) in med}
        a, b = fit(measured, 5) if measured else (0.0, 0.0)
        for count in counts:
            if ("stock", count) not in med and measured:
                modelled[count] = a + b * math.ceil(count / 5)
            cells = []
            for label in labels:
                if (label, count) in med:
                    cells.append(f"{med[(label, count)]:>9.1f} s {memory[(label, count)] / 2**20:>6.0f} MiB")
                elif count not in modelled:
                    cells.append(f"{'not timed':>22}")
                else:
                    cells.append(f"{'~' + format(modelled[count], '.0f'):>9} s {'model':>10}")
            stock_t = med.get(("stock", count), modelled.get(count))
            ratios = " ".join(
                f"{stock_t / med[(label, count)]:.2f}x" if stock_t else "-" for label in labels[:-1]
            )
            ls = loads[count]
            load = f"{statistics.median(ls):.1f} ({min(ls):.1f}-{max(ls):.1f})"
            print(f"{count:>5} " + " ".join(cells) + f"   {ratios}   {load}")
        if modelled:
            errors = ", ".join(f"{n}: {a + b * math.ceil(n / 5) - t:+.1f} s" for n, t in measured.items())
            print(f"stock above {args.stock_max} nodes: model t(N) = {a:.1f} + {b:.2f} * ceil(N / 5) s "
                  f"(forks 5), fitted to {sorted(measured)}; its error there: {errors}")  # fmt: skip
        for label in labels:
            if (label, counts[0]) in med and (label, largest) in med and largest != counts[0]:
                scale = med[(label, largest)] / med[(label, counts[0])]
                print(f"{label:>16}: t({largest} nodes) / t({counts[0]}) = {scale:.2f}")
        if args.ref:
            for count in counts:
                change = med[("--full", count)] / med[(ref_label, count)] - 1
                print(f"--full on {count} node(s): {change:+.1%} against {args.ref}")
                if ref_noop:
                    change = med[("provision", count)] / med[(ref_noop, count)] - 1
                    print(f"provision (records) on {count} node(s): {change:+.1%} against {args.ref}")
        print(node_memory(cluster, largest))
        every = [x for ls in loads.values() for x in ls]
        print(
            f"load average (1 min) around the runs: median {statistics.median(every):.1f}, "
            f"min {min(every):.1f}, max {max(every):.1f} on {os.cpu_count()} CPUs"
        )
    finally:
        if not args.keep:
            subprocess.run([*provision, "sim", "down", "--name", args.name], env=env, capture_output=True)


if __name__ == "__main__":
    main()
