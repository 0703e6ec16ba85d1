"""Weights from the mirror: a profile whose model folder is not on the node, with ``model_url``.

ONE simulated node, service mode, the real vLLM CPU engine; the cluster's mirror carries the cached SmolLM2
folder as ``models/smollm2.tar`` + ``sha256sums.txt`` (:mod:`provision_sim.mirror.weights`). The tests run
in file order against one node and one engine start:

1. ``plan`` with two pools sharing the model: one "would download", nothing written.
2. a reserve that no disk holds: refused before anything is downloaded (the mirror saw HEAD, no GET),
   naming host, pool, needed and free MiB; nothing left on the node.
3. a wrong ``model_sha256``: downloaded, refused by the checksum, nothing left on the node.
4. the checksum from the mirror's ``sha256sums.txt``: downloaded, verified, extracted, marked, renamed into
   place; the instance passes the gate and answers a completion; the files equal the engine cache's.
5. a second apply: nothing changed, and the mirror was not asked again.
6. refusals without a download: another archive pinned for the extracted folder; a folder at the model path
   that the role did not extract (left as it is).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from provision.inventory.rules import MEBIBYTES
from provision_sim.cluster import Cluster
from provision_sim.mirror.weights import ModelArchive, mirror_model
from provision_sim.serving import vllm_cpu as engine
from provision_sim.serving.setup import engine_binds, smollm2_profile
from tests.helpers import Run, complete, copy_inventory, exists, provision

ClusterFactory = Callable[..., Cluster]  # the sim_cluster_module_factory fixture (tests/conftest.py)

pytestmark = [pytest.mark.cluster, pytest.mark.engine, pytest.mark.slow]

NODE = "node1"
MODEL = "/srv/models/smollm2"  # not on the node: the engine cache is mounted elsewhere
POOL = {"name": "smol", "devices": [0], "port": 8000, "profile": "smollm2-mirror"}
# The engine listens on the node's address, which needs a key (provision validate refuses it otherwise).
API_KEY = "weights-test-key"
MARKER = ".provision-weights.json"
LEFTOVERS = ["/srv/models/.smollm2.partial", "/srv/models/.smollm2.smollm2.tar"]


@dataclass
class Mirrored:
    cluster: Cluster
    inventory: Path
    url: str
    archive: ModelArchive

    def settings(self, profile: dict[str, object] | None = None, **role: object) -> None:
        """group_vars: service mode from the engine's venv, the smollm2 profile with its weights on the mirror
        (plus ``profile`` fields), and ``role`` variables."""
        shipped = smollm2_profile()
        values: dict[str, object] = {
            "npu_pools_list": [POOL],
            "vllm_serve_mode": "service",
            "vllm_serve_venv": str(engine.engine_venv()),
            "vllm_serve_api_key": API_KEY,
            "vllm_serve_profiles": {
                "smollm2-mirror": {**shipped, "model": MODEL, "model_url": self.url, **(profile or {})}
            },
            **role,
        }
        (self.inventory.parent / "group_vars" / "npu_nodes.yml").write_text(yaml.safe_dump(values))

    def apply(self, *args: str) -> Run:
        return provision("apply", self.inventory, "-p", "serve", *args, timeout=900)

    def on_node(self, *argv: str) -> str:
        done = self.cluster.exec(NODE, list(argv))
        return done.stdout

    def exists(self, path: str) -> bool:
        return exists(self.cluster, NODE, path)

    def archive_requests(self) -> list[str]:
        """The mirror's log lines for the archive: ``HEAD`` / ``GET`` (python -m http.server's format)."""
        log = (self.cluster.dir / "mirror.log").read_text(errors="replace")
        return re.findall(r'"(HEAD|GET) /models/smollm2\.tar HTTP', log)

    def nothing_left(self) -> None:
        for path in [MODEL, *LEFTOVERS]:
            assert not self.exists(path), f"{path} left on {NODE}"

    def journal(self) -> str:
        return self.on_node("journalctl", "-u", "vllm-smol.service", "-n", "40", "--no-pager")


@pytest.fixture(scope="module")
def mirrored(
    sim_host: None, sim_cluster_module_factory: ClusterFactory, tmp_path_factory: pytest.TempPathFactory
) -> Mirrored:
    engine.prepare()  # cached: instant after the first time
    cluster = sim_cluster_module_factory("weights", nodes=1, os_list="ubuntu-22.04", binds=engine_binds())
    url, archive = mirror_model(cluster.dir)
    folder = tmp_path_factory.mktemp("weights")
    return Mirrored(cluster, copy_inventory(cluster, folder), url, archive)


def test_plan_would_download_once_for_two_pools_sharing_the_weights(mirrored: Mirrored) -> None:
    second = {**POOL, "name": "smol2", "devices": [1], "port": 8001}
    mirrored.settings(npu_pools_list=[POOL, second])

    plan = provision("plan", mirrored.inventory, "-p", "serve")
    assert plan.rc == 0, plan.explain()
    would = plan.results("vllm_serve : Would download the weights")[NODE]["results"]
    assert [item["msg"] for item in would] == [
        f"would download {mirrored.url} ({-(-mirrored.archive.size // 2**20)} MiB, sha256 "
        f"{mirrored.archive.sha256} from {mirrored.url.rsplit('/', 1)[0]}/sha256sums.txt) and extract it to "
        f"{MODEL} for pool smol, smol2"
    ]
    assert mirrored.archive_requests() == ["HEAD"], "plan asks for the size only"
    mirrored.nothing_left()


def test_a_disk_too_small_is_refused_before_downloading(mirrored: Mirrored) -> None:
    reserve = int(MEBIBYTES.high)  # 64 TiB, the most validate takes: no disk of the node holds it
    mirrored.settings(vllm_serve_model_reserve_mb=reserve)
    before = mirrored.archive_requests()
    run = mirrored.apply()
    assert run.rc == 1, run.explain()
    message = run.failures()[NODE]
    mib = -(-mirrored.archive.size // 2**20)
    assert "vllm_serve : Check the free space before downloading anything" in message
    assert (
        f"Not enough space for the weights of pool smol on {NODE}: {MODEL} needs {2 * mib + reserve} MiB"
        in message
    )
    free = re.search(r"which has (\d+) MiB free", message)
    assert free is not None and 0 < int(free.group(1)) < 2 * mib + reserve, message
    assert "Nothing was downloaded" in message
    assert mirrored.archive_requests()[len(before) :] == ["HEAD"], "the size was asked, nothing downloaded"
    mirrored.nothing_left()
    assert not mirrored.exists("/etc/provision/serve/smol/args"), "nothing configured"


def test_a_wrong_sha256_is_refused_and_nothing_is_left(mirrored: Mirrored) -> None:
    wrong = "0" * 64
    mirrored.settings({"model_sha256": wrong})
    run = mirrored.apply()
    assert run.rc == 1, run.explain()
    message = run.failures()[NODE]
    assert f"Pool smol on {NODE}: the weights {MODEL} (profile smollm2-mirror) were not fetched" in message
    assert f"sha256 {wrong} from model_sha256 of profile smollm2-mirror" in message
    assert f"did not match {wrong}; it was {mirrored.archive.sha256}" in message
    assert "Nothing of it was left in /srv/models" in message and ".. " not in message
    mirrored.nothing_left()
    assert not mirrored.exists("/etc/provision/serve/smol/args"), "nothing configured"


def test_apply_downloads_verifies_and_serves_then_changes_nothing(mirrored: Mirrored) -> None:
    mirrored.settings()  # sha256 from the mirror's sha256sums.txt
    before = mirrored.archive_requests()
    run = mirrored.apply()
    assert run.rc == 0, run.explain() + mirrored.journal()
    changed = run.tasks(NODE)
    for task in (
        "vllm_serve : Download the weights archive and verify its sha256",
        "vllm_serve : Extract the weights archive",
        "vllm_serve : Move the weights into place",
    ):
        assert task in changed, changed
    assert mirrored.archive_requests()[len(before) :] == ["HEAD", "GET"], "one download"

    marker = json.loads(mirrored.on_node("cat", f"{MODEL}/{MARKER}"))
    assert marker == {
        "url": mirrored.url,
        "sha256": mirrored.archive.sha256,
        "bytes": mirrored.archive.size,
        "profile": "smollm2-mirror",
    }
    listing = mirrored.on_node("find", MODEL, "-type", "f", "-printf", "%P %s %m %u\n").splitlines()
    cache = engine.model_dir()
    expected = [f"{p.name} {p.stat().st_size} 644 root" for p in cache.iterdir() if p.is_file()]
    assert sorted(line for line in listing if not line.startswith(f"{MARKER} ")) == sorted(expected)
    config = mirrored.on_node("sha256sum", f"{MODEL}/config.json").split()[0]
    assert config == hashlib.sha256((cache / "config.json").read_bytes()).hexdigest()
    for path in LEFTOVERS:
        assert not mirrored.exists(path), f"{path} left on {NODE}"

    args = mirrored.on_node("cat", "/etc/provision/serve/smol/args").splitlines()
    assert args[args.index("--model") + 1] == MODEL
    url = f"http://{mirrored.cluster.node(NODE).ip}:{POOL['port']}"
    assert complete(url, api_key=API_KEY).strip(), "an empty completion"
    download = run.events("vllm_serve : Download the weights archive and verify its sha256")[NODE]
    extract = run.events("vllm_serve : Extract the weights archive")[NODE]
    print(
        f"\nweights {mirrored.archive.size / 2**20:.0f} MiB: download + sha256 "
        f"{download.get('duration', 0):.1f} s, extract {extract.get('duration', 0):.1f} s; "
        f"first apply {run.seconds:.1f} s"
    )

    again = mirrored.apply()
    assert again.rc == 0, again.explain()
    assert again.changed() == {NODE: 0}
    assert mirrored.archive_requests()[len(before) :] == ["HEAD", "GET"], "the mirror was not asked again"
    print(f"second apply {again.seconds:.1f} s")


def test_a_changed_pin_or_a_foreign_folder_is_refused_and_left_alone(mirrored: Mirrored) -> None:
    assert mirrored.exists(f"{MODEL}/{MARKER}"), "runs after the weights were fetched"
    before = mirrored.archive_requests()
    pinned = "1" * 64
    mirrored.settings({"model_sha256": pinned})
    run = mirrored.apply()
    assert run.rc == 1, run.explain()
    message = run.failures()[NODE]
    assert "vllm_serve : Check the extracted weights come from the pinned archive" in message
    assert f"{MODEL} on {NODE} holds the weights of archive sha256 {mirrored.archive.sha256}" in message
    assert f"pins model_sha256 {pinned}. Give the new weights a new model path" in message

    foreign = "/srv/models/copied"
    mirrored.cluster.exec(NODE, ["sh", "-c", f"mkdir -p {foreign} && echo '{{}}' > {foreign}/config.json"])
    mirrored.settings({"model": foreign})
    run = mirrored.apply()
    assert run.rc == 1, run.explain()
    message = run.failures()[NODE]
    assert f"Pool smol on {NODE}: {foreign} exists but holds no {MARKER}" in message
    assert "It is left alone: remove it to have the archive downloaded" in message
    assert mirrored.on_node("ls", "-A", foreign).split() == ["config.json"], "the folder is left as it was"
    assert mirrored.archive_requests() == before, "nothing asked of the mirror"
    assert mirrored.exists(f"{MODEL}/{MARKER}"), "the fetched weights are kept"
