"""``provision bundle build``: gather what :mod:`provision.bundle.needs` decided into one archive.

Everything is checked before anything is copied (a ``.run`` file missing or not matching its checksum, an
image nobody gave, an OS repository the mirror lacks: InputError listing every problem, exit 2). Files are
gathered into a work folder beside the output (``<FILE>.work/``, laid out as the mirror the nodes read);
a rerun keeps every file already there whose sha256 matches, so an interrupted build resumes where it
stopped. The archive is written last, the manifest first in it.

Sources, in this slice: an existing mirror (``--from-mirror DIR``, laid out as the simulator's and
docs/bundle.md describe: ``ascend/``, ``openeuler/``, ``ubuntu/``, ``images/``, ``models/``; or its URL,
fetched first by :mod:`provision.bundle.remote`), the vendor's ``.run`` files from ``--run-files DIR``,
images as ``docker save`` tarballs or saved from a local engine by reference, weights archives from
``--weights DIR``. The OS repositories are taken with the mirror's metadata and signatures, or re-signed
by the bundle (``sign_repos``, :mod:`provision.bundle.repos`); or, with ``closures`` (``--resolve``), the
packages the roles install are resolved with their dependencies from the distributions' mirrors the
inventory names (:mod:`provision.bundle.closure`) into repositories the bundle writes and signs.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import tarfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from provision import __version__
from provision.ascend import files as ascend_files
from provision.bundle import closure, repos
from provision.bundle import manifest as mf
from provision.bundle.needs import Need, Plan, apt_file_wanted
from provision.errors import InputError

Say = Callable[[str], None]
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")
SUM_FOLDERS = ("ascend", "images", "models")
"""Folders whose files the roles check against a ``sha256sums.txt`` beside them (the bundle writes it)."""


@dataclass(frozen=True, slots=True)
class Sources:
    mirror: Path | None = None
    mirror_url: str | None = None
    """A mirror served over HTTP: what the plan needs is fetched into ``<FILE>.mirror/`` first."""
    run_files: Path | None = None
    images: tuple[str, ...] = ()
    weights: Path | None = None
    closures: tuple[closure.Group, ...] = ()
    """OS packages resolved from the distributions' mirrors instead of repositories taken from ``mirror``."""


@dataclass(slots=True)
class Item:
    """One file of the bundle and where it comes from."""

    path: str
    kind: mf.Kind
    version: str
    source: str
    origin: Path | None = None
    expected: str | None = None
    image_ref: str | None = None
    """Saved from the local engine (``docker save``) instead of copied from ``origin``."""
    variables: tuple[str, ...] = ()


@dataclass(slots=True)
class Result:
    output: Path
    files: int
    bytes: int
    archive_bytes: int
    copied: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0
    repo_key: str | None = None
    """The key the OS repositories were re-signed with (``sign_repos``)."""
    packages: int = 0
    """OS packages of the resolved closures (``Sources.closures``), and how many were downloaded now."""
    downloaded: int = 0


def work_dir(output: Path) -> Path:
    return output.with_name(output.name + ".work")


def check_output(output: Path) -> None:
    if not output.name.endswith(ARCHIVE_SUFFIXES):
        raise InputError(f"-o {output}: the bundle's name must end in {', '.join(ARCHIVE_SUFFIXES)}")
    if not output.parent.is_dir():
        raise InputError(f"-o {output}: folder {output.parent} does not exist")
    if output.is_dir():
        raise InputError(f"-o {output}: is a folder")


def check_sources(sources: Sources) -> None:
    for option, folder in (
        ("--from-mirror", sources.mirror),
        ("--run-files", sources.run_files),
        ("--weights", sources.weights),
    ):
        if folder is not None and not folder.is_dir():
            raise InputError(f"{option} {folder}: not a folder")


# ------------------------------------------------------------------------------------------ resolve


