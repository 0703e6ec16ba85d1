"""A simulated Ascend device plugin for the kubelet (device plugin API ``v1beta1``), part of the rig.

It stands in for MindCluster's ``ascend-device-plugin`` on a simulated node and keeps its contract (read in
github.com/Ascend/ascend-device-plugin, ``pkg/server/plugin.go`` and ``pkg/common/common.go``):

- **Registration**: ``Register`` with the kubelet at ``/var/lib/kubelet/device-plugins/kubelet.sock``
  (``version`` ``v1beta1``, its own socket as ``endpoint``, the resource name ``huawei.com/<type>``: the
  NPU line's ``k8s_resource`` in ``provision/data/hardware.yml``, ``huawei.com/Ascend910`` for 910B and A3
  chips, ``huawei.com/Ascend310P`` for a 300I Duo).
- **ListAndWatch**: one device per chip, named ``<type>-<physical id>`` (``Ascend910-0``: the plugin's
  ``DeviceName``), ``Healthy`` or ``Unhealthy``; the whole list again whenever a chip's health changes.
  Health is what ``npu-smi info -t health`` reads on the simulator (the ``npu_health`` knob): ``OK`` is
  healthy, anything else (Warning, Alarm, Critical) is not, as a non-zero DCMI health is to the plugin.
- **Allocate**: per container, with the Ascend Docker Runtime (the plugin's default, ``useAscendDocker``):
  ``ASCEND_VISIBLE_DEVICES`` the chips' physical ids joined by ``,`` and ``ASCEND_RUNTIME_OPTIONS`` empty
  (the runtime mounts the devices); without it (``ascend_docker=False``, its "origin mount way"): device
  specs for ``/dev/davinci_manager``, ``/dev/devmm_svm``, ``/dev/hisi_hdc`` and each ``/dev/davinciN``,
  ``rw``. A device it does not have is refused (``plugin doesn't have device X``).
- ``GetDevicePluginOptions`` answers empty options; ``GetPreferredAllocation`` "not support";
  ``PreStartContainer`` an empty answer.

The gRPC stubs come from the kubelet's own ``api.proto`` in the Kubernetes source package the control
plane is built from (:mod:`provision_sim.k8s.build`), compiled once with ``grpcio-tools`` into the build
folder; the gogoproto import and its Go-only file options are dropped first (they do not change the wire
format). The plugin runs on the host and reads the node's simulated hardware (``hardware.json``) under its
root, as the real one reads DCMI; its socket lives in the node's device-plugin folder, which the node's
kubelet sees.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import tarfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from provision.ascend import hardware as lines
from provision.errors import ProvisionError
from provision_sim.k8s import build

API_PROTO = "staging/src/k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.proto"
MODULE = "kubelet_deviceplugin_v1beta1"
"""The compiled proto's name: ``<MODULE>_pb2`` and ``<MODULE>_pb2_grpc`` (package ``v1beta1`` as upstream)."""
VERSION = "v1beta1"
DEVICE_PLUGIN_PATH = "/var/lib/kubelet/device-plugins"
KUBELET_SOCKET = "kubelet.sock"
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"
DEFAULT_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
"""What the plugin mounts besides the chips when the Ascend Docker Runtime does not (``defaultDevs``)."""
HARDWARE_JSON = "etc/provision-sim/hardware.json"
POLL_S = 1.0
"""How often the chips' health is read (the real plugin polls DCMI on a period too)."""


class PluginError(ProvisionError):
    """The device plugin could not start, register or answer."""


def stubs() -> tuple[ModuleType, ModuleType]:
    """(``pb2``, ``pb2_grpc``) of the kubelet's device plugin API, compiled once into the build folder
    from the source package's ``api.proto``."""
    out = build.build_dir() / "deviceplugin"
    if not (out / f"{MODULE}_pb2_grpc.py").exists():
        _compile(out)
    if str(out) not in sys.path:
        sys.path.insert(0, str(out))
    return importlib.import_module(f"{MODULE}_pb2"), importlib.import_module(f"{MODULE}_pb2_grpc")


