"""The support bundle: everything ``provision doctor`` collected, per node, secrets redacted, as a tar.gz.

Layout::

    manifest.json              hosts, files (size, sha256), provision version, what was redacted
    <host>/probe.txt           the node's raw probe output (tool outputs, journals, configs)
    <host>/holders.txt         the cgroups of the processes on the NPUs (when any)
    <host>/facts.json          the same, parsed
    <host>/findings.json       the known failures matched, with evidence and fix

Every text passes :func:`redact` before it is written: API keys (``vllm_serve_api_key`` values,
``VLLM_API_KEY=``, ``--api-key``, vLLM's ``api_key=`` in its logged arguments), ``Authorization`` and
``Proxy-Authorization`` credentials (Bearer, Basic ...: curl -v's ``> Authorization:`` lines, ``-H``,
JSON), cookies, credentials in URLs (``https://user:password@host``), hub and registry tokens (Hugging
Face ``hf_...``, Docker Hub ``dckr_pat_...``, ModelScope ``ms-<uuid>``, JWTs, the values of ``--token``,
``--password``, ``docker login -p``, ``HF_TOKEN=``, ``MODELSCOPE_API_TOKEN=``), docker's ``config.json``
``auths`` (``auth``, ``identitytoken``), passwords (vault passwords included), tokens and secrets in
``key: value`` / ``key=value`` / JSON form, Ansible vault blocks, private keys, and every literal secret
the caller names (the inventory's own values). The file is created mode 0600.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision import __version__

REDACTED = "[REDACTED]"
REDACTED_WHAT = (
    "API keys, bearer/basic credentials, credentials in URLs, hub and registry tokens, docker auths, "
    "cookies, passwords/tokens/secrets, vault blocks, private keys, inventory secrets"
)
_KEYS = r"(?:vllm_serve_api_key|api[_-]?key|password|passwd|passphrase|secret|token|private[_-]?key)"
# a value not redacted yet: quoted, or up to the next blank
_QUOTED_OR_WORD = r"(?!\[REDACTED\])(?:\"[^\"]*\"|'[^']*'|\S+)"
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S
        ),
        f"-----BEGIN PRIVATE KEY----- {REDACTED} -----END PRIVATE KEY-----",
    ),
    (re.compile(r"\$ANSIBLE_VAULT;[^\n]*(?:\n[ \t]*[0-9a-fA-F]+)*"), f"$ANSIBLE_VAULT {REDACTED}"),
    # scheme://user:password@host (pip index URLs, proxies, git remotes, registry mirrors)
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@\"'<>]+@"), rf"\g<1>{REDACTED}@"),
    # Authorization / Proxy-Authorization headers: curl -v ("> Authorization: Basic dXNl..."), -H, JSON
    (
        re.compile(
            r"(?i)(\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)"
            r"((?:basic|bearer|digest|token|negotiate|ntlm)\s+)?[^\"'\n]+"
        ),
        rf"\g<1>\g<2>{REDACTED}",
    ),
    (re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}"), rf"\g<1>{REDACTED}"),
    (re.compile(r"(?im)^([<>]?\s*(?:set-)?cookie\s*:\s*).+$"), rf"\g<1>{REDACTED}"),
    # tokens that say what they are wherever they stand: Hugging Face (hf_..., api_org_...), Docker Hub
    # personal access tokens (dckr_pat_...), ModelScope SDK tokens (ms-<uuid>), JWTs (registry bearer
    # and identity tokens)
    (re.compile(r"\b(?:hf|api_org)_[A-Za-z0-9]{30,}\b"), REDACTED),
    (re.compile(r"\bdckr_pat_[A-Za-z0-9_-]{20,}"), REDACTED),
    (re.compile(r"\bms-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), REDACTED),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"), REDACTED),
    # docker's config.json: "auths": {"registry": {"auth": "<base64 of user:password>"}}
    (re.compile(r"(?i)([\"']auth[\"']\s*:\s*)(?:\"[^\"]*\"|'[^']*')"), f'\\g<1>"{REDACTED}"'),
    # options that take a secret: --api-key K, --password P, --token T (modelscope login, huggingface-cli
    # login), --hf-token T; not --api-key-file or --password-stdin, which name no secret
    (
        re.compile(
            rf"(?i)(--[\w-]*(?:api-?key|password|passwd|passphrase|token|secret)(?:=|\s+)){_QUOTED_OR_WORD}"
        ),
        rf"\g<1>{REDACTED}",
    ),
    (re.compile(rf"(\bdocker\s+login\b[^\n]*?\s-p(?:=|\s*)){_QUOTED_OR_WORD}"), rf"\g<1>{REDACTED}"),
    # "key": "value" (JSON), key: value (YAML), key=value (env files, logged arguments: api_key='x')
    (
        re.compile(
            rf"(?i)([\"']?\b\w*{_KEYS}\w*[\"']?\s*[:=]\s*)(?!\[REDACTED\])(\[?)(\"[^\"]*\"|'[^']*'|[^\s,\]\)]+)"
        ),
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


def _redacted(value: Any, secrets: Iterable[str]) -> Any:
    """``value`` (parsed facts, findings) with every string in it redacted: in its JSON form a text is
    escaped (``\\n``, ``\\"``), which the patterns would not see through. The JSON is redacted again as a
    whole, for a secret whose key and value are a mapping's key and value."""
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, Mapping):
        return {key: _redacted(item, secrets) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(item, secrets) for item in value]
    return value


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
            "facts.json": json.dumps(_redacted(node.facts, secrets), indent=2, sort_keys=True, default=str),
            "findings.json": json.dumps(_redacted(node.findings, secrets), indent=2, default=str),
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
    # Created 0600 (mkstemp's mode, whatever the umask), then renamed over the target: no moment where
    # another user could open it, and an existing file of wider mode is replaced, not written into.
    fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mtime = int(time.time())
                info.mode = 0o600
                tar.addfile(info, io.BytesIO(data))
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    return manifest
