"""The support bundle: everything ``provision doctor`` collected, per node, secrets redacted, as a tar.gz.

Layout::

    manifest.json              hosts, files (size, sha256), provision version, what was redacted
    <host>/probe.txt           the node's raw probe output (tool outputs, journals, configs)
    <host>/holders.txt         the cgroups of the processes on the NPUs (when any)
    <host>/facts.json          the same, parsed
    <host>/findings.json       the known failures matched, with evidence and fix

Every text passes :func:`redact` before it is written: API keys (``vllm_serve_api_key`` values,
``VLLM_API_KEY=``, ``--api-key``, vLLM's ``api_key=`` in its logged arguments), ``Authorization: Bearer``
tokens, passwords, tokens and secrets in ``key: value`` / ``key=value`` / JSON form, Ansible vault blocks,
private keys, and every literal secret the caller names (the inventory's own values).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision import __version__

REDACTED = "[REDACTED]"
REDACTED_WHAT = (
    "API keys, bearer tokens, passwords/tokens/secrets, vault blocks, private keys, inventory secrets"
)
_KEYS = r"(?:vllm_serve_api_key|api[_-]?key|password|passwd|passphrase|secret|token|private[_-]?key)"
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S
        ),
        f"-----BEGIN PRIVATE KEY----- {REDACTED} -----END PRIVATE KEY-----",
    ),
    (re.compile(r"\$ANSIBLE_VAULT;[^\n]*(?:\n[ \t]*[0-9a-fA-F]+)*"), f"$ANSIBLE_VAULT {REDACTED}"),
    (re.compile(r"(?i)(authorization\s*[:=]\s*[\"']?bearer\s+)[^\s\"',]+"), rf"\g<1>{REDACTED}"),
    (re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}"), rf"\g<1>{REDACTED}"),
    (re.compile(r"(--api-key[= ]\s*)(?:\"[^\"]*\"|'[^']*'|\S+)"), rf"\g<1>{REDACTED}"),
    # "key": "value" (JSON), key: value (YAML), key=value (env files, logged arguments: api_key='x')
    (
        re.compile(rf"(?i)([\"']?\b\w*{_KEYS}\w*[\"']?\s*[:=]\s*)(\[?)(\"[^\"]*\"|'[^']*'|[^\s,\]\)]+)"),
        rf"\g<1>\g<2>{REDACTED}",
    ),
)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every secret it shows replaced by ``[REDACTED]``."""
    for value in sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


@dataclass(slots=True)
class NodeBundle:
    host: str
    probe: str = ""
    holders: str = ""
    facts: Mapping[str, Any] = field(default_factory=dict)
    findings: list[Mapping[str, Any]] = field(default_factory=list)
    error: str | None = None


def write_bundle(path: Path, nodes: Iterable[NodeBundle], *, secrets: Iterable[str] = ()) -> dict[str, Any]:
    """Write the tar.gz at ``path``; returns its manifest."""
    secrets = tuple(secrets)
    files: dict[str, bytes] = {}
    hosts = []
    for node in nodes:
        hosts.append({"host": node.host, "error": redact(node.error, secrets) if node.error else None})
        parts = {
            "probe.txt": node.probe,
            "holders.txt": node.holders,
            "facts.json": json.dumps(node.facts, indent=2, sort_keys=True, default=str),
            "findings.json": json.dumps(node.findings, indent=2, default=str),
        }
        for name, text in parts.items():
            if text:
                files[f"{node.host}/{name}"] = redact(text, secrets).encode()
    manifest = {
        "provision": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "hosts": hosts,
        "files": {
            name: {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            for name, data in files.items()
        },
        "redacted": REDACTED_WHAT,
    }
    files = {"manifest.json": json.dumps(manifest, indent=2).encode(), **files}
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = int(time.time())
            info.mode = 0o600
            tar.addfile(info, io.BytesIO(data))
    path.chmod(0o600)
    return manifest
