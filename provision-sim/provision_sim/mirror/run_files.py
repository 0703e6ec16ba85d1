"""The vendor ``.run`` artifacts of a local (air-gapped) mirror, generated for the simulated nodes.

:func:`build_artifacts` writes real self-extracting archives with Huawei's file names — a POSIX ``sh``
header in makeself's layout followed by a gzip'd tar payload — and refreshes ``sha256sums.txt``
(``sha256sum`` format, every ``*.run`` of the folder, so several versions can share one folder for
upgrade tests). The payload holds ``install.sh``, ``package.json`` (the manifest) and a copy of the
simulator's ``ascendsim`` engine, so a ``.run`` is self-contained: on a node it needs only ``sh``,
coreutils, ``tar``, ``gzip`` and ``python3``.

Header behaviour (makeself's): ``Verifying archive integrity...  100%   SHA256 checksums are OK. All
good.`` (a corrupted file: ``Error in SHA256 checksums: ...``, exit 1), the free-space check
(``Not enough space left in ...``, exit 1; also forced by the node's ``disk_full`` fault knob),
``Uncompressing <LABEL>  100%  ``, then ``./install.sh <args>`` whose exit code is the ``.run``'s.
Header options: ``--check`` (verify only), ``--version``, ``--info``, ``--list``, ``--noexec``, ``--keep``,
``--target DIR``, ``--nodiskspace``, ``--help``; ``--quiet`` silences the header and is passed on; every
other argument goes to the installer (see ``ascendsim/installer.py`` for the package flags).

Serving: the folder is plain static files; the cluster code serves it, e.g.
``python3 -m http.server --bind <controller address> --directory DEST PORT`` in the controller
namespace, and roles fetch ``http://<address>:<port>/<name>.run`` with ``get_url: checksum: sha256:...``
taken from ``sha256sums.txt``.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import tarfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.ascend.hardware import load_hardware, model_for_line
from provision.errors import ProvisionError
from provision_sim.hardware import node_source

__all__ = [
    "COMPONENTS",
    "Artifact",
    "artifact_specs",
    "build_artifacts",
    "build_run",
    "write_sha256sums",
]

COMPONENTS = ("driver", "firmware", "toolkit", "ops", "nnal", "docker-runtime")
"""Buildable components; ``ops`` means the 910B operator package (``kernels`` for CANN <= 8.3)."""

SHA256SUMS = "sha256sums.txt"
_MTIME = 1_700_000_000  # fixed: identical inputs give byte-identical files (stable checksums)

_FW_RANGE: dict[tuple[int, ...], str] = {
    (23, 0): "7.1.99",
    (24, 1): "7.2.99",
    (25, 0): "7.7.99",
    (25, 2): "7.7.99",
    (25, 3): "7.8.99",
    (25, 5): "7.8.99",
}
_DRIVER_INNER: dict[tuple[int, ...], str] = {
    (24, 1): "V100R001C15SPC006B220",
    (25, 0): "V100R001C21SPC002B220",
}


@dataclass(frozen=True)
class Artifact:
    """One ``.run`` to build: its file name, makeself label and manifest."""

    name: str
    label: str
    manifest: dict[str, Any]


def _vt(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version))


def _check_version(what: str, version: str) -> None:
    if not re.fullmatch(r"[0-9][0-9A-Za-z.]*", version):
        raise ProvisionError(f"invalid {what} version {version!r}")


def artifact_specs(
    *,
    arch: str = "aarch64",
    driver: str = "25.5.1",
    firmware: str = "7.8.0.6.201",
    cann: str = "9.1.0",
    nnal: str | None = None,
    docker_runtime: str = "26.1.0",
    components: Iterable[str] = COMPONENTS,
    driver_compatible_fw: tuple[str, str] | None = None,
    line: str = "910b",
) -> list[Artifact]:
    """The artifacts :func:`build_artifacts` would write (names, labels, manifests).

    ``line`` is the NPU line (``910b``, ``a3``, ``310p``): the driver, firmware and operator package carry
    its vendor names (provision/data/hardware.yml, the names the roles fetch); the toolkit, NNAL and the
    Docker runtime are one file for every line."""
    if arch not in ("aarch64", "x86_64"):
        raise ProvisionError(f"arch must be aarch64 or x86_64, got {arch!r}")
    nnal = nnal or cann
    for what, v in (
        ("driver", driver),
        ("firmware", firmware),
        ("CANN", cann),
        ("NNAL", nnal),
        ("docker runtime", docker_runtime),
    ):
        _check_version(what, v)
    wanted = list(components)
    unknown = set(wanted) - set(COMPONENTS) - {"kernels"}
    if unknown:
        raise ProvisionError(f"unknown components {sorted(unknown)}; known: {', '.join(COMPONENTS)}")
    mm: tuple[int, ...] = _vt(driver)[:2]
    fw_range = list(driver_compatible_fw or ("7.0.0", _FW_RANGE.get(mm, "7.99.99")))
    ops = "ops" if _vt(cann)[:2] >= (8, 5) else "kernels"
    model = model_for_line(line)
    if model is None:
        known = ", ".join(m.base_image_tag for m in load_hardware().models.values())
        raise ProvisionError(f"unknown NPU line {line!r}; known: {known}")
    table: dict[str, tuple[str, str, str, dict[str, Any]]] = {
        "driver": (
            model.driver_file(driver, arch),
            "ASCEND DRIVER RUN PACKAGE",
            driver,
            {"compatible_fw": fw_range, "innerversion": _DRIVER_INNER.get(mm, "V100R001C25SPC001B220")},
        ),
        "firmware": (
            model.firmware_file(firmware),
            # the A2 label is the captured one; the other lines' are written the same way (no capture)
            f"ASCEND-HDK-{line.upper()}-NPU FIRMWARE RUN PACKAGE",
            firmware,
            {"package_version": driver},
        ),
        "toolkit": (
            f"Ascend-cann-toolkit_{cann}_linux-{arch}.run",
            "ASCEND-CANN-TOOLKIT RUN PACKAGE",
            cann,
            {},
        ),
        "ops": (
            model.cann_ops_file(cann, arch, new_layout=ops == "ops"),
            f"ASCEND-CANN-{line.upper()}-OPS RUN PACKAGE"
            if ops == "ops"
            else f"ASCEND-CANN-KERNELS-{line.upper()} RUN PACKAGE",
            cann,
            {},
        ),
        "nnal": (f"Ascend-cann-nnal_{nnal}_linux-{arch}.run", "ASCEND-CANN-NNAL RUN PACKAGE", nnal, {}),
        "docker-runtime": (
            f"Ascend-docker-runtime_{docker_runtime}_linux-{arch}.run",
            "ASCEND DOCKER RUNTIME RUN PACKAGE",
            docker_runtime,
            {},
        ),
    }
    out: list[Artifact] = []
    for comp in COMPONENTS:
        if comp not in wanted and not (comp == "ops" and "kernels" in wanted):
            continue
        name, label, version, extra = table[comp]
        component = ops if comp == "ops" else comp
        out.append(Artifact(name, label, _manifest(component, name, version, arch, line, extra)))
    return out


def _manifest(
    component: str, name: str, version: str, arch: str, line: str, extra: dict[str, Any]
) -> dict[str, Any]:
    return {
        "component": component,
        "name": name.removesuffix(".run"),
        "version": version,
        "arch": arch,
        "chip": line,
        **extra,
    }


def build_artifacts(
    dest: Path,
    *,
    arch: str = "aarch64",
    driver: str = "25.5.1",
    firmware: str = "7.8.0.6.201",
    cann: str = "9.1.0",
    nnal: str | None = None,
    docker_runtime: str = "26.1.0",
    components: Sequence[str] = COMPONENTS,
    driver_compatible_fw: tuple[str, str] | None = None,
    line: str = "910b",
) -> list[Path]:
    """Write the ``.run`` installers into ``dest`` and refresh ``dest/sha256sums.txt``.

    Returns the ``.run`` paths written by this call (``sha256sums.txt`` lists every ``.run`` in
    ``dest``). Packages built for ``arch`` refuse to install on a node of another ``uname -m``
    (firmware excepted, as on real hosts): build ``x86_64`` for simulated nodes on an x86_64 host.
    ``nnal`` defaults to ``cann``. CANN >= 8.5 gets ``Ascend-cann-910b-ops``, older
    ``Ascend-cann-kernels-910b``. Builds are deterministic.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    specs = artifact_specs(
        arch=arch,
        driver=driver,
        firmware=firmware,
        cann=cann,
        nnal=nnal,
        docker_runtime=docker_runtime,
        components=components,
        driver_compatible_fw=driver_compatible_fw,
        line=line,
    )
    payload_engine = _engine_files()
    written = [build_run(dest / spec.name, spec.label, spec.manifest, payload_engine) for spec in specs]
    write_sha256sums(dest)
    return written


