"""`provision sim up --serve`: the serving variables it appends to the cluster's group_vars are valid."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from provision.errors import ProvisionError
from provision.inventory.validate import host_issues
from provision_sim.mirror import repos
from provision_sim.serving import image as serve_image
from provision_sim.serving import setup as sim_engine
from provision_sim.serving import vllm_cpu as engine
from provision_sim.serving.setup import SERVE_POOL, serving_group_vars

pytestmark = pytest.mark.unit

# `provision sim up --serve` writes the engines' API key beside these variables (write_api_key, tested below):
# the nodes' engines listen on their addresses, which provision validate refuses without one.
KEY = {"vllm_serve_api_key": "written-by-provision-serve-key"}


def test_serving_group_vars_append_to_the_mirror_vars_and_pass_validation() -> None:
    text = repos.group_vars("http://10.200.0.1:8080") + serving_group_vars("service")
    settings = yaml.safe_load(text)
    assert settings["npu_pools_list"] == [SERVE_POOL]
    assert settings["vllm_serve_mode"] == "service"
    assert settings["vllm_serve_venv"] == str(engine.engine_venv())
    assert settings["openeuler_repos_mirror_url"] == "http://10.200.0.1:8080/openeuler"  # not clobbered
    assert host_issues("node1", {**settings, **KEY}) == []


def test_container_mode_without_a_mirror_loads_the_sim_image_from_its_file_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    image = serve_image.ServeImage(
        Path("/cache/serve-images/v.tar"), "provision-sim/vllm-cpu:1", "ab" * 32, 1, 0
    )
    monkeypatch.setattr(serve_image, "ensure_serve_image", lambda: image)
    monkeypatch.setattr(sim_engine, "container_volumes", lambda: ["/var/cache/provision-engine", "/py"])
    settings = yaml.safe_load(repos.group_vars("http://10.200.0.1:8080") + serving_group_vars("container"))
    assert settings["vllm_serve_mode"] == "container" and "vllm_serve_venv" not in settings
    assert settings["vllm_serve_image"] == "provision-sim/vllm-cpu:1"
    assert settings["vllm_serve_image_url"] == "file:///cache/serve-images/v.tar"
    assert settings["vllm_serve_image_checksum"] == "ab" * 32
    assert settings["vllm_serve_container_volumes"] == ["/var/cache/provision-engine", "/py"]
    assert host_issues("node1", {**settings, **KEY}) == []
    assert sim_engine.SERVE_MODE == "container", "the demo serves in the role's default mode"


def _served_mirror(tmp_path: Path) -> tuple[Path, Path]:
    """A cluster folder whose mirror.json names a mirror root holding the verification image's sums."""
    root, cluster_dir = tmp_path / "mirror", tmp_path / "cluster"
    (root / "images").mkdir(parents=True)
    (root / "images" / "sha256sums.txt").write_text(f"{'cd' * 32}  busybox.tar\n")
    cluster_dir.mkdir()
    served = {"root": str(root), "ip": "10.200.0.1", "port": 8080, "url": "http://10.200.0.1:8080"}
    (cluster_dir / "mirror.json").write_text(json.dumps(served))
    return root, cluster_dir


def _image(folder: Path, key: str, data: bytes) -> serve_image.ServeImage:
    path = folder / f"vllm-cpu-{key}.tar"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return serve_image.ServeImage(
        path, "provision-sim/vllm-cpu:1", hashlib.sha256(data).hexdigest(), len(data), 0
    )


def test_container_mode_with_a_mirror_downloads_the_image_over_http(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, cluster_dir = _served_mirror(tmp_path)
    image = _image(tmp_path / "serve-images", "0123456789ab", b"image tarball")
    monkeypatch.setattr(serve_image, "ensure_serve_image", lambda: image)
    monkeypatch.setattr(sim_engine, "container_volumes", lambda: ["/var/cache/provision-engine"])
    text = repos.group_vars("http://10.200.0.1:8080") + serving_group_vars("container", cluster_dir)
    settings = yaml.safe_load(text)
    assert settings["vllm_serve_image"] == "provision-sim/vllm-cpu:1"
    assert settings["vllm_serve_image_url"] == "http://10.200.0.1:8080/images/vllm-cpu-0123456789ab.tar"
    assert "vllm_serve_image_checksum" not in settings, "the role reads it from the mirror's sha256sums.txt"
    assert host_issues("node1", {**settings, **KEY}) == []
    served = root / "images" / "vllm-cpu-0123456789ab.tar"
    assert served.stat().st_ino == image.path.stat().st_ino, "a hard link, no second copy"
    assert repos.read_sums(root / "images" / "sha256sums.txt") == {
        "busybox.tar": "cd" * 32,  # the container runtime's verification image stays listed
        "vllm-cpu-0123456789ab.tar": image.sha256,
    }


def test_a_new_serving_image_replaces_the_old_one_on_the_mirror(tmp_path: Path) -> None:
    root, cluster_dir = _served_mirror(tmp_path)
    (root / "images" / "vllm-cpu-broken.tar").write_bytes(b"kept")  # not a serving image of ours
    old = _image(tmp_path / "serve-images", "aaaaaaaaaaaa", b"old image")
    new = _image(tmp_path / "serve-images", "bbbbbbbbbbbb", b"new image")
    assert serve_image.mirror_serve_image(cluster_dir, old)[0].endswith("/images/vllm-cpu-aaaaaaaaaaaa.tar")
    url, _ = serve_image.mirror_serve_image(cluster_dir, new)
    again, _ = serve_image.mirror_serve_image(cluster_dir, new)
    assert url == again == "http://10.200.0.1:8080/images/vllm-cpu-bbbbbbbbbbbb.tar"
    assert sorted(path.name for path in (root / "images").glob("*.tar")) == [
        "vllm-cpu-bbbbbbbbbbbb.tar",
        "vllm-cpu-broken.tar",
    ]
    assert repos.read_sums(root / "images" / "sha256sums.txt") == {
        "busybox.tar": "cd" * 32,
        "vllm-cpu-bbbbbbbbbbbb.tar": new.sha256,
    }


def test_a_cluster_without_a_mirror_has_no_http_image(tmp_path: Path) -> None:
    image = _image(tmp_path, "0123456789ab", b"x")
    with pytest.raises(ProvisionError, match="serves no mirror"):
        serve_image.mirror_serve_image(tmp_path, image)
