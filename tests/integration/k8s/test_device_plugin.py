"""The simulated Ascend device plugin (``provision_sim.k8s.device_plugin``) against a stand-in for the
kubelet's device manager, over the real gRPC API compiled from the kubelet's own ``api.proto`` (the
Kubernetes source package the control plane is built from): it registers with the kubelet's socket, lists
one device per chip with its health, re-lists when a chip's health changes, and answers Allocate as
MindCluster's plugin does (``ASCEND_VISIBLE_DEVICES``, or the device nodes without the Ascend Docker
Runtime). No kubelet binary yet: the registration server is the test's, playing the kubelet's part of the
protocol. A few seconds.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from provision_sim.hardware.testroot import SimRoot
from provision_sim.k8s import build as k8s_build
from provision_sim.k8s import device_plugin as plugin

pytestmark = [pytest.mark.k8s]


class Kubelet:
    """The kubelet's side: the Registration service on ``kubelet.sock``, then a client of the plugin."""

    def __init__(self, folder: Path) -> None:
        self.pb2, self.grpc = plugin.stubs()
        self.folder = folder
        self.registered: queue.Queue[Any] = queue.Queue()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.grpc.add_RegistrationServicer_to_server(self, self.server)
        folder.mkdir(parents=True, exist_ok=True)
        self.held = plugin.Folder(folder)
        self.server.add_insecure_port(self.held.address(plugin.KUBELET_SOCKET))
        self.server.start()

    def Register(self, request: Any, context: Any) -> Any:
        self.registered.put(request)
        return self.pb2.Empty()

    def stub(self, endpoint: str) -> Any:
        return self.grpc.DevicePluginStub(grpc.insecure_channel(self.held.address(endpoint)))

    def stop(self) -> None:
        self.server.stop(grace=0).wait()
        self.held.close()


@pytest.fixture
def node(tmp_path: Path, k8s_built: k8s_build.BuildReport) -> SimRoot:
    return SimRoot.create(tmp_path / "node", name="node1", index=1)


@pytest.fixture
def kubelet(node: SimRoot) -> Iterator[Kubelet]:
    found = Kubelet(node.path(plugin.DEVICE_PLUGIN_PATH))
    yield found
    found.stop()


def health(response: Any) -> dict[str, str]:
    return {device.ID: device.health for device in response.devices}


def test_it_registers_lists_every_chip_and_relists_on_a_health_change(
    node: SimRoot, kubelet: Kubelet
) -> None:
    running = plugin.serve(node.root, poll_s=0.1)
    try:
        request = kubelet.registered.get(timeout=10)
        assert (request.version, request.endpoint, request.resource_name) == (
            "v1beta1",
            "ascend.sock",
            "huawei.com/Ascend910",
        )
        stream = kubelet.stub(request.endpoint).ListAndWatch(kubelet.pb2.Empty(), timeout=30)
        updates: queue.Queue[Any] = queue.Queue()

        def read() -> None:
            with contextlib.suppress(grpc.RpcError):  # cancelled at the end
                for response in stream:
                    updates.put(response)

        threading.Thread(target=read, daemon=True).start()
        assert health(updates.get(timeout=10)) == {f"Ascend910-{n}": "Healthy" for n in range(8)}

        node.set_faults({"npu_health": {"3": "Critical"}})
        changed = health(updates.get(timeout=10))
        assert changed["Ascend910-3"] == "Unhealthy"
        assert [d for d, h in changed.items() if h != "Healthy"] == ["Ascend910-3"]
        node.set_faults({}, replace=True)
        assert health(updates.get(timeout=10))["Ascend910-3"] == "Healthy"
        stream.cancel()
    finally:
        running.stop()


def test_allocate_answers_as_mindclusters_plugin(node: SimRoot, kubelet: Kubelet) -> None:
    pb2 = kubelet.pb2
    running = plugin.serve(node.root)
    try:
        stub = kubelet.stub("ascend.sock")
        assert stub.GetDevicePluginOptions(pb2.Empty()) == pb2.DevicePluginOptions()
        request = pb2.AllocateRequest(
            container_requests=[pb2.ContainerAllocateRequest(devicesIDs=["Ascend910-3", "Ascend910-2"])]
        )
        [answer] = stub.Allocate(request).container_responses
        assert dict(answer.envs) == {"ASCEND_VISIBLE_DEVICES": "2,3", "ASCEND_RUNTIME_OPTIONS": ""}
        assert list(answer.devices) == []  # the Ascend Docker Runtime mounts them
        with pytest.raises(grpc.RpcError) as refused:
            stub.Allocate(
                pb2.AllocateRequest(
                    container_requests=[pb2.ContainerAllocateRequest(devicesIDs=["Ascend910-9"])]
                )
            )
        assert refused.value.details() == "plugin doesn't have device Ascend910-9"
        with pytest.raises(grpc.RpcError) as preferred:
            stub.GetPreferredAllocation(pb2.PreferredAllocationRequest())
        assert preferred.value.details() == "not support"
    finally:
        running.stop()

    mounted = plugin.serve(node.root, ascend_docker=False, register=False)
    try:
        [answer] = kubelet.stub("ascend.sock").Allocate(request).container_responses
        assert dict(answer.envs) == {}
        assert [(d.container_path, d.host_path, d.permissions) for d in answer.devices] == [
            (path, path, "rw")
            for path in (
                "/dev/davinci_manager",
                "/dev/devmm_svm",
                "/dev/hisi_hdc",
                "/dev/davinci2",
                "/dev/davinci3",
            )
        ]
    finally:
        mounted.stop()


@pytest.mark.parametrize(
    ("model", "npus", "resource", "first"),
    [
        ("910_93", 16, "huawei.com/Ascend910", "Ascend910-0"),
        ("310p3", 2, "huawei.com/Ascend310P", "Ascend310P-0"),
    ],
)
def test_the_resource_and_device_names_follow_the_npu_line(
    tmp_path: Path, k8s_built: k8s_build.BuildReport, model: str, npus: int, resource: str, first: str
) -> None:
    node = SimRoot.create(tmp_path / model, name="node2", index=2, npus=npus, model=model)
    found, chips = plugin.read_chips(node.root)
    assert found == resource and len(chips) == npus
    running = plugin.serve(node.root, register=False)
    try:
        pb2, stubs = plugin.stubs()
        channel = grpc.insecure_channel(running.folder.address("ascend.sock"))
        listed = next(iter(stubs.DevicePluginStub(channel).ListAndWatch(pb2.Empty(), timeout=10)))
        ids = [d.ID for d in listed.devices]
        assert (ids[0], len(ids)) == (first, npus)
        channel.close()
    finally:
        running.stop()


def test_no_kubelet_is_a_clear_error(node: SimRoot) -> None:
    with pytest.raises(plugin.PluginError, match=r"no kubelet answers on .*/kubelet\.sock"):
        plugin.serve(node.root, timeout_s=1)
