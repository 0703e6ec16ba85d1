"""``provision bundle verify`` / ``unpack``: a bundle is used only when every byte is what its manifest says.

Checked, all problems reported at once (BundleRefused, exit 1): ``manifest.json`` against
``manifest.json.sha256`` and its signature ``manifest.json.asc`` (an unsigned bundle is refused unless the
caller allows it: the checksum catches damage, only a signature catches a rewritten manifest), then every
file the manifest lists: present, a plain file, its size and sha256; and no file the manifest does not list
(a server would hand it out). An archive is read as a stream, member by member, so a bundle is checked
without unpacking it.
"""

from __future__ import annotations

import os
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

from provision.bundle import manifest as mf
from provision.bundle.needs import Need, Plan, missing
from provision.errors import InputError


@dataclass(frozen=True, slots=True)
class Verified:
    where: Path
    manifest: mf.Manifest
    signed_by: str | None
    """The fingerprint of the signing key, when the bundle is signed."""


@dataclass(frozen=True, slots=True)
class Trust:
    """What a bundle's signature must show: ``key`` a signer's FINGERPRINT or a public key FILE (None: any
    key of the user's keyring); ``allow_unsigned`` accepts a bundle with no signature at all."""

    key: str | None = None
    allow_unsigned: bool = False


def verify(path: Path, trust: Trust) -> Verified:
    """Check an archive or an unpacked folder; InputError when ``path`` is no bundle at all (exit 2)."""
    if path.is_dir():
        return verify_dir(path, trust)
    if not path.is_file():
        raise InputError(f"{path}: no such bundle (an archive or a folder)")
    return verify_archive(path, trust)


def verify_archive(path: Path, trust: Trust) -> Verified:
    own: dict[str, bytes] = {}
    found: dict[str, tuple[str, int]] = {}
    odd: list[str] = []
    try:
        with tarfile.open(path, "r:*") as archive:
            for member in archive:
                name = member.name.removeprefix("./")
                if member.isdir():
                    continue
                if not member.isfile():
                    odd.append(f"{name}: not a plain file (a link or a device): refused")
                    continue
                fh = archive.extractfile(member)
                assert fh is not None  # a regular member always has data
                if name in mf.OWN_FILES:
                    own[name] = fh.read()
                else:
                    found[name] = mf.sha256_stream(fh)
    except (tarfile.TarError, OSError, EOFError) as exc:
        if not own and not found:
            raise InputError(f"{path}: not a bundle archive (tar): {exc}") from None
        raise mf.BundleRefused(
            f"{path}: refused: the archive is damaged after {len(found)} files: {exc}"
        ) from None
    if mf.MANIFEST not in own:
        raise InputError(f"{path}: not a provision bundle: it holds no {mf.MANIFEST}")
    return _judge(path, own, found, odd, trust)


def verify_dir(root: Path, trust: Trust) -> Verified:
    if not (root / mf.MANIFEST).is_file():
        raise InputError(f"{root}: not a provision bundle: it holds no {mf.MANIFEST}")
    own = {name: (root / name).read_bytes() for name in mf.OWN_FILES if (root / name).is_file()}
    found: dict[str, tuple[str, int]] = {}
    odd: list[str] = []
    for item in sorted(root.rglob("*")):
        rel = item.relative_to(root).as_posix()
        if rel in mf.OWN_FILES or (item.is_dir() and not item.is_symlink()):
            continue
        if item.is_symlink() or not item.is_file():
            odd.append(f"{rel}: not a plain file (a link or a device): refused")
            continue
        with item.open("rb") as fh:
            found[rel] = mf.sha256_stream(fh)
    return _judge(root, own, found, odd, trust)


def _judge(
    where: Path,
    own: dict[str, bytes],
    found: dict[str, tuple[str, int]],
    odd: list[str],
    trust: Trust,
) -> Verified:
    data = own[mf.MANIFEST]
    sum_text = own.get(mf.MANIFEST_SUM)
    if sum_text is None and not mf.looks_like_manifest(data):
        # Another tool's manifest.json (a `docker save` tarball has one): not a bundle at all.
        raise InputError(f"{where}: not a provision bundle: its {mf.MANIFEST} is not a bundle manifest")
    mf.check_manifest_sum(
        data, sum_text.decode("utf-8", "replace") if sum_text is not None else None, str(where)
    )
    signed_by = None
    if mf.SIGNATURE in own:
        signed_by = mf.check_signature(data, own[mf.SIGNATURE], trust.key, str(where))
    elif trust.key is not None:
        raise mf.BundleRefused(f"{where}: --key given, but the bundle is not signed (no {mf.SIGNATURE})")
    elif not trust.allow_unsigned:
        raise mf.BundleRefused(
            f"{where}: not signed (no {mf.SIGNATURE}): its checksum catches damage, not a manifest rewritten "
            "with its files. Build it with --sign-key KEY and verify with --key FINGERPRINT, or accept it "
            "with --allow-unsigned"
        )
    manifest = mf.parse_manifest(data, f"{where}: {mf.MANIFEST}")
    problems = list(odd)
    listed = manifest.by_path()
    for path, entry in listed.items():
        if path not in found:
            problems.append(f"{path}: missing (the manifest lists it: {entry.kind} {entry.version})".rstrip())
            continue
        sha, size = found[path]
        if sha != entry.sha256 or size != entry.size:
            problems.append(
                f"{path}: corrupted: sha256 {sha} ({size} bytes), the manifest says {entry.sha256} "
                f"({entry.size} bytes)"
            )
    for path in sorted(set(found) - set(listed)):
        problems.append(f"{path}: not in the manifest")
    if problems:
        raise mf.BundleRefused(f"{where}: refused, {len(problems)} problem(s):\n  " + "\n  ".join(problems))
    return Verified(where=where, manifest=manifest, signed_by=signed_by)


def completeness(manifest: mf.Manifest, plan: Plan) -> dict[str, list[Need]]:
    """Per host of ``plan``, what the bundle lacks (empty: it has everything every node needs)."""
    return missing(plan, [entry.path for entry in manifest.files])


def unpack(archive: Path, dest: Path, trust: Trust) -> Verified:
    """Extract ``archive`` into ``dest`` (new or empty) and verify what was written; on a refusal nothing
    is left behind. The files are checked where they will be served from, so they are read once."""
    if not archive.is_file():
        raise InputError(f"{archive}: no such bundle archive")
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise InputError(f"{dest}: exists and is not an empty folder")
    partial = dest.with_name(f".{dest.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        try:
            with tarfile.open(archive, "r:*") as tar:
                # Python's "data" filter: no absolute paths, no "..", no links out, no devices, sane modes.
                tar.extractall(partial, filter="data")
        except tarfile.FilterError as exc:
            raise mf.BundleRefused(f"{archive}: refused: {exc}") from None
        except (tarfile.TarError, EOFError) as exc:
            if not any(partial.iterdir()):
                raise InputError(f"{archive}: not a bundle archive (tar): {exc}") from None
            raise mf.BundleRefused(f"{archive}: refused: the archive is damaged: {exc}") from None
        checked = verify_dir(partial, trust)
        if dest.exists():
            dest.rmdir()
        os.replace(partial, dest)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return Verified(where=dest, manifest=checked.manifest, signed_by=checked.signed_by)
