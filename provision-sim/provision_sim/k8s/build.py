"""The Kubernetes control plane and kubelet, built once from Debian's ``kubernetes`` source.

There is no Kubernetes server binary among the packages this machine reaches, and no Go module proxy. Debian
bookworm's *source* package ``kubernetes`` (1.20.2) carries the whole tree with ``vendor/`` and ``staging/``,
and Debian's Go 1.19 builds it the way 1.20 itself was built (shared/reference/KUBERNETES.md):

- GOPATH mode (``GO111MODULE=off``, the tree at ``$GOPATH/src/k8s.io/kubernetes``): module mode with Go 1.19
  refuses the vendored ``go.mod``;
- Debian's ``reflect2`` 1.0.2 in place of the vendored 1.0.1, which segfaults at run time under Go >= 1.18;
- ``openapi-gen`` run first: ``pkg/generated/openapi`` is not in the tarball, and the apiserver needs it;
- ``-tags providerless``: no in-tree cloud providers (fewer packages to compile);
- the version stamped through ``-ldflags -X`` as ``hack/lib/version.sh`` does.

Everything lives under ``/var/cache/provision-k8s`` (``$PROVISION_K8S_CACHE`` overrides it)::

    apt/                 a private apt state with only Debian's deb-src lines (the machine's apt is untouched)
    downloads/           the source package as fetched (.dsc, orig tarball, debian tarball)
    <sha256>/            one build, keyed on the orig tarball's sha256
        bin/             kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy
        stamp.json       what was built, how long it took; written last (the "built" marker)
        .lock            held while building, so concurrent callers wait instead of racing
        work/            the GOPATH and Go's build cache while building; removed once built

:func:`prepare` (or ``python -m provision_sim.k8s.build prepare``) is idempotent: once the stamp matches
:data:`SPEC` it returns at once. The build is CPU-heavy (tens of minutes on two cores): it runs under
``nice``, and with one Go worker when the machine is already loaded.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.errors import EnvironmentProblem, ProvisionError

CACHE_ENV = "PROVISION_K8S_CACHE"
DEFAULT_CACHE = Path("/var/cache/provision-k8s")

# The orig tarball of bookworm's `kubernetes` source package (1.20.5+really1.20.2): the cache key, and the
# check that the archive served the tree this recipe is known to build.
SOURCE_PACKAGE = "kubernetes"
SOURCE_SHA256 = "b83c0780efb182d928dc63d46488a847f161f04e40a94b96bf5247dd671ecdfc"
KUBE_VERSION = "v1.20.2"
COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy")

# What a completed build holds; a stamp that differs from this is built again.
SPEC: Mapping[str, Any] = {
    "source_sha256": SOURCE_SHA256,
    "version": KUBE_VERSION,
    "components": list(COMPONENTS),
    "tags": "providerless",
    "recipe": "1",
}

# Debian's archive, as the machine's own sources name it; signed by the keyring the machine trusts.
_DEB_SRC = (
    "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian"
    " bookworm main\n"
    "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security"
    " bookworm-security main\n"
)
_REFLECT2 = Path("/usr/share/gocode/src/github.com/modern-go/reflect2")
_GO = Path("/usr/lib/go-1.19/bin/go")
_KUBE_PKG = "k8s.io/kubernetes"
# openapi-gen's inputs for pkg/generated/openapi: every package tagged `+k8s:openapi-gen=` but these
# (build/root/Makefile.generated_files, KUBE_OPENAPI_TAG_FILES).
_OPENAPI_EXCLUDED = ("vendor/k8s.io/code-generator/", "vendor/k8s.io/sample-apiserver/")

# No step may hang a test session: one component took 17 min on two loaded cores (GOMAXPROCS=1).
STEP_TIMEOUT_S = 2 * 3600.0

Progress = Callable[[str], None]


class BuildError(ProvisionError):
    """Fetching or building Kubernetes failed; the message says which step and shows its output."""


def cache_root() -> Path:
    """``$PROVISION_K8S_CACHE`` or ``/var/cache/provision-k8s``."""
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def build_dir() -> Path:
    """This recipe's build folder: ``<cache>/<sha256 of the source tarball>``."""
    return cache_root() / SOURCE_SHA256


def binary(name: str) -> Path:
    """The path of one built component (valid once :func:`prepare` ran)."""
    if name not in COMPONENTS:
        raise ValueError(f"{name} is not one of {', '.join(COMPONENTS)}")
    return build_dir() / "bin" / name


