"""Filter of the openeuler_repos role: is a node already what the role would make it (one probe, no change)?

``openeuler_repos_drift(probe_stdout, expected)`` reads the output of ``_openeuler_repos_probe``
(vars/main.yml) and lists every way the node differs from what the role's tasks would write or install.
An empty list means a run of the role would change nothing, so the role ends there (one module run
instead of five).
Anything the probe cannot see for certain counts as a difference: the full role then runs as before.

``openeuler_repos_key_fingerprints(text)`` reads a downloaded signing key, for the fingerprint pin.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

MARK = "@@@provision "
FILE_MODE = "644:root:root"


def _sections(text: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    label: str | None = None
    for line in text.splitlines():
        if line.startswith(MARK):
            label = line[len(MARK) :].strip()
            sections[label] = []
        elif label is not None and line.strip():
            sections[label].append(line.rstrip())
    return sections


def openeuler_repos_drift(text: str, expected: Mapping[str, Any]) -> list[str]:
    """Differences between the probe output and ``expected``; ``[]`` when the role has nothing to do.

    ``expected``: ``pkg_mgr`` (dnf|apt); ``files`` {path: sha1 of what the role writes, ``present`` for a
    file that must only exist, or null for a file that must not exist}; ``disable_other_sources`` and
    ``own_sources`` (paths the role owns); ``packages`` (names that must be installed); dnf:
    ``dnf_exclude`` (the exclude= line wanted, or null) and ``dnf_exclude_line``; apt: ``hold`` (bool) and
    ``hold_pattern``.
    """
    sections = _sections(text or "")
    if "end" not in sections:
        return ["the probe did not finish"]
    drift: list[str] = []
    found: dict[str, tuple[str, str]] = {}
    for line in sections.get("files", []):
        path, attrs, digest = line.rsplit(" ", 2)
        found[path] = (attrs, digest)
    for path, want in (expected.get("files") or {}).items():
        if want is None:
            if path in found:
                drift.append(f"{path} should not exist")
        elif path not in found:
            drift.append(f"{path} is missing")
        elif found[path][0] != FILE_MODE:
            drift.append(f"{path} has mode/owner {found[path][0]}")
        elif want != "present" and found[path][1] != want:
            drift.append(f"{path} differs from what the role writes")
    if expected.get("disable_other_sources"):
        own = set(expected.get("own_sources") or [])
        others = [p for p in sections.get("others", []) if p not in own]
        if others:
            drift.append(f"other sources enabled: {', '.join(others)}")
        if expected.get("pkg_mgr") == "apt":
            if "sources.list" not in sections:
                drift.append("/etc/apt/sources.list is missing")
            elif sections["sources.list"]:
                drift.append("/etc/apt/sources.list has enabled entries")
    mgr = expected.get("pkg_mgr")
    if mgr == "dnf":
        installed = {word for line in sections.get("packages", []) for word in line.split()}
        excludes = sections.get("dnf.conf exclude", [])
        wanted_line = expected.get("dnf_exclude_line")
        if expected.get("dnf_exclude"):
            if not excludes or excludes[-1] != wanted_line:
                drift.append(f"/etc/dnf/dnf.conf lacks {wanted_line}")
        elif wanted_line in excludes:
            drift.append(f"/etc/dnf/dnf.conf still has {wanted_line}")
    elif mgr == "apt":
        status: dict[str, str] = {}
        for line in sections.get("packages", []):
            words = line.split()
            if len(words) >= 2:
                status[words[0]] = words[1]
        installed = {name for name, flags in status.items() if flags[1:2] == "i"}
        pattern = re.compile(str(expected.get("hold_pattern") or "(?!)"))
        selection = "h" if expected.get("hold") else "i"
        unheld = sorted(n for n in installed if pattern.match(n) and status[n][:1] != selection)
        if unheld:
            drift.append(f"kernel package selections to change: {', '.join(unheld)}")
    else:
        return [f"unknown package manager {mgr}"]
    missing = [p for p in expected.get("packages") or [] if p not in installed]
    if missing:
        drift.append(f"packages to install: {', '.join(missing)}")
    return drift


def openeuler_repos_key_fingerprints(text: str) -> list[str]:
    """The fingerprints of the primary keys in an armored key file (upper-case hex, as ``gpg
    --fingerprint`` prints them without spaces); ``[]`` when the text is no OpenPGP public key."""
    from provision.openpgp import key_fingerprints

    try:
        return key_fingerprints(str(text or ""))
    except ValueError:
        return []


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "openeuler_repos_drift": openeuler_repos_drift,
            "openeuler_repos_key_fingerprints": openeuler_repos_key_fingerprints,
        }
