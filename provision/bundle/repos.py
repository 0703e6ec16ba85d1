"""The bundle's own repository signatures: its apt suites and rpm repositories re-signed with one key.

A bundle keeps of an apt suite only the indexes of its nodes' architectures (and of a mirror only the
packages they list), so the mirror's ``Release`` no longer describes what the bundle holds, and the
mirror's key vouches for a mirror the rack never sees. With ``build --sign-repos`` (or ``--repo-key
KEYID``) the bundle writes, for every suite it holds, a new ``Release`` listing exactly the index files it
carries (MD5Sum and SHA256, as the distributions' own), ``InRelease`` (clear-signed) and ``Release.gpg``
(detached), as ``apt-ftparchive release`` + ``gpg --clearsign`` do on a real archive; for every rpm
repository a detached ``repodata/repomd.xml.asc`` (what dnf's ``repo_gpgcheck`` checks). The packages keep
their own signatures (the distribution's rpm key stays in the bundle).

The key: the user's (``--repo-key KEYID``, from ``--gnupg-home`` or the own keyring), else one the build
generates once into ``FILE.gnupg/`` beside the bundle (kept: a rerun signs with the same key, and the
private key never goes into the bundle). Its public half is ``ubuntu/provision-bundle-archive-keyring.asc``
and ``openeuler/RPM-GPG-KEY-provision-bundle``; ``bundle serve`` points ``openeuler_repos_apt_signed_by`` at
the first.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from email.utils import formatdate
from pathlib import Path, PurePosixPath

from provision.bundle import manifest as mf
from provision.errors import InputError

APT_KEY = "ubuntu/provision-bundle-archive-keyring.asc"
RPM_KEY = "openeuler/RPM-GPG-KEY-provision-bundle"
KEY_UID = "provision bundle <bundle@provision.invalid>"
SUITE_SIGNED = ("Release", "InRelease", "Release.gpg")
"""What the bundle writes of each suite: the mirror's are left out (and nothing the mirror signed stays)."""
_DROPPED_FIELDS = ("Date", "Valid-Until", "Architectures", "Acquire-By-Hash", "Signed-By")
_HASHES = (("MD5Sum", "md5"), ("SHA256", "sha256"))


def gnupg_dir(output: Path) -> Path:
    """Where a build keeps the key it generated: ``FILE.gnupg/`` beside the bundle."""
    return output.with_name(output.name + ".gnupg")


def replaced(path: str) -> bool:
    """Whether a mirror's file is one the re-signing writes anew (a suite's Release and signatures, an apt
    key of the mirror, a repomd signature): such files are not taken from the mirror."""
    parts = PurePosixPath(path).parts
    if parts[0] == "ubuntu":
        if len(parts) == 2 and path.endswith((".asc", ".gpg")):
            return True
        return len(parts) == 4 and parts[1] == "dists" and parts[3] in SUITE_SIGNED
    return path.endswith("/repodata/repomd.xml.asc")


def ensure_key(output: Path, key: str | None, home: Path | None) -> tuple[str, Path | None, bool]:
    """(key id, GnuPG home, generated now): the user's key, else the build's own in ``FILE.gnupg/``."""
    if key is not None:
        _gpg(home, "--list-secret-keys", key, what=f"--repo-key {key}: no secret key")
        return key, home, False
    own = gnupg_dir(output)
    if (own / "ready").is_file():
        return KEY_UID, own, False
    own.mkdir(mode=0o700, exist_ok=True)
    # Same parameters as the simulator's mirror key: RSA signs where every apt/gpgv and rpm can check it.
    _gpg(own, "--passphrase", "", "--quick-generate-key", KEY_UID, "rsa3072", "sign", "never", what="")
    (own / "ready").write_text("")
    return KEY_UID, own, True


