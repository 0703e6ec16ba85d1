"""Filters of the container_runtime role: daemon.json parsing and merging, the verification's verdict.

Pure functions (unit-tested in tests/unit/test_container_runtime_config.py); the role only moves text around.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

DEVICE = re.compile(r"^davinci(\d+)$")
MANAGER_DEVICES = ("davinci_manager", "devmm_svm", "hisi_hdc")


def container_runtime_parse_daemon_json(text: str | None) -> dict[str, Any]:
    """``{"ok": bool, "data": {...}, "error": str}`` for a daemon.json's text (``None``/empty: ``{}``)."""
    if text is None or not text.strip():
        return {"ok": True, "data": {}, "error": ""}
    try:
        data = json.loads(text)
    except ValueError as exc:
        return {"ok": False, "data": {}, "error": f"not valid JSON ({exc})"}
    if not isinstance(data, dict):
        return {"ok": False, "data": {}, "error": f"holds a JSON {type(data).__name__}, not an object"}
    runtimes = data.get("runtimes")
    if runtimes is not None and not isinstance(runtimes, dict):
        return {"ok": False, "data": data, "error": '"runtimes" is not an object'}
    if isinstance(runtimes, dict) and not isinstance(runtimes.get("ascend", {}), dict):
        return {"ok": False, "data": data, "error": '"runtimes.ascend" is not an object'}
    return {"ok": True, "data": data, "error": ""}


def container_runtime_merge_daemon_json(
    current: Mapping[str, Any] | None, runtime_path: str, default_runtime: bool = True
) -> dict[str, Any]:
    """``current`` with ``runtimes.ascend`` pointing at ``runtime_path`` and, when ``default_runtime``,
    ``"default-runtime": "ascend"``. Every other key (and the other runtimes, and an existing
    ``runtimeArgs`` of ascend) is kept, as MindCluster's install helper does."""
    # Only the levels it changes are copied (the input is left as it was): a deep copy of the lazy containers
    # Ansible passes in copies their templating context too, ~0.3 s of controller CPU per host and call.
    merged: dict[str, Any] = dict(current or {})
    runtimes = merged.get("runtimes")
    runtimes = dict(runtimes) if isinstance(runtimes, Mapping) else {}
    ascend = runtimes.get("ascend")
    ascend = dict(ascend) if isinstance(ascend, Mapping) else {}
    ascend["path"] = runtime_path
    ascend.setdefault("runtimeArgs", [])
    runtimes["ascend"] = ascend
    merged["runtimes"] = runtimes
    if default_runtime:
        merged["default-runtime"] = "ascend"
    return merged


def container_runtime_seen_devices(listing: str) -> list[int]:
    """NPU ids of the ``/dev/davinciN`` names in ``ls -1 /dev`` output (sorted)."""
    return sorted(int(m.group(1)) for line in listing.splitlines() if (m := DEVICE.match(line.strip())))


def container_runtime_verdict(
    result: Mapping[str, Any], pool: Mapping[str, Any], host: str, image: str
) -> dict[str, Any]:
    """``{"ok", "message", "seen"}`` for one pool's verification container (a registered command result)."""
    expected = sorted(int(d) for d in pool.get("devices", []))
    name = pool.get("name", "?")
    want = ", ".join(f"/dev/davinci{d}" for d in expected) or "none"
    rc = result.get("rc")
    if rc != 0:
        err = (str(result.get("stderr") or "") or str(result.get("msg") or "")).strip()
        return {
            "ok": False,
            "seen": [],
            "message": (
                f"{host}: pool {name}: the verification container (image {image}, ASCEND_VISIBLE_DEVICES="
                f"{','.join(map(str, expected))}) did not run (exit {rc}): {err[-800:]}"
            ),
        }
    listing = str(result.get("stdout") or "")
    seen = container_runtime_seen_devices(listing)
    names = {line.strip() for line in listing.splitlines()}
    missing_managers = [d for d in MANAGER_DEVICES if d not in names]
    got = ", ".join(f"/dev/davinci{d}" for d in seen) or "none"
    if seen != expected or missing_managers:
        extra = f"; missing {', '.join('/dev/' + d for d in missing_managers)}" if missing_managers else ""
        return {
            "ok": False,
            "seen": seen,
            "message": (
                f"{host}: pool {name}: a container given ASCEND_VISIBLE_DEVICES="
                f"{','.join(map(str, expected))} should see exactly {want} but saw {got}{extra}. The Ascend "
                "Docker Runtime is not the runtime docker used, or it does not inject the devices: check "
                "daemon.json (runtimes.ascend, default-runtime) and `docker info | grep -i runtime`."
            ),
        }
    return {"ok": True, "seen": seen, "message": f"{host}: pool {name}: container sees exactly {got}"}


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "container_runtime_parse_daemon_json": container_runtime_parse_daemon_json,
            "container_runtime_merge_daemon_json": container_runtime_merge_daemon_json,
            "container_runtime_seen_devices": container_runtime_seen_devices,
            "container_runtime_verdict": container_runtime_verdict,
        }


__all__: Sequence[str] = ["FilterModule"]
