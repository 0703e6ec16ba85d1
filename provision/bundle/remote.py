"""``--from-mirror URL``: the part of a mirror served over HTTP that a plan needs, fetched into a folder.

The files are found the way the nodes' package managers find them, from the repositories' own metadata,
never by guessing names: an openEuler repository's ``repodata/repomd.xml`` names its metadata files and
its ``primary`` the packages (``<location href>`` with their sha256); an apt suite's ``Release`` names its
index files (``SHA256:`` section) and each ``Packages`` index the ``.deb`` files (``Filename``,
``SHA256``); the ``ascend/``, ``images/`` and ``models/`` folders' ``sha256sums.txt`` name their files.
Only the folder parts the inventory does not know (the openEuler release, ``openEuler-22.03-*``; the
apt key's name) are read from the server's directory listing (the ``href`` links of an autoindex page, as
nginx, Apache and Python's http.server write them).

Formats: createrepo_c's ``repomd.xml``/``primary.xml`` and Debian's ``Release``/``Packages`` as the
simulator's mirror writes them with the real tools (``provision-sim/provision_sim/mirror/repos.py``:
createrepo_c, dpkg-scanpackages). Every file is downloaded into the local folder once, checked against the
sha256 its metadata gives; a rerun keeps the files already there that match.
"""

from __future__ import annotations

import bz2
import fnmatch
import gzip
import hashlib
import lzma
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath
from urllib.parse import quote, unquote, urljoin

import httpx

from provision.bundle import manifest as mf
from provision.bundle.needs import Plan, apt_file_wanted
from provision.errors import InputError

Say = Callable[[str], None]
_REPO = "{http://linux.duke.edu/metadata/repo}"
_COMMON = "{http://linux.duke.edu/metadata/common}"
_HREF = re.compile(r'href="([^"?#]+)"')


