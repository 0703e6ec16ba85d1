"""``provision bundle build/verify/serve/unpack``: the offline bundle of an air-gapped rack (docs/bundle.md).

``build`` decides from the inventory and the version lock what the nodes need and gathers it, checked, into
one archive with a manifest; ``verify`` checks an archive or folder against its manifest (and, given an
inventory, whether it holds everything each node needs); ``serve`` verifies, then serves it over HTTP and
prints the group_vars lines that point the roles at it; ``unpack`` verifies and extracts it for a web server
of your own. Exit codes: 0 ok, 1 the bundle is refused (or incomplete), 2 bad input.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
import yaml

from provision.bundle import build as builder
from provision.bundle import closure, needs, serve, verify
from provision.bundle.manifest import BundleRefused
from provision.cli import _inputs
from provision.cli import _playbook as common
from provision.cli._ansible_options import AnsibleArgs, vault_options
from provision.cli.console import Console
from provision.errors import InputError
from provision.inventory.load import Inventory
from provision.inventory.validate import check

bundle_app = typer.Typer(
    help="The offline bundle: one checksummed archive holding the mirror an air-gapped rack installs from.",
    no_args_is_help=True,
)

KeyOpt = typer.Option(
    None,
    "--key",
    metavar="FINGERPRINT|FILE",
    help="The signer the bundle must be signed by: its key's fingerprint (40 hex digits, checked with your "
    "keyring, $GNUPGHOME), or a public key file (checked with that key alone). Default: any key of your "
    "keyring.",
    show_default=False,
)
AllowUnsignedOpt = typer.Option(
    False,
    "--allow-unsigned",
    help="Accept a bundle without a signature (its checksum then catches damage, not a rewrite).",
)


def _inventory(
    inventory: Path | None, inventories: list[Path], ansible: AnsibleArgs
) -> tuple[list[Path], Inventory]:
    sources = _inputs.inventories(inventory, inventories)
    return sources, check(sources, ansible.checked().vault)


@contextlib.contextmanager
def _file_errors() -> Iterator[None]:
    """A file that cannot be read or written (permissions, a full disk) is a message naming it, exit 2."""
    try:
        yield
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise InputError(f"{where}{exc.strerror or exc}") from None


@contextlib.contextmanager
def _refusals(as_json: bool) -> Iterator[None]:
    """With ``--json``, a refused bundle (exit 1) is ``{"ok": false, "refused": MESSAGE}`` on stdout too."""
    try:
        yield
    except BundleRefused as exc:
        if as_json:
            _echo({"ok": False, "refused": str(exc)})
        raise


def _echo(summary: dict[str, Any]) -> None:
    typer.echo(json.dumps(summary, indent=2))


def _os_option(values: list[str]) -> dict[str, str]:
    """``--os FLAVOUR`` (every host the inventory does not describe) or ``--os HOST=FLAVOUR``."""
    chosen: dict[str, str] = {}
    for value in values:
        host, _, flavour = value.rpartition("=")
        if flavour not in needs.FLAVOURS:
            raise InputError(f"--os {value}: unknown OS {flavour!r}; known: {', '.join(needs.FLAVOURS)}")
        chosen[host] = flavour
    return chosen


def _host_values(option: str, values: list[str], what: str) -> dict[str, str]:
    """``OPTION VALUE`` (every host the inventory does not describe) or ``OPTION HOST=VALUE``."""
    chosen: dict[str, str] = {}
    for value in values:
        host, _, given = value.rpartition("=")
        if not given.strip() or any(c.isspace() or c in "/{}" for c in given):
            raise InputError(f"{option} {value}: not {what}")
        chosen[host] = given
    return chosen


@bundle_app.command("build")
@vault_options
def build(
    inventory: Path | None = common.InventoryArg,
    output: Path = typer.Option(..., "--output", "-o", help="The bundle to write: FILE.tar or FILE.tar.gz."),
    from_mirror: str | None = typer.Option(
        None,
        "--from-mirror",
        help="A mirror (folder or http(s) URL) to take OS repositories, .run files, images, weights from.",
    ),
    run_files: Path | None = typer.Option(
        None, "--run-files", help="Folder of the vendor's .run files (and their sha256sums.txt)."
    ),
    image: list[str] = typer.Option(
        [], "--image", help="A docker save tarball, or an image reference to save from docker (repeatable)."
    ),
    weights: Path | None = typer.Option(
        None, "--weights", help="Folder of weights archives (model_url names)."
    ),
    os_name: list[str] = typer.Option(
        [], "--os", help="OS of hosts without bootstrap_facts: FLAVOUR or HOST=FLAVOUR (repeatable)."
    ),
    arch: str = typer.Option("aarch64", "--arch", help="Architecture of hosts without bootstrap_facts."),
    resolve: bool = typer.Option(
        False,
        "--resolve",
        help="OS packages the roles install, with their dependencies, resolved from the mirrors the "
        "inventory names (openeuler_repos_mirror_url: dnf download --resolve --alldeps; "
        "openeuler_repos_apt_mirror_url: apt-get) into repositories the bundle writes and signs, "
        "instead of whole repositories from --from-mirror.",
    ),
    kernel: list[str] = typer.Option(
        [],
        "--kernel",
        help="With --resolve: kernel (uname -r) of hosts without bootstrap_facts.kernel, for "
        "kernel-devel-/linux-headers-<kernel>: VERSION or HOST=VERSION (repeatable).",
    ),
    openeuler_release: list[str] = typer.Option(
        [],
        "--openeuler-release",
        help="With --resolve: the release part of openEuler-<version>-<release> on the mirror (LTS-SP1) "
        "of hosts without bootstrap_facts.os.pretty_name: RELEASE or HOST=RELEASE (repeatable).",
    ),
    sign_key: str | None = typer.Option(None, "--sign-key", help="GnuPG key to sign the manifest with."),
    gnupg_home: Path | None = typer.Option(
        None, "--gnupg-home", help="GnuPG home holding --sign-key / --repo-key."
    ),
    sign_repos: bool = typer.Option(
        False,
        "--sign-repos",
        help="Re-sign the OS repositories (apt Release/InRelease, repomd.xml.asc) with the bundle's own "
        "key, generated into FILE.gnupg/ (kept for reruns).",
    ),
    repo_key: str | None = typer.Option(
        None, "--repo-key", help="GnuPG key to re-sign the OS repositories with (implies --sign-repos)."
    ),
    as_json: bool = common.JsonOpt,
    inventories: list[Path] = common.InventoriesOpt,
    *,
    ansible: AnsibleArgs,
) -> None:
    """Gather what the inventory's nodes need (OS repositories, .run files checked against their sha256,
    images, NPU-Exporter, weights) into one archive with a manifest. A rerun reuses what FILE.work/ holds."""
    started = time.monotonic()
    err = Console.for_stream(sys.stderr)
    sources_, loaded = _inventory(inventory, inventories, ansible)
    plan = needs.plan(loaded, os_names=_os_option(os_name), arch=arch)
    for option, given in (("--kernel", kernel), ("--openeuler-release", openeuler_release)):
        if given and not resolve:
            raise InputError(f"{option}: only with --resolve (it says what to resolve)")
    groups = []
    if resolve:
        kernels = _host_values("--kernel", kernel, "a kernel release (uname -r on the node)")
        releases = _host_values("--openeuler-release", openeuler_release, "an openEuler release (LTS-SP1)")
        groups = closure.groups(loaded, plan, kernels, releases)
    remote = bool(from_mirror and from_mirror.startswith(("http://", "https://")))
    with _file_errors(), _refusals(as_json):
        result = builder.build(
            plan,
            builder.Sources(
                mirror=Path(from_mirror) if from_mirror and not remote else None,
                mirror_url=from_mirror if remote else None,
                run_files=run_files,
                images=tuple(image),
                weights=weights,
                closures=tuple(groups),
            ),
            output,
            inventory=", ".join(map(str, sources_)),
            sign_key=sign_key,
            gnupg_home=gnupg_home,
            sign_repos=sign_repos,
            repo_key=repo_key,
            say=err.status,
        )
    out = Console.for_stream()
    for line in result.skipped:
        err.line(f"not bundled (optional): {line}")
    if as_json:
        _echo(
            {
                "ok": True, "output": str(output), "files": result.files, "bytes": result.bytes,
                "archive_bytes": result.archive_bytes, "nodes": len(plan.nodes), "copied": result.copied,
                "reused": result.reused, "skipped": result.skipped,
                "packages": result.packages if resolve else None,
                "downloaded": result.downloaded if resolve else None, "repo_key": result.repo_key,
                "work_dir": str(builder.work_dir(output)), "seconds": round(time.monotonic() - started, 2),
            }
        )  # fmt: skip
        return
    resolved = f"{result.packages} OS packages resolved ({result.downloaded} downloaded); " if resolve else ""
    out.line(
        f"{output}: {result.files} files, {_size(result.bytes)} (archive {_size(result.archive_bytes)}) "
        f"for {len(plan.nodes)} node(s); {resolved}"
        f"{len(result.copied)} copied, {len(result.reused)} reused from {builder.work_dir(output)}; "
        f"{time.monotonic() - started:.1f} s"
    )


def _size(count: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"


@bundle_app.command("verify")
@vault_options
def verify_cmd(
    bundle: Path = typer.Argument(
        ..., help="The bundle: an archive or an unpacked folder.", show_default=False
    ),
    inventory: Path | None = typer.Option(
        None, "--inventory", "-i", help="Also check the bundle holds everything this inventory's nodes need."
    ),
    key: str | None = KeyOpt,
    allow_unsigned: bool = AllowUnsignedOpt,
    os_name: list[str] = typer.Option([], "--os", help="As for build: OS of hosts without bootstrap_facts."),
    arch: str = typer.Option("aarch64", "--arch", help="As for build."),
    as_json: bool = common.JsonOpt,
    *,
    ansible: AnsibleArgs,
) -> None:
    """Check every file against the manifest, the manifest against its checksum and signature; with
    --inventory, what is missing for which node. Exit 1 when refused or incomplete."""
    plan = None
    if inventory is not None:
        _, loaded = _inventory(inventory, [], ansible)
        plan = needs.plan(loaded, os_names=_os_option(os_name), arch=arch)
    with _file_errors(), _refusals(as_json):
        checked = verify.verify(bundle, verify.Trust(key, allow_unsigned))
    if as_json:
        gaps = verify.completeness(checked.manifest, plan) if plan is not None else {}
        missing = {host: [{"path": n.path, "why": n.why} for n in found] for host, found in gaps.items()}
        complete = None if plan is None else not missing
        _echo(
            {
                "ok": complete is not False, "bundle": str(bundle), "files": len(checked.manifest.files),
                "signed_by": checked.signed_by, "inventory": str(inventory) if inventory else None,
                "complete": complete, "missing": missing,
            }
        )  # fmt: skip
        if complete is False:
            raise typer.Exit(BundleRefused.exit_code)
        return
    out = Console.for_stream()
    signed = f", signed by {checked.signed_by}" if checked.signed_by else ", not signed"
    out.line(f"{bundle}: ok, {len(checked.manifest.files)} files match the manifest{signed}")
    if plan is None:
        return
    gaps = verify.completeness(checked.manifest, plan)
    if gaps:
        lines = [f"{host}: {need.path} ({need.why})" for host, found in gaps.items() for need in found]
        raise BundleRefused(f"{bundle}: incomplete for {inventory}:\n  " + "\n  ".join(lines))
    out.line(f"{bundle}: complete for {inventory} ({len(plan.nodes)} node(s))")


@bundle_app.command("unpack")
def unpack(
    bundle: Path = typer.Argument(..., help="The bundle archive.", show_default=False),
    dest: Path = typer.Argument(..., help="A new (or empty) folder to unpack it into.", show_default=False),
    key: str | None = KeyOpt,
    allow_unsigned: bool = AllowUnsignedOpt,
    as_json: bool = common.JsonOpt,
) -> None:
    """Verify the archive, unpack it, verify the files written: a folder for your own web server."""
    with _file_errors(), _refusals(as_json):
        checked = verify.unpack(bundle, dest, verify.Trust(key, allow_unsigned))
    if as_json:
        _echo(
            {"ok": True, "bundle": str(bundle), "dest": str(dest), "files": len(checked.manifest.files),
             "signed_by": checked.signed_by}
        )  # fmt: skip
        return
    Console.for_stream().line(
        f"{dest}: {len(checked.manifest.files)} files, verified; serve it as the mirror"
    )


@bundle_app.command("serve")
def serve_cmd(
    bundle: Path = typer.Argument(
        ..., help="The bundle: an archive or an unpacked folder.", show_default=False
    ),
    port: int = typer.Option(8080, "--port", min=0, max=65535, help="TCP port."),
    bind: str = typer.Option(
        "127.0.0.1",
        "--bind",
        metavar="ADDR",
        help="Address to listen on: this machine's address on the nodes' network (default: loopback only).",
    ),
    key: str | None = KeyOpt,
    allow_unsigned: bool = AllowUnsignedOpt,
    as_json: bool = typer.Option(
        False, "--json", help="Print one JSON object (URL, files, group_vars) on stdout once serving."
    ),
) -> None:
    """Verify the bundle (an archive is unpacked beside it first, removed when the server stops), then
    serve its files (no folder listings) over HTTP and print the group_vars lines that point the roles at
    it. Nothing is served when it is refused."""
    trust = verify.Trust(key, allow_unsigned)
    if bundle.is_dir():
        with _file_errors(), _refusals(as_json):
            checked = verify.verify_dir(bundle, trust)
        _serve(bundle, checked, bundle, bind, port, as_json)
        return
    if not bundle.is_file():
        raise InputError(f"{bundle}: no such bundle (an archive or a folder)")
    # Beside the archive, not in /tmp: a bundle is as large as the mirror it holds.
    with (
        _file_errors(),
        _refusals(as_json),
        tempfile.TemporaryDirectory(prefix=f".{bundle.name}.serve-", dir=bundle.parent) as tmp,
    ):
        root = Path(tmp) / "bundle"
        _serve(root, verify.unpack(bundle, root, trust), bundle, bind, port, as_json)


def _serve(
    root: Path, checked: verify.Verified, bundle: Path, bind: str, port: int, as_json: bool = False
) -> None:
    try:
        server = serve.open_server(root, bind, port)
    except OSError as exc:
        raise InputError(f"--bind {bind} --port {port}: cannot listen: {exc.strerror or exc}") from None
    host, real_port = str(server.server_address[0]), int(server.server_address[1])
    shown = socket.gethostname() if host in ("0.0.0.0", "::") else host
    lines = serve.group_vars(f"http://{shown}:{real_port}", checked.manifest)
    loopback = ipaddress.ip_address(host).is_loopback
    if as_json:
        _echo(
            {"ok": True, "bundle": str(bundle), "url": f"http://{host}:{real_port}/", "bind": host,
             "port": real_port, "files": len(checked.manifest.files), "signed_by": checked.signed_by,
             "loopback_only": loopback, "group_vars": yaml.safe_load(lines)}
        )  # fmt: skip
        sys.stdout.flush()
    else:
        out = Console.for_stream()
        out.line(
            f"serving {bundle} ({len(checked.manifest.files)} files, verified) on http://{host}:{real_port}/"
        )
        if loopback:
            # The default: nothing beyond this machine reaches it until --bind names an address that does.
            out.line(
                f"listening on loopback only: the nodes cannot reach {host}; give --bind ADDR to serve them"
            )
        out.line("put these in group_vars/npu_nodes.yml (use the address the nodes reach this machine at):")
        out.line(lines)

    def stop(_signum: int, _frame: object) -> None:
        # SIGTERM (systemd, kill) ends it as Ctrl-C does, so the unpacked copy is removed.
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.server_close()


def register(app: typer.Typer) -> None:
    app.add_typer(bundle_app, name="bundle")
