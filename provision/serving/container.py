"""Container mode of an engine instance: the ``docker run`` command line around the profile's arguments.

The vllm_serve role runs every instance as a systemd unit ``vllm-<pool>.service``. In container mode its
args file holds the whole ``docker run`` (in the foreground, ``--rm --name vllm-<pool>``), so systemd
watches the container through the CLI: the unit is alive while the container runs, and the container's
output is the unit's journal. This module builds that command line from an :class:`~provision.serving.
plan.PoolPlan` (whose vLLM arguments come from :func:`~provision.serving.profiles.vllm_args`, the one
implementation shared with service mode) and the role's container settings:

- only the pool's NPUs: with the Ascend Docker Runtime as docker's default runtime (``devices="runtime"``)
  ``-e ASCEND_VISIBLE_DEVICES=<pool ids>``, and the runtime adds those ``/dev/davinciN``, the manager
  devices and the driver files; otherwise (``devices="device"``) ``--device /dev/davinciN`` per pool NPU,
  ``/dev/davinci_manager``, ``/dev/devmm_svm``, ``/dev/hisi_hdc`` and the driver files read-only
  (FACTS.md §4). Never ``--privileged``;
- ``--net=host`` (the pool's port on the node's addresses), ``--shm-size``, ``--group-add <gid of the node's
  HwHiAiUser>`` (the image runs as a non-root user; the NPU device nodes belong to that group);
- the instance's environment passed BY NAME (``-e NAME``): docker copies the value from its own
  environment, which the unit fills from the pool file, the ``env`` file and the root-only ``secret.env``.
  So the API key (``VLLM_API_KEY``) is in no command line and no args file;
- the model weights and the site's volumes mounted read-only;
- the command: our image's entrypoint (``container/entrypoint.sh``) serves the vLLM arguments that follow
  the image; an image without it, such as the official ``quay.io/ascend/vllm-ascend:<tag>`` (its Dockerfile
  ends in ``CMD ["/bin/bash"]``, its only entrypoint is the CANN base image's, which sources the Ascend
  environment and runs the command it is given), gets the whole command from the role
  (:func:`image_command`).

Pure functions; the role calls them through its filter plugin.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from provision.errors import InputError
from provision.inventory.rules import container_args_problems

NPU_DEVICE = "/dev/davinci{}"
MANAGER_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
"""Devices every NPU container needs besides its ``/dev/davinciN`` (FACTS.md §4)."""
DRIVER_MOUNTS = (
    "/usr/local/dcmi",
    "/usr/local/bin/npu-smi",
    "/usr/local/sbin/npu-smi",
    "/usr/local/Ascend/driver/lib64",
    "/usr/local/Ascend/driver/version.info",
    "/etc/ascend_install.info",
)
"""Driver files a container without the Ascend Docker Runtime gets read-only, where they exist on the node
(npu-smi lives in ``/usr/local/bin`` or ``/usr/local/sbin`` depending on the host: FACTS.md §4)."""
DEVICE_MODES = ("runtime", "device")
SECRET_ENV = ("VLLM_API_KEY",)
"""Passed by name even when unset (then docker leaves it out): adding a key later changes no argument."""
OUR_ENTRYPOINT = "/opt/provision/entrypoint.sh"
"""Our image's entrypoint (``Dockerfile``): it serves the vLLM arguments given after the image."""
API_SERVER_COMMAND = ("python3", "-m", "vllm.entrypoints.openai.api_server")
"""What an image without our entrypoint runs before the vLLM arguments: the same API server module that
service mode and our entrypoint run, with the image's ``python3``."""


def image_command(setting: object, entrypoint: Sequence[str] | None) -> list[str]:
    """What the container runs before the vLLM arguments, for ``vllm_serve_image_command`` ``setting``:
    a list of words is that command; an empty one reads the image's ``entrypoint`` (its
    ``Config.Entrypoint``; None when the node lacks the image, as in a dry run on a fresh node: taken as
    ours): nothing when it is ours, else :data:`API_SERVER_COMMAND`."""
    if (
        isinstance(setting, str)
        or not isinstance(setting, Sequence)
        or not all(isinstance(word, str) and word for word in setting)
    ):
        raise InputError(f"vllm_serve_image_command {setting!r}: a list of words ([]: read from the image)")
    if setting:
        return list(setting)
    if entrypoint is None or list(entrypoint) == [OUR_ENTRYPOINT]:
        return []
    return list(API_SERVER_COMMAND)


