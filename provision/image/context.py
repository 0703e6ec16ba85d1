"""The build context: the top-level ``Dockerfile`` and ``container/``, and nothing else.

``provision image build`` sends the engine a small tar it makes itself (not the whole checkout with its
virtual environment): files sorted, owner root, fixed timestamps and modes, so the same sources always give
the same context and the engine's layer cache is reused across checkouts and machines.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from dataclasses import dataclass
from pathlib import Path

from provision.errors import EnvironmentProblem

_PACKAGE_DIR = Path(__file__).resolve().parents[1]
CONTEXT_FILES = ("Dockerfile",)
CONTEXT_DIRS = ("container",)
# A fixed timestamp (2020-01-01) for every member: the context depends on contents and modes only.
_MTIME = 1577836800


def default_context_dir() -> Path:
    """Where the Dockerfile lives: ``provision/_image`` in an installed wheel, the checkout root otherwise."""
    bundled = _PACKAGE_DIR / "_image"
    if (bundled / "Dockerfile").is_file():
        return bundled
    return _PACKAGE_DIR.parent


@dataclass(frozen=True)
class Context:
    directory: Path
    data: bytes
    files: tuple[str, ...]

    @property
    def dockerfile(self) -> Path:
        return self.directory / "Dockerfile"

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def fileobj(self) -> io.BytesIO:
        return io.BytesIO(self.data)


def make_context(directory: Path | None = None) -> Context:
    """Pack ``Dockerfile`` and ``container/`` of ``directory`` (default: :func:`default_context_dir`)."""
    root = (directory or default_context_dir()).resolve()
    if not (root / "Dockerfile").is_file():
        raise EnvironmentProblem(f"no Dockerfile in {root} (give the checkout with --context)")
    members: list[Path] = [root / name for name in CONTEXT_FILES]
    for name in CONTEXT_DIRS:
        folder = root / name
        if folder.is_dir():
            members += sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in members:
            rel = path.relative_to(root).as_posix()
            info = tarfile.TarInfo(rel)
            data = path.read_bytes()
            info.size = len(data)
            info.mtime = _MTIME
            info.mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    return Context(
        directory=root,
        data=buffer.getvalue(),
        files=tuple(p.relative_to(root).as_posix() for p in members),
    )
