"""``provision image build`` on the Docker Engine API: lock-derived args, streamed progress, a run record.

The build is skipped when the image already carries the same ``provision.build-digest`` label (a hash of the
build context and every build argument), so a repeat run reports nothing built; otherwise the engine's layer
cache does the rest (an entrypoint change rebuilds the last step only: see the Dockerfile's layer order).

Each build writes a run folder (``$PROVISION_RUNS_DIR`` or ``~/.local/state/provision/runs``) with
``build.log`` (the engine's output) and ``result.json``; registry credentials never reach either.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors

from provision.errors import EnvironmentProblem, InputError, ProvisionError
from provision.image.context import Context, make_context
from provision.image.engine import EngineInfo, engine_info
from provision.image.registry import Credentials, PushResult, Redactor, push, stream_error
from provision.image.spec import Overrides, Target, dockerfile_args, resolve_build_args

DIGEST_LABEL = "provision.build-digest"

Progress = Callable[["BuildEvent"], None]


class BuildFailed(ProvisionError):
    """The engine refused or failed the build; the message carries its last output lines."""


# ----------------------------------------------------------------------------------------- the stream

# Docker: "Step 3/44 : RUN ...", Podman/buildah: "STEP 3/44: RUN ...".
_STEP = re.compile(r"^(?:Step|STEP)\s+(\d+)/(\d+)\s*:\s*(.*)$")
_CACHED = re.compile(r"Using cache")
# The end of a step: " ---> 583fa043916e" (Docker), "--> 583fa043916" (Podman).
_STEP_DONE = re.compile(r"^\s*-+>\s+([0-9a-f]{12,})\s*$")


@dataclass(frozen=True)
class BuildEvent:
    """One line of build output: ``kind`` is ``step``, ``cached``, ``output`` or ``error``."""

    kind: str
    text: str
    step: int = 0
    total: int = 0


@dataclass
class BuildStream:
    """Folds the engine's build stream into events, step counts and the image ID (pure; unit-tested)."""

    step: int = 0
    total: int = 0
    cached: int = 0
    rebuilt: int = 0  # steps that ran (not from cache), FROM and the ARGs before it not counted
    image_id: str = ""
    error: str = ""
    lines: list[str] = field(default_factory=list)
    _from: bool = False
    _cached_step: bool = False

    def feed(self, chunk: Mapping[str, Any]) -> list[BuildEvent]:
        error = stream_error(chunk)
        if error:
            self.error = error
            self.lines.append(error)
            return [BuildEvent("error", error, self.step, self.total)]
        aux = chunk.get("aux")
        if isinstance(aux, Mapping) and aux.get("ID"):
            self.image_id = str(aux["ID"])
        text = chunk.get("stream")
        if not isinstance(text, str):
            return []
        events = []
        for raw in text.splitlines():
            line = raw.rstrip()
            if not line.strip():
                continue
            self.lines.append(line)
            step = _STEP.match(line.strip())
            if step:
                self.step, self.total = int(step.group(1)), int(step.group(2))
                self._from = step.group(3).upper().startswith("FROM")
                self._cached_step = False
                events.append(BuildEvent("step", line.strip(), self.step, self.total))
            elif _CACHED.search(line):
                self.cached += 1
                self._cached_step = True
                events.append(BuildEvent("cached", line.strip(), self.step, self.total))
            else:
                if _STEP_DONE.match(line) and not (self._from or self._cached_step):
                    self.rebuilt += 1
                events.append(BuildEvent("output", line, self.step, self.total))
        return events

    def tail(self, count: int = 30) -> str:
        return "\n".join(self.lines[-count:])


# ----------------------------------------------------------------------------------------- options


@dataclass(frozen=True)
class BuildOptions:
    target: Target
    overrides: Overrides = field(default_factory=Overrides)
    context_dir: Path | None = None
    platform: str | None = None  # None: the engine's own
    network_mode: str | None = None
    no_cache: bool = False
    pull: bool = False
    force: bool = False
    extra_tags: tuple[str, ...] = ()
    revision: str | None = None  # None: the checkout's git commit, when there is one


