"""Shared fixtures, above all the simulated cluster (``provision_sim``) the integration tests run against.

``sim_cluster`` boots 3 nodes of mixed flavours once per test session and removes them at the end, even when
tests fail or the session is interrupted (pytest finalizer, plus ``atexit`` and SIGTERM as a safety net).
Tests that use it are marked ``@pytest.mark.cluster``.

The cluster needs root and systemd-nspawn. Where they are missing the cluster tests FAIL, so CI cannot pass
by silently skipping them; set ``PROVISION_ALLOW_SKIP=1`` to skip them instead (a laptop without root).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

import pytest

from provision.errors import EnvironmentProblem, ProvisionError
from provision.runner.run import ansible_env
from provision_sim.cluster import BOOT_TIMEOUT_S, Cluster, state_root
from provision_sim.k8s import build as k8s_build
from provision_sim.k8s.controlplane import ControlPlane
from provision_sim.system import require_host

# One cluster per pytest process, so two sessions (two engineers, or CI and a developer) never share
# or tear down each other's nodes; clusters of dead sessions are removed when the next one starts.
SIM_CLUSTER_PREFIX = "pytest-"
SIM_CLUSTER_NAME = os.environ.get("PROVISION_TEST_CLUSTER", f"{SIM_CLUSTER_PREFIX}{os.getpid()}")
SIM_CLUSTER_OS = "openeuler-22.03,ubuntu-22.04,openeuler-24.03"
SIM_CLUSTER_NODES = 3
SIM_CLUSTER_NPUS = 8

# Connect budget of every provision/Ansible run the tests start (Mitogen's covers ssh AND the node's Python
# starting; provision's own default is 60 s). On 2 cores shared with the nodes, their engines loading (three
# Python processes importing vLLM each, all CPU) and a second worker's tests, a first contact was seen taking
# 86 s (an idle engine costs ~2 % of a core: it is the loads that crowd the machine). A node that is really
# gone still fails; it takes longer to say so.
os.environ.setdefault("ANSIBLE_TIMEOUT", "180")

# sim_ansible(pattern, module, args="", *extra_cli_args, timeout=300)
AnsibleRunner = Callable[..., subprocess.CompletedProcess[str]]
# run_ansible(inventory, pattern, module, args="", *extra_cli_args, timeout=300)
InventoryAnsibleRunner = Callable[..., subprocess.CompletedProcess[str]]
# sim_cluster_factory(purpose, *, nodes, os_list, npus=8, binds=(), mirror=True, boot_timeout=...)
ClusterFactory = Callable[..., Cluster]


# The groups of tests one pytest-xdist worker runs in order (``-n 2``, the Makefile's ``test``): those that
# share a cluster or another costly fixture stay together, so that none is built twice and module fixtures
# keep their order. Collection order is the schedule: the serving package (the longest group) first, the
# unit modules last. pytest-xdist's own ``--dist loadgroup`` cannot carry its marks on pytest >= 9.2 (a
# node's id is no longer a string it can append to), so the grouping is this scheduler's, by node id.
SERVING_PACKAGE = "tests/integration/serving/"
SESSION_CLUSTER_MODULES = frozenset(
    {"tests/integration/test_repos.py", "tests/integration/test_sim_cluster.py"}
)
"""The modules whose tests use the session cluster (``sim_cluster``): one group. A module that uses it and is
missing here is refused at collection, so the cluster is never started twice."""
_SESSION_CLUSTER_FIXTURES = {"sim_cluster", "sim_inventory", "sim_ansible"}
K8S_PACKAGE = "tests/integration/k8s/"
"""The tests of the Kubernetes control plane (``k8s_control_plane``). They are in the ``serving`` group: the
external metrics path (``tests/integration/serving/test_autoscale.py``) needs the control plane and the
serving cluster at once, and one worker running both groups' tests starts each of them once."""
K8S_GROUP = "serving"


def xdist_group(nodeid: str) -> str:
    """The group of the test ``nodeid``: ``serving`` (the serving package and the Kubernetes tests),
    ``sim_cluster`` or its module's path."""
    module = nodeid.split("::", 1)[0]
    if module.startswith(SERVING_PACKAGE):
        return "serving"
    if module.startswith(K8S_PACKAGE):
        return K8S_GROUP
    if module in SESSION_CLUSTER_MODULES:
        return "sim_cluster"
    return module


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class Groups(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid)

    return Groups(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        uses = _SESSION_CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ()))
        if uses and xdist_group(item.nodeid) != "sim_cluster":
            raise pytest.UsageError(
                f"{module} uses {', '.join(sorted(uses))}: add it to SESSION_CLUSTER_MODULES "
                "in tests/conftest.py"
            )
        if "k8s_control_plane" in getattr(item, "fixturenames", ()) and xdist_group(item.nodeid) != K8S_GROUP:
            raise pytest.UsageError(
                f"{module} uses k8s_control_plane: move it under {K8S_PACKAGE} or {SERVING_PACKAGE}"
            )


