"""The post-start smoke of an instance: what its NPU runtime sees, and whether vLLM took the Ascend platform.

Right after an instance's unit (re)starts, before its health gate waits for the weights to load:

1. inside the instance, :data:`DEVICE_COUNT` in the image's Ascend environment (``ascend-env.sh``, the one
   the entrypoint sources) must print the pool's NPU count: a container given the wrong devices, or an image
   whose torch-npu cannot reach the driver, shows here in seconds instead of after a 30-minute load;
2. the engine's log of this start must say :data:`PLUGIN_LINE`, vLLM's line when it picked the vllm-ascend
   platform (``INFO 05-21 21:37:08 [__init__.py:239] Platform plugin ascend is activated``,
   vllm-ascend#9447; also #19) within the smoke's time; ``No platform detected, vLLM is running on
   UnspecifiedPlatform`` without it then names the cause (vllm-ascend missing or broken).

Pure functions; the ``vllm_serve_smoke`` action plugin runs the commands.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

DEVICE_COUNT = "import torch, torch_npu; print(torch.npu.device_count())"
"""The NPU runtime's own count (FACTS.md §1: the smoke test is ``import torch, torch_npu``)."""
ENV_SCRIPT = "/opt/provision/ascend-env.sh"
"""The image's Ascend environment (container/ascend-env.sh), sourced by its entrypoint."""
PLUGIN_LINE = "Platform plugin ascend is activated"
NO_PLATFORM = "No platform detected"
DEFAULT_TIMEOUT_S = 300.0
_SSH_NOISE = re.compile(r"Shared connection to \S+ closed\.?|Connection to \S+ closed\.?")
_PYTHON_FAILED = ("Traceback (most recent call last)", "ModuleNotFoundError", "ImportError", "RuntimeError")
"""Lines that say Python itself ran and failed (not docker, which answers while the container is created)."""
SERVICE_MODE_NOTE = (
    "post-start smoke not run: it runs inside a container (vllm_serve_mode: container) in this version; "
    "in service mode the health gate alone checks the instance"
)


@dataclass(frozen=True, slots=True)
class Verdict:
    """``ok``, ``failed`` (``message`` says why) or neither (not there yet: ask again)."""

    ok: bool = False
    failed: bool = False
    message: str = ""
    count: int | None = None
    line: str = ""


def exec_argv() -> list[str]:
    """What ``docker exec CONTAINER`` runs: the count in the image's environment, with its engine's Python
    (``VLLM_PYTHON``, as the entrypoint starts the engine; ``python3`` by default)."""
    python = f'exec "${{VLLM_PYTHON:-python3}}" -c {shlex.quote(DEVICE_COUNT)}'
    script = f"[ -r {ENV_SCRIPT} ] && . {ENV_SCRIPT}; {python}"
    return ["bash", "-c", script]


def _said(stdout: str, stderr: str) -> list[str]:
    """What the command printed, both streams (a connection with a terminal merges them into stdout), less
    the SSH client's own goodbye."""
    return [
        line.strip()
        for line in f"{stdout}\n{stderr}".splitlines()
        if line.strip() and not _SSH_NOISE.fullmatch(line.strip())
    ]


def read_count(rc: int, stdout: str, stderr: str, devices: int, container: str) -> Verdict:
    """The device count's answer: the pool's count (ok), another or a Python error (failed), else (no
    container yet, the engine still creating it: docker's own errors) ask again; ``message`` says what
    was seen, for when time runs out."""
    said = _said(stdout, stderr)
    if rc != 0:
        last = said[-1] if said else f"exit code {rc}"
        if not any(line.startswith(_PYTHON_FAILED) for line in said):
            return Verdict(message=f"`{DEVICE_COUNT}` in {container}: {last}")
        return Verdict(
            failed=True,
            message=(
                f"post-start smoke: `python -c '{DEVICE_COUNT}'` failed in {container}: {last}. torch-npu "
                "cannot reach the NPUs (image without torch-npu, or CANN/driver files missing in it)."
            ),
        )
    stdout = "\n".join(said)
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    if not lines or not lines[-1].isdigit():
        return Verdict(
            failed=True,
            message=f"post-start smoke: `python -c '{DEVICE_COUNT}'` in {container} printed no count: "
            f"{said!r}",
        )
    count = int(lines[-1])
    if count != devices:
        return Verdict(
            failed=True,
            count=count,
            message=(
                f"post-start smoke: the NPU runtime in {container} sees {count} NPU(s), the pool has "
                f"{devices}: the container got other devices than the pool's "
                "(vllm_serve_container_devices, the Ascend Docker Runtime's ASCEND_VISIBLE_DEVICES)."
            ),
        )
    return Verdict(ok=True, count=count)


UNIT_EXTRA = ("InvocationID", "ExecMainStartTimestamp")
"""Read with the unit's state on each poll: which start it is, and since when its journal counts."""


def journal_command(unit: str, since: str) -> str:
    """The unit's journal since its main process started (``ExecMainStartTimestamp``), the lines that tell."""
    journal = ["journalctl", "-u", unit, "-o", "cat", "--no-pager"] + (["--since", since] if since else [])
    grep = ["grep", "-m", "20", "-e", PLUGIN_LINE, "-e", NO_PLATFORM]
    return f"{shlex.join(journal)} 2>/dev/null | {shlex.join(grep)}"


def read_plugin(journal: str) -> Verdict:
    """Ok once vLLM logged its platform plugin line. Some versions log the no-platform line first and the
    plugin line after it (vllm-ascend#19), so that line alone only says what was seen (``line``)."""
    seen = ""
    for line in journal.splitlines():
        if PLUGIN_LINE in line:
            return Verdict(ok=True, line=line.strip())
        if NO_PLATFORM in line and not seen:
            seen = line.strip()
    return Verdict(line=seen)


def timeout_message(unit: str, container: str, count: int | None, seconds: float, seen: str = "") -> str:
    """Why the smoke gave up; ``seen``: the last thing the count said (no count yet) or the log's
    no-platform line."""
    if count is None:
        told = f": {seen}" if seen else ""
        return f"post-start smoke: {container} of {unit} did not answer within {seconds:.0f} s{told}"
    if seen:
        return (
            f"post-start smoke: vLLM did not take the Ascend platform within {seconds:.0f} s of the start of "
            f"{unit}: {seen!r}. vllm-ascend is missing from the image or failed to import "
            "(`provision doctor INVENTORY --limit HOST`)."
        )
    return (
        f"post-start smoke: the engine log of {unit} has no {PLUGIN_LINE!r} within {seconds:.0f} s of "
        "its start: vLLM did not load the vllm-ascend platform plugin (is vllm-ascend in the image?)"
    )
