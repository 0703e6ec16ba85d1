"""Images for air-gapped sites: ``provision image save`` writes a tar, ``provision image load`` reads it.

The tar is the engine's own ``docker save`` format (``docker load`` reads it too), gzip-compressed when the
file name ends in ``.gz``. Beside it goes ``<file>.sha256`` in ``sha256sum`` format; ``load`` checks it when
present, so a copy damaged on the way is refused before the engine sees it.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import docker
import docker.errors

from provision.errors import InputError, ProvisionError
from provision.image.registry import stream_error

Progress = Callable[[str], None]
CHUNK = 1 << 20
_LOADED = re.compile(r"^Loaded image(?: ID)?:\s*(\S+)")


class TransferError(ProvisionError):
    """Saving or loading an image failed."""


@dataclass(frozen=True)
class SaveResult:
    reference: str
    path: Path
    bytes: int
    sha256: str
    seconds: float


@dataclass(frozen=True)
class LoadResult:
    path: Path
    images: tuple[str, ...]
    verified: bool
    seconds: float


def checksum_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def default_output(reference: str) -> Path:
    """``registry:5000/vllm-ascend:0.23.0-...`` → ``vllm-ascend_0.23.0-....tar``."""
    name = reference.rsplit("/", 1)[-1].replace(":", "_").replace("@", "_")
    return Path(f"{name}.tar")


def save(
    client: docker.DockerClient, reference: str, output: Path, progress: Progress | None = None
) -> SaveResult:
    """Write ``reference`` (with its tag) to ``output`` and its checksum beside it."""
    say = progress or (lambda _text: None)
    try:
        client.images.get(reference)
    except docker.errors.ImageNotFound:
        raise InputError(f"no image {reference} on the engine (build or load it first)") from None
    started = time.monotonic()
    partial = output.with_name(output.name + ".partial")
    digest = hashlib.sha256()
    written = 0
    next_report = 256 * CHUNK
    try:
        with partial.open("wb") as raw:
            sink: IO[bytes] | gzip.GzipFile = raw
            if _gz(output):
                sink = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1, mtime=0)
            try:
                for chunk in client.api.get_image(reference, chunk_size=CHUNK):
                    sink.write(chunk)
                    written += len(chunk)
                    if written >= next_report:
                        say(f"{reference}: {written / 2**20:.0f} MiB")
                        next_report += 256 * CHUNK
            finally:
                if sink is not raw:
                    sink.close()
        with partial.open("rb") as fh:
            for block in iter(lambda: fh.read(CHUNK), b""):
                digest.update(block)
        partial.replace(output)
    except docker.errors.APIError as exc:
        partial.unlink(missing_ok=True)
        raise TransferError(f"saving {reference} failed: {exc.explanation or exc}") from None
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    checksum_path(output).write_text(f"{digest.hexdigest()}  {output.name}\n")
    return SaveResult(
        reference=reference,
        path=output,
        bytes=output.stat().st_size,
        sha256=digest.hexdigest(),
        seconds=round(time.monotonic() - started, 3),
    )


def verify(path: Path) -> bool:
    """Check ``path`` against ``path.sha256`` when it exists (True: checked, False: no checksum file)."""
    sidecar = checksum_path(path)
    if not sidecar.exists():
        return False
    expected = sidecar.read_text().split()[0] if sidecar.read_text().strip() else ""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            digest.update(block)
    if digest.hexdigest() != expected:
        raise TransferError(
            f"{path}: checksum mismatch (file {digest.hexdigest()[:16]}…, {sidecar.name} {expected[:16]}…): "
            "the copy is damaged; transfer it again"
        )
    return True


def load(client: docker.DockerClient, path: Path, progress: Progress | None = None) -> LoadResult:
    """Verify (when a checksum file is beside it) and load an image tar; returns the loaded references."""
    say = progress or (lambda _text: None)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    started = time.monotonic()
    verified = verify(path)
    if verified:
        say(f"{path.name}: checksum OK")
    images: list[str] = []
    try:
        with path.open("rb") as fh:
            for event in _load_events(client, fh):
                error = stream_error(event)
                if error:
                    raise TransferError(f"loading {path} failed: {error}")
                text = str(event.get("stream", "")).strip()
                match = _LOADED.match(text)
                if match:
                    images.append(match.group(1))
                    say(text)
    except docker.errors.APIError as exc:
        raise TransferError(f"loading {path} failed: {exc.explanation or exc}") from None
    if not images:
        raise TransferError(f"{path}: the engine loaded no image (not a `docker save` tar?)")
    return LoadResult(
        path=path, images=tuple(images), verified=verified, seconds=round(time.monotonic() - started, 3)
    )


def _load_events(client: docker.DockerClient, fh: IO[bytes]) -> Iterator[dict[str, Any]]:
    # The engine takes gzip as it is; the SDK streams the file object as the request body.
    result = client.api.load_image(fh, quiet=False)
    yield from result


def _gz(path: Path) -> bool:
    return path.suffix in (".gz", ".tgz")