def sim_unavailable(reason: str, what: str = "simulated cluster") -> NoReturn:
    """Skip (with ``PROVISION_ALLOW_SKIP=1``) or fail: CI must never skip the cluster tests silently."""
    if os.environ.get("PROVISION_ALLOW_SKIP") == "1":
        pytest.skip(f"{what} unavailable: {reason}")
    pytest.fail(
        f"{what} unavailable: {reason}\n(set PROVISION_ALLOW_SKIP=1 to skip the {what} tests instead)",
        pytrace=False,
    )


def require_sim_host() -> None:
    """Root, systemd-nspawn, iproute2, overlayfs — or skip/fail with what to install."""
    try:
        require_host()
    except EnvironmentProblem as exc:
        reason = str(exc)
    else:
        return
    sim_unavailable(reason)


def cluster_name(purpose: str) -> str:
    """``pytest-<pid>-<purpose>``: a cluster of this pytest process (later sessions remove it if it dies)."""
    name = f"{SIM_CLUSTER_PREFIX}{os.getpid()}-{purpose}"
    if len(name) > 24:  # provision_sim.cluster.check_name
        raise ValueError(f"cluster purpose {purpose!r} too long for a cluster name: {name!r}")
    return name


def _start_cluster(
    name: str,
    *,
    nodes: int,
    os_list: str,
    npus: int,
    binds: Sequence[str] = (),
    mirror: bool = True,
    boot_timeout: float = BOOT_TIMEOUT_S,
    model_list: str = "910B3",
    snapshots: Sequence[Any] = (),
) -> Cluster:
    """Bring up a cluster (removing a leftover of the same name first), or skip/fail with the reason.

    ``binds``: read-only mounts into every node (``SRC:DST``), e.g.
    ``provision_sim.serving.setup.engine_binds()``.
    ``mirror``: serve the local package mirror to the nodes. ``boot_timeout``: seconds until sshd answers.
    ``model_list``: the simulated hardware of each node in turn (``provision sim up --model``).
    ``snapshots``: start the nodes converged, from these :class:`provision_sim.snapshot.Snapshot` in turn.
    """
    require_sim_host()
    _remove_clusters_of_dead_sessions()
    leftover = Cluster.load(name)
    if leftover is not None:
        leftover.down()
    try:
        return Cluster.up(
            name,
            nodes=nodes,
            os_list=os_list,
            npus=npus,
            binds=binds,
            mirror=mirror,
            boot_timeout=boot_timeout,
            model_list=model_list,
            snapshots=snapshots,
        )
    except EnvironmentProblem as exc:  # e.g. mmdebstrap missing to build the base
        reason = str(exc)
    sim_unavailable(reason)


def _remove_clusters_of_dead_sessions() -> None:
    """Clusters ``pytest-<pid>`` and ``pytest-<pid>-<purpose>`` whose pytest process is gone."""
    root = state_root()
    for folder in sorted(root.glob(f"{SIM_CLUSTER_PREFIX}*")) if root.is_dir() else []:
        pid = folder.name.removeprefix(SIM_CLUSTER_PREFIX).split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            stale = Cluster.load(folder.name)
            if stale is not None:
                stale.down()


class _Teardown:
    """``down`` exactly once, whichever of finalizer, atexit or SIGTERM comes first."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.done = False

    def __call__(self) -> None:
        if self.done:
            return
        self.done = True
        warnings = self.cluster.down()
        if warnings:
            print(f"sim_cluster teardown: {'; '.join(warnings)}", file=sys.stderr)


def _interrupt_on_sigterm() -> None:
    """SIGTERM becomes KeyboardInterrupt, so pytest still runs the finalizers (unless already handled)."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def interrupt(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt("SIGTERM")

    signal.signal(signal.SIGTERM, interrupt)


# What a new machine has (Debian 12's kernel defaults). A host that ran a dockerd, or this suite before the
# nodes set their own values, has ip_forward 1, and new network namespaces copy the host's IPv4 settings: so
# every cluster test runs with the host set back to these, and shows what a fresh machine would meet.
FRESH_HOST_SYSCTLS = {"net.ipv4.ip_forward": "0", "net.core.devconf_inherit_init_net": "0"}


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def _set_fresh_host_network() -> dict[str, str]:
    """Set the host's network sysctls to a new machine's; return what they were."""
    kept = {name: _sysctl_path(name).read_text().strip() for name in FRESH_HOST_SYSCTLS}
    try:
        for name, value in FRESH_HOST_SYSCTLS.items():
            _sysctl_path(name).write_text(f"{value}\n")
    except OSError as exc:  # not root: the cluster tests then skip or fail on their own
        print(f"fresh_host_network: host sysctls left as they are: {exc}", file=sys.stderr)
    return kept