def _compile(out: Path) -> None:
    from grpc_tools import protoc  # the rig's own dependency; only needed to compile once

    tarballs = sorted((build.cache_root() / "downloads").glob(f"{build.SOURCE_PACKAGE}_*.orig.tar.*"))
    if not tarballs:
        raise PluginError(
            f"no {build.SOURCE_PACKAGE} source package in {build.cache_root() / 'downloads'}: "
            "run `python -m provision_sim.k8s.build prepare` first"
        )
    with tarfile.open(tarballs[-1]) as tar:
        member = next((m for m in tar.getmembers() if m.name.endswith(API_PROTO)), None)
        handle = tar.extractfile(member) if member is not None else None
        if handle is None:
            raise PluginError(f"{tarballs[-1]} holds no {API_PROTO}")
        text = handle.read().decode("utf-8")
    kept = [
        line
        for line in text.splitlines()
        if "gogoproto" not in line  # the gogo import and its file options: Go code generation only
    ]
    staging = out.with_name(out.name + ".tmp")
    staging.mkdir(parents=True, exist_ok=True)
    (staging / f"{MODULE}.proto").write_text("\n".join(kept) + "\n", encoding="utf-8")
    code = protoc.main(
        [
            "protoc",
            f"-I{staging}",
            f"--python_out={staging}",
            f"--grpc_python_out={staging}",
            f"{MODULE}.proto",
        ]
    )
    if code != 0:
        raise PluginError(f"grpc_tools.protoc could not compile {API_PROTO} (exit {code})")
    if not out.exists():  # another process may have compiled it meanwhile: theirs is as good
        staging.replace(out)


@dataclass(frozen=True)
class Chip:
    phy_id: int
    healthy: bool


def resource_name(hardware_model: str) -> str:
    """The device plugin's resource for a node's hardware model (``a2``, ``a3``, ``300i-duo``)."""
    return lines.model(hardware_model).k8s_resource


def read_chips(node_root: Path) -> tuple[str, list[Chip]]:
    """(resource name, chips) of a simulated node, from its ``hardware.json``."""
    from provision_sim.hardware.node.ascendsim.npusmi import npu_health

    path = node_root / HARDWARE_JSON
    try:
        config: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PluginError(f"cannot read the node's hardware ({path}): {exc}") from exc
    chips = [Chip(int(n["id"]), npu_health(config, int(n["id"]))[0] == "OK") for n in config["npus"]]
    return resource_name(str(config["hardware_model"])), chips


class AscendPlugin:
    """The ``DevicePlugin`` service of one node (``serve`` starts it and registers it)."""

    def __init__(self, node_root: Path, *, ascend_docker: bool = True, poll_s: float = POLL_S) -> None:
        self.node_root = Path(node_root)
        self.ascend_docker = ascend_docker
        self.poll_s = poll_s
        self.resource, self.chips = read_chips(self.node_root)
        self.prefix = self.resource.split("/", 1)[1]
        self.stopped = threading.Event()
        self.pb2, self.grpc = stubs()

    def device_name(self, chip: Chip) -> str:
        return f"{self.prefix}-{chip.phy_id}"

    def devices(self) -> list[Any]:
        return [
            self.pb2.Device(ID=self.device_name(c), health=HEALTHY if c.healthy else UNHEALTHY)
            for c in self.chips
        ]

    # -- the DevicePlugin service ---------------------------------------------------------------------

    def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:
        return self.pb2.DevicePluginOptions()

    def ListAndWatch(self, request: Any, context: Any) -> Iterator[Any]:
        yield self.pb2.ListAndWatchResponse(devices=self.devices())
        while not self.stopped.wait(self.poll_s) and context.is_active():
            _, now = read_chips(self.node_root)
            if now != self.chips:
                self.chips = now
                yield self.pb2.ListAndWatchResponse(devices=self.devices())

    def GetPreferredAllocation(self, request: Any, context: Any) -> Any:
        import grpc

        context.abort(grpc.StatusCode.UNKNOWN, "not support")

    def Allocate(self, request: Any, context: Any) -> Any:
        import grpc

        known = {self.device_name(c): c.phy_id for c in self.chips}
        answers = []
        for container in request.container_requests:
            missing = [d for d in container.devicesIDs if d not in known]
            if missing:
                context.abort(grpc.StatusCode.UNKNOWN, f"plugin doesn't have device {missing[0]}")
            ids = sorted(known[d] for d in container.devicesIDs)
            answer = self.pb2.ContainerAllocateResponse()
            if self.ascend_docker:
                answer.envs["ASCEND_VISIBLE_DEVICES"] = ",".join(str(i) for i in ids)
                answer.envs["ASCEND_RUNTIME_OPTIONS"] = ""
            else:
                for path in [*DEFAULT_DEVICES, *(f"/dev/davinci{i}" for i in ids)]:
                    answer.devices.append(
                        self.pb2.DeviceSpec(container_path=path, host_path=path, permissions="rw")
                    )
            answers.append(answer)
        return self.pb2.AllocateResponse(container_responses=answers)

    def PreStartContainer(self, request: Any, context: Any) -> Any:
        return self.pb2.PreStartContainerResponse()