@dataclass(frozen=True)
class Plan:
    """What a build would do: where it builds, with which arguments, and whether it is already done."""

    reference: str
    tags: tuple[str, ...]
    platform: str
    send_platform: bool
    build_args: dict[str, str]
    build_digest: str
    context: Context
    up_to_date: bool
    existing_id: str | None


@dataclass
class BuildResult:
    reference: str
    tags: list[str]
    image_id: str
    built: bool
    seconds: float
    steps: int
    cached_steps: int
    rebuilt_steps: int
    platform: str
    build_args: dict[str, str]
    build_digest: str
    run_dir: str | None = None
    push: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def git_revision(directory: Path) -> str:
    """The commit of a checkout (empty outside one)."""
    try:
        result = subprocess.run(
            ["git", "-C", str(directory), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout.strip() if result.returncode == 0 else ""


def choose_platform(info: EngineInfo, requested: str | None) -> tuple[str, bool]:
    """The platform to build for and whether to send it to the engine.

    Without ``--platform`` the engine builds for its own architecture. A foreign one (arm64 on an x86 engine)
    needs an engine that takes ``platform`` (API >= 1.32) and can run foreign binaries (binfmt + qemu) on
    its host; the CI workflow uses buildx for that.
    """
    if requested is None:
        return info.platform, False
    from provision.image.spec import parse_platform

    _os, arch = parse_platform(requested)
    platform = f"linux/{arch}"
    if not info.takes_platform:
        if platform != info.platform:
            raise EnvironmentProblem(
                f"{info.describe()} cannot build for {platform} (its API predates the build platform "
                "parameter): build on an arm64 host, or with the CI workflow (buildx)"
            )
        return platform, False
    return platform, True


def plan(client: docker.DockerClient, options: BuildOptions) -> Plan:
    """Resolve everything a build needs without building: args, tags, platform, up-to-date check."""
    info = engine_info(client)
    platform, send_platform = choose_platform(info, options.platform)
    target = options.target
    if target.platform != platform:
        arch = platform.split("/")[1]
        target = Target(target.stack, target.os_variant, target.soc, arch, target.repository)
    context = make_context(options.context_dir)
    known = list(dockerfile_args(context.dockerfile))
    overrides = options.overrides
    revision = options.revision if options.revision is not None else git_revision(context.directory)
    extra = dict(overrides.extra)
    if revision and "REVISION" not in extra:
        extra["REVISION"] = revision
    args = resolve_build_args(
        target,
        Overrides(overrides.base_image, overrides.pip_packages, overrides.mirrors, extra),
        known,
    )
    digest = build_digest(context, args, platform)
    existing_id: str | None = None
    up_to_date = False
    try:
        image = client.images.get(target.reference)
        existing_id = str(image.id)
        labels = image.labels or {}
        up_to_date = labels.get(DIGEST_LABEL) == digest
    except docker.errors.ImageNotFound:
        pass
    tags = (target.reference, *options.extra_tags)
    return Plan(
        reference=target.reference,
        tags=tags,
        platform=platform,
        send_platform=send_platform,
        build_args=args,
        build_digest=digest,
        context=context,
        up_to_date=up_to_date and not options.force and not options.no_cache,
        existing_id=existing_id,
    )


def build_digest(context: Context, args: Mapping[str, str], platform: str) -> str:
    """A hash of what determines the image: the context's bytes, every build argument, the platform."""
    payload = json.dumps(
        {"context": context.digest, "args": dict(sorted(args.items())), "platform": platform}
    )
    return "sha256:" + hashlib.sha256(payload.encode()).hexdigest()


def build(
    client: docker.DockerClient,
    options: BuildOptions,
    progress: Progress | None = None,
    *,
    run_dir: Path | None = None,
    push_credentials: Credentials | None = None,
    push_image: bool = False,
    push_progress: Callable[[str], None] | None = None,
) -> BuildResult:
    """Build (unless up to date), tag, optionally push; record the run in ``run_dir`` when given."""
    say = progress or (lambda _event: None)
    redact = Redactor([push_credentials.password] if push_credentials else [])
    the_plan = plan(client, options)
    started = time.monotonic()
    log = (run_dir / "build.log").open("w", encoding="utf-8") if run_dir else None
    stream_state = BuildStream()
    try:
        if the_plan.up_to_date:
            image_id = the_plan.existing_id or ""
            built = False
        else:
            image_id = _run_build(client, options, the_plan, stream_state, say, redact, log)
            built = True
        image = client.images.get(image_id)
        for tag in the_plan.tags:
            if tag not in (image.tags or []):
                repository, _, name = tag.rpartition(":")
                image.tag(repository, name)
    finally:
        if log:
            log.close()
    result = BuildResult(
        reference=the_plan.reference,
        tags=list(the_plan.tags),
        image_id=image_id,
        built=built,
        seconds=round(time.monotonic() - started, 3),
        steps=stream_state.total,
        cached_steps=stream_state.cached,
        rebuilt_steps=stream_state.rebuilt,
        platform=the_plan.platform,
        build_args=the_plan.build_args,
        build_digest=the_plan.build_digest,
        run_dir=str(run_dir) if run_dir else None,
    )
    if push_image:
        pushed: list[PushResult] = [
            push(client, tag, push_credentials, push_progress, redact) for tag in the_plan.tags
        ]
        result.push = {
            "digest": pushed[0].digest,
            "by_digest": pushed[0].by_digest,
            "references": [p.reference for p in pushed],
        }
    if run_dir:
        text = redact(json.dumps(result.to_json(), indent=2))
        (run_dir / "result.json").write_text(text + "\n", encoding="utf-8")
    return result


def _run_build(
    client: docker.DockerClient,
    options: BuildOptions,
    the_plan: Plan,
    stream_state: BuildStream,
    say: Progress,
    redact: Redactor,
    log: Any,
) -> str:
    kwargs: dict[str, Any] = {
        "fileobj": the_plan.context.fileobj(),
        "custom_context": True,
        "tag": the_plan.reference,
        "buildargs": the_plan.build_args,
        "labels": {DIGEST_LABEL: the_plan.build_digest},
        "rm": True,
        "forcerm": True,
        "nocache": options.no_cache,
        "pull": options.pull,
        "decode": True,
    }
    if the_plan.send_platform:
        kwargs["platform"] = the_plan.platform
    if options.network_mode:
        kwargs["network_mode"] = options.network_mode
    try:
        for chunk in client.api.build(**kwargs):
            for event in stream_state.feed(chunk):
                event = BuildEvent(event.kind, redact(event.text), event.step, event.total)
                if log:
                    log.write(event.text + "\n")
                    log.flush()
                say(event)
    except docker.errors.APIError as exc:
        raise BuildFailed(redact(f"the engine refused the build: {exc.explanation or exc}")) from None
    if stream_state.error or not stream_state.image_id:
        detail = stream_state.error or "no image ID in the engine's answer"
        raise BuildFailed(
            redact(
                f"build of {the_plan.reference} failed at step {stream_state.step}/{stream_state.total}: "
                f"{detail}\n--- last output ---\n{stream_state.tail()}"
            )
        )
    return stream_state.image_id


def check_labels(labels: Mapping[str, str], target: Target) -> list[str]:
    """Differences between an image's labels and what the lock says for ``target`` (empty: it matches)."""
    problems = []
    for key, want in target.labels().items():
        have = labels.get(key)
        if have != want:
            problems.append(f"{key}: {have!r} (lock: {want!r})")
    return problems


def require_engine_image(client: docker.DockerClient, reference: str) -> Any:
    try:
        return client.images.get(reference)
    except docker.errors.ImageNotFound:
        raise InputError(f"no image {reference} on the engine (`provision image build` makes it)") from None
