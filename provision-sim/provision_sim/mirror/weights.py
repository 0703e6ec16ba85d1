"""Model weights on the simulated cluster's mirror: the cached SmolLM2 folder as a tar archive.

Air-gapped sites keep weights on an internal HTTP mirror and give a serving profile ``model_url`` (an
archive of the model folder) and ``model_sha256`` (or a ``sha256sums.txt`` beside the archive); the
``vllm_serve`` role downloads, verifies and extracts it on the nodes that lack the folder. For tests and
rehearsals this module puts the engine cache's model (:func:`provision_sim.serving.vllm_cpu.model_dir`) on the
cluster's mirror the same way::

    <mirror root>/models/smollm2.tar        the folder smollm2/ (uncompressed: safetensors do not compress)
    <mirror root>/models/sha256sums.txt     sha256sum format

The archive is written once (deterministic: sorted members, fixed mtime, owner root) into
``<sim cache>/models/<key>/`` (``<key>`` hashes the model files' names, sizes and mtimes) and hard-linked
into the mirror on demand (:func:`publish`), so the mirror's own cache key, and its build, are untouched.
"""

from __future__ import annotations

import hashlib
import shutil
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from provision.errors import ProvisionError
from provision_sim import rootfs
from provision_sim.mirror import repos
from provision_sim.serving import vllm_cpu as engine
from provision_sim.system import locked

__all__ = [
    "ARCHIVE",
    "FOLDER",
    "ModelArchive",
    "build_model_archive",
    "ensure_model_archive",
    "mirror_model",
    "publish",
]

FOLDER = "models"
"""The mirror's folder for weights."""
ARCHIVE = "smollm2.tar"
"""The SmolLM2 archive's name; it holds the folder ``smollm2/``."""
SHA256SUMS = "sha256sums.txt"
_MTIME = 1_700_000_000
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ModelArchive:
    """A model archive in the cache: path, sha256, size; ``seconds`` it took to write (0: cached)."""

    path: Path
    sha256: str
    size: int
    seconds: float = 0.0

    def relative_url(self) -> str:
        """Its path below the mirror's URL: ``models/smollm2.tar``."""
        return f"{FOLDER}/{self.path.name}"


def build_model_archive(model_dir: Path, dest: Path, top: str | None = None) -> ModelArchive:
    """Write ``dest``: an uncompressed tar of ``model_dir`` under one folder ``top`` (default: its name).

    Members are sorted, owned by root, mtime fixed, files 0644 and folders 0755: the same folder gives the
    same bytes. Only regular files and folders are taken (a link would point outside the archive).
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ProvisionError(f"no model folder at {model_dir}")
    top = top or model_dir.name
    started = time.monotonic()
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    with tarfile.open(partial, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(_info(f"{top}/", tarfile.DIRTYPE, 0o755))
        for path in sorted(model_dir.rglob("*")):
            name = f"{top}/{path.relative_to(model_dir).as_posix()}"
            if path.is_symlink():
                raise ProvisionError(f"{path} is a link: archives hold plain files only")
            if path.is_dir():
                tar.addfile(_info(f"{name}/", tarfile.DIRTYPE, 0o755))
            elif path.is_file():
                info = _info(name, tarfile.REGTYPE, 0o644)
                info.size = path.stat().st_size
                with path.open("rb") as data:
                    tar.addfile(info, data)
    partial.replace(dest)
    return ModelArchive(dest, _sha256(dest), dest.stat().st_size, time.monotonic() - started)


def ensure_model_archive(cache: Path | None = None, model_dir: Path | None = None) -> ModelArchive:
    """The cached archive of ``model_dir`` (default the engine cache's SmolLM2), written first if missing.

    Needs the engine prepared (:func:`provision_sim.serving.vllm_cpu.prepare`). Older archives are removed.
    """
    model_dir = Path(model_dir or engine.model_dir())
    if not model_dir.is_dir():
        raise ProvisionError(
            f"no model folder at {model_dir}: run python -m provision_sim.serving.vllm_cpu prepare"
        )
    folder = (cache or rootfs.cache_dir()) / FOLDER
    key = _key(model_dir)
    home = folder / key
    archive = home / ARCHIVE
    sums = home / SHA256SUMS
    with locked(folder / ".lock"):
        if archive.is_file() and sums.is_file():
            sha256 = sums.read_text().split()[0]
            return ModelArchive(archive, sha256, archive.stat().st_size)
        shutil.rmtree(home, ignore_errors=True)
        built = build_model_archive(model_dir, archive, top=model_dir.name)
        _write_sums(sums, {ARCHIVE: built.sha256})
        for stale in folder.iterdir():
            if stale.is_dir() and stale != home:
                shutil.rmtree(stale, ignore_errors=True)
        return built


def publish(mirror_root: Path, archive: ModelArchive) -> str:
    """Make ``archive`` part of the mirror at ``mirror_root`` (``models/<name>`` + ``models/sha256sums.txt``);
    returns its path below the mirror's URL. A hard link when both are on one file system, else a copy."""
    return repos.publish_file(Path(mirror_root), FOLDER, archive.path, archive.sha256)


def mirror_model(cluster_dir: Path) -> tuple[str, ModelArchive]:
    """Put SmolLM2 on the mirror a cluster serves (``Cluster.dir``): its URL and the archive."""
    served = repos.served(cluster_dir)
    if served is None:
        raise ProvisionError(f"the cluster in {cluster_dir} serves no mirror (started with mirror=False?)")
    archive = ensure_model_archive()
    return f"{served.url}/{publish(served.root, archive)}", archive


# ------------------------------------------------------------------------------------------------ helpers


def _info(name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.mtime = _MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _key(model_dir: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(model_dir.rglob("*")):
        stat = path.stat()
        digest.update(f"{path.relative_to(model_dir)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:12]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        while chunk := data.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _write_sums(path: Path, listed: dict[str, str]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(f"{sha}  {name}\n" for name, sha in sorted(listed.items())))
    tmp.replace(path)
