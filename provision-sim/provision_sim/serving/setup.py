"""The cached vLLM CPU engine on simulated nodes: read-only bind mounts at its host paths, and the inventory
variables that serve it (``provision sim up --serve``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from provision.errors import ProvisionError
from provision_sim import rootfs
from provision_sim.mirror import repos
from provision_sim.serving import image as serve_image
from provision_sim.serving import vllm_cpu as engine


def engine_binds() -> list[str]:
    """``SRC:DST`` mounts for ``Cluster.up(binds=...)`` / ``provision sim up --bind-ro``.

    The engine cache and its interpreter's prefix (``engine_runtime_paths()``), plus host libraries that
    vLLM's native extension links against and the nodes' base system lacks (libnuma), then the folder of
    the serving image tarballs (:func:`provision_sim.serving.image.image_binds`, container mode).
    """
    return [*_engine_only_binds(), *serve_image.image_binds()]


def container_volumes() -> list[str]:
    """Container mode: the engine's paths as the nodes see them, for ``vllm_serve_container_volumes``
    (each mounted read-only into the serving containers: the image holds no engine)."""
    return [bind.split(":")[1] for bind in _engine_only_binds()]


def _engine_only_binds() -> list[str]:
    runtime = engine.engine_runtime_paths()
    binds = [f"{path}:{path}" for path in runtime]
    base = rootfs.ensure_base()
    site = next((engine.engine_venv() / "lib").glob("python3*/site-packages"))
    for library in sorted((site / "vllm").glob("_C*.so")):
        done = subprocess.run(["ldd", str(library)], capture_output=True, text=True, check=False)
        for match in re.finditer(r"=> (/\S+)", done.stdout):
            needed = Path(match.group(1))
            if any(needed.is_relative_to(path) for path in runtime):
                continue
            target = needed.resolve().parent / needed.name  # /lib -> /usr/lib on merged-/usr systems
            bind = f"{needed.resolve()}:{target}"
            if not (base / str(target).lstrip("/")).exists() and bind not in binds:
                binds.append(bind)
    return binds


SERVE_POOL = {"name": "chat", "devices": [0], "port": 8000, "profile": "smollm2-cpu"}
"""The pool ``provision sim up --serve`` gives every node: one "NPU", the smollm2-cpu profile (TP 1)."""

SERVE_MODE = "container"
"""How ``provision sim up --serve`` serves: the role's default (the container_runtime stage of site.yml
installs docker and the Ascend Docker Runtime first)."""


PROFILE = "smollm2-cpu"
"""The serving profile of the simulated nodes; not an Ascend profile, so the rig brings it in the
inventory (``vllm_serve_profiles``) as a site brings its own, rather than among the shipped ones."""


def smollm2_profile() -> dict[str, Any]:
    """The smollm2-cpu profile (``smollm2-cpu.yml`` beside this file), its model in the engine cache and
    vLLM's cache the one :func:`~provision_sim.serving.vllm_cpu.prepare` filled (read-only on the nodes)."""
    raw: dict[str, Any] = yaml.safe_load((Path(__file__).with_name(f"{PROFILE}.yml")).read_text())
    env = {**raw.get("env", {}), **engine.cache_env()}
    return {**raw, "model": str(engine.model_dir()), "env": env}


def engine_profile_vars() -> dict[str, object]:
    """``vllm_serve_profiles`` with the smollm2-cpu profile, for an inventory whose pools serve it."""
    return {"vllm_serve_profiles": {PROFILE: smollm2_profile()}}


def serving_group_vars(mode: str = SERVE_MODE, cluster_dir: Path | None = None) -> str:
    """YAML for ``group_vars/npu_nodes.yml``: each node serves SmolLM2 from the cached engine.

    ``container``: in a container of the image :mod:`provision_sim.serving.image` builds (written here when
    missing), with the engine's paths as read-only volumes. When ``cluster_dir`` (``Cluster.dir``) serves a
    mirror, the image goes on it and the role downloads it over HTTP, verifies it against the mirror's
    ``images/sha256sums.txt`` and ``docker load``s it, as an air-gapped site does; else the role loads it
    from its ``file://`` URL with the sha256 pinned. ``service``: from the engine's venv.
    """
    settings: dict[str, object] = {"npu_pools_list": [SERVE_POOL], "vllm_serve_mode": mode}
    if mode == "container":
        image = serve_image.ensure_serve_image()
        if cluster_dir is not None and repos.served(cluster_dir) is not None:
            url, image = serve_image.mirror_serve_image(cluster_dir, image)
            source: dict[str, object] = {"vllm_serve_image_url": url}  # sha256 from sha256sums.txt
        else:
            source = {"vllm_serve_image_url": image.url, "vllm_serve_image_checksum": image.sha256}
        settings.update(
            vllm_serve_image=image.tag,
            **source,
            vllm_serve_container_volumes=container_volumes(),
        )
    else:
        settings["vllm_serve_venv"] = str(engine.engine_venv())
    settings.update(engine_profile_vars())
    how = (
        "in a container (image built from the nodes' base, engine mounted read-only)"
        if mode == "container"
        else "from the engine's venv"
    )
    return (
        "# Written by `provision sim up --serve`: every node serves SmolLM2-135M with the real vLLM CPU\n"
        f"# engine cached in {engine.engine_venv().parent} (mounted read-only into the nodes), {how},\n"
        f"# from pool {SERVE_POOL['name']!r}. On NPU servers a pool names an Ascend profile\n"
        "# (provision/data/profiles)\n" + yaml.safe_dump(settings, sort_keys=False, default_flow_style=None)
    )


KEY_GROUP = "all"
"""The group whose ``group_vars/<group>/`` gets the engines' API key: ``npu_nodes``'s variables are one file
(``group_vars/npu_nodes.yml``), which Ansible stops reading once a ``group_vars/npu_nodes/`` folder exists."""


def write_api_key(inventory: Path) -> str:
    """Give the simulated engines an API key as a careful operator would, with the product's own command
    (``provision serve key``, run as a program: the rig does not reach into provision's internals). The
    engines listen on the nodes' addresses, which ``provision validate`` refuses without a key. Plain text,
    0600: a rehearsal rig has no vault password. A key already there is kept. Returns what to tell the
    user."""
    existing = inventory.parent / "group_vars" / KEY_GROUP / "vllm_serve_api_key.yml"
    if existing.is_file():
        return f"API key: {existing} (kept)"
    argv = [sys.executable, "-m", "provision", "serve", "key", str(inventory), "--group", KEY_GROUP]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ProvisionError(f"provision serve key: {(done.stderr or done.stdout).strip()}")
    return f"API key: {existing} (plain text, mode 0600: the rig has no vault password)"
