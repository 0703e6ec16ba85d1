"""The shared serving cluster: two simulated nodes (openEuler 22.03, Ubuntu 22.04) serving the REAL vLLM CPU
engine (SmolLM2-135M) through the vllm_serve role in container mode (the role's default).

The repos, driver and container_runtime stages run first (the nodes get the simulated driver with ``npu-smi``
and ``/dev/davinciN``, a real dockerd and the simulated Ascend Docker Runtime from the cluster's mirror); the
serving image is built here from the nodes' base rootfs (``provision_sim.serving.image``) and put on the
mirror (``images/`` + ``sha256sums.txt``), and the role downloads it, verifies it, ``docker load``s it and
removes the tarball, as an air-gapped site does. node1 gives its container the pool's NPU through the Ascend
runtime (``ASCEND_VISIBLE_DEVICES``), node2 with ``--device``. Before the first apply, node1 is sent a wrong
``vllm_serve_image_checksum`` (refused, nothing loaded). This is the cluster the day-2 tests (observability,
bench, doctor, drain, autoscaling) share.

Service mode (the engine from a venv) has no cluster of its own here: the clusters that serve that way for
their own reasons check it (tests/integration/test_site.py: first apply, key handling, no restart on a
converged apply, a unit disabled by hand, a killed engine; test_serve_weights.py; test_hccn_gate.py: a broken
change rolled back). The rollout's per-node rollback is the same role path in both modes, checked here.

Costs: two engines (~3.6 GB each); the stages (1-4 min) and the image build before the first apply.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from provision_sim.cluster import Cluster
from provision_sim.serving.image import (
    BROKEN_TAG,
    ServeImage,
    broken_image,
    ensure_serve_image,
    mirror_serve_image,
)
from provision_sim.serving.setup import container_volumes, engine_binds, engine_profile_vars
from tests.helpers import (
    PROVISION,
    Run,
    copy_inventory,
    host_vars,
    journals,
    json_summary,
    mirror_vars,
    provision_cli,
)
from tests.helpers import complete as shared_complete
from tests.helpers import provision as run_provision

POOL_NAME = "smol"
PORT = 8000
UNIT = "vllm-smol.service"
CONTAINER = "vllm-smol"
ARGS = "/etc/provision/serve/smol/args"
API_KEY = "serve-test-key"
APPLY_TIMEOUT_S = 600
STAGES = ("repos", "driver", "container_runtime")  # before serving, in container mode
STAGING = "/var/cache/provision/vllm_serve"  # vllm_serve_image_staging_dir
WRONG_SHA256 = "0" * 64
DOWNLOAD = "vllm_serve : Download the image tarball and verify its sha256"


def complete(url: str, prompt: str = "The capital of France is", timeout: float = 30.0) -> str:
    return shared_complete(url, api_key=API_KEY, prompt=prompt, timeout=timeout)


@dataclass
class Served:
    """A converged serving cluster and what its setup saw (first plan and apply, the wrong-sha256 refusal)."""

    cluster: Cluster
    inventory: Path
    runs: Path
    settings_file: Path  # the group_vars file that holds the serving settings
    image: ServeImage | None = None  # container mode: the good image, on the mirror at image_url
    image_url: str = ""
    broken: ServeImage | None = None
    timings: dict[str, float] = field(default_factory=dict)
    refused: Run | None = None  # container mode: the apply with a wrong sha256 on node1
    refused_gets: int = 0
    refused_image: bool = True
    refused_left: str = ""
    first_apply_gets: int = 0
    plan: dict[str, Any] = field(default_factory=dict)
    unit_after_plan: bool = False
    first_apply: dict[str, Any] = field(default_factory=dict)

    def url(self, node: str) -> str:
        return f"http://{self.cluster.node(node).ip}:{PORT}"

    def sh(self, node: str, *argv: str) -> str:
        done = self.cluster.exec(node, list(argv), timeout=120)
        assert done.returncode == 0, f"{node}: {' '.join(argv)}: {done.stdout}{done.stderr}"
        return done.stdout

    def settings(self) -> dict[str, Any]:
        values: dict[str, Any] = yaml.safe_load(self.settings_file.read_text())
        return values

    def apply(self, *args: str, playbook: str = "serve") -> Any:
        return provision_cli(
            "apply", str(self.inventory), "-p", playbook, *args, runs=self.runs, timeout=APPLY_TIMEOUT_S
        )

    def status(self, *args: str) -> Any:
        return provision_cli("serve", "status", str(self.inventory), *args, runs=self.runs, timeout=120)

    def image_gets(self) -> int:
        """How many times the nodes downloaded the image tarball (the mirror's log, http.server format)."""
        log = (self.cluster.dir / "mirror.log").read_text(errors="replace")
        return len(re.findall(rf'"GET /{re.escape(self.image_url.split("/", 3)[3])} HTTP', log))

    def staged(self, node: str) -> str:
        """What the staging folder holds on ``node`` (the role created it before downloading)."""
        return self.sh(node, "find", STAGING, "-mindepth", "1")

    def wait_ready(self, node: str, timeout: float = 300.0) -> None:
        """Until ``node`` answers a completion again (after a drill that stopped its engine)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if complete(self.url(node), timeout=10).strip():
                    return
            except (OSError, ValueError, KeyError):
                pass
            assert time.monotonic() < deadline, f"{node} not ready again after {timeout:.0f} s"
            time.sleep(3)

    def bench_load(
        self, node: str, *, prompts: int, concurrency: int, input_len: int = 256, output_len: int = 32
    ) -> subprocess.Popen[str]:
        """``provision bench`` on ``node``'s engine, started and left running (the caller waits for it):
        ``concurrency`` requests at a time, ``--ignore-eos`` so that each runs its ``output_len`` tokens."""
        args = ["bench", self.url(node), "--api-key", API_KEY, "--num-prompts", str(prompts), "--json"]
        args += ["--max-concurrency", str(concurrency), "--random-input-len", str(input_len)]
        args += ["--random-output-len", str(output_len), "--ignore-eos", "--num-warmups", "0"]
        env = {**os.environ, "CI": "1", "PROVISION_RUNS_DIR": str(self.runs)}
        return subprocess.Popen(
            [*PROVISION, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )


def container_settings(image: ServeImage, url: str) -> dict[str, Any]:
    values: dict[str, Any] = {
        "npu_pools_list": [{"name": POOL_NAME, "devices": [3], "port": PORT, "profile": "smollm2-cpu"}],
        "vllm_serve_mode": "container",
        "vllm_serve_image": image.tag,
        "vllm_serve_image_url": url,  # on the mirror, its sha256 in sha256sums.txt beside it
        # the engine's venv, interpreter and libnuma, at the paths the nodes see them (read-only)
        "vllm_serve_container_volumes": container_volumes(),
        "vllm_serve_api_key": API_KEY,
        "vllm_serve_restart_sec": 60,
    }
    values.update(engine_profile_vars())
    return values


StartCluster = Callable[..., Cluster]  # tests.conftest.start_cluster bound to the fixture's request


def serve_container(start: StartCluster, folder: Path) -> Served:
    begun = time.monotonic()
    image, broken = ensure_serve_image(), broken_image()
    build_s = time.monotonic() - begun
    cluster = start("servec", nodes=2, os_list="openeuler-22.03,ubuntu-22.04", binds=engine_binds())
    image_url, image = mirror_serve_image(cluster.dir, image)
    inventory = copy_inventory(cluster, folder, mirror_vars(cluster))
    served = Served(
        cluster,
        inventory,
        folder / "runs",
        folder / "group_vars" / "all.yml",
        image=image,
        image_url=image_url,
        broken=broken,
        timings={"image build": build_s},
    )
    served.settings_file.write_text(yaml.safe_dump(container_settings(image, image_url)))
    host_vars(inventory, "node2", {"vllm_serve_container_devices": "device"})
    for stage in STAGES:
        begun = time.monotonic()
        json_summary(served.apply("--json", playbook=stage), stage)
        served.timings[stage] = time.monotonic() - begun
    # node1 lacks the image: a wrong sha256 must be refused before anything is loaded
    wrong = f"vllm_serve_image_checksum={WRONG_SHA256}"
    served.refused = run_provision("apply", inventory, "-p", "serve", "--limit", "node1", "-e", wrong)
    served.refused_gets = served.image_gets()
    served.refused_image = cluster.exec("node1", ["docker", "image", "inspect", image.tag]).returncode == 0
    served.refused_left = served.staged("node1")
    _plan_and_apply(served)
    served.first_apply_gets = served.image_gets()
    return served


def _plan_and_apply(served: Served) -> None:
    planned = provision_cli(
        "plan", str(served.inventory), "-p", "serve", "--json", runs=served.runs, timeout=APPLY_TIMEOUT_S
    )
    served.plan = json_summary(planned, "plan")
    unit = served.cluster.exec("node1", ["test", "-e", f"/etc/systemd/system/{UNIT}"])
    served.unit_after_plan = unit.returncode == 0
    begun = time.monotonic()
    done = served.apply("--json")
    served.timings["first apply"] = time.monotonic() - begun
    served.first_apply = json_summary(done, "apply -p serve" + journals(served.cluster, UNIT))


def broken_settings(served: Served) -> tuple[dict[str, Any], str]:
    """The serving settings changed so that the engine cannot start (an image whose entrypoint fails), and
    the journal line that says why."""
    settings = served.settings()
    assert served.broken is not None
    settings["vllm_serve_image"] = BROKEN_TAG
    settings["vllm_serve_image_url"] = served.broken.url  # file://, its sha256 pinned
    settings["vllm_serve_image_checksum"] = served.broken.sha256
    return settings, "/opt/provision/entrypoint.sh"


def kill_engine(served: Served, node: str) -> str:
    """SIGKILL the engine's container on ``node``; returns how systemd's journal words the unit's end."""
    served.sh(node, "docker", "kill", "--signal", "KILL", CONTAINER)
    return "Main process exited, code=exited, status=137"  # `docker run` reports the container's end