class Folder:
    """A folder held open, so that its sockets have short addresses: a unix socket's path may not exceed
    107 bytes, and a node's device-plugin folder seen from the host is longer than that. Through the
    folder's descriptor (``/proc/self/fd/N/NAME``) bind and connect reach the same socket."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_PATH | os.O_DIRECTORY)

    def address(self, name: str) -> str:
        return f"unix:/proc/self/fd/{self.fd}/{name}"

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


@dataclass
class Running:
    """A started plugin: its gRPC server, socket and service (``stop`` ends them)."""

    server: Any
    socket: Path
    plugin: AscendPlugin
    folder: Folder

    def stop(self) -> None:
        self.plugin.stopped.set()
        self.server.stop(grace=1).wait()
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        self.folder.close()


def serve(
    node_root: Path,
    *,
    plugin_dir: str = DEVICE_PLUGIN_PATH,
    endpoint: str = "ascend.sock",
    ascend_docker: bool = True,
    register: bool = True,
    poll_s: float = POLL_S,
    timeout_s: float = 10.0,
) -> Running:
    """Start the plugin on ``<node_root><plugin_dir>/<endpoint>`` and, with ``register``, register it with
    the kubelet's socket in the same folder (as the real plugin does at start and after a kubelet restart)."""
    import grpc

    plugin = AscendPlugin(node_root, ascend_docker=ascend_docker, poll_s=poll_s)
    path = Path(node_root) / plugin_dir.lstrip("/")
    path.mkdir(parents=True, exist_ok=True)
    socket = path / endpoint
    with contextlib.suppress(FileNotFoundError):
        socket.unlink()
    folder = Folder(path)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    plugin.grpc.add_DevicePluginServicer_to_server(plugin, server)
    server.add_insecure_port(folder.address(endpoint))
    server.start()
    running = Running(server, socket, plugin, folder)
    if register:
        try:
            with grpc.insecure_channel(folder.address(KUBELET_SOCKET)) as channel:
                grpc.channel_ready_future(channel).result(timeout=timeout_s)
                plugin.grpc.RegistrationStub(channel).Register(
                    plugin.pb2.RegisterRequest(
                        version=VERSION,
                        endpoint=endpoint,
                        resource_name=plugin.resource,
                        options=plugin.pb2.DevicePluginOptions(),
                    ),
                    timeout=timeout_s,
                )
        except grpc.FutureTimeoutError as exc:
            running.stop()
            raise PluginError(f"no kubelet answers on {path / KUBELET_SOCKET}") from exc
        except grpc.RpcError as exc:
            running.stop()
            raise PluginError(f"the kubelet refused the registration: {exc.details()}") from exc
    return running


def _main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m provision_sim.k8s.device_plugin", description=__doc__)
    parser.add_argument("node_root", type=Path, help="the simulated node's root folder on the host")
    parser.add_argument("--no-ascend-docker", action="store_true", help="mount the devices (no runtime)")
    args = parser.parse_args(argv)
    running = serve(args.node_root, ascend_docker=not args.no_ascend_docker)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        running.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