def resign(
    work: Path, key: str, home: Path | None, releases: Mapping[str, Path], *, source: str
) -> list[mf.FileEntry]:
    """Sign every apt suite and rpm repository below ``work`` with ``key``; the manifest entries of the
    files written (new ``Release`` files and their signatures, repomd signatures, the public key).

    ``releases``: suite folder (``ubuntu/dists/jammy``) -> the mirror's ``Release`` of it, whose header
    (Origin, Label, Suite, Codename, Components, ...) the new one keeps.
    """
    written: list[Path] = []
    dists = work / "ubuntu" / "dists"
    suites = sorted(folder for folder in dists.glob("*") if folder.is_dir())
    for suite in suites:
        mirror_release = releases.get(suite.relative_to(work).as_posix())
        header = _header(mirror_release) if mirror_release else [f"Suite: {suite.name}"]
        release = suite / "Release"
        release.write_text(release_text(suite, header))
        _gpg(home, "--local-user", key, "--clearsign", "--output", str(suite / "InRelease"), str(release))
        _gpg(
            home,
            "--local-user",
            key,
            "--armor",
            "--detach-sign",
            "--output",
            str(suite / "Release.gpg"),
            str(release),
        )
        written += [release, suite / "InRelease", suite / "Release.gpg"]
    for repomd in sorted((work / "openeuler").glob("**/repodata/repomd.xml")):
        signature = repomd.with_name("repomd.xml.asc")
        _gpg(home, "--local-user", key, "--armor", "--detach-sign", "--output", str(signature), str(repomd))
        written.append(signature)
    for public, wanted in ((work / APT_KEY, bool(suites)), (work / RPM_KEY, (work / "openeuler").is_dir())):
        if wanted:
            _gpg(home, "--armor", "--export", "--output", str(public), key)
            written.append(public)
    entries = []
    for path in written:
        rel = path.relative_to(work).as_posix()
        entries.append(
            mf.FileEntry(
                path=rel,
                sha256=mf.sha256_file(path),
                size=path.stat().st_size,
                kind="os-key" if rel in (APT_KEY, RPM_KEY) else "os-repo",
                source=f"provision bundle build, signed by {key}",
                version=source,
            )
        )
    return entries


def _header(mirror_release: Path) -> list[str]:
    """The header fields of a mirror's ``Release`` the bundle's keeps (not its date, architectures,
    hashes)."""
    header = []
    for line in mirror_release.read_text(errors="replace").splitlines():
        if not line.strip() or line[0].isspace():
            continue
        name = line.split(":", 1)[0]
        if name in _DROPPED_FIELDS or name in ("MD5Sum", "SHA1", "SHA256", "SHA512"):
            continue
        header.append(line)
    return header


def release_text(suite: Path, header: Sequence[str]) -> str:
    """A suite's ``Release`` over the index files below ``suite`` (what ``apt-ftparchive release`` writes):
    the kept header, today's ``Date``, the architectures whose ``binary-<arch>/`` it holds, the hashes."""
    files = sorted(
        path
        for path in suite.rglob("*")
        if path.is_file() and not (path.parent == suite and path.name in SUITE_SIGNED)
    )
    arches = sorted(
        {path.parent.name.removeprefix("binary-") for path in files if path.parent.name.startswith("binary-")}
        - {"all"}
    )
    lines = [*header, f"Date: {formatdate(usegmt=True)}", f"Architectures: {' '.join(arches)}"]
    for title, algorithm in _HASHES:
        lines.append(f"{title}:")
        for path in files:
            data = path.read_bytes()
            rel = path.relative_to(suite).as_posix()
            lines.append(f" {hashlib.new(algorithm, data).hexdigest()} {len(data):>8} {rel}")
    return "\n".join(lines) + "\n"


def stop_agent(home: Path) -> None:
    """Stop the gpg-agent that signing started for the build's own GnuPG home (it would outlive the build)."""
    if shutil.which("gpgconf"):
        subprocess.run(
            ["gpgconf", "--homedir", str(mf.gpg_home(home)), "--kill", "gpg-agent"],
            check=False,
            capture_output=True,
        )


def _gpg(home: Path | None, *args: str, what: str = "") -> None:
    done = mf.run_gpg([*mf._gpg_argv(home), *args])
    if done.returncode != 0:
        raise InputError(f"{what or 'gpg ' + ' '.join(args[:2])}: {done.stderr.strip()[-800:]}")