def resolve(plan: Plan, sources: Sources) -> tuple[list[Item], list[str]]:
    """Every file of the bundle and where it comes from, checked; (items, skipped optional needs).

    InputError listing every problem when something needed cannot be had intact.
    """
    problems: list[str] = []
    items: dict[str, Item] = {}
    skipped: list[str] = []
    images = _image_candidates(sources, problems)
    # "one of" groups (a vendor file per NPU line): what each group found, and what it did not
    groups: dict[str, list[tuple[Need, list[str]]]] = {}
    for path, need in plan.unique().items():
        item: Item | None
        if need.kind == "os-repo":
            for tree_item in _os_repo(need, sources.mirror, problems):
                items.setdefault(tree_item.path, tree_item)
        elif need.kind in ("run-file", "exporter"):
            own: list[str] = []
            item = _checked_file(
                need, [sources.run_files, _sub(sources.mirror, "ascend")], own, "--run-files"
            )
            if item is not None:
                items[path] = item
            if need.one_of:
                groups.setdefault(need.one_of, []).append((need, own))
            else:
                problems += own
        elif need.kind == "image":
            item = _image(need, images, problems)
            if item is not None:
                items[path] = item
        elif need.kind == "weights":
            before = len(problems)
            item = _checked_file(
                need, [sources.weights, _sub(sources.mirror, "models")], problems, "--weights"
            )
            if item is not None:
                items[path] = item
            elif len(problems) == before + 1 and problems[-1].startswith(f"{need.path}: not found"):
                # Weights are optional: a site may keep them on another server (model_url) or on the nodes.
                problems.pop()
                skipped.append(f"{need.path} ({need.why}): not found in --weights or the mirror's models/")
    for group, members in groups.items():
        absent = [need.path for need, own in members if own and own[0].startswith(f"{need.path}: not found")]
        problems += [problem for need, own in members if need.path not in absent for problem in own]
        if len(absent) == len(members):
            names = ", ".join(PurePosixPath(path).name for path in absent)
            problems.append(
                f"{group}: none of {names} found in --run-files or the mirror's ascend/ (one per NPU line: "
                "set ascend_driver_chip / cann_chip in the inventory to need only your line's)"
            )
        elif absent:
            have = [PurePosixPath(need.path).name for need, _own in members if need.path not in absent]
            skipped.append(
                f"{group} of the other NPU lines: {', '.join(PurePosixPath(p).name for p in absent)} "
                f"(the bundle has {', '.join(have)})"
            )
    needed = {normalize_ref(need.version) for need in plan.unique().values() if need.kind == "image"}
    given = {ref for ref, (_tar, how) in images.items() if how in sources.images}
    for name in sorted(given - needed):
        problems.append(
            f"--image {images[name][1]}: holds {name}, which no node needs (needed: "
            f"{', '.join(sorted(n.version for n in plan.unique().values() if n.kind == 'image')) or 'none'})"
        )
    if problems:
        raise InputError("cannot build the bundle:\n  " + "\n  ".join(problems))
    return sorted(items.values(), key=lambda item: item.path), skipped


def _sub(folder: Path | None, name: str) -> Path | None:
    return folder / name if folder is not None and (folder / name).is_dir() else None


def _os_repo(need: Need, mirror: Path | None, problems: list[str]) -> list[Item]:
    if mirror is None:
        problems.append(
            f"{need.why}: no --from-mirror DIR to take it from (fetching packages from the distribution's "
            "mirrors, dnf download --resolve / apt-get download, is not implemented yet)"
        )
        return []
    roots = sorted(p for p in mirror.glob(need.path) if (p / need.marker).is_file())
    if not roots:
        problems.append(f"{need.why}: {mirror} has no {need.path}/{need.marker}")
        return []
    items = []
    for root in roots:
        for rel in mf.relative_files(root):
            if need.deb_arch and not apt_file_wanted(rel, need.deb_arch):
                continue
            path = f"{root.relative_to(mirror).as_posix()}/{rel}"
            items.append(Item(path, "os-repo", need.version, f"mirror {mirror}", root / rel))
    if need.deb_arch:
        items += _ubuntu_pool(need, mirror, roots[0], problems)
    return items


