"""The serving image of the simulated cluster: container-mode vLLM on the nodes' real docker.

No registry is reachable and the real vllm-ascend image needs NPUs, so the tests and ``make demo`` serve
with an image built here, in the format ``docker save`` writes (:mod:`provision_sim.images`), from:

- ONE layer: the cached base rootfs tar of :mod:`provision_sim.rootfs` (Debian, the nodes' own base,
  ≈ 370 MB), taken as it is;
- a small layer with our image's entrypoint (``container/entrypoint.sh`` and ``ascend-env.sh``, as the
  ``Dockerfile`` installs them in ``/opt/provision``), and the rig's stand-ins for what only an NPU image has
  (``engine_shim/``, in ``/opt/provision-sim``): ``VLLM_PYTHON`` is ``bin/vllm-python``, which runs the cached
  engine's Python and, when it starts the vLLM server, first prints the line vllm-ascend's platform plugin
  makes vLLM log (``Platform plugin ascend is activated``: the CPU engine cannot log it, having no
  vllm-ascend); ``PYTHONPATH`` holds a ``torch_npu`` whose ``torch.npu.device_count()`` counts the
  ``/dev/davinciN`` of the container, for every command but the engine (the launcher takes it off the
  engine's path: transformers would import NPU kernels from it). The serving role's post-start smoke
  (``import torch, torch_npu``, that line in the log) then runs unchanged against the simulated nodes.

The engine itself (its venv, interpreter and model, ≈ 3.5 GB) is NOT in the image: the nodes already see it
at its host paths (:func:`provision_sim.serving.setup.engine_binds`) and the containers get the same
folders through read-only volumes (``vllm_serve_container_volumes``). So ``docker run IMAGE --model ...
--port 8000`` on a node runs ``$VLLM_PYTHON -m vllm.entrypoints.openai.api_server --model ...``, like the
production image.

The tarballs are cached in ``<sim cache>/serve-images/`` (``$PROVISION_SIM_CACHE``, default
``/var/cache/provision-sim``). :func:`mirror_serve_image` hard-links the serving image into the cluster's
HTTP mirror as ``images/vllm-cpu-<key>.tar`` with its line in ``images/sha256sums.txt`` (beside the
container runtime's verification image), so the role downloads it from an ``http://`` URL
(``vllm_serve_image_url``), verifies it against that file and ``docker load``s it, the way an air-gapped
site loads the image from its mirror; the mirror's cache key and build are untouched. The tarballs also
reach the nodes as a read-only bind mount at the same path (:func:`image_binds`), for ``file://`` URLs.

:func:`broken_image` writes a small image whose entrypoint is missing, for rolling-upgrade drills.

:func:`official_image` writes the stand-in for the OFFICIAL image, ``quay.io/ascend/vllm-ascend:<tag>``, which
keeps its contract: none of our entrypoint, ``CMD ["/bin/bash"]`` (the end of vllm-project/vllm-ascend's
``Dockerfile``) and, inherited from its CANN base (Ascend/cann-container-image, e.g.
``cann/9.0.0-910b-ubuntu22.04-py3.11/Dockerfile``), an entrypoint that sources the toolkit's and NNAL's
``set_env.sh`` and runs the command it is given: ``docker run IMAGE --model ...`` cannot serve, the role must
give the whole command. Its ``python3`` is the engine (first on ``PATH``, as the official image's Python holds
vllm and vllm-ascend), through the same launcher as ``VLLM_PYTHON`` above; the ``set_env.sh`` files are
stand-ins that set the toolkit's home.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

from provision.errors import ProvisionError
from provision.image.context import default_context_dir
from provision.image.spec import default_target
from provision_sim import images, rootfs
from provision_sim.mirror import repos
from provision_sim.serving import vllm_cpu as engine
from provision_sim.system import locked

__all__ = [
    "BROKEN_TAG",
    "IMAGE_TAG",
    "OFFICIAL_TAG",
    "ServeImage",
    "broken_image",
    "ensure_serve_image",
    "image_binds",
    "images_dir",
    "mirror_serve_image",
    "official_image",
]

IMAGE_REPOSITORY = "provision-sim/vllm-cpu"
IMAGE_TAG = f"{IMAGE_REPOSITORY}:{engine.SPEC['vllm'].split('==')[-1]}"
"""The serving image's tag: the vLLM CPU engine's version (``provision-sim/vllm-cpu:0.32.0``)."""
BROKEN_TAG = f"{IMAGE_REPOSITORY}:broken"
OFFICIAL_TAG = f"provision-sim/vllm-ascend-official:{engine.SPEC['vllm'].split('==')[-1]}"
"""The stand-in for ``quay.io/ascend/vllm-ascend:<tag>`` (:func:`official_image`)."""
CANN_ENV_SCRIPTS = ("/usr/local/Ascend/ascend-toolkit/set_env.sh", "/usr/local/Ascend/nnal/atb/set_env.sh")
"""What the CANN base image's entrypoint sources before it runs its arguments (its third, the BiSheng
compiler's ``set_env.sh`` under a versioned path, has no part here)."""
ENTRYPOINT_DIR = "/opt/provision"
ENTRYPOINT_FILES = ("entrypoint.sh", "ascend-env.sh")
SIM_DIR = "/opt/provision-sim"
"""The rig's own part of the image: the engine launcher and the torch_npu stand-in (``engine_shim/``)."""
SIM_SOURCE = Path(__file__).with_name("engine_shim")
MIRROR_FOLDER = "images"
"""The mirror's folder for images (the container runtime's verification image is there too)."""
CONTENT_VERSION = 2
"""Bump when what :func:`ensure_serve_image` writes changes."""


