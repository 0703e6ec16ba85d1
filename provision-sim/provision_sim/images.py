"""Container images written by plain Python, in the format ``docker save`` writes and ``docker load`` reads.

No registry is reachable from the simulated cluster (nor from many real sites): images travel as
``docker save`` tarballs on a mirror and are ``docker load``-ed on the nodes. :func:`save_image` writes one
such tarball from layers built here, without a container engine::

    manifest.json               [{"Config": "<sha256>.json", "RepoTags": ["name:tag"], "Layers": [...]}]
    <sha256>.json               the image config (architecture, os, config.Env/Cmd..., rootfs.diff_ids)
    <layer sha256>/layer.tar    one uncompressed tar per layer (its sha256 is the layer's diff_id)
    <layer sha256>/VERSION      "1.0"
    <layer sha256>/json         the legacy v1 layer description docker still writes
    repositories                {"name": {"tag": "<top layer id>"}}

Layers come from a folder (``Layer.from_tree``: e.g. the base rootfs, for a serving image FROM it) or from
entries given in memory (``Layer.from_entries``: files, symlinks, folders). Timestamps are fixed, so the
same inputs give a byte-identical tarball (stable sha256 on the mirror). Example, the serving image
(container-mode vLLM) built FROM the nodes' base rootfs with the engine's venv on top::

    base = Layer.from_tree(rootfs.ensure_base())
    venv = Layer.from_tree(venv_dir, prefix="/opt/vllm")
    save_image(dest, "provision-sim/vllm-cpu:0.23.0", [base, venv],
               ImageConfig(env={"PATH": "/opt/vllm/bin:/usr/bin:/bin"}, entrypoint=["/opt/vllm/bin/vllm"]))

:func:`busybox_image` is the small image the simulated cluster's mirror serves for the container runtime's
verification (Debian's ``busybox-static``: ``ls``, ``sh``, ``cat``).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import stat
import tarfile
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from provision.errors import ProvisionError

__all__ = ["Entry", "ImageConfig", "Layer", "busybox_image", "go_arch", "save_image"]

MTIME = 1_700_000_000
"""Fixed timestamp of every layer entry and of the image's ``created``."""
CREATED = "2023-11-14T22:13:20Z"


def go_arch(machine: str | None = None) -> str:
    """Docker's architecture name of a ``uname -m`` (``x86_64`` → ``amd64``, ``aarch64`` → ``arm64``)."""
    machine = machine or platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


@dataclass(frozen=True)
class Entry:
    """One member of a layer: a file (``data``), a symlink (``link``) or a folder (neither)."""

    path: str
    data: bytes | None = None
    link: str | None = None
    mode: int = 0o644
    uid: int = 0
    gid: int = 0


@dataclass(frozen=True)
class Layer:
    """One image layer: the bytes of its uncompressed tar."""

    tar: bytes

    @property
    def diff_id(self) -> str:
        return "sha256:" + hashlib.sha256(self.tar).hexdigest()

    @classmethod
    def from_entries(cls, entries: Iterable[Entry]) -> Layer:
        """A layer of the given entries; parent folders are added (0755) where missing."""
        members: dict[str, Entry] = {}
        for entry in entries:
            name = entry.path.strip("/")
            if not name:
                continue
            parts = name.split("/")
            for i in range(1, len(parts)):
                members.setdefault("/".join(parts[:i]), Entry("/".join(parts[:i]), mode=0o755))
            members[name] = entry
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name in sorted(members):
                entry = members[name]
                info = tarfile.TarInfo(name)
                info.mtime, info.mode, info.uid, info.gid = MTIME, entry.mode, entry.uid, entry.gid
                if entry.link is not None:
                    info.type, info.linkname = tarfile.SYMTYPE, entry.link
                    tar.addfile(info)
                elif entry.data is not None:
                    info.size = len(entry.data)
                    tar.addfile(info, io.BytesIO(entry.data))
                else:
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
        return cls(buf.getvalue())

    @classmethod
    def from_tree(cls, root: Path, *, prefix: str = "/", exclude: Sequence[str] = ()) -> Layer:
        """A layer holding the folder ``root`` at ``prefix`` (owners, modes, links kept; times fixed).

        ``exclude``: paths relative to ``root`` to leave out (with everything below them). Device nodes,
        sockets and FIFOs are skipped (an engine creates ``/dev`` itself).
        """
        root = Path(root)
        skip = {p.strip("/") for p in exclude}
        base = prefix.strip("/")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            parts = base.split("/") if base else []
            for i in range(1, len(parts) + 1):
                info = tarfile.TarInfo("/".join(parts[:i]))
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, MTIME
                tar.addfile(info)
            for dirpath, dirnames, filenames in os.walk(root):
                rel_dir = os.path.relpath(dirpath, root)
                dirnames[:] = sorted(
                    d for d in dirnames if os.path.normpath(os.path.join(rel_dir, d)).lstrip("./") not in skip
                )
                for name in [*dirnames, *sorted(filenames)]:
                    rel = os.path.normpath(os.path.join(rel_dir, name))
                    if rel in skip:
                        continue
                    full = os.path.join(dirpath, name)
                    st = os.lstat(full)
                    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                        continue
                    info = tar.gettarinfo(full, arcname="/".join(p for p in (base, rel) if p))
                    info.mtime = MTIME
                    info.uname = info.gname = ""
                    if info.isreg():
                        with open(full, "rb") as fh:
                            tar.addfile(info, fh)
                    else:
                        tar.addfile(info)
        return cls(buf.getvalue())


