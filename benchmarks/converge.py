#!/usr/bin/env python3
"""No-op converge of site.yml: `provision apply` vs stock `ansible-playbook`, on 1 and N simulated nodes.

Usage (root, as for `provision sim`):  .venv/bin/python benchmarks/converge.py [--nodes 10] [--reps 3]

Brings up a cluster named `bench`, converges it once, then times no-op runs (nothing left to change) of
the same playbooks and roles:
  provision  `provision apply INVENTORY --limit ...`: each node is compared with the record its last apply
             left (playbooks/converged.yml: one command per node, the health gate, the stack report); a
             node as recorded runs no role (site.yml only; other playbooks run as `--full`)
  --full     `provision apply INVENTORY --full --limit ...`: every task of every role on every node (our
             ansible.cfg: pipelining, ControlPersist 300 s, forks 50, small fact subsets per play;
             Mitogen's mitogen_linear strategy, one Python per node for the whole run)
  stock      `ansible-playbook -i INVENTORY playbooks/site.yml --limit ...` with Ansible's defaults where
             provision changes them: linear strategy, no pipelining, forks 5, ControlPersist 60 s (the
             collections path stays: the playbooks call the collection's roles)
Runs alternate (--full, provision, stock, --full, ...) so machine load affects all alike; SSH masters are
closed before every run (cold start, like a fresh CLI invocation). Prints medians, ratios and the load
average (1 min) around each run: the machine may be shared, and 10-node runs measure total CPU.
`--playbook NAME` times another playbook of playbooks/ (e.g. `driver`) instead of site.yml.
`--ref COMMIT` also times `--full` with that commit's provision package and collection (a git worktree of it,
run with this venv), in the same rotation: "--full within 10 % of before" read on one machine in one hour.
Its run goes first in each rotation, and this tree's --full (which records the nodes again) right after it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reftree import tree_env, worktree  # benchmarks/, this script's folder

from provision.paths import collections_path

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


def run(argv: list[str], env: dict[str, str], verified: int | None = None) -> float:
    """Seconds of one run; with ``verified``, the run (``--json``) must have verified that many nodes."""
    started = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(argv)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    if verified is not None:
        summary = json.loads(done.stdout)
        if len(summary["verified"]) != verified:
            sys.exit(
                f"not a no-op: {verified} node(s) expected verified, got {summary['verified']}, "
                f"drift {summary['drift']}"
            )
    return seconds


def close_masters(cluster_dir: Path) -> None:
    for socket in (cluster_dir / "cp").glob("*"):
        subprocess.run(["ssh", "-O", "exit", "-o", f"ControlPath={socket}", "x"], capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--name", default="bench")
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    parser.add_argument("--playbook", default="site", help="playbook of playbooks/ to time (default site)")
    parser.add_argument("--ref", help="also time --full with this commit's provision (a git worktree of it)")
    args = parser.parse_args()

    provision = [str(BIN / "provision")]
    env = {**os.environ, "CI": "1", "PROVISION_RUNS_DIR": tempfile.mkdtemp(prefix="bench-runs-")}
    subprocess.run([*provision, "sim", "down", "--name", args.name], env=env, check=True, capture_output=True)
    subprocess.run(
        [
            *provision,
            "sim",
            "up",
            "--nodes",
            str(args.nodes),
            "--name",
            args.name,
            "--os",
            "openeuler-22.03,ubuntu-22.04",
        ],
        env=env,
        check=True,
    )
    cluster_dir = Path(os.environ.get("PROVISION_SIM_DIR", "/var/lib/provision-sim")) / args.name
    inventory = cluster_dir / "inventory.ini"
    try:
        print("converging once (not timed) ...", flush=True)
        run([*provision, "apply", str(inventory), "-p", args.playbook], env)
        with tempfile.NamedTemporaryFile("w", suffix=".cfg", delete=False) as cfg:
            cfg.write(STOCK_CFG.format(collections=collections_path()))
        stock_env = {**env, "ANSIBLE_CONFIG": cfg.name}
        playbook = ROOT / "playbooks" / f"{args.playbook.removesuffix('.yml')}.yml"
        stock = [str(BIN / "ansible-playbook"), "-i", str(inventory), str(playbook)]
        ours = [*provision, "apply", str(inventory), "-p", args.playbook]
        site = playbook.stem == "site"
        labels: tuple[str, ...] = ("provision", "--full", "stock") if site else ("--full", "stock")
        ref_label = f"{args.ref} --full" if args.ref else ""
        ref_env = tree_env(worktree(args.ref), env) if args.ref else env
        if args.ref:
            labels = (ref_label, *labels)

        results: dict[tuple[str, int], list[float]] = {}
        loads: list[float] = []
        for count in (1, args.nodes):
            limit = ",".join(f"node{i}" for i in range(1, count + 1))
            for _ in range(args.reps):
                for label, argv, run_env, verified in (
                    (ref_label, [*ours, "--limit", limit, "--full"], ref_env, None),
                    # --full records the nodes as this tree sees them (the ref's run recorded its own view)
                    ("--full", [*ours, "--limit", limit, "--full"], env, None),
                    ("provision", [*ours, "--limit", limit, "--json"], env, count),
                    ("stock", [*stock, "--limit", limit], stock_env, None),
                ):
                    if label not in labels:
                        continue
                    close_masters(cluster_dir)
                    before = os.getloadavg()[0]
                    seconds = run(argv, run_env, verified)
                    after = os.getloadavg()[0]
                    loads += [before, after]
                    results.setdefault((label, count), []).append(seconds)
                    load = f"(load {before:.1f} -> {after:.1f})"
                    print(f"  {label:<16} {count:>2} node(s): {seconds:6.1f} s   {load}", flush=True)

        print(f"\nno-op converge of {playbook.name}, medians of {args.reps} (seconds)")
        print(f"{'nodes':>5} " + " ".join(f"{label:>16}" for label in labels) + "   stock/each")
        med = {key: statistics.median(values) for key, values in results.items()}
        for count in (1, args.nodes):
            times = [med[(label, count)] for label in labels]
            ratios = " ".join(f"{med[('stock', count)] / t:.2f}x" for t in times[:-1])
            print(f"{count:>5} " + " ".join(f"{t:>16.1f}" for t in times) + f"   {ratios}")
        for label in labels:
            scale = med[(label, args.nodes)] / med[(label, 1)]
            print(f"{label:>16}: t({args.nodes} nodes) / t(1 node) = {scale:.2f}")
        if args.ref:
            for count in (1, args.nodes):
                change = med[("--full", count)] / med[(ref_label, count)] - 1
                print(f"--full on {count} node(s): {change:+.1%} against {args.ref}")
        print(
            f"load average (1 min) around the runs: median {statistics.median(loads):.1f}, "
            f"min {min(loads):.1f}, max {max(loads):.1f} on {os.cpu_count()} CPUs"
        )
    finally:
        if not args.keep:
            subprocess.run([*provision, "sim", "down", "--name", args.name], env=env, capture_output=True)


if __name__ == "__main__":
    main()
