"""``provision image``: build, push, list, save and load the vllm-ascend serving image.

Everything goes through the Docker Engine API (dockerd, or ``podman system service``), addressed by
``--engine`` / ``$PROVISION_DOCKER_HOST`` / ``$DOCKER_HOST``. Tags and build arguments come from the version
lock; ``provision image args`` hands the same to CI (a buildx bake file).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from provision.cli import _inputs
from provision.cli.console import Console
from provision.errors import InputError

image_app = typer.Typer(
    help="The vllm-ascend serving image: build (and push), list, save and load it; CI build arguments.",
    no_args_is_help=True,
)

ENGINE_OPTION = typer.Option(
    None,
    "--engine",
    envvar="PROVISION_DOCKER_HOST",
    callback=_inputs.engine,
    help="Engine API address, e.g. unix:///run/podman/podman.sock (default: $DOCKER_HOST, then the "
    "default socket).",
    show_default=False,
)
STACK_OPTION = typer.Option(
    None, "--stack", envvar="PROVISION_STACK", help="Stack of the version lock (default: the lock's default)."
)
OS_OPTION = typer.Option(
    "openeuler24.03", "--os", help="Base OS of the CANN image: openeuler24.03, ubuntu22.04."
)
SOC_OPTION = typer.Option(
    "910b", "--soc", help="SoC family: 910b (Atlas A2), a3 (Atlas A3) or 310p (Atlas 300I Duo)."
)
REPOSITORY_OPTION = typer.Option(
    "vllm-ascend",
    "--repository",
    envvar="PROVISION_IMAGE_REPOSITORY",
    help="Image repository, with the registry to push to: registry.example:5000/team/vllm-ascend.",
)
JSON_OPTION = typer.Option(False, "--json", help="Machine-readable output.")
VAULT_OPTION = typer.Option(
    None,
    "--vault-file",
    envvar="PROVISION_REGISTRY_VAULT",
    help="ansible-vault file with registry_user and registry_password (default: $PROVISION_REGISTRY_USER "
    "and $PROVISION_REGISTRY_PASSWORD).",
    show_default=False,
)
VAULT_PASSWORD_OPTION = typer.Option(
    None,
    "--vault-password-file",
    help="Password file for --vault-file (default: $ANSIBLE_VAULT_PASSWORD_FILE).",
    show_default=False,
)


def _err() -> Console:
    return Console.for_stream(sys.stderr)


# ----------------------------------------------------------------------------------------- build


@image_app.command("build")
def build_command(
    stack: str | None = STACK_OPTION,
    os_variant: str = OS_OPTION,
    soc: str = SOC_OPTION,
    platform: str | None = typer.Option(
        None,
        "--platform",
        envvar="PROVISION_IMAGE_PLATFORM",
        help="linux/arm64 or linux/amd64 (default: the engine's own; a foreign one needs binfmt/qemu).",
        show_default=False,
    ),
    repository: str = REPOSITORY_OPTION,
    also_tag: list[str] = typer.Option([], "--also-tag", help="Another full reference to tag (repeatable)."),
    base_image: str | None = typer.Option(
        None, "--base-image", help="Base image instead of the CANN image (an internal mirror's copy)."
    ),
    pip_index_url: str | None = typer.Option(None, "--pip-index-url", envvar="PROVISION_PIP_INDEX_URL"),
    pip_extra_index_url: str | None = typer.Option(
        None,
        "--pip-extra-index-url",
        envvar="PROVISION_PIP_EXTRA_INDEX_URL",
        help="Space-separated; '' for none (air-gapped).",
    ),
    pip_trusted_host: str | None = typer.Option(
        None, "--pip-trusted-host", envvar="PROVISION_PIP_TRUSTED_HOST"
    ),
    apt_source: str | None = typer.Option(
        None, "--apt-source", help="A sources.list line for OS packages (Ubuntu bases)."
    ),
    yum_baseurl: str | None = typer.Option(None, "--yum-baseurl", help="A repository URL (openEuler bases)."),
    pip_packages: str | None = typer.Option(
        None, "--pip-packages", help="The whole pip requirement list instead of the lock's pins."
    ),
    build_arg: list[str] = typer.Option([], "--build-arg", help="NAME=VALUE for any Dockerfile ARG."),
    network: str | None = typer.Option(None, "--network", help="Network for RUN steps, e.g. host."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Rebuild every layer."),
    pull: bool = typer.Option(False, "--pull", help="Pull a newer base image first."),
    force: bool = typer.Option(False, "--force", help="Build even when the image is up to date."),
    push: bool = typer.Option(False, "--push", help="Push every tag after the build."),
    vault_file: Path | None = VAULT_OPTION,
    vault_password_file: Path | None = VAULT_PASSWORD_OPTION,
    context: Path | None = typer.Option(
        None, "--context", help="Folder with the Dockerfile and container/ (default: this checkout)."
    ),
    engine: str | None = ENGINE_OPTION,
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the tag, platform and build arguments only."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show every line of build output."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Build the image for a stack of the version lock (skipped when already up to date), and push it."""
    from provision.image import build as image_build
    from provision.image import registry
    from provision.image.engine import connect
    from provision.image.spec import Overrides, default_target, parse_assignments
    from provision.runner.run import new_run_dir

    mirrors = {
        name: value
        for name, value in (
            ("PIP_INDEX_URL", pip_index_url),
            ("PIP_EXTRA_INDEX_URL", pip_extra_index_url),
            ("PIP_TRUSTED_HOST", pip_trusted_host),
            ("APT_SOURCE", apt_source),
            ("YUM_BASEURL", yum_baseurl),
        )
        if value is not None
    }
    overrides = Overrides(
        base_image=base_image,
        pip_packages=pip_packages,
        mirrors=mirrors,
        extra=parse_assignments(build_arg, "--build-arg"),
    )
    target = default_target(stack=stack, os_variant=os_variant, soc=soc, repository=repository)
    credentials = registry.resolve_credentials(vault_file, vault_password_file) if push else None
    client = connect(engine)
    options = image_build.BuildOptions(
        target=target,
        overrides=overrides,
        context_dir=context,
        platform=platform,
        network_mode=network,
        no_cache=no_cache,
        pull=pull,
        force=force,
        extra_tags=tuple(also_tag),
    )
    out = Console.for_stream()
    err = _err()
    if dry_run:
        the_plan = image_build.plan(client, options)
        if as_json:
            typer.echo(json.dumps(_plan_json(the_plan), indent=2))
            return
        out.line(f"{the_plan.reference} for {the_plan.platform}")
        out.line("up to date: nothing to build" if the_plan.up_to_date else "would build")
        for name, value in sorted(the_plan.build_args.items()):
            out.line(f"  {name}={value}")
        return

    redact = registry.Redactor([credentials.password] if credentials else [])

    def progress(event: image_build.BuildEvent) -> None:
        if event.kind == "step":
            err.status(event.text)
        elif event.kind == "error":
            err.error(event.text)
        elif verbose:
            err.line(f"  {event.text}")

    def push_progress(text: str) -> None:
        if verbose:
            err.line(f"  {redact(text)}")

    run_dir = new_run_dir("image-build")
    result = image_build.build(
        client,
        options,
        progress if not as_json else None,
        run_dir=run_dir,
        push_credentials=credentials,
        push_image=push,
        push_progress=push_progress,
    )
    if as_json:
        typer.echo(redact(json.dumps(result.to_json(), indent=2)))
        return
    short = result.image_id.removeprefix("sha256:")[:12]
    if result.built:
        out.line(
            f"built {result.reference} ({short}) for {result.platform} in {result.seconds:.1f} s: "
            f"{result.rebuilt_steps} of {result.steps} steps run, {result.cached_steps} from cache"
        )
    else:
        out.line(f"up to date: {result.reference} ({short}), nothing built")
    for tag in result.tags[1:]:
        out.line(f"tagged {tag}")
    if result.push:
        out.line(redact(f"pushed {', '.join(result.push['references'])}"))
        out.line(f"digest {result.push['by_digest']}")
    out.line(f"run record: {run_dir}")