def _restore_host_network(kept: dict[str, str]) -> None:
    for name, value in kept.items():
        with contextlib.suppress(OSError):
            _sysctl_path(name).write_text(f"{value}\n")


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _is_xdist_controller(config: pytest.Config) -> bool:
    return not _is_xdist_worker(config) and bool(getattr(config.option, "numprocesses", None))


_KEPT_HOST_NETWORK = pytest.StashKey[dict[str, str]]()


def pytest_configure(config: pytest.Config) -> None:
    # With workers (pytest-xdist), the controller sets the host's sysctls once for the whole run and puts
    # them back after the last worker ended: a worker that finished first must not restore them under
    # another worker's clusters.
    if _is_xdist_controller(config) and os.geteuid() == 0:
        config.stash[_KEPT_HOST_NETWORK] = _set_fresh_host_network()


def pytest_unconfigure(config: pytest.Config) -> None:
    kept = config.stash.get(_KEPT_HOST_NETWORK, None)
    if kept is not None:
        _restore_host_network(kept)


@pytest.fixture(scope="session")
def fresh_host_network(pytestconfig: pytest.Config) -> Iterator[dict[str, str]]:
    """The host's network sysctls as on a new machine while the session's clusters run; restored after
    (by the controller, when the run has workers)."""
    kept = _set_fresh_host_network()
    try:
        yield dict(FRESH_HOST_SYSCTLS)
    finally:
        if not _is_xdist_worker(pytestconfig):
            _restore_host_network(kept)


@pytest.fixture(scope="session")
def sim_host() -> None:
    """Root, systemd-nspawn, iproute2, overlayfs on this machine, or skip/fail (for tests that need the host
    ready before they start a cluster, e.g. to compute its bind mounts)."""
    require_sim_host()


@pytest.fixture(scope="session")
def sim_cluster(request: pytest.FixtureRequest, fresh_host_network: dict[str, str]) -> Cluster:
    """A running 3-node cluster: openEuler 22.03, Ubuntu 22.04, openEuler 24.03, 8 simulated NPUs each.

    The :class:`provision_sim.cluster.Cluster` gives ``nodes`` (name, ip, flavour, root...),
    ``inventory_path``, ``private_key``, ``known_hosts``, ``controller_ip`` and ``exec(node, argv)``.
    Shared by the whole session: tests may change nodes but must leave them running.
    """
    cluster = _start_cluster(
        SIM_CLUSTER_NAME, nodes=SIM_CLUSTER_NODES, os_list=SIM_CLUSTER_OS, npus=SIM_CLUSTER_NPUS
    )
    _tear_down_at_end(request, cluster)
    return cluster


def _tear_down_at_end(request: pytest.FixtureRequest, cluster: Cluster) -> None:
    teardown = _Teardown(cluster)
    request.addfinalizer(teardown)
    atexit.register(teardown)
    _interrupt_on_sigterm()


def _factory(request: pytest.FixtureRequest) -> ClusterFactory:
    def start(
        purpose: str,
        *,
        nodes: int,
        os_list: str,
        npus: int = SIM_CLUSTER_NPUS,
        binds: Sequence[str] = (),
        mirror: bool = True,
        boot_timeout: float = BOOT_TIMEOUT_S,
        model_list: str = "910B3",
        snapshots: Sequence[Any] = (),
    ) -> Cluster:
        cluster = _start_cluster(
            cluster_name(purpose),
            nodes=nodes,
            os_list=os_list,
            npus=npus,
            binds=binds,
            mirror=mirror,
            boot_timeout=boot_timeout,
            model_list=model_list,
            snapshots=snapshots,
        )
        _tear_down_at_end(request, cluster)
        return cluster

    return start


def start_cluster(request: pytest.FixtureRequest, purpose: str, **options: Any) -> Cluster:
    """A cluster torn down with the fixture whose ``request`` this is (for a parametrized fixture: when its
    parameter changes, so that two parameters' clusters never run at once). ``options``: see ``_factory``."""
    cluster: Cluster = _factory(request)(purpose, **options)
    return cluster


@pytest.fixture(scope="module")
def sim_cluster_module_factory(
    request: pytest.FixtureRequest, fresh_host_network: dict[str, str]
) -> ClusterFactory:
    """Like ``sim_cluster_factory``, for clusters shared by the tests of one module."""
    return _factory(request)


