#!/usr/bin/env python3
"""No-op `provision apply -p serve` on a serving cluster: this tree's roles against another commit's.

Usage (root, as for `provision sim`):  .venv/bin/python benchmarks/serve_noop.py [--reps 3] [--ref HEAD~1]

Brings up the demo's cluster (`provision sim up --serve`: 2 nodes, container mode, the real vLLM CPU engine),
converges it once, then times no-op runs of the serve playbook (nothing left to change: every node's
engines ready, files as written), alternating this tree and, with `--ref`, a git worktree of that commit
(its own provision package and collection, run with this venv). Both trees must write the same files, so
each run of either is a no-op: the script fails if a run changed anything. SSH masters are closed before
every run. Prints each run, the medians and the load average around the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from reftree import tree_env, worktree  # benchmarks/, this script's folder

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(argv)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    summary = json.loads(done.stdout)
    changed = {host: stats["changed"] for host, stats in summary["hosts"].items()}
    if any(changed.values()):
        sys.exit(f"not a no-op: {changed} ({' '.join(argv)})")
    return float(summary["seconds"])


def close_masters(cluster_dir: Path) -> None:
    for socket in (cluster_dir / "cp").glob("*"):
        subprocess.run(["ssh", "-O", "exit", "-o", f"ControlPath={socket}", "x"], capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--name", default="bench-serve")
    parser.add_argument("--ref", help="also time this commit's roles (a git worktree of it)")
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    args = parser.parse_args()

    env = {**os.environ, "CI": "1", "PROVISION_RUNS_DIR": tempfile.mkdtemp(prefix="bench-runs-")}
    provision = [str(BIN / "provision")]
    subprocess.run([*provision, "sim", "down", "--name", args.name], env=env, check=True, capture_output=True)
    sim_up = ["sim", "up", "--nodes", "2", "--os", "openeuler-22.03,ubuntu-22.04", "--serve"]
    subprocess.run(
        [*provision, *sim_up, "--name", args.name],
        env=env,
        check=True,
    )
    cluster_dir = Path(os.environ.get("PROVISION_SIM_DIR", "/var/lib/provision-sim")) / args.name
    inventory = cluster_dir / "inventory.ini"
    trees = {"this tree": (ROOT, env)}
    if args.ref:
        ref = worktree(args.ref)
        trees[f"{args.ref}"] = (ref, tree_env(ref, env))
    try:
        print("converging once (not timed) ...", flush=True)
        subprocess.run([*provision, "apply", str(inventory)], env=env, check=True, capture_output=True)
        results: dict[str, list[float]] = {}
        loads: list[float] = []
        for _ in range(args.reps):
            for label, (tree, run_env) in trees.items():
                argv = [sys.executable, "-m", "provision", "apply", str(inventory), "-p", "serve", "--json"]
                close_masters(cluster_dir)
                before = os.getloadavg()[0]
                seconds = timed(argv, run_env, tree)
                after = os.getloadavg()[0]
                loads += [before, after]
                results.setdefault(label, []).append(seconds)
                print(f"  {label:<12} {seconds:6.1f} s   (load {before:.1f} -> {after:.1f})", flush=True)
        print(f"\nno-op `apply -p serve` on 2 serving nodes, medians of {args.reps} (seconds)")
        for label, values in results.items():
            runs = ", ".join(f"{v:.1f}" for v in values)
            print(f"  {label:<12} {statistics.median(values):6.1f}   runs: {runs}")
        print(
            f"load average (1 min) around the runs: median {statistics.median(loads):.1f}, "
            f"min {min(loads):.1f}, max {max(loads):.1f} on {os.cpu_count()} CPUs"
        )
    finally:
        if not args.keep:
            subprocess.run([*provision, "sim", "down", "--name", args.name], env=env, capture_output=True)


if __name__ == "__main__":
    main()
