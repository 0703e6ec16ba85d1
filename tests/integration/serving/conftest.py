"""One serving cluster for every test of this package (``cluster.py`` says what it holds).

``served`` is package-scoped: container mode (service mode is checked on the clusters that serve that way,
``cluster.py`` says where). Tests marked ``disruptive`` (they leave an engine down, or the cluster on another
configuration) run last of those that use it; every other test leaves the cluster healthy and as it found it.
"""

from __future__ import annotations

import pytest

from provision_sim.cluster import Cluster
from provision_sim.serving import vllm_cpu as engine
from tests.conftest import start_cluster
from tests.integration.serving.cluster import Served, serve_container


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "disruptive: leaves the shared serving cluster degraded or reconfigured; runs last"
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    position = {id(item): index for index, item in enumerate(items)}
    mine = [item for item in items if "served" in getattr(item, "fixturenames", ())]
    ordered = sorted(mine, key=lambda i: (i.get_closest_marker("disruptive") is not None, position[id(i)]))
    slots = sorted(position[id(item)] for item in mine)
    for slot, item in zip(slots, ordered, strict=True):
        items[slot] = item


@pytest.fixture(scope="package")
def served(
    request: pytest.FixtureRequest,
    sim_host: None,
    fresh_host_network: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Served:
    engine.prepare()  # cached: instant after the first time (~3 min)
    folder = tmp_path_factory.mktemp("serve")

    def start(purpose: str, **options: object) -> Cluster:
        return start_cluster(request, purpose, **options)

    return serve_container(start, folder)