@dataclass(frozen=True)
class ServeImage:
    """A ``docker save`` tarball: path, tag, sha256, size, and how long writing it took (0: cached)."""

    path: Path
    tag: str
    sha256: str
    size: int
    seconds: float

    @property
    def url(self) -> str:
        return f"file://{self.path}"


def images_dir() -> Path:
    return rootfs.cache_dir() / "serve-images"


def image_binds() -> list[str]:
    """``SRC:DST`` read-only mounts that show the image tarballs to the nodes at the same path."""
    folder = images_dir()
    folder.mkdir(parents=True, exist_ok=True)
    return [f"{folder}:{folder}"]


def base_tarball() -> Path:
    """The cached ``mmdebstrap`` tar of the nodes' base (built first when missing)."""
    rootfs.ensure_base()
    found = sorted(rootfs.cache_dir().glob(f"debian-{rootfs.SUITE}-*.tar"))
    if len(found) != 1:
        raise ProvisionError(f"expected one base rootfs tar in {rootfs.cache_dir()}, found {len(found)}")
    return found[0]


def _entrypoint_layer() -> images.Layer:
    source = default_context_dir() / "container"
    entries = [
        images.Entry(f"{ENTRYPOINT_DIR}/{name}", data=(source / name).read_bytes(), mode=0o755)
        for name in ENTRYPOINT_FILES
    ]
    # What the CPU engine lacks for the serving role's post-start smoke: a launcher that logs vllm-ascend's
    # platform line (engine_shim/vllm-python) and a torch_npu that counts the container's NPUs.
    entries += [
        images.Entry(
            f"{SIM_DIR}/bin/vllm-python", data=(SIM_SOURCE / "vllm-python").read_bytes(), mode=0o755
        ),
        images.Entry(
            f"{SIM_DIR}/python/torch_npu/__init__.py",
            data=(SIM_SOURCE / "torch_npu" / "__init__.py").read_bytes(),
            mode=0o644,
        ),
    ]
    return images.Layer.from_entries(entries)


def _config() -> images.ImageConfig:
    return images.ImageConfig(
        env={
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "VLLM_PYTHON": f"{SIM_DIR}/bin/vllm-python",
            "PROVISION_SIM_ENGINE_PYTHON": str(engine.engine_python()),
            "PYTHONPATH": f"{SIM_DIR}/python",
            "PROVISION_RUN_DIR": "/tmp/provision",
        },
        entrypoint=[f"{ENTRYPOINT_DIR}/entrypoint.sh"],
        # The stack labels `provision image build` gives the image it stands in for (the lock's default
        # stack, A2, openEuler): the serving role compares them with each node's driver and NPU line.
        labels={
            **default_target().labels(),
            "org.opencontainers.image.title": "vllm-cpu (provision simulated cluster)",
            "provision.engine": engine.SPEC["vllm"],
        },
    )


def ensure_serve_image(*, force: bool = False) -> ServeImage:
    """The serving image's tarball, written once per base rootfs, entrypoint and engine path."""
    base = base_tarball()
    entry = _entrypoint_layer()
    config = _config()
    key = hashlib.sha256(
        json.dumps(
            [CONTENT_VERSION, base.name, base.stat().st_size, entry.diff_id, repr(config), IMAGE_TAG]
        ).encode()
    ).hexdigest()[:12]
    folder = images_dir()
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / f"vllm-cpu-{key}.tar"
    with locked(folder / ".lock"):
        started = time.monotonic()
        seconds = 0.0
        if force or not dest.is_file():
            images.save_image(dest, IMAGE_TAG, [images.Layer(base.read_bytes()), entry], config)
            seconds = time.monotonic() - started
            for stale in folder.glob("vllm-cpu-*.tar"):
                if stale != dest:
                    stale.unlink(missing_ok=True)
        return ServeImage(dest, IMAGE_TAG, _sha256(dest), dest.stat().st_size, seconds)