def _ubuntu_pool(need: Need, mirror: Path, suite: Path, problems: list[str]) -> list[Item]:
    """The .deb files a suite's ``Packages`` index lists for the node's architecture, and the apt keys."""
    ubuntu = mirror / "ubuntu"
    items = [
        Item(f"ubuntu/{key.name}", "os-key", need.version, f"mirror {mirror}", key)
        for key in sorted([*ubuntu.glob("*.asc"), *ubuntu.glob("*.gpg")])
    ]
    for index in sorted(suite.glob(f"*/binary-{need.deb_arch}/Packages*")):
        if index.name not in ("Packages", "Packages.gz"):
            continue
        data = gzip.decompress(index.read_bytes()) if index.suffix == ".gz" else index.read_bytes()
        for line in data.decode("utf-8", errors="replace").splitlines():
            if line.startswith("Filename:"):
                rel = line.split(":", 1)[1].strip()
                deb = ubuntu / rel
                if not deb.is_file():
                    problems.append(f"{index.relative_to(mirror)} lists {rel}, which {ubuntu} lacks")
                else:
                    items.append(Item(f"ubuntu/{rel}", "os-repo", need.version, f"mirror {mirror}", deb))
    return items


def _checked_file(
    need: Need, folders: Sequence[Path | None], problems: list[str], option: str
) -> Item | None:
    """A file found in the first folder that has it, whose sha256 matches what is expected of it."""
    name = Path(need.path).name
    looked = [folder for folder in folders if folder is not None]
    origin = next((folder / name for folder in looked if (folder / name).is_file()), None)
    if origin is None:
        where = ", ".join(map(str, looked)) or f"nowhere: give {option} DIR or --from-mirror DIR"
        problems.append(f"{need.path}: not found ({need.why}); looked in {where}")
        return None
    expected, said = need.sha256, need.pinned_in
    if expected is None:
        for folder in looked:
            listed = mf.read_sums(folder / mf.SUMS).get(name)
            if listed:
                expected, said = listed, str(folder / mf.SUMS)
                break
    if expected is None:
        problems.append(
            f"{origin}: no sha256 to check it against: list it in {origin.parent / mf.SUMS} (sha256sum "
            f"format, the values the vendor publishes) or pin it in {need.pinned_in or _pin_variable(need)}"
        )
        return None
    actual = mf.sha256_file(origin)
    if actual != expected:
        problems.append(
            f"{origin}: sha256 {actual} does not match {expected} ({said}): it is corrupted or not the "
            "vendor's file"
        )
        return None
    kind: mf.Kind = (
        "run-file" if need.kind == "run-file" else "exporter" if need.kind == "exporter" else "weights"
    )
    return Item(need.path, kind, need.version, str(origin.parent), origin, expected)


def _pin_variable(need: Need) -> str:
    if need.kind == "exporter":
        return "monitoring_npu_exporter_checksum"
    if need.kind == "weights":
        return "the profile's model_sha256"
    return ascend_files.pin_variable(Path(need.path).name)


def repo_tags(tar: Path) -> list[str]:
    """The references a ``docker save`` tarball holds (``RepoTags`` of its ``manifest.json``)."""
    try:
        with tarfile.open(tar) as archive:
            member = archive.extractfile("manifest.json")
            data = json.load(member) if member is not None else []
    except (tarfile.TarError, KeyError, OSError, ValueError) as exc:
        raise InputError(f"{tar}: not a docker save tarball (no readable manifest.json: {exc})") from None
    return [normalize_ref(tag) for entry in data for tag in entry.get("RepoTags") or []]


def normalize_ref(reference: str) -> str:
    """``docker.io/library/busybox:1`` and ``busybox:1`` are one image."""
    for prefix in ("docker.io/library/", "docker.io/", "index.docker.io/library/"):
        if reference.startswith(prefix):
            return reference[len(prefix) :]
    return reference


