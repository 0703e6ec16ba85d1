"""The groups the suite's pytest-xdist workers keep whole (tests/conftest.py): a test that shares a cluster
with others must land in their group, or its cluster is built twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import SESSION_CLUSTER_MODULES, xdist_group

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("nodeid", "group"),
    [
        ("tests/integration/serving/test_serve.py::test_apply", "serving"),
        ("tests/integration/serving/test_doctor_faults.py::test_fault[node1-npu-busy]", "serving"),
        # the control plane's tests with the serving cluster's: the autoscaling drill needs both at once
        ("tests/integration/k8s/test_control_plane.py::test_version", "serving"),
        ("tests/integration/serving/test_autoscale.py::test_drill", "serving"),
        ("tests/integration/test_repos.py::test_repos_plan_apply_repeat", "sim_cluster"),
        ("tests/integration/test_sim_cluster.py::test_reboot_really_reboots", "sim_cluster"),
        ("tests/integration/test_site.py::test_x", "tests/integration/test_site.py"),
        ("tests/unit/test_bundle.py::test_y[a::b]", "tests/unit/test_bundle.py"),
    ],
)
def test_each_test_has_the_group_of_what_it_shares(nodeid: str, group: str) -> None:
    assert xdist_group(nodeid) == group


def test_the_listed_session_cluster_modules_exist() -> None:
    assert SESSION_CLUSTER_MODULES and all((ROOT / m).is_file() for m in SESSION_CLUSTER_MODULES)
