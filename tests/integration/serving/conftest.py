"""One serving cluster for every test of this package (``cluster.py`` says what it holds).

``served`` is package-scoped and parametrized by mode (``cluster.MODES``: container mode only; service mode
is checked on the clusters that serve that way, ``cluster.py`` says where); a module names its mode with
``pytest.mark.parametrize("served", ["container"], indirect=True)``. pytest groups the tests of one mode
together. Tests marked ``disruptive`` (they leave an engine down, or the cluster on another configuration) run
last in their group; every other test leaves the cluster healthy and as it found it.
"""

from __future__ import annotations

import pytest

from provision_sim.cluster import Cluster
from provision_sim.serving import vllm_cpu as engine
from tests.conftest import start_cluster
from tests.integration.serving.cluster import MODES, Served, serve_container


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "disruptive: leaves the shared serving cluster degraded or reconfigured; runs last"
    )


@pytest.hookimpl(trylast=True)  # after pytest grouped the tests by the package fixture's parameter
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def mode(item: pytest.Item) -> str:
        callspec = getattr(item, "callspec", None)
        return str(callspec.params.get("served", "")) if callspec else ""

    position = {id(item): index for index, item in enumerate(items)}
    mine = [item for item in items if mode(item) in MODES]
    if not mine:
        return
    first = {m: min(position[id(i)] for i in mine if mode(i) == m) for m in {mode(i) for i in mine}}
    ordered = sorted(
        mine,
        key=lambda i: (first[mode(i)], i.get_closest_marker("disruptive") is not None, position[id(i)]),
    )
    slots = sorted(position[id(item)] for item in mine)
    for slot, item in zip(slots, ordered, strict=True):
        items[slot] = item


@pytest.fixture(scope="package", params=MODES)
def served(
    request: pytest.FixtureRequest,
    sim_host: None,
    fresh_host_network: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Served:
    engine.prepare()  # cached: instant after the first time (~3 min)
    folder = tmp_path_factory.mktemp(f"serve-{request.param}")

    def start(purpose: str, **options: object) -> Cluster:
        return start_cluster(request, purpose, **options)

    return serve_container(start, folder)
