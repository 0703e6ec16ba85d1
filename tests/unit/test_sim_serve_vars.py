"""`provision sim up --serve`: the serving variables it appends to the cluster's group_vars are valid."""

from __future__ import annotations

import pytest
import yaml

from provision.inventory.validate import host_issues
from provision.serving import engine
from provision.sim import repos
from provision.sim.engine import SERVE_POOL, serving_group_vars

pytestmark = pytest.mark.unit


def test_serving_group_vars_append_to_the_mirror_vars_and_pass_validation() -> None:
    text = repos.group_vars("http://10.200.0.1:8080") + serving_group_vars()
    settings = yaml.safe_load(text)
    assert settings["npu_pools_list"] == [SERVE_POOL]
    assert settings["vllm_serve_venv"] == str(engine.engine_venv())
    assert settings["openeuler_repos_mirror_url"] == "http://10.200.0.1:8080/openeuler"  # not clobbered
    assert host_issues("node1", settings) == []
