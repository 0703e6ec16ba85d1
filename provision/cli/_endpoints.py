"""The serving endpoints ``serve status`` and ``bench`` address: a base URL checked, and the instances of an
inventory as the health gate sees them (the ``vllm_health`` action plugin, ad hoc through the runner)."""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

from provision import paths
from provision.errors import InputError
from provision.inventory.schema import HOST_GROUP
from provision.runner.events import Outcome, TaskEvent, on_tasks
from provision.runner.options import AnsibleOptions
from provision.runner.run import Sources, run_module
from provision.serving.health import Endpoint, State

# Names that read as an inventory file, not a host: one that does not exist is not probed as a URL.
_INVENTORY_SUFFIXES = (".ini", ".yml", ".yaml", ".json")


def endpoint(url: str, model: str | None, api_key: str | None) -> Endpoint:
    """An endpoint from a base URL (``host:port`` means http); InputError for one no request could go to."""
    given = url
    if "://" not in url:
        if url.endswith(_INVENTORY_SUFFIXES):
            raise InputError(f"{url}: no such inventory file (nor a URL)")
        url = f"http://{url}"
    if not url.startswith(("http://", "https://")):
        raise InputError(f"{given}: not an http(s) URL")
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # urllib checks the port only when asked
    except ValueError as exc:
        raise InputError(f"{given}: not a valid URL: {exc}") from None
    if not parts.hostname:
        raise InputError(f"{given}: no host in the URL")
    if port == 0:
        raise InputError(f"{given}: port 0 is not a port a server listens on")
    if parts.username is not None or parts.password is not None:
        raise InputError(f"{given}: credentials in the URL are not sent; give --api-key")
    if parts.query or parts.fragment:
        raise InputError(f"{given}: a base URL has no ?query or #fragment")
    return Endpoint(url=url, model=model, api_key=api_key)


def probe_inventory(
    inventory: Sources,
    *,
    api_key: str | None = None,
    completion_timeout: float = 30.0,
    limit: str | None = None,
    log_lines: int = 20,
    options: AnsibleOptions | None = None,
) -> list[dict[str, Any]]:
    """One row per instance (and one per unreachable host): host plus the plugin's endpoint fields."""
    rows: list[dict[str, Any]] = []

    def handle(task: TaskEvent) -> None:
        if task.outcome in (Outcome.OK, Outcome.FAILED) and "endpoints" in task.result:
            rows.extend({"host": task.host, **item} for item in task.result["endpoints"])
        elif task.outcome in (Outcome.FAILED, Outcome.UNREACHABLE):
            state = "unreachable" if task.outcome is Outcome.UNREACHABLE else State.FAILED.value
            rows.append(_host_row(task.host, state, task.message or "no answer"))

    args = " ".join(
        [
            "wait=false",
            "fail_when_not_ready=false",
            f"completion_timeout_s={completion_timeout}",
            f"log_lines={log_lines}",
        ]
    )
    # run_module keeps no run directory: an API key given here must not stay on disk.
    run = run_module(
        f"{paths.COLLECTION}.vllm_health",
        inventory,
        host_pattern=HOST_GROUP,
        module_args=args,
        limit=limit,
        extra_vars={"vllm_serve_api_key": api_key} if api_key else {},
        verb="serve-status",
        observer=on_tasks(handle),
        options=options,
    )
    if not rows and run.rc != 0:
        shown = inventory if isinstance(inventory, Path) else ", ".join(map(str, inventory))
        raise InputError(f"could not probe {shown}: {run.stdout.strip()[-2000:] or run.status}")
    return sorted(rows, key=lambda row: (row["host"], str(row.get("pool", ""))))


def _host_row(host: str, state: str, message: str) -> dict[str, Any]:
    return {
        "host": host,
        "pool": None,
        "unit": None,
        "unit_state": None,
        "url": "-",
        "state": state,
        "ready": False,
        "model": None,
        "reason": message.splitlines()[0],
        "log_tail": message.splitlines()[1:],
        "message": message,
    }