def stamp_path() -> Path:
    return build_dir() / "stamp.json"


@dataclass(frozen=True)
class BuildReport:
    """What :func:`prepare` found or did. ``cached`` is True when nothing had to be done."""

    cached: bool
    seconds: float
    steps: Mapping[str, float]
    binaries: Mapping[str, int]

    def summary(self) -> str:
        sizes = ", ".join(f"{name} {size / 2**20:.0f} MiB" for name, size in self.binaries.items())
        if self.cached:
            return f"Kubernetes {KUBE_VERSION} cached at {build_dir()} ({sizes})"
        steps = ", ".join(f"{name} {secs:.0f} s" for name, secs in self.steps.items())
        return f"Kubernetes {KUBE_VERSION} built at {build_dir()} in {self.seconds:.0f} s ({steps}; {sizes})"


def read_stamp() -> dict[str, Any] | None:
    """The stamp of a completed build, or None when absent or unreadable."""
    try:
        data = json.loads(stamp_path().read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_built() -> bool:
    """True when the cache holds every component of :data:`SPEC`."""
    stamp = read_stamp()
    return (
        stamp is not None
        and stamp.get("spec") == dict(SPEC)
        and all(os.access(binary(name), os.X_OK) for name in COMPONENTS)
    )


def prepare(*, progress: Progress | None = None, force: bool = False) -> BuildReport:
    """Fetch the source and build the components into :func:`build_dir` unless already there.

    Safe to call from several processes at once: a file lock serialises them, and the late comers find the
    stamp and return. A failed build raises :class:`BuildError` (with the failing command's output) and
    leaves no stamp; Go's build cache is kept, so the next try resumes where this one stopped.
    """
    say = progress or (lambda _text: None)
    started = time.monotonic()
    if not force and is_built():
        return _report_from_stamp(started)
    root = build_dir()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot create the Kubernetes cache {root}: {exc} (set ${CACHE_ENV})"
        ) from exc
    with locked(root / ".lock"):
        if not force and is_built():  # another process finished it while we waited
            return _report_from_stamp(started)
        stamp_path().unlink(missing_ok=True)
        steps, debian_version = _build(say)
        total = time.monotonic() - started
        sizes = {name: binary(name).stat().st_size for name in COMPONENTS}
        stamp = {
            "spec": dict(SPEC),
            "debian_version": debian_version,
            "go": _go_version(),
            "steps": steps,
            "seconds": round(total, 1),
            "binaries": sizes,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        tmp = stamp_path().with_suffix(".tmp")
        tmp.write_text(json.dumps(stamp, indent=2) + "\n")
        tmp.replace(stamp_path())
        shutil.rmtree(root / "work", ignore_errors=True)
    return BuildReport(cached=False, seconds=total, steps=steps, binaries=sizes)


def _report_from_stamp(started: float) -> BuildReport:
    stamp = read_stamp() or {}
    return BuildReport(
        cached=True,
        seconds=time.monotonic() - started,
        steps=dict(stamp.get("steps", {})),
        binaries=dict(stamp.get("binaries", {})),
    )


# --------------------------------------------------------------------------------------------- steps


def _build(say: Progress) -> tuple[dict[str, float], str]:
    for needed, package in ((_GO, "golang-go"), (_REFLECT2, "golang-github-modern-go-reflect2-dev")):
        if not needed.exists():
            raise EnvironmentProblem(f"{needed} is missing: install Debian's {package} (make deps)")
    if shutil.which("dpkg-source") is None:
        raise EnvironmentProblem("dpkg-source is missing: install Debian's dpkg-dev (make deps)")
    steps: dict[str, float] = {}

    def step(name: str, message: str, action: Callable[[], None]) -> None:
        say(message)
        began = time.monotonic()
        action()
        steps[name] = round(time.monotonic() - began, 1)

    work = build_dir() / "work"
    tree = work / "gopath" / "src" / _KUBE_PKG
    dsc: list[Path] = []

    step("fetch", f"fetching Debian's {SOURCE_PACKAGE} source package", lambda: dsc.append(_fetch()))
    step("unpack", "unpacking the source tree", lambda: _unpack(dsc[0], tree))
    env = _go_env(work)
    step("openapi-gen", "generating pkg/generated/openapi", lambda: _openapi(tree, work, env))
    bin_dir = build_dir() / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in COMPONENTS:
        step(name, f"building {name} (Go, minutes)", functools.partial(_go_build, tree, name, bin_dir, env))
    return steps, _debian_version(dsc[0])


def _apt_options() -> list[str]:
    state = cache_root() / "apt"
    (state / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    (state / "sources.list.d").mkdir(exist_ok=True)
    sources = state / "sources.list"
    if not sources.exists() or sources.read_text() != _DEB_SRC:
        sources.write_text(_DEB_SRC)
    return [
        f"-oDir::Etc::SourceList={sources}",
        f"-oDir::Etc::SourceParts={state / 'sources.list.d'}",
        f"-oDir::State::Lists={state / 'lists'}",
    ]


def _fetch() -> Path:
    """The .dsc of the source package, downloaded with a private apt state holding only deb-src lines."""
    downloads = cache_root() / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    found = _verified_dsc(downloads)
    if found is not None:
        return found
    options = _apt_options()
    run_step(["apt-get", "-q", *options, "update"], "read Debian's source index (apt-get update)")
    run_step(
        ["apt-get", "-q", *options, "source", "--download-only", SOURCE_PACKAGE],
        f"download the {SOURCE_PACKAGE} source package (apt-get source)",
        cwd=downloads,
    )
    found = _verified_dsc(downloads)
    if found is None:
        tarballs = ", ".join(f"{p.name} {_sha256(p)}" for p in downloads.glob("*.orig.tar.*")) or "none"
        raise BuildError(
            f"Debian's {SOURCE_PACKAGE} source package in {downloads} is not the one this recipe builds: "
            f"expected an orig tarball with sha256 {SOURCE_SHA256}, found {tarballs}"
        )
    return found


def orig_tarball() -> Path:
    """The verified orig tarball of the source package (fetched when the cache has none)."""
    dsc = _fetch()
    [orig] = [p for p in dsc.parent.glob(f"{SOURCE_PACKAGE}_*.orig.tar.*") if p.name in dsc.read_text()]
    return orig


def _verified_dsc(downloads: Path) -> Path | None:
    for dsc in sorted(downloads.glob(f"{SOURCE_PACKAGE}_*.dsc"), reverse=True):
        origs = [p for p in downloads.glob(f"{SOURCE_PACKAGE}_*.orig.tar.*") if p.name in dsc.read_text()]
        if origs and _sha256(origs[0]) == SOURCE_SHA256:
            return dsc
    return None


def _debian_version(dsc: Path) -> str:
    match = re.search(r"^Version:\s*(\S+)", dsc.read_text(), re.MULTILINE)
    return match.group(1) if match else "unknown"


def _unpack(dsc: Path, tree: Path) -> None:
    gopath = tree.parents[2]
    if gopath.exists():  # a half-unpacked tree from an earlier try (Go's build cache beside it is kept)
        shutil.rmtree(gopath)
    tree.parent.mkdir(parents=True)
    # With Debian's patches (CVE fixes) applied.
    run_step(["dpkg-source", "-x", str(dsc), str(tree)], "unpack the source package (dpkg-source)")
    vendored = tree / "vendor" / "github.com" / "modern-go" / "reflect2"
    shutil.rmtree(vendored)
    shutil.copytree(_REFLECT2, vendored, ignore=shutil.ignore_patterns("go.mod", "*_test.go"))


def _go_env(work: Path) -> dict[str, str]:
    busy = os.getloadavg()[0] >= (os.cpu_count() or 1)
    env = {
        "GOPATH": str(work / "gopath"),
        "GOCACHE": str(work / "gocache"),
        "GO111MODULE": "off",
        "GOFLAGS": "",
        "CGO_ENABLED": "0",
        "GOTOOLCHAIN": "local",
        "HOME": str(work),
        "PATH": f"{_GO.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
    }
    if busy:  # others are working on this machine: one compiler at a time
        env["GOMAXPROCS"] = "1"
    return env


def _go(env: Mapping[str, str]) -> list[str]:
    parallel = ["-p", "1"] if env.get("GOMAXPROCS") == "1" else []
    return ["nice", "-n", "10", str(_GO), "build", *parallel, "-trimpath"]


def _openapi(tree: Path, work: Path, env: Mapping[str, str]) -> None:
    generator = work / "openapi-gen"
    run_step(
        [*_go(env), "-o", str(generator), "./vendor/k8s.io/kube-openapi/cmd/openapi-gen"],
        "build openapi-gen",
        env=env,
        cwd=tree,
    )
    packages = ",".join(f"{_KUBE_PKG}/{d}" for d in openapi_dirs(tree))
    run_step(
        [
            "nice",
            "-n",
            "10",
            str(generator),
            "--logtostderr",
            "-i",
            packages,
            "-p",
            f"{_KUBE_PKG}/pkg/generated/openapi",
            "-O",
            "zz_generated.openapi",
            "-h",
            str(tree / "vendor/k8s.io/code-generator/hack/boilerplate.go.txt"),
            "-r",
            str(work / "openapi-violations.report"),
        ],
        "generate pkg/generated/openapi (openapi-gen)",
        env=env,
        cwd=tree,
    )
    if not (tree / "pkg/generated/openapi/zz_generated.openapi.go").exists():
        raise BuildError("openapi-gen ran but wrote no pkg/generated/openapi/zz_generated.openapi.go")


def openapi_dirs(tree: Path) -> list[str]:
    """The packages (relative, staging/src named as vendor/) tagged ``+k8s:openapi-gen=``, as 1.20's Makefile
    finds them: Go files carrying a ``// +k8s:`` comment-tag, outside ``vendor/``, ``_*`` and ``.*``."""
    tagged: set[str] = set()
    tag = re.compile(r"^// *\+k8s:", re.MULTILINE)
    for top, dirs, files in os.walk(tree):
        rel = os.path.relpath(top, tree)
        if rel == ".":
            dirs[:] = [d for d in dirs if d != "vendor" and not d.startswith(("_", "."))]
        for name in files:
            if not name.endswith(".go"):
                continue
            with contextlib.suppress(OSError, UnicodeDecodeError):
                text = (Path(top) / name).read_text()
                if tag.search(text) and "+k8s:openapi-gen=" in text:
                    package = re.sub(r"^staging/src/", "vendor/", rel)
                    if not package.startswith(_OPENAPI_EXCLUDED) and not package.startswith("staging/"):
                        tagged.add(package)
    return sorted(tagged)


def _ldflags() -> str:
    major, minor = KUBE_VERSION.lstrip("v").split(".")[:2]
    values = {
        "gitVersion": KUBE_VERSION,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
        "buildDate": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    flags = ["-s", "-w"]
    for package in ("client-go/pkg/version", "component-base/version"):
        flags += [f"-X {_KUBE_PKG}/vendor/k8s.io/{package}.{key}={value}" for key, value in values.items()]
    return " ".join(flags)


def _go_build(tree: Path, name: str, bin_dir: Path, env: Mapping[str, str]) -> None:
    partial = bin_dir / f".{name}.partial"
    run_step(
        [
            *_go(env),
            "-tags",
            "providerless",
            "-ldflags",
            _ldflags(),
            "-o",
            str(partial),
            f"{_KUBE_PKG}/cmd/{name}",
        ],
        f"build {name}",
        env=env,
        cwd=tree,
    )
    partial.replace(bin_dir / name)


def _go_version() -> str:
    done = subprocess.run([str(_GO), "version"], capture_output=True, text=True, check=False)
    return done.stdout.strip()


# --------------------------------------------------------------------------------------------- helpers


def run_step(
    argv: Sequence[str],
    what: str,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = STEP_TIMEOUT_S,
) -> None:
    """Run one step of a build; on failure raise :class:`BuildError` naming ``what``, with its output."""
    # Output goes to a file, not a pipe: a Go build writes little, but a pipe nobody reads could still fill.
    with tempfile.TemporaryFile(mode="w+") as log:
        try:
            done = subprocess.run(
                list(argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
                env={**os.environ, **(env or {})},
                cwd=cwd,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            returncode: int | str = f"killed after {timeout:.0f} s"
        else:
            returncode = done.returncode
        if returncode != 0:
            log.seek(0)
            tail = "\n".join(log.read().strip().splitlines()[-30:])
            raise BuildError(f"could not {what} ({returncode}): {' '.join(argv)[:400]}\n{tail}")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing): concurrent builders wait for each other."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m provision_sim.k8s.build", description=__doc__.split("\n")[0]
    )
    parser.add_argument("command", choices=("prepare", "status"))
    parser.add_argument("--force", action="store_true", help="build again even when the cache is complete")
    args = parser.parse_args(argv)
    if args.command == "status":
        print(json.dumps(read_stamp() if is_built() else None, indent=2))
        return 0 if is_built() else 1
    try:
        report = prepare(progress=lambda text: print(f"[k8s] {text}", flush=True), force=args.force)
    except ProvisionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.summary())
    from provision_sim.k8s import node  # the node's parts need the source tarball this build fetched

    try:
        parts = node.node_parts()
    except ProvisionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"node parts (pause image, CNI plugins) at {parts.pause_image.parent}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