@dataclass(frozen=True)
class ImageConfig:
    """The parts of an image config a ``docker run`` uses."""

    env: Mapping[str, str] = field(
        default_factory=lambda: {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    )
    entrypoint: Sequence[str] = ()
    cmd: Sequence[str] = ()
    workdir: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    architecture: str = field(default_factory=go_arch)


def save_image(dest: Path, tag: str, layers: Sequence[Layer], config: ImageConfig | None = None) -> Path:
    """Write a ``docker save`` tarball of ``layers`` (bottom first) tagged ``tag`` to ``dest``."""
    if ":" not in tag.rsplit("/", 1)[-1]:
        raise ProvisionError(f"image tag {tag!r} needs a :tag")
    if not layers:
        raise ProvisionError("an image needs at least one layer")
    config = config or ImageConfig()
    image_config: dict[str, object] = {
        "architecture": config.architecture,
        "os": "linux",
        "created": CREATED,
        "config": {
            "Env": [f"{k}={v}" for k, v in config.env.items()],
            "Entrypoint": list(config.entrypoint) or None,
            "Cmd": list(config.cmd) or None,
            "WorkingDir": config.workdir,
            "Labels": dict(config.labels) or None,
        },
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
        "history": [{"created": CREATED, "created_by": "provision_sim.images"} for _ in layers],
    }
    config_bytes = json.dumps(image_config, sort_keys=True, separators=(",", ":")).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    members: list[tuple[str, bytes]] = [(config_name, config_bytes)]
    layer_paths = []
    parent = ""
    chain = ""
    for layer in layers:
        chain = hashlib.sha256(f"{chain} {layer.diff_id}".encode()).hexdigest()
        v1 = {"id": chain, "created": CREATED, "container_config": {}, "os": "linux"}
        if parent:
            v1["parent"] = parent
        members += [
            (f"{chain}/VERSION", b"1.0"),
            (f"{chain}/json", json.dumps(v1, sort_keys=True).encode()),
            (f"{chain}/layer.tar", layer.tar),
        ]
        layer_paths.append(f"{chain}/layer.tar")
        parent = chain
    repo, _, version = tag.rpartition(":")
    manifest = [{"Config": config_name, "RepoTags": [tag], "Layers": layer_paths}]
    members += [
        ("manifest.json", json.dumps(manifest).encode()),
        ("repositories", json.dumps({repo: {version: parent}}).encode()),
    ]
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    try:
        with (
            os.fdopen(fd, "wb") as raw,
            tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar,
        ):
            folders = sorted({name.split("/")[0] for name, _ in members if "/" in name})
            for folder in folders:
                info = tarfile.TarInfo(folder)
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, MTIME
                tar.addfile(info)
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o644, MTIME
                tar.addfile(info, io.BytesIO(data))
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dest


BUSYBOX_APPLETS = ("sh", "ls", "cat", "echo", "env", "sleep", "true", "false", "id", "grep", "wc", "stat")


def busybox_image(dest: Path, busybox: bytes, tag: str, *, machine: str | None = None) -> Path:
    """A one-layer image of a static ``busybox`` binary with its common applets linked in ``/bin``."""
    entries = [Entry("/bin/busybox", data=busybox, mode=0o755)]
    entries += [Entry(f"/bin/{applet}", link="busybox", mode=0o777) for applet in BUSYBOX_APPLETS]
    entries += [Entry(p, mode=0o755) for p in ("/dev", "/proc", "/sys", "/etc", "/root")]
    entries += [Entry("/tmp", mode=0o1777)]
    entries += [
        Entry("/etc/passwd", data=b"root:x:0:0:root:/root:/bin/sh\n"),
        Entry("/etc/group", data=b"root:x:0:\n"),
    ]
    config = ImageConfig(env={"PATH": "/bin"}, cmd=["sh"], architecture=go_arch(machine))
    return save_image(dest, tag, [Layer.from_entries(entries)], config)
