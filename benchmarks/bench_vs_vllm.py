#!/usr/bin/env python3
"""`provision bench` next to `vllm bench serve` on one real vLLM CPU engine, same workload, several reps.

Usage:  flock /tmp/provision-cluster.lock .venv/bin/python benchmarks/bench_vs_vllm.py [--reps 3]
        [--num-prompts 48] [--concurrency 4] [--input-len 128] [--output-len 64]

Starts the engine of provision_sim.serving.vllm_cpu (SmolLM2-135M, FACTS.md §8; prepared once into
/var/cache/provision-engine), then alternates the two clients (provision, vllm, provision, ...) so machine
load hits both alike, each on the workload: random prompts of --input-len tokens, --output-len tokens each,
with --ignore-eos, --num-prompts requests at --max-concurrency --concurrency. `vllm bench serve` runs from the
engine's own venv through `vllm.benchmarks.serve`'s add_cli_args and main (the `vllm` console script of the
vllm-cpu distribution does not start), with the model folder as its tokenizer. Prints every run's median TTFT,
median TPOT and output tokens/s, then the medians over the reps, their provision / vllm ratio, and the median
of the per-rep ratios (each rep's two runs are back to back, under the same load).
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

from provision.serving.health import Endpoint, wait_ready
from provision_sim.serving import vllm_cpu as engine

BIN = Path(sys.executable).parent
KEYS = ("median_ttft_ms", "median_tpot_ms", "output_throughput")

VLLM_MAIN = """
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


def _provision(url: str, args: argparse.Namespace, out: Path) -> dict[str, float]:
    argv = [str(BIN / "provision"), "bench", url, "--dataset-name", "random"]
    argv += ["--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len)]
    argv += ["--num-prompts", str(args.num_prompts), "--max-concurrency", str(args.concurrency)]
    argv += ["--ignore-eos", "--save-result", "--result-filename", str(out), "--json"]
    _run(argv, dict(os.environ))
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def _vllm(url: str, args: argparse.Namespace, out: Path) -> dict[str, float]:
    argv = [str(engine.engine_python()), "-c", VLLM_MAIN, "--backend", "openai", "--base-url", url]
    argv += ["--endpoint", "/v1/completions", "--model", engine.SERVED_MODEL_NAME]
    argv += ["--tokenizer", str(engine.model_dir()), "--dataset-name", "random"]
    argv += ["--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len)]
    argv += ["--num-prompts", str(args.num_prompts), "--max-concurrency", str(args.concurrency)]
    argv += ["--ignore-eos", "--save-result", "--result-dir", str(out.parent), "--result-filename", out.name]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    _run(argv, env)
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def _run(argv: list[str], env: dict[str, str]) -> None:
    """A client run; its output only when it failed (vLLM's progress bar and import noise otherwise)."""
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        sys.exit(f"{argv[0]} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--num-prompts", type=int, default=48)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    args = parser.parse_args()
    engine.prepare()
    with tempfile.TemporaryDirectory(prefix="bench-vs-vllm-") as tmp:
        folder = Path(tmp)
        proc = engine.start_engine(log_path=folder / "engine.log")
        try:
            verdict = wait_ready(Endpoint(proc.url, engine.SERVED_MODEL_NAME), alive=proc.alive, budget_s=600)
            if not verdict.ready:
                print(f"engine not ready: {verdict.message}", file=sys.stderr)
                return 1
            print(
                f"workload: random {args.input_len} in / {args.output_len} out, {args.num_prompts} prompts, "
                f"concurrency {args.concurrency}, ignore-eos; "
                f"engine {proc.url} ({engine.SERVED_MODEL_NAME}, CPU)"
            )
            print(f"{'run':<14} {'median TTFT ms':>15} {'median TPOT ms':>15} {'out tok/s':>10} {'load':>5}")
            seen: dict[str, list[dict[str, float]]] = {"provision": [], "vllm": []}
            for rep in range(args.reps):
                for name, run in (("provision", _provision), ("vllm", _vllm)):
                    started = time.monotonic()
                    result = run(proc.url, args, folder / f"{name}-{rep}.json")
                    seen[name].append(result)
                    print(
                        f"{name + ' #' + str(rep + 1):<14} {result['median_ttft_ms']:>15.1f} "
                        f"{result['median_tpot_ms']:>15.1f} {result['output_throughput']:>10.2f} "
                        f"{os.getloadavg()[0]:>5.1f}   ({time.monotonic() - started:.0f} s)",
                        flush=True,
                    )
        finally:
            proc.stop()
    print("medians over the reps, provision / vllm of the medians, and the median of each rep's ratio:")
    for key in KEYS:
        ours = statistics.median(r[key] for r in seen["provision"])
        theirs = statistics.median(r[key] for r in seen["vllm"])
        # back-to-back runs share the machine's state (a 2-core VM's neighbours, the engine's warmth), so
        # each rep's pair is the fair comparison; the medians of the two columns mix reps of other loads
        pairs = zip(seen["provision"], seen["vllm"], strict=True)
        paired = statistics.median(ours_run[key] / vllm_run[key] for ours_run, vllm_run in pairs)
        print(
            f"  {key:<20} provision {ours:10.2f}   vllm {theirs:10.2f}   ratio {ours / theirs:.3f}   "
            f"paired {paired:.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