def mirror_serve_image(cluster_dir: Path, image: ServeImage | None = None) -> tuple[str, ServeImage]:
    """Put the serving image (default :func:`ensure_serve_image`) on the mirror a cluster serves
    (``Cluster.dir``): its ``http://`` URL and the image. Older serving images leave the mirror."""
    served = repos.served(cluster_dir)
    if served is None:
        raise ProvisionError(f"the cluster in {cluster_dir} serves no mirror (started with mirror=False?)")
    image = image or ensure_serve_image()
    keyed = "vllm-cpu-" + "?" * 12 + ".tar"  # the names ensure_serve_image writes (not the broken image's)
    path = repos.publish_file(served.root, MIRROR_FOLDER, image.path, image.sha256, replaces=keyed)
    return f"{served.url}/{path}", image


def broken_image(tag: str = BROKEN_TAG) -> ServeImage:
    """A small image whose entrypoint does not exist: ``docker run`` fails at once (the container cannot
    start), as a bad image pushed by mistake would."""
    folder = images_dir()
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / "vllm-cpu-broken.tar"
    started = time.monotonic()
    layer = images.Layer.from_entries([images.Entry("/etc/provision-broken-image", data=b"no engine here\n")])
    config = images.ImageConfig(entrypoint=[f"{ENTRYPOINT_DIR}/entrypoint.sh"])
    with locked(folder / ".lock"):
        images.save_image(dest, tag, [layer], config)
    return ServeImage(dest, tag, _sha256(dest), dest.stat().st_size, time.monotonic() - started)


def official_image() -> ServeImage:
    """The stand-in for the official vllm-ascend image (see the module's text): written once per base
    rootfs and engine path, beside the serving image; load it from its ``file://`` URL, sha256 pinned."""
    base = base_tarball()
    shim = (SIM_SOURCE / "vllm-python").read_bytes()
    entries = [
        images.Entry(f"{SIM_DIR}/bin/vllm-python", data=shim, mode=0o755),
        images.Entry(f"{SIM_DIR}/official/python3", data=shim, mode=0o755),
        images.Entry(
            f"{SIM_DIR}/python/torch_npu/__init__.py",
            data=(SIM_SOURCE / "torch_npu" / "__init__.py").read_bytes(),
            mode=0o644,
        ),
    ]
    home = "/usr/local/Ascend/ascend-toolkit/latest"
    for script in CANN_ENV_SCRIPTS:
        text = f"# stand-in for CANN's {script} (provision-sim)\nexport ASCEND_HOME_PATH={home}\n"
        entries.append(images.Entry(script, data=text.encode(), mode=0o755))
    layer = images.Layer.from_entries(entries)
    sources = " && ".join(f"source {script}" for script in CANN_ENV_SCRIPTS)
    config = images.ImageConfig(
        env={
            "PATH": f"{SIM_DIR}/official:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "PROVISION_SIM_ENGINE_PYTHON": str(engine.engine_python()),
            "PYTHONPATH": f"{SIM_DIR}/python",
        },
        entrypoint=["/bin/bash", "-c", f'{sources} && exec "$@"', "--"],
        cmd=["/bin/bash"],
        labels={"org.opencontainers.image.title": "vllm-ascend official image stand-in (provision-sim)"},
    )
    key = hashlib.sha256(
        json.dumps([CONTENT_VERSION, base.name, base.stat().st_size, layer.diff_id, repr(config)]).encode()
    ).hexdigest()[:12]
    folder = images_dir()
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / f"vllm-ascend-official-{key}.tar"
    with locked(folder / ".lock"):
        started = time.monotonic()
        seconds = 0.0
        if not dest.is_file():
            images.save_image(dest, OFFICIAL_TAG, [images.Layer(base.read_bytes()), layer], config)
            seconds = time.monotonic() - started
            for stale in folder.glob("vllm-ascend-official-*.tar"):
                if stale != dest:
                    stale.unlink(missing_ok=True)
        return ServeImage(dest, OFFICIAL_TAG, _sha256(dest), dest.stat().st_size, seconds)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