class Remote:
    """A mirror at ``url`` and the local folder its files are fetched into (same relative paths)."""

    def __init__(self, url: str, root: Path, client: httpx.Client, say: Say) -> None:
        self.url = url.rstrip("/") + "/"
        self.root = root
        self.client = client
        self.say = say
        self.problems: list[str] = []

    def fetch(self, rel: str, sha256: str | None = None, *, required: bool = True) -> Path | None:
        """``rel`` downloaded (or kept, when already there with ``sha256``); None when the server lacks it."""
        _safe(rel, self.url)
        dest = self.root / rel
        # A package named by its version is kept as it is; metadata without a checksum is fetched again.
        if dest.is_file() and (
            (sha256 is None and rel.endswith((".rpm", ".deb"))) or sha256 == mf.sha256_file(dest)
        ):
            return dest
        dest.parent.mkdir(parents=True, exist_ok=True)
        partial = dest.with_name(f".{dest.name}.partial")
        digest = hashlib.sha256()
        try:
            with self.client.stream("GET", urljoin(self.url, quote(rel))) as answer:
                if answer.status_code == 404:
                    if required:
                        self.problems.append(f"{self.url}{rel}: not on the mirror (404)")
                    return None
                answer.raise_for_status()
                with partial.open("wb") as out:
                    for chunk in answer.iter_bytes(mf.CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
        except httpx.HTTPError as exc:
            partial.unlink(missing_ok=True)
            self.problems.append(f"{self.url}{rel}: cannot download: {exc}")
            return None
        if sha256 is not None and digest.hexdigest() != sha256:
            partial.unlink(missing_ok=True)
            self.problems.append(
                f"{self.url}{rel}: sha256 {digest.hexdigest()} does not match {sha256} (the mirror's "
                "metadata): it is corrupted on the mirror or was damaged on the way"
            )
            return None
        partial.replace(dest)
        return dest

    def listing(self, rel: str) -> list[str]:
        """The entries a directory listing page links to (names, without a trailing ``/``)."""
        try:
            answer = self.client.get(urljoin(self.url, quote(rel.rstrip("/")) + "/"))
            answer.raise_for_status()
        except httpx.HTTPError as exc:
            self.problems.append(f"{self.url}{rel}/: cannot list it: {exc}")
            return []
        names = {unquote(link).rstrip("/").rsplit("/", 1)[-1] for link in _HREF.findall(answer.text)}
        return sorted(name for name in names if name and name not in (".", ".."))


def _safe(rel: str, where: str) -> None:
    pure = PurePosixPath(rel)
    if pure.is_absolute() or ".." in pure.parts:
        raise InputError(f"{where}: the mirror's metadata names {rel!r}, a path outside the mirror")


def _open(path: Path) -> bytes:
    data = path.read_bytes()
    for suffix, decompress in ((".gz", gzip.decompress), (".xz", lzma.decompress), (".bz2", bz2.decompress)):
        if path.name.endswith(suffix):
            return decompress(data)
    if path.name.endswith(".zst"):
        raise InputError(f"{path.name}: zstd-compressed metadata cannot be read by this Python (3.14 can)")
    return data


def fetch_mirror(
    plan: Plan, url: str, root: Path, *, images: bool, local: Iterable[Path | None] = (), say: Say
) -> Path:
    """Fetch into ``root`` what ``plan`` needs from the mirror at ``url``; ``root`` then reads as a mirror
    folder. ``images``: also the mirror's image tarballs (to find the ones the nodes need by their tags).
    ``local``: folders whose files are taken instead (``--run-files``, ``--weights``). InputError listing
    every file that could not be had."""
    folders = [folder for folder in local if folder is not None]
    root.mkdir(parents=True, exist_ok=True)
    with httpx.Client(timeout=httpx.Timeout(60.0, connect=10.0), follow_redirects=True) as client:
        remote = Remote(url, root, client, say)
        unique = plan.unique()
        for folder, kinds in (("ascend", ("run-file", "exporter")), ("models", ("weights",))):
            wanted = [
                Path(n.path).name
                for n in unique.values()
                if n.kind in kinds and not any((folder / Path(n.path).name).is_file() for folder in folders)
            ]
            if wanted:
                sums = remote.fetch(f"{folder}/{mf.SUMS}", required=False)
                listed = mf.read_sums(sums) if sums else {}
                for name in wanted:
                    if name in listed:  # else the build names it as missing, with where it looked
                        remote.fetch(f"{folder}/{name}", listed[name])
        if images and any(n.kind == "image" for n in unique.values()):
            sums = remote.fetch(f"images/{mf.SUMS}", required=False)
            for name, sha in (mf.read_sums(sums) if sums else {}).items():
                if name.endswith(".tar"):
                    say(f"downloading images/{name}")
                    remote.fetch(f"images/{name}", sha)
        repos = [n for n in unique.values() if n.kind == "os-repo"]
        for need in repos:
            if need.deb_arch:
                _apt_suite(remote, need.path, need.deb_arch)
            else:
                for folder in _expand(remote, need.path):
                    _rpm_repo(remote, folder)
        if any(n.deb_arch for n in repos):
            for name in remote.listing("ubuntu"):
                if name.endswith((".asc", ".gpg")):
                    remote.fetch(f"ubuntu/{name}")
    if remote.problems:
        raise InputError(f"cannot fetch from {url}:\n  " + "\n  ".join(dict.fromkeys(remote.problems)))
    return root


def _expand(remote: Remote, pattern: str) -> Iterable[str]:
    """``openeuler/openEuler-22.03-*/OS/aarch64`` -> the folders the mirror has (its listing names them)."""
    parts = pattern.split("/")
    star = next((i for i, part in enumerate(parts) if "*" in part), None)
    if star is None:
        return [pattern]
    parent = "/".join(parts[:star])
    found = [name for name in remote.listing(parent) if fnmatch.fnmatchcase(name, parts[star])]
    return ["/".join([parent, name, *parts[star + 1 :]]) for name in found]


def _rpm_repo(remote: Remote, folder: str) -> None:
    repomd = remote.fetch(f"{folder}/repodata/repomd.xml", required=False)
    if repomd is None:
        return  # another release of the listing without this section: the build says what is missing
    try:
        tree = ET.fromstring(repomd.read_bytes())
    except ET.ParseError as exc:
        remote.problems.append(f"{remote.url}{folder}/repodata/repomd.xml: not XML: {exc}")
        return
    for data in tree.findall(f"{_REPO}data"):
        location = data.find(f"{_REPO}location")
        checksum = data.find(f"{_REPO}checksum")
        if location is None:
            continue
        sha = checksum.text if checksum is not None and checksum.get("type") == "sha256" else None
        path = remote.fetch(f"{folder}/{location.get('href')}", sha)
        if path is not None and data.get("type") == "primary":
            for package in ET.fromstring(_open(path)).findall(f"{_COMMON}package"):
                href = package.find(f"{_COMMON}location")
                digest = package.find(f"{_COMMON}checksum")
                if href is not None:
                    ok = digest is not None and digest.get("type") == "sha256"
                    remote.fetch(
                        f"{folder}/{href.get('href')}", digest.text if ok and digest is not None else None
                    )
    remote.fetch(f"{folder}/RPM-GPG-KEY-openEuler", required=False)  # the OS section publishes it


def _apt_suite(remote: Remote, suite: str, deb_arch: str) -> None:
    """``ubuntu/dists/<suite>``: Release (+ InRelease, Release.gpg), the indexes of ``deb_arch``, the debs."""
    release = remote.fetch(f"{suite}/Release", required=False)
    if release is None:
        return
    for name in ("InRelease", "Release.gpg"):
        remote.fetch(f"{suite}/{name}", required=False)
    listed: dict[str, str] = {}
    section = ""
    for line in release.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.startswith(" "):
            section = line.split(":", 1)[0]
        elif section == "SHA256":
            fields = line.split()
            if len(fields) == 3:
                listed[fields[2]] = fields[0]
    base = suite.split("/dists/", 1)[0]
    for rel, sha in sorted(listed.items()):
        if not apt_file_wanted(rel, deb_arch):
            continue
        path = remote.fetch(f"{suite}/{rel}", sha, required=False)
        if path is None or PurePosixPath(rel).name not in ("Packages", "Packages.gz", "Packages.xz"):
            continue
        filename, digest = "", None
        for line in [*_open(path).decode("utf-8", errors="replace").splitlines(), ""]:
            if line.startswith("Filename:"):
                filename = line.split(":", 1)[1].strip()
            elif line.startswith("SHA256:"):
                digest = line.split(":", 1)[1].strip()
            elif not line.strip() and filename:
                remote.fetch(f"{base}/{filename}", digest)
                filename, digest = "", None
