"""`provision sim up --serve`: the serving variables it appends to the cluster's group_vars are valid."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from provision.inventory.validate import host_issues
from provision.serving import engine
from provision.sim import engine as sim_engine
from provision.sim import repos, serve_image
from provision.sim.engine import SERVE_POOL, serving_group_vars

pytestmark = pytest.mark.unit


def test_serving_group_vars_append_to_the_mirror_vars_and_pass_validation() -> None:
    text = repos.group_vars("http://10.200.0.1:8080") + serving_group_vars("service")
    settings = yaml.safe_load(text)
    assert settings["npu_pools_list"] == [SERVE_POOL]
    assert settings["vllm_serve_mode"] == "service"
    assert settings["vllm_serve_venv"] == str(engine.engine_venv())
    assert settings["openeuler_repos_mirror_url"] == "http://10.200.0.1:8080/openeuler"  # not clobbered
    assert host_issues("node1", settings) == []


def test_container_mode_loads_the_sim_image_and_mounts_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
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
    assert host_issues("node1", settings) == []
    assert sim_engine.SERVE_MODE == "container", "the demo serves in the role's default mode"
