"""Match a node's collected facts against the known failures: each match is a finding with its evidence.

A regex signature is searched in every text of its outputs (:func:`outputs`: the npu-smi output, each vLLM
unit's journal, the plog, docker's journal, ``dkms status``); its evidence is the first matching line,
prefixed with where it was seen. A condition signature gives its own evidence lines.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from provision.doctor.catalog import Catalog, Failure
from provision.doctor.conditions import CONDITIONS, Expected


@dataclass(frozen=True, slots=True)
class Finding:
    id: str
    title: str
    evidence: list[str]
    cause: str
    fix: str
    sources: list[str]


@dataclass(slots=True)
class NodeReport:
    host: str
    reachable: bool = True
    error: str | None = None
    """Why the node could not be probed (unreachable, the probe failed)."""
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.reachable and self.error is None and not self.findings

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "ok": self.ok,
            "reachable": self.reachable,
            "error": self.error,
            "findings": [asdict(f) for f in self.findings],
        }


def outputs(node: Mapping[str, Any]) -> dict[str, list[tuple[str, str]]]:
    """Output name -> ``[(where, text)]``: the texts a regex signature of that output is searched in."""
    journals: Mapping[str, list[str]] = node.get("journals") or {}
    plog = node.get("plog")
    return {
        "npu_smi": [("npu-smi info", node["npu_smi"])] if node.get("npu_smi") else [],
        "engine_log": [
            (u, "\n".join(lines)) for u, lines in sorted(journals.items()) if u.startswith("vllm-")
        ],
        "plog": [(str(plog["path"]), "\n".join(plog["lines"]))] if plog else [],
        "docker_log": [("docker.service", "\n".join(journals.get("docker.service") or []))],
        "dkms": [("dkms status", node["dkms"])] if node.get("dkms") else [],
    }


def diagnose(node: Mapping[str, Any], expected: Expected, catalog: Catalog) -> list[Finding]:
    """Every known failure the node shows, in the catalogue's order."""
    texts = outputs(node)
    findings = []
    for failure in catalog.failures:
        evidence = _evidence(failure, node, expected, texts)
        if evidence:
            findings.append(
                Finding(
                    id=failure.id,
                    title=failure.title,
                    evidence=evidence,
                    cause=failure.cause,
                    fix=failure.fix,
                    sources=[s.url for s in failure.sources],
                )
            )
    return findings


def _evidence(
    failure: Failure,
    node: Mapping[str, Any],
    expected: Expected,
    texts: Mapping[str, list[tuple[str, str]]],
) -> list[str]:
    signature = failure.signature
    if signature.condition is not None:
        return CONDITIONS[signature.condition](node, expected)
    found = []
    for output in signature.outputs:
        for where, text in texts.get(output, []):
            line = failure.search(text)
            if line is not None:
                found.append(f"{where}: {line}")
    return found