@dataclass(frozen=True)
class ContainerSettings:
    """The role's container variables, as one node sees them."""

    image: str
    devices: str = "runtime"
    engine: str = "docker"
    shm_size: str = "1g"
    volumes: Sequence[str] = ()
    driver_mounts: Sequence[str] = DRIVER_MOUNTS
    extra_args: Sequence[str] = ()
    group_add: Sequence[str] = ()
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.image or any(c.isspace() for c in self.image):
            raise InputError(f"container image {self.image!r}: give a reference such as vllm-ascend:TAG")
        if self.devices not in DEVICE_MODES:
            raise InputError(
                f"container devices {self.devices!r}: one of {', '.join(DEVICE_MODES)} "
                "(runtime: the Ascend Docker Runtime injects ASCEND_VISIBLE_DEVICES; "
                "device: --device per NPU)"
            )
        for volume in self.volumes:
            volume_spec(volume)
        problems = container_args_problems(list(self.extra_args))
        if problems:
            raise InputError(
                "vllm_serve_container_args: "
                + "; ".join(f"[{path[0]}] {why}" if path else why for path, why in problems)
            )


def container_name(pool: str) -> str:
    """The container of a pool's engine: ``vllm-<pool>`` (the unit's name without ``.service``)."""
    return f"vllm-{pool}"


def volume_spec(volume: str) -> tuple[str, str]:
    """``SRC[:DST][:ro]`` -> (SRC, DST); both absolute. Always mounted read-only."""
    parts = volume.split(":")
    if parts[-1] in ("ro", "rw") and len(parts) > 1:
        if parts[-1] == "rw":
            raise InputError(f"volume {volume!r}: the serving container mounts volumes read-only")
        parts = parts[:-1]
    if len(parts) == 1:
        parts = [parts[0], parts[0]]
    if len(parts) != 2 or not all(p.startswith("/") for p in parts):
        raise InputError(f"volume {volume!r}: expected /host/path[:/container/path], absolute paths")
    return parts[0], parts[1]


def env_names(env: Iterable[str]) -> list[str]:
    """Names docker copies from the unit's environment: the instance's, then the secret ones."""
    names = sorted(set(env))
    return [*names, *(name for name in SECRET_ENV if name not in names)]


def run_argv(
    instance: Mapping[str, Any],
    settings: ContainerSettings,
    command: Sequence[str] = (),
) -> list[str]:
    """``docker run`` for one instance (a :meth:`~provision.serving.plan.PoolPlan.as_dict`), ending
    with the image, ``command`` (empty: the image's entrypoint serves the arguments that follow) and the
    instance's vLLM arguments."""
    pool = str(instance["pool"])
    devices = [int(device) for device in instance["devices"]]
    argv = [settings.engine, "run", "--rm", "--name", container_name(pool), "--pull=never"]
    argv += ["--net=host", f"--shm-size={settings.shm_size}"]
    budget = int(instance.get("budget_s") or 0)
    if budget:  # a HEALTHCHECK failing while the engine loads keeps the container "starting", not unhealthy
        argv.append(f"--health-start-period={budget}s")
    for group in settings.group_add:  # the image's non-root user reaches the devices through HwHiAiUser
        argv += ["--group-add", str(group)]
    labels = {"provision.pool": pool, "provision.profile": str(instance["profile"]), **settings.labels}
    for key, value in sorted(labels.items()):
        argv += ["--label", f"{key}={value}"]
    if settings.devices == "runtime":
        argv += ["-e", "ASCEND_VISIBLE_DEVICES=" + ",".join(map(str, devices))]
    else:
        for path in [NPU_DEVICE.format(device) for device in devices] + list(MANAGER_DEVICES):
            argv += ["--device", path]
    for name in env_names(instance.get("env") or {}):
        argv += ["-e", name]
    mounts: list[tuple[str, str]] = []
    if settings.devices == "device":
        mounts += [(path, path) for path in settings.driver_mounts]
    mounts += [volume_spec(volume) for volume in settings.volumes]
    model = str(instance.get("model") or "")
    if model.startswith("/") and not any(_under(model, dst) for _, dst in mounts):
        mounts.append((model, model))
    seen: set[str] = set()
    for src, dst in mounts:
        if dst in seen:
            continue
        seen.add(dst)
        argv += ["-v", f"{src}:{dst}:ro"]
    argv += list(settings.extra_args)
    return [*argv, settings.image, *command, *map(str, instance["args"])]


def _under(path: str, folder: str) -> bool:
    folder = folder.rstrip("/") or "/"
    return path == folder or path.startswith(folder + "/") or folder == "/"