def _image_candidates(sources: Sources, problems: list[str]) -> dict[str, tuple[Path | None, str]]:
    """Image reference -> (its tarball, or None to ``docker save`` it; how it was given)."""
    found: dict[str, tuple[Path | None, str]] = {}
    mirror_images = _sub(sources.mirror, "images")
    for tar in sorted(mirror_images.glob("*.tar")) if mirror_images else []:
        try:
            tags = repo_tags(tar)
        except InputError:
            continue  # the mirror's other files are not this build's business
        for tag in tags:
            found.setdefault(tag, (tar, str(tar)))
    for given in sources.images:
        path = Path(given)
        if path.is_file():
            try:
                tags = repo_tags(path)
            except InputError as exc:
                problems.append(str(exc))
                continue
            if not tags:
                problems.append(
                    f"--image {given}: the tarball names no image (docker save IMAGE:TAG, not an id)"
                )
            for tag in tags:
                found[tag] = (path, given)
        elif given.endswith((".tar", ".tar.gz", ".tgz")) or given.startswith(("/", "./", "../")):
            problems.append(f"--image {given}: no such file")
        else:
            found[normalize_ref(given)] = (None, given)
    return found


def _image(need: Need, images: Mapping[str, tuple[Path | None, str]], problems: list[str]) -> Item | None:
    ref = normalize_ref(need.version)
    if ref not in images:
        problems.append(
            f"{need.path}: no image {need.version} ({need.why}): give --image TAR (docker save "
            f"{need.version}) or --image {need.version} to save it from the local docker engine"
        )
        return None
    tar, given = images[ref]
    if tar is None:
        return Item(
            need.path,
            "image",
            need.version,
            f"docker save {given}",
            image_ref=given,
            expected=need.sha256,
            variables=need.variables,
        )
    expected, said = need.sha256, need.pinned_in
    if expected is None:
        expected = mf.read_sums(tar.parent / mf.SUMS).get(tar.name)
        said = str(tar.parent / mf.SUMS)
        sidecar = tar.with_name(tar.name + ".sha256")
        if expected is None and sidecar.is_file():
            expected, said = next(iter(mf.read_sums(sidecar).values()), None), str(sidecar)
    if expected is not None:
        actual = mf.sha256_file(tar)
        if actual != expected:
            problems.append(
                f"{tar}: sha256 {actual} does not match {expected} ({said}): the tarball is damaged"
            )
            return None
    return Item(need.path, "image", need.version, given, tar, expected, variables=need.variables)


# ------------------------------------------------------------------------------------------ gather