@pytest.fixture
def sim_cluster_factory(request: pytest.FixtureRequest, fresh_host_network: dict[str, str]) -> ClusterFactory:
    """Start extra clusters for one test: ``sim_cluster_factory("ten", nodes=10, os_list="ubuntu-22.04")``.

    The cluster is named ``pytest-<pid>-<purpose>`` (a later session removes it if this process dies) and is
    removed when the test ends (if the test did not call ``down`` itself). Clusters get their own subnet, so
    they run next to the session cluster. ``binds`` and ``mirror``: see ``Cluster.up``.
    """
    return _factory(request)


@pytest.fixture(scope="session")
def sim_inventory(sim_cluster: Cluster) -> Path:
    """Path of the running cluster's inventory.ini (group ``npu_nodes``)."""
    return sim_cluster.inventory_path


def _run_ansible(
    inventory: Path, pattern: str, module: str, args: str = "", *extra: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``ansible <pattern> -m <module> -a <args>`` with the project's ansible.cfg (SSH, host keys checked)."""
    ansible = Path(sys.executable).with_name("ansible")
    argv = [str(ansible), "-i", str(inventory), pattern, "-m", module]
    if args:
        argv += ["-a", args]
    env = {**os.environ, **ansible_env()}
    return subprocess.run(
        [*argv, *extra], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


@pytest.fixture(scope="session")
def sim_ansible(sim_inventory: Path) -> AnsibleRunner:
    """Run ad-hoc Ansible against the cluster: ``sim_ansible("node1", "command", "uname -r")``."""

    def ansible(
        pattern: str, module: str, args: str = "", *extra: str, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        return _run_ansible(sim_inventory, pattern, module, args, *extra, timeout=timeout)

    return ansible


@pytest.fixture(scope="session")
def run_ansible() -> InventoryAnsibleRunner:
    """Ad-hoc Ansible against any inventory: ``run_ansible(cluster.inventory_path, "all", "ping")``."""
    return _run_ansible


@pytest.fixture(scope="session")
def k8s_built() -> k8s_build.BuildReport:
    """Kubernetes 1.20 built from Debian's source package (binaries and the source tarball), from the cache
    ``make k8s-rig`` fills (``provision_sim.k8s.build``); where it is empty it is built here first, under the
    cache's lock (tens of minutes, once per machine). A failed build fails the tests that use this fixture
    with the build's own error."""
    try:
        built = k8s_build.prepare(progress=lambda text: print(f"[k8s] {text}", file=sys.stderr))
    except EnvironmentProblem as exc:
        sim_unavailable(str(exc), what="Kubernetes control plane")
    except ProvisionError as exc:
        pytest.fail(f"the Kubernetes control plane could not be built: {exc}", pytrace=False)
    print(f"[k8s] {built.summary()}", file=sys.stderr)
    return built


@pytest.fixture(scope="session")
def k8s_control_plane(
    k8s_built: k8s_build.BuildReport, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    """A real Kubernetes 1.20 control plane on loopback (etcd, kube-apiserver, kube-controller-manager),
    from :func:`k8s_built`'s binaries. Stopped (by PID) at the end."""
    try:
        plane = ControlPlane.start(tmp_path_factory.mktemp("k8s"))
    except EnvironmentProblem as exc:
        sim_unavailable(str(exc), what="Kubernetes control plane")
    except ProvisionError as exc:  # a component exited or was not ready: its log's tail says why
        pytest.fail(f"the Kubernetes control plane did not start: {exc}", pytrace=False)
    atexit.register(plane.stop)
    _interrupt_on_sigterm()
    try:
        yield plane
    finally:
        warnings = plane.stop()
        if warnings:
            print(f"k8s_control_plane teardown: {'; '.join(warnings)}", file=sys.stderr)


# Where the suite's time goes, printed at the end of every run: the wall-clock span and the summed setup +
# call + teardown time of each layer (an xdist group; the unit modules together). The suite's budget is
# spent per layer, so a new layer shows what it costs beside the others.
_LAYER_TIMES: dict[str, list[float]] = {}


def _layer(report: pytest.TestReport) -> str:
    return "unit" if "unit" in report.keywords else xdist_group(report.nodeid)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    start, stop = getattr(report, "start", 0.0), getattr(report, "stop", 0.0)
    if not start or not stop:
        return
    first, last, spent, count = _LAYER_TIMES.get(_layer(report), [start, stop, 0.0, 0.0])
    _LAYER_TIMES[_layer(report)] = [
        min(first, start),
        max(last, stop),
        spent + report.duration,
        count + (report.when == "call"),
    ]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _LAYER_TIMES:
        return
    terminalreporter.section("time per layer")
    rows = sorted(_LAYER_TIMES.items(), key=lambda item: -(item[1][1] - item[1][0]))
    for layer, (first, last, spent, count) in rows:
        terminalreporter.write_line(
            f"{last - first:8.1f} s wall {spent:8.1f} s in tests {int(count):5d} tests  {layer}"
        )
