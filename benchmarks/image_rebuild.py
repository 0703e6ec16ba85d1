"""Rebuild of the serving image after an entrypoint change, against a cold build (issue 6: goal <= 10 %).

On the offline bench of ``provision_sim.image_bench`` (a private dockerd, a local apt repository and pip
index, a Debian base standing in for the CANN image), for each payload:

* **cold**: ``provision image build`` with ``--no-cache`` from the base image: every step of the Dockerfile
  runs (OS packages from the local apt repository, the pip install, the user, metadata, scripts);
* **rebuild**: the same build after one line is appended to ``container/entrypoint.sh`` (in a copy of the
  context), i.e. what a developer does when changing the entrypoint;
* **ratio** = rebuild / cold.

Payloads (``PIP_PACKAGES``): ``six`` (the tests' wheel: the cold build is all Dockerfile overhead), and
``torch`` (the CPU wheel of torch 2.13.0 and its dependencies, ≈ 190 MB of wheels: closer to the real image,
whose vllm + torch-npu install takes many minutes). The real vllm-ascend image cannot be built here (no
CANN base image, no NPU wheels), so its own figures are not measured.

    .venv/bin/python benchmarks/image_rebuild.py [--payload six --payload torch] [--json]

Needs root, dockerd (Debian docker.io), mmdebstrap, dpkg-dev; downloads from PyPI/Debian once into
``/var/cache/provision-image-test``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from provision.image.build import BuildOptions, build
from provision.image.spec import Overrides, default_target
from provision_sim import image_bench as testbed

ROOT = Path(__file__).resolve().parents[1]
PAYLOADS = {"six": (testbed.TEST_WHEEL, ()), "torch": ("torch==2.13.0", ("torch==2.13.0",))}


def _context(folder: Path) -> Path:
    folder.mkdir(parents=True)
    shutil.copy(ROOT / "Dockerfile", folder / "Dockerfile")
    shutil.copytree(ROOT / "container", folder / "container")
    return folder


def measure(client: Any, files: testbed.FileServer, base: str, payload: str, work: Path) -> dict[str, Any]:
    packages, _extra = PAYLOADS[payload]
    context = _context(work / f"context-{payload}")
    options = BuildOptions(
        target=default_target(arch="amd64", repository=f"bench-{payload}/vllm-ascend"),
        overrides=Overrides(
            base_image=base,
            pip_packages=packages,
            mirrors={
                "APT_SOURCE": f"deb [trusted=yes] {files.url}/apt ./",
                "PIP_INDEX_URL": f"{files.url}/simple/",
                "PIP_EXTRA_INDEX_URL": "",
            },
        ),
        context_dir=context,
        network_mode="host",
        revision="bench",
    )
    started = time.monotonic()
    cold = build(client, BuildOptions(**{**options.__dict__, "no_cache": True}))
    cold_s = time.monotonic() - started
    entrypoint = context / "container" / "entrypoint.sh"
    entrypoint.write_text(entrypoint.read_text() + "# an entrypoint change\n")
    started = time.monotonic()
    rebuild = build(client, options)
    rebuild_s = time.monotonic() - started
    size = int(client.images.get(cold.image_id).attrs["Size"])
    return {
        "payload": payload,
        "pip_packages": packages,
        "image_size_mib": round(size / 2**20, 1),
        "cold_s": round(cold_s, 2),
        "cold_steps_run": cold.rebuilt_steps,
        "rebuild_s": round(rebuild_s, 2),
        "rebuild_steps_run": rebuild.rebuilt_steps,
        "steps": rebuild.steps,
        "ratio_percent": round(100 * rebuild_s / cold_s, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--payload", action="append", choices=sorted(PAYLOADS), help="repeatable")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    payloads = args.payload or ["six", "torch"]
    extra = tuple(w for p in payloads for w in PAYLOADS[p][1])
    results = []
    with tempfile.TemporaryDirectory(prefix="image-rebuild-") as tmp:
        work = Path(tmp)
        tree = testbed.package_tree(extra, progress=lambda t: print(t, file=sys.stderr))
        with testbed.Dockerd(work / "dockerd") as dockerd, testbed.FileServer(tree) as files:
            client = dockerd.client()
            base = testbed.base_image(client, progress=lambda t: print(t, file=sys.stderr))
            for payload in payloads:
                print(f"measuring {payload} ...", file=sys.stderr)
                results.append(measure(client, files, base, payload, work))
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(
        f"{'payload':<8} {'image':>10} {'cold build':>12} {'rebuild':>10} {'ratio':>8}  "
        "steps run (cold / rebuild)"
    )
    for r in results:
        print(
            f"{r['payload']:<8} {r['image_size_mib']:>6.0f} MiB {r['cold_s']:>10.1f} s "
            f"{r['rebuild_s']:>8.2f} s "
            f"{r['ratio_percent']:>7.1f}%  {r['cold_steps_run']} / {r['rebuild_steps_run']} of {r['steps']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