def write_sha256sums(dest: Path) -> Path:
    """``<sha256>  <name>`` for every ``*.run`` in ``dest`` and its ``npu-exporter`` (sorted by name)."""
    listed = [
        p
        for p in sorted(Path(dest).iterdir())
        if p.is_file() and (p.suffix == ".run" or p.name == "npu-exporter")
    ]
    lines = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n" for p in listed]
    path = Path(dest) / SHA256SUMS
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(lines), encoding="utf-8")
    tmp.replace(path)
    return path


# ------------------------------------------------------------------------------------------------
# the archive
# ------------------------------------------------------------------------------------------------

INSTALL_SH = """#!/bin/sh
# Entry point of the simulated package (provision sim): runs the bundled ascendsim installer.
here=$(cd "$(dirname "$0")" && pwd)
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" exec python3 -B -m ascendsim install "$here/package.json" "$@"
"""

HEADER = r"""#!/bin/sh
# This script was generated by provision_sim.mirror.run_files in the layout of Makeself 2.4
# (a self-extracting archive). It is a SIMULATED Huawei package for provision's test cluster.
umask 077
label="@LABEL@"
archname="@NAME@"
version="@VERSION@"
script="./install.sh"
sha256="@SHA256@"
offset=@OFFSET@
unpack_kb=@UNPACK_KB@

quiet=n; keep=n; noexec=n; check_only=n; diskcheck=y; target=""
usage() {
    cat <<EOF
Makeself version 2.4.0
 1) Getting help or info about $0 :
  $0 --help   Print this message
  $0 --info   Print embedded info : title, default target directory, embedded script ...
  $0 --list   Print the list of files in the archive
  $0 --check  Checks integrity of the archive
  $0 --version  Print the package version
 2) Running $0 :
  $0 [options] [--] [additional arguments to embedded script]
  with following options (in that order)
  --quiet       Do not print anything except error messages
  --noexec      Do not run embedded script
  --keep        Do not erase target directory after running the embedded script
  --nox11       Do not spawn an xterm
  --nodiskspace Do not check for available disk space
  --target dir  Extract directly to a target directory (implies --keep)
  Package options (passed to the embedded script): @OPTIONS@
EOF
}
payload() { tail -c +$((offset + 1)) "$0"; }

n=$#
while [ "$n" -gt 0 ]; do
    a=$1; shift; n=$((n - 1))
    case "$a" in
    --help|-h) usage; exit 0 ;;
    --info)
        echo "Identification: $label"; echo "Target directory: $archname"
        echo "Script run after extraction: $script"; echo "Version: $version"; exit 0 ;;
    --list) payload | gzip -cd | tar tvf -; exit $? ;;
    --check) check_only=y ;;
    --version) echo "$version"; exit 0 ;;
    --noexec) noexec=y ;;
    --keep) keep=y ;;
    --nodiskspace) diskcheck=n ;;
    --target) target=$1; shift; n=$((n - 1)); keep=y ;;
    --target=*) target=${a#--target=}; keep=y ;;
    --quiet|-q) quiet=y; set -- "$@" "$a" ;;
    --) ;;
    *) set -- "$@" "$a" ;;
    esac
done

[ "$quiet" = y ] || printf '%s' "Verifying archive integrity..."
actual=$(payload | sha256sum | cut -d' ' -f1)
if [ "$actual" != "$sha256" ]; then
    echo "" >&2
    echo "Error in SHA256 checksums: $actual is different from $sha256" >&2
    exit 1
fi
[ "$quiet" = y ] || echo "  100%   SHA256 checksums are OK. All good."
[ "$check_only" = y ] && exit 0

tmproot=${TMPDIR:-/tmp}
[ -n "$target" ] && tmproot=$(dirname "$target")
full=n
hw="${PROVISION_SIM_ROOT:-}/etc/provision-sim/hardware.json"
if [ -f "$hw" ] && grep -Eq '"disk_full"[[:space:]]*:[[:space:]]*true' "$hw"; then full=y; fi
if [ "$diskcheck" = y ]; then
    avail=$(df -kP "$tmproot" 2>/dev/null | tail -n 1 | tr -s ' ' | cut -d' ' -f4)
    [ "$full" = y ] && avail=0
    if [ -n "$avail" ] && [ "$avail" -lt "$unpack_kb" ]; then
        echo "Not enough space left in $tmproot ($avail KB) to decompress $0 ($unpack_kb KB)" >&2
        echo "Use --nodiskspace option to skip this check and proceed anyway" >&2
        echo "Consider setting TMPDIR to a directory with more free space." >&2
        exit 1
    fi
fi
if [ -n "$target" ]; then
    tmpdir=$target
    mkdir -p "$tmpdir" || exit 1
else
    tmpdir=$(mktemp -d "$tmproot/selfgz.XXXXXXXX") || exit 1
fi
[ "$quiet" = y ] || printf 'Uncompressing %s  100%%  \n' "$label"
if [ "$full" = y ]; then
    echo "tar: ./install.sh: Cannot write: No space left on device" >&2
    [ "$keep" = y ] || rm -rf "$tmpdir"
    exit 1
fi
if ! payload | gzip -cd | tar xf - -C "$tmpdir"; then
    echo "Extraction failed." >&2
    [ "$keep" = y ] || rm -rf "$tmpdir"
    exit 1
fi
[ "$noexec" = y ] && exit 0
cd "$tmpdir" || exit 1
$script "$@"
res=$?
cd /
[ "$keep" = y ] || rm -rf "$tmpdir"
exit $res
"""