def build(
    plan: Plan,
    sources: Sources,
    output: Path,
    *,
    inventory: str,
    sign_key: str | None = None,
    gnupg_home: Path | None = None,
    sign_repos: bool = False,
    repo_key: str | None = None,
    say: Say | None = None,
) -> Result:
    """Resolve, gather into ``<output>.work/`` (reusing matching files), write the manifest, the archive.

    ``sign_repos`` (or a ``repo_key``): the OS repositories are re-signed by the bundle
    (:mod:`provision.bundle.repos`) with ``repo_key``, else a key generated into ``<output>.gnupg/``.
    """
    started = time.monotonic()
    report = say or (lambda _text: None)
    check_output(output)
    check_sources(sources)
    full_plan = plan
    if sources.closures:  # the OS repositories are the bundle's own: nothing of them from --from-mirror
        closure.check_tools(sources.closures)
        plan = Plan(
            [replace(node, needs=[n for n in node.needs if n.kind != "os-repo"]) for node in plan.nodes]
        )
    if sources.mirror_url is not None:
        from provision.bundle.remote import fetch_mirror

        given = _image_candidates(Sources(images=sources.images), [])
        wanted = {normalize_ref(n.version) for n in plan.unique().values() if n.kind == "image"}
        fetched = fetch_mirror(
            plan,
            sources.mirror_url,
            output.with_name(output.name + ".mirror"),
            images=bool(wanted - set(given)),
            local=(sources.run_files, sources.weights),
            say=report,
        )
        sources = replace(sources, mirror=fetched, mirror_url=None)
    items, skipped = resolve(plan, sources)
    # Resolved repositories carry the bundle's own metadata: only the bundle's key can vouch for it.
    sign_repos = sign_repos or repo_key is not None or bool(sources.closures)
    releases: dict[str, Path] = {}
    if sign_repos:  # the suites' Release files and signatures, the mirror's keys: the bundle writes its own
        for item in items:
            if item.path.endswith("/Release") and repos.replaced(item.path) and item.origin is not None:
                releases[item.path.rsplit("/", 1)[0]] = item.origin
        items = [item for item in items if not repos.replaced(item.path)]
        key, home, generated = repos.ensure_key(output, repo_key, gnupg_home)  # a bad key: before any copy
        if generated:
            report(f"generated the bundle's repository key in {repos.gnupg_dir(output)} (keep it private)")
    # Signing with the build's own key starts a gpg-agent in its home: stopped however the build ends
    # (a refused closure, a failed copy), or it outlives the command.
    own_agent = home if sign_repos and home == repos.gnupg_dir(output) else None
    try:
        resolved = None
        if sources.closures:  # after every check above: nothing is downloaded for a build that is refused
            resolved = closure.resolve(sources.closures, closure.closure_dir(output), report)
            items += _closure_items(resolved)
            for item in items:
                if item.path.endswith("/Release") and repos.replaced(item.path) and item.origin is not None:
                    releases[item.path.rsplit("/", 1)[0]] = item.origin
            items = [item for item in items if not repos.replaced(item.path)]
        work = work_dir(output)
        work.mkdir(exist_ok=True)
        result = Result(output=output, files=0, bytes=0, archive_bytes=0, skipped=skipped)
        if resolved is not None:
            result.packages, result.downloaded = len(resolved.packages), resolved.downloaded
        entries: list[mf.FileEntry] = []
        for item in items:
            dest = work / item.path
            sha = _gather(item, dest, result, report)
            entries.append(
                mf.FileEntry(
                    path=item.path,
                    sha256=sha,
                    size=dest.stat().st_size,
                    kind=item.kind,
                    source=item.source,
                    version=item.version,
                    variables=list(item.variables),
                )
            )
        if sign_repos:
            result.repo_key = key
            entries += repos.resign(work, key, home, releases, source=inventory)
    finally:
        if own_agent is not None:
            repos.stop_agent(own_agent)
    entries += _sum_files(work, entries)
    wanted = {entry.path for entry in entries}
    for rel in mf.relative_files(work, skip=mf.OWN_FILES):
        if rel not in wanted:  # left by an earlier build for another inventory
            (work / rel).unlink()
    manifest = mf.Manifest(
        created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        provision=__version__,
        inventory=inventory,
        nodes=[
            mf.NodeEntry(
                host=node.host,
                os=node.os,
                arch=node.arch,
                stack=node.stack,
                needs=[f"{n.path}/{n.marker}" if n.marker else n.path for n in node.needs],
            )
            for node in full_plan.nodes
        ],
        files=sorted(entries, key=lambda entry: entry.path),
    )
    data = manifest.dumps()
    (work / mf.MANIFEST).write_bytes(data)
    (work / mf.MANIFEST_SUM).write_text(mf.manifest_sum(data))
    (work / mf.SIGNATURE).unlink(missing_ok=True)
    if sign_key:
        mf.sign(work / mf.MANIFEST, sign_key, gnupg_home)
    report(f"writing {output}")
    write_archive(work, manifest, output)
    result.files = len(entries)
    result.bytes = sum(entry.size for entry in entries)
    result.archive_bytes = output.stat().st_size
    result.seconds = round(time.monotonic() - started, 2)
    return result


def _closure_items(resolved: closure.Resolved) -> list[Item]:
    """The resolved packages (source: the URL each came from) and the metadata the build wrote for them."""
    packages = {package.path: package for package in resolved.packages}
    items = []
    for rel in mf.relative_files(resolved.tree):
        package = packages.get(rel)
        if package is not None:
            items.append(Item(rel, "os-repo", package.version, package.url, package.origin))
        else:
            kind: mf.Kind = "os-key" if rel.endswith(closure.RPM_KEY_NAME) else "os-repo"
            items.append(Item(rel, kind, "", "provision bundle build --resolve", resolved.tree / rel))
    return items


