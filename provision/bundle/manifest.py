"""The bundle's manifest: every file's path, sha256, size, kind, source and version, and what vouches for it.

An unpacked bundle is a mirror root (``ascend/``, ``openeuler/``, ``ubuntu/``, ``images/``, ``models/``)
plus::

    manifest.json         this module's :class:`Manifest` (JSON, sorted keys)
    manifest.json.sha256  ``sha256sum`` format: the manifest's own checksum
    manifest.json.asc     optional: an armored GnuPG detached signature of manifest.json

The format is documented in docs/bundle.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import IO, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from provision import openpgp
from provision.errors import EnvironmentProblem, InputError, ProvisionError

FORMAT = "provision-bundle/1"
MANIFEST = "manifest.json"
MANIFEST_SUM = "manifest.json.sha256"
SIGNATURE = "manifest.json.asc"
OWN_FILES = (MANIFEST, MANIFEST_SUM, SIGNATURE)
"""The files that describe the bundle; every other file must be listed in the manifest."""
SUMS = "sha256sums.txt"
CHUNK = 1 << 20

Kind = Literal["os-repo", "os-key", "run-file", "exporter", "image", "weights", "checksums"]


class BundleRefused(ProvisionError):
    """The bundle does not match its manifest (or its manifest its checksum/signature): exit 1."""

    exit_code = 1


class FileEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)
    kind: Kind
    source: str
    version: str = ""
    variables: list[str] = Field(default_factory=list)
    """The inventory variables that name this file (an image: ``vllm_serve_image``,
    ``container_runtime_verify_image``): ``bundle serve`` prints their ``*_url`` for it."""


class NodeEntry(BaseModel):
    """What one node of the inventory the bundle was built for needs (paths as in :class:`FileEntry`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str
    os: str
    arch: str
    stack: str
    needs: list[str]


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["provision-bundle/1"] = "provision-bundle/1"
    created: str
    provision: str
    inventory: str
    nodes: list[NodeEntry] = Field(default_factory=list)
    files: list[FileEntry]

    def by_path(self) -> dict[str, FileEntry]:
        return {entry.path: entry for entry in self.files}

    def dumps(self) -> bytes:
        data = self.model_dump()
        for entry in data["files"]:  # every file but the images: no variables, none written
            if not entry["variables"]:
                del entry["variables"]
        return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()


def parse_manifest(data: bytes, where: str) -> Manifest:
    """A manifest from its bytes; BundleRefused naming ``where`` when it is not one."""
    try:
        manifest = Manifest.model_validate_json(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise BundleRefused(f"{where}: not a provision bundle manifest: {field}: {first['msg']}") from None
    for entry in manifest.files:
        safe_path(entry.path, where)
    return manifest


def looks_like_manifest(data: bytes) -> bool:
    try:
        raw = json.loads(data)
    except ValueError:
        return False
    return isinstance(raw, dict) and raw.get("format") == FORMAT


def safe_path(path: str, where: str) -> PurePosixPath:
    """A relative path that stays inside the bundle (no ``..``, not absolute), else BundleRefused."""
    pure = PurePosixPath(path)
    if not path or pure.is_absolute() or ".." in pure.parts or str(pure) != path.rstrip("/"):
        raise BundleRefused(f"{where}: {path!r} is not a plain relative path inside the bundle")
    return pure


# ------------------------------------------------------------------------------------------ checksums


def sha256_file(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def sha256_stream(fh: IO[bytes]) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    while chunk := fh.read(CHUNK):
        digest.update(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


def sums_text(entries: dict[str, str]) -> str:
    """``sha256sum`` format (what ``sha256sum -c`` and the roles' get_url ``checksum:`` read)."""
    return "".join(f"{sha}  {name}\n" for name, sha in sorted(entries.items()))


def parse_sums(text: str) -> dict[str, str]:
    """``sha256sum`` output (text or ``*`` binary mode): name -> sha256."""
    listed: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split(maxsplit=1)
        if len(fields) == 2 and len(fields[0]) == 64:
            listed[fields[1].strip().lstrip("*")] = fields[0].lower()
    return listed


def read_sums(path: Path) -> dict[str, str]:
    """A ``sha256sums.txt`` file (nothing when it does not exist)."""
    return parse_sums(path.read_text(encoding="utf-8", errors="replace")) if path.is_file() else {}


def manifest_sum(data: bytes) -> str:
    return sums_text({MANIFEST: hashlib.sha256(data).hexdigest()})


def check_manifest_sum(data: bytes, sum_text: str | None, where: str) -> None:
    if sum_text is None:
        raise BundleRefused(f"{where}: {MANIFEST_SUM} is missing: the manifest cannot be checked")
    wanted = parse_sums(sum_text).get(MANIFEST)
    actual = hashlib.sha256(data).hexdigest()
    if wanted != actual:
        raise BundleRefused(
            f"{where}: {MANIFEST} does not match {MANIFEST_SUM} (sha256 {actual}, expected {wanted}): "
            "the manifest was changed or damaged"
        )


# ------------------------------------------------------------------------------------------ signature


def _gpg() -> str:
    found = shutil.which("gpg")
    if found is None:
        raise EnvironmentProblem("gpg is not installed: install gnupg to sign or check a bundle's signature")
    return found


def _gpg_argv(home: Path | None) -> list[str]:
    # Same invocation as the rig's repository signing: batch, no prompts, an empty passphrase is accepted.
    argv = [_gpg(), "--batch", "--yes", "--quiet", "--pinentry-mode", "loopback"]
    return argv + (["--homedir", str(gpg_home(home))] if home is not None else [])


_SOCKET_ROOM = 106 - len("/S.gpg-agent.browser")
"""The longest GnuPG home whose agent sockets gpg-agent accepts (measured with GnuPG 2.2: a 107-byte socket
path is "too long" for it, below the 108 bytes of a Unix socket path)."""


def gpg_home(home: Path) -> Path:
    """``home``, or a short link to it where the agent's sockets would not fit a Unix socket path below it:
    gpg-agent then fails to start ("No agent running"), unless the machine has /run/user/UID (a systemd
    login session) for them, which a CI runner or a root cron job has not."""
    if len(str(home)) <= _SOCKET_ROOM:
        return home
    base = Path("/tmp") if Path("/tmp").is_dir() else Path(tempfile.gettempdir())
    links = base / f"provision-gnupg-{os.getuid()}"
    links.mkdir(mode=0o700, exist_ok=True)
    link = links / hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:16]
    if not (link.is_symlink() and link.resolve() == home.resolve()):
        link.unlink(missing_ok=True)
        link.symlink_to(home.resolve(), target_is_directory=True)
    return link


_AGENT_NOT_UP = ("No agent running", "can't connect to the agent", "no gpg-agent running")


def run_gpg(argv: list[str], attempts: int = 3) -> subprocess.CompletedProcess[str]:
    """Run gpg; again when it gave up waiting for the gpg-agent it starts itself (its wait is a few
    seconds, which a loaded machine can outlast: the agent is up by the next try)."""
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    for _ in range(attempts - 1):
        if done.returncode == 0 or not any(text in done.stderr for text in _AGENT_NOT_UP):
            break
        time.sleep(1)
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    return done


def sign(manifest: Path, key: str, home: Path | None = None) -> Path:
    """``manifest.json.asc`` beside ``manifest``: an armored detached signature by ``key``."""
    output = manifest.with_name(SIGNATURE)
    argv = [*_gpg_argv(home), "--local-user", key, "--armor", "--detach-sign", "--output", str(output)]
    done = run_gpg([*argv, str(manifest)])
    if done.returncode != 0:
        raise InputError(
            f"--sign-key {key}: gpg could not sign {manifest.name}: {done.stderr.strip()[-800:]}"
        )
    return output


def signer_pin(value: str) -> str | None:
    """``--key``'s value as a fingerprint (upper case, no spaces, no ``0x``); None when it is not one
    (then it names a public key file)."""
    return openpgp.normalize_fingerprint(value)


def check_signature(data: bytes, signature: bytes, key: str | None, where: str) -> str:
    """The fingerprint that made ``signature`` over ``data``; BundleRefused when it does not verify.

    ``key``: a FINGERPRINT the signer must have (its primary key's or the signing subkey's), checked with the
    user's keyring (``$GNUPGHOME``); or a public key FILE (armored or binary), imported into a throw-away
    keyring that holds nothing else; None: any key of the user's keyring.
    """
    pin = signer_pin(key) if key is not None else None
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / MANIFEST).write_bytes(data)
        (work / SIGNATURE).write_bytes(signature)
        home: Path | None = None
        if key is not None and pin is None:
            if not Path(key).is_file():
                raise InputError(
                    f"--key {key}: neither a key fingerprint (40 hex digits, 64 for a v6 key) nor a file"
                )
            home = work / "gnupg"
            home.mkdir(mode=0o700)
            imported = subprocess.run(
                [*_gpg_argv(home), "--import", key], capture_output=True, text=True, check=False
            )
            if imported.returncode != 0:
                raise InputError(f"--key {key}: not a GnuPG public key: {imported.stderr.strip()[-400:]}")
        done = subprocess.run(
            [*_gpg_argv(home), "--status-fd", "1", "--verify", str(work / SIGNATURE), str(work / MANIFEST)],
            capture_output=True,
            text=True,
            check=False,
        )
    # gpg's machine-readable status lines (doc/DETAILS): "VALIDSIG <signing key fpr> <date> <timestamp>
    # <expires> <version> <reserved> <algo> <hash> <class> <primary key fpr>" for a good signature.
    valid = [line.split()[2:] for line in done.stdout.splitlines() if line.startswith("[GNUPG:] VALIDSIG ")]
    if done.returncode != 0 or not valid:
        reason = (
            "no public key for it (import the signer's key, or give --key FILE)"
            if "NO_PUBKEY" in done.stdout
            else "bad signature"
        )
        raise BundleRefused(f"{where}: {SIGNATURE} does not verify {MANIFEST}: {reason}")
    fields = valid[0]
    signer = fields[0].upper()
    primary = fields[9].upper() if len(fields) > 9 else signer
    if pin is not None and pin not in (signer, primary):
        raise BundleRefused(f"{where}: signed by {primary}, not by the pinned key {pin} (--key): refused")
    return primary


def copy_verified(source: Path, dest: Path, expected: str | None) -> str:
    """Copy ``source`` to ``dest`` through a temporary file; its sha256 (checked against ``expected``)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(f".{dest.name}.partial")
    digest = hashlib.sha256()
    try:
        with source.open("rb") as src, partial.open("wb") as out:
            while chunk := src.read(CHUNK):
                digest.update(chunk)
                out.write(chunk)
        shutil.copymode(source, partial)
        if expected is not None and digest.hexdigest() != expected:
            raise InputError(
                f"{source}: changed while it was copied (sha256 {digest.hexdigest()}, expected {expected})"
            )
        os.replace(partial, dest)
    finally:
        partial.unlink(missing_ok=True)
    return digest.hexdigest()


def relative_files(root: Path, skip: Sequence[str] = ()) -> list[str]:
    """Every regular file below ``root`` as a POSIX path relative to it, sorted."""
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            rel = path.relative_to(root).as_posix()
            if rel not in skip:
                found.append(rel)
    return sorted(found)