_OPTIONS = {
    "driver": "--full --run --devel --upgrade --uninstall --install-path=<path> --install-for-all "
    "--install-username=<user> --install-usergroup=<group> --quiet",
    "firmware": "--full --upgrade --uninstall --quiet",
    "docker-runtime": "--install --upgrade --uninstall --install-path=<path> --install-scene=<scene> "
    "--install-type=<type> --injection-mode=<mode> --version",
}
_CANN_OPTIONS = "--install --full --upgrade --uninstall --install-path=<path> --install-for-all --quiet"


def _engine_files() -> list[tuple[str, bytes]]:
    src = node_source()
    files = []
    for path in sorted(src.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            files.append((f"ascendsim/{path.relative_to(src).as_posix()}", path.read_bytes()))
    return files


def _tar_gz(entries: Sequence[tuple[str, bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        dirs: set[str] = set()
        for name, _, _ in entries:
            parts = name.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                dirs.add("/".join(parts[:i]))
        for d in sorted(dirs):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, _MTIME
            tar.addfile(info)
        for name, data, mode in sorted(entries):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, _MTIME
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buf.getvalue(), compresslevel=6, mtime=0)


def build_run(
    path: Path, label: str, manifest: dict[str, Any], engine: Sequence[tuple[str, bytes]] | None = None
) -> Path:
    """Write one self-extracting ``.run`` (mode 0755) and return its path."""
    entries: list[tuple[str, bytes, int]] = [
        ("install.sh", INSTALL_SH.encode(), 0o755),
        ("package.json", (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode(), 0o644),
    ]
    entries += [(name, data, 0o644) for name, data in (engine if engine is not None else _engine_files())]
    payload = _tar_gz(entries)
    unpack_kb = sum(len(d) for _, d, _ in entries) // 1024 + 16
    options = _OPTIONS.get(str(manifest["component"]), _CANN_OPTIONS)
    header = (
        HEADER.replace("@LABEL@", label)
        .replace("@NAME@", str(manifest["name"]))
        .replace("@VERSION@", str(manifest["version"]))
        .replace("@SHA256@", hashlib.sha256(payload).hexdigest())
        .replace("@UNPACK_KB@", str(unpack_kb))
        .replace("@OPTIONS@", options)
    )
    offset = 0
    while True:
        text = header.replace("@OFFSET@", str(offset)).encode()
        if len(text) == offset:
            break
        offset = len(text)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(text + payload)
    tmp.chmod(0o755)
    tmp.replace(path)
    return path