def _gather(item: Item, dest: Path, result: Result, report: Say) -> str:
    if item.image_ref is not None:
        return _saved_image(item, dest, result, report)
    assert item.origin is not None
    expected = item.expected or mf.sha256_file(item.origin)
    if dest.is_file() and mf.sha256_file(dest) == expected:
        result.reused.append(item.path)
        return expected
    if item.kind != "os-repo":  # a repository is thousands of files: its progress is not worth a line each
        report(f"copying {item.path}")
    mf.copy_verified(item.origin, dest, expected)
    result.copied.append(item.path)
    return expected


def _saved_image(item: Item, dest: Path, result: Result, report: Say) -> str:
    from provision.image import engine, transfer

    assert item.image_ref is not None
    client = engine.connect()
    try:
        image_id = str(client.images.get(item.image_ref).id)
    except Exception:  # docker.errors.ImageNotFound and the engine's other refusals
        raise InputError(f"--image {item.image_ref}: no such image on the docker engine") from None
    if dest.is_file() and _config_id(dest) == image_id:
        result.reused.append(item.path)
        return mf.sha256_file(dest)
    report(f"docker save {item.image_ref} -> {item.path}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    saved = transfer.save(client, item.image_ref, dest)
    transfer.checksum_path(dest).unlink(missing_ok=True)  # the folder's sha256sums.txt lists it
    if item.expected is not None and saved.sha256 != item.expected:
        raise InputError(f"docker save {item.image_ref}: sha256 {saved.sha256}, pinned {item.expected}")
    result.copied.append(item.path)
    return saved.sha256


def _config_id(tar: Path) -> str | None:
    """The image id (``sha256:<config digest>``) a ``docker save`` tarball holds."""
    try:
        with tarfile.open(tar) as archive:
            member = archive.extractfile("manifest.json")
            config = str(json.load(member)[0]["Config"]) if member is not None else ""
    except (tarfile.TarError, KeyError, OSError, ValueError, IndexError):
        return None
    digest = config.rsplit("/", 1)[-1].removesuffix(".json")
    return f"sha256:{digest}"


def _sum_files(work: Path, entries: Sequence[mf.FileEntry]) -> list[mf.FileEntry]:
    """``sha256sums.txt`` of each folder whose files the roles check against one."""
    written = []
    for folder in SUM_FOLDERS:
        listed = {
            entry.path.split("/", 1)[1]: entry.sha256
            for entry in entries
            if entry.path.startswith(f"{folder}/") and "/" not in entry.path.split("/", 1)[1]
        }
        path = work / folder / mf.SUMS
        if not listed:
            path.unlink(missing_ok=True)
            continue
        text = mf.sums_text(listed)
        path.write_text(text)
        written.append(
            mf.FileEntry(
                path=f"{folder}/{mf.SUMS}",
                sha256=mf.sha256_file(path),
                size=path.stat().st_size,
                kind="checksums",
                source="provision bundle build",
            )
        )
    return written


def write_archive(root: Path, manifest: mf.Manifest, output: Path) -> None:
    """The archive: the manifest's own files first (a reader checks them before the rest), then every file."""
    partial = output.with_name(f".{output.name}.partial")
    mode = "w:gz" if output.name.endswith((".gz", ".tgz")) else "w"

    def owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    try:
        with tarfile.open(partial, mode) as archive:  # type: ignore[call-overload]
            for name in mf.OWN_FILES:
                if (root / name).is_file():
                    archive.add(root / name, arcname=name, filter=owned_by_root)
            for entry in manifest.files:
                archive.add(root / entry.path, arcname=entry.path, filter=owned_by_root)
        os.replace(partial, output)
    finally:
        partial.unlink(missing_ok=True)