def _plan_json(the_plan: Any) -> dict[str, Any]:
    return {
        "reference": the_plan.reference,
        "tags": list(the_plan.tags),
        "platform": the_plan.platform,
        "up_to_date": the_plan.up_to_date,
        "existing_id": the_plan.existing_id,
        "build_digest": the_plan.build_digest,
        "context_files": list(the_plan.context.files),
        "build_args": the_plan.build_args,
    }


# ----------------------------------------------------------------------------------------- push


@image_app.command("push")
def push_command(
    reference: str = typer.Argument(..., help="repository:tag of a local image, with a registry host."),
    vault_file: Path | None = VAULT_OPTION,
    vault_password_file: Path | None = VAULT_PASSWORD_OPTION,
    engine: str | None = ENGINE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Push a local image; prints the digest to pull it by."""
    from provision.image import registry
    from provision.image.build import require_engine_image
    from provision.image.engine import connect

    credentials = registry.resolve_credentials(vault_file, vault_password_file)
    client = connect(engine)
    require_engine_image(client, reference)
    err = _err()
    result = registry.push(client, reference, credentials, lambda text: err.line(f"  {text}"))
    if as_json:
        typer.echo(
            json.dumps({"reference": reference, "digest": result.digest, "by_digest": result.by_digest})
        )
        return
    Console.for_stream().line(f"pushed {reference}\ndigest {result.by_digest}")


# ----------------------------------------------------------------------------------------- list


@image_app.command("list")
def list_command(
    arch: str | None = typer.Option(
        None, "--arch", help="arm64 or amd64 (default: the engine's own, arm64 without an engine)."
    ),
    repository: str = REPOSITORY_OPTION,
    engine: str | None = ENGINE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Show the images the version lock describes and which of them the engine has."""
    from provision.errors import EnvironmentProblem
    from provision.image.catalog import age, catalog
    from provision.image.engine import connect, engine_info
    from provision.image.spec import normalize_arch, validate_repository

    validate_repository(repository)
    client = None
    note = ""
    try:
        client = connect(engine, timeout=30)
        engine_arch = engine_info(client).arch
    except EnvironmentProblem as exc:
        engine_arch = "arm64"
        note = f"no engine: {exc}"
    rows = catalog(client, normalize_arch(arch) if arch else engine_arch, repository)
    if as_json:
        typer.echo(json.dumps({"engine": note or "ok", "images": [r.to_json() for r in rows]}, indent=2))
        return
    out = Console.for_stream()
    if note:
        _err().line(note)
    out.line(f"{'IMAGE':<62} {'STATE':<12} {'ID':<12} {'SIZE':>9}  CREATED")
    for row in rows:
        size = f"{row.size / 2**30:.2f} GiB" if row.size else ""
        state = row.state if not row.label_problems else "stale"
        out.line(f"{row.reference:<62} {state:<12} {row.image_id:<12} {size:>9}  {age(row.created)}".rstrip())
        for problem in row.label_problems:
            out.line(f"    label {problem}")


# ----------------------------------------------------------------------------------------- save / load


@image_app.command("save")
def save_command(
    reference: str | None = typer.Argument(
        None, help="Image to save (default: the lock's for --stack/--os/--soc)."
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Tar file to write (.tar.gz: compressed)."
    ),
    stack: str | None = STACK_OPTION,
    os_variant: str = OS_OPTION,
    soc: str = SOC_OPTION,
    repository: str = REPOSITORY_OPTION,
    engine: str | None = ENGINE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Write an image to a tar (plus a .sha256 beside it) to carry to an air-gapped site."""
    from provision.image.engine import connect, engine_info
    from provision.image.spec import default_target
    from provision.image.transfer import default_output, save

    client = connect(engine)
    if reference is None:
        arch = engine_info(client).arch
        reference = default_target(
            stack=stack, os_variant=os_variant, soc=soc, arch=arch, repository=repository
        ).reference
    err = _err()
    result = save(client, reference, output or default_output(reference), err.line)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "reference": result.reference,
                    "path": str(result.path),
                    "bytes": result.bytes,
                    "sha256": result.sha256,
                    "seconds": result.seconds,
                }
            )
        )
        return
    Console.for_stream().line(
        f"saved {result.reference} to {result.path} ({result.bytes / 2**20:.1f} MiB, "
        f"sha256 {result.sha256[:16]}…) in {result.seconds:.1f} s"
    )


@image_app.command("load")
def load_command(
    path: Path = typer.Argument(..., help="A tar written by `provision image save` (or `docker save`)."),
    engine: str | None = ENGINE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Load an image tar (checked against its .sha256 when present) and show its stack labels."""
    from provision.image.engine import connect
    from provision.image.transfer import load

    client = connect(engine)
    result = load(client, path, _err().line)
    stacks = {}
    for name in result.images:
        labels = client.images.get(name).labels or {}
        stacks[name] = {k: v for k, v in sorted(labels.items()) if k.startswith("provision.stack")}
    if as_json:
        payload = {
            "path": str(path),
            "images": list(result.images),
            "verified": result.verified,
            "labels": stacks,
        }
        typer.echo(json.dumps(payload, indent=2))
        return
    out = Console.for_stream()
    check = "checksum verified" if result.verified else "no .sha256 beside it: not verified"
    out.line(f"loaded {', '.join(result.images)} from {path} ({check}) in {result.seconds:.1f} s")
    for name, labels in stacks.items():
        if labels:
            out.line(
                f"  {name}: "
                + ", ".join(f"{k.removeprefix('provision.stack.')}={v}" for k, v in labels.items())
            )


# ----------------------------------------------------------------------------------------- args (CI)


@image_app.command("args")
def args_command(
    stack: str | None = STACK_OPTION,
    os_variant: str = OS_OPTION,
    soc: str = SOC_OPTION,
    arch: str = typer.Option("arm64", "--arch", help="Target architecture."),
    repository: str = REPOSITORY_OPTION,
    revision: str = typer.Option(
        "", "--revision", envvar="PROVISION_IMAGE_REVISION", help="Commit for the label."
    ),
    fmt: str = typer.Option(
        "lines", "--format", help="lines (NAME=VALUE), json, or bake (a docker buildx bake file)."
    ),
) -> None:
    """Print the lock's tag and build arguments for CI (no engine needed)."""
    from provision.image.spec import default_target

    target = default_target(stack=stack, os_variant=os_variant, soc=soc, arch=arch, repository=repository)
    build_args = target.build_args()
    if revision:
        build_args["REVISION"] = revision
    if fmt == "lines":
        for name, value in build_args.items():
            typer.echo(f"{name}={value}")
    elif fmt == "json":
        payload = {
            "reference": target.reference,
            "tag": target.tag,
            "platform": target.platform,
            "build_args": build_args,
            "labels": target.labels(),
        }
        typer.echo(json.dumps(payload, indent=2))
    elif fmt == "bake":
        bake = {
            "group": {"default": {"targets": ["vllm-ascend"]}},
            "target": {
                "vllm-ascend": {
                    "context": ".",
                    "dockerfile": "Dockerfile",
                    "platforms": [target.platform],
                    "tags": [target.reference],
                    "args": build_args,
                }
            },
        }
        typer.echo(json.dumps(bake, indent=2))
    else:
        raise InputError(f"--format {fmt!r}: choose lines, json or bake")


def register(app: typer.Typer) -> None:
    app.add_typer(image_app, name="image")
