"""Match a node's collected facts against the known failures: each match is a finding with its evidence.

A regex signature is searched in every text of its outputs (:func:`outputs`: the npu-smi output, each vLLM
unit's journal, the plog and its error lines, docker's journal, ``dkms status``, the driver's kernel
lines); its evidence is the first matching line, prefixed with where it was seen, and, when the entry
has a ``peer`` regex and the line names the other end, a ``peer:`` line: its server, NPU, NPU address or
rank, and the node of the run whose NPU has that address. A condition signature gives its own evidence.

:func:`by_cause` then orders each node's findings by cause: a failure whose ``symptoms`` (in
``failures.yml``) include another finding of the node comes before it, and every finding names the found
failures that cause it, on its own node or on the peer node its evidence names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
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
    caused_by: list[str] = field(default_factory=list)
    """The found failures that cause this one: ``id`` on this node, ``host: id`` on the peer node."""
    peer_hosts: list[str] = field(default_factory=list)
    """The nodes of this run the evidence names as the other end."""


@dataclass(slots=True)
class NodeReport:
    host: str
    reachable: bool = True
    error: str | None = None
    """Why the node could not be probed (unreachable, the probe failed)."""
    findings: list[Finding] = field(default_factory=list)
    links: Mapping[str, Any] | None = None
    """What the HCCN gate's bandwidth check last measured on this node (a group's head): ``age_s``,
    ``threshold`` and ``links``, each pair's figures (:func:`provision.ascend.hccl_check.link_figures`)."""

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
            "links": dict(self.links) if self.links is not None else None,
        }


NpuAddresses = Mapping[str, tuple[str, int]]
"""An NPU port address -> (host, NPU) of the nodes of one doctor run (:func:`npu_addresses`)."""


def outputs(node: Mapping[str, Any]) -> dict[str, list[tuple[str, str]]]:
    """Output name -> ``[(where, text)]``: the texts a regex signature of that output is searched in."""
    journals: Mapping[str, list[str]] = node.get("journals") or {}
    plog = node.get("plog")
    plog_errors: Mapping[str, list[str]] = node.get("plog_errors") or {}
    kernel: list[str] = node.get("kernel_log") or []
    return {
        "npu_smi": [("npu-smi info", node["npu_smi"])] if node.get("npu_smi") else [],
        "engine_log": [
            (u, "\n".join(lines)) for u, lines in sorted(journals.items()) if u.startswith("vllm-")
        ],
        "plog": ([(str(plog["path"]), "\n".join(plog["lines"]))] if plog else [])
        + [(path, "\n".join(lines)) for path, lines in sorted(plog_errors.items())],
        "docker_log": [("docker.service", "\n".join(journals.get("docker.service") or []))],
        "dkms": [("dkms status", node["dkms"])] if node.get("dkms") else [],
        "kernel_log": [("kernel log", "\n".join(kernel))] if kernel else [],
    }


def npu_addresses(nodes: Mapping[str, Mapping[str, Any]]) -> dict[str, tuple[str, int]]:
    """The NPU port addresses ``hccn_tool -ip -g`` showed on each probed node: address -> (host, NPU)."""
    found: dict[str, tuple[str, int]] = {}
    for host, node in nodes.items():
        for npu, port in ((node.get("hccn") or {}).get("npus") or {}).items():
            if port.get("ip") and str(npu).isdigit():
                found[str(port["ip"])] = (host, int(npu))
    return found


def diagnose(
    node: Mapping[str, Any], expected: Expected, catalog: Catalog, npus: NpuAddresses | None = None
) -> list[Finding]:
    """Every known failure the node shows, in the catalogue's order; ``npus`` names the node of a peer."""
    texts = outputs(node)
    findings = []
    for failure in catalog.failures:
        evidence, peers = _evidence(failure, node, expected, texts, npus or {})
        if evidence:
            findings.append(
                Finding(
                    id=failure.id,
                    title=failure.title,
                    evidence=evidence,
                    cause=failure.cause,
                    fix=failure.fix,
                    sources=[s.url for s in failure.sources],
                    peer_hosts=peers,
                )
            )
    return findings


def by_cause(found: Mapping[str, list[Finding]], catalog: Catalog) -> dict[str, list[Finding]]:
    """Each node's findings (host -> findings, as :func:`diagnose` returns them), causes first.

    A finding is caused by a found failure whose ``symptoms`` list its id, on the same node or on a peer
    node its evidence names; on one node, a cause comes before its symptoms (otherwise the catalogue's
    order holds).
    """
    symptoms = {f.id: set(f.symptoms) for f in catalog.failures}
    out: dict[str, list[Finding]] = {}
    for host, unordered in found.items():
        findings = _causes_first(unordered, symptoms)
        named = []
        for finding in findings:
            causes = [c.id for c in findings if finding.id in symptoms.get(c.id, ())]
            for peer in finding.peer_hosts:
                if peer != host:
                    causes += [
                        f"{peer}: {c.id}" for c in found.get(peer, []) if finding.id in symptoms.get(c.id, ())
                    ]
            named.append(replace(finding, caused_by=causes))
        out[host] = named
    return out


def _causes_first(findings: list[Finding], symptoms: Mapping[str, set[str]]) -> list[Finding]:
    """``findings`` sorted by how many found causes stand above each (stable: else the catalogue's order)."""
    depth: dict[str, int] = {}

    def level(fid: str, seen: frozenset[str]) -> int:
        # the catalogue refuses a circle of symptoms; `seen` only guards one built by hand
        if fid not in depth:
            above = [c.id for c in findings if fid in symptoms.get(c.id, set()) and c.id not in seen]
            depth[fid] = 1 + max((level(c, seen | {fid}) for c in above), default=-1)
        return depth[fid]

    return sorted(findings, key=lambda f: level(f.id, frozenset()))


def _evidence(
    failure: Failure,
    node: Mapping[str, Any],
    expected: Expected,
    texts: Mapping[str, list[tuple[str, str]]],
    npus: NpuAddresses,
) -> tuple[list[str], list[str]]:
    """The evidence lines, and the nodes of the run they name as the peer."""
    signature = failure.signature
    if signature.condition is not None:
        return CONDITIONS[signature.condition](node, expected), []
    found: list[str] = []
    hosts: list[str] = []
    for output in signature.outputs:
        for where, text in texts.get(output, []):
            line = failure.search(text)
            if line is not None:
                found.append(f"{where}: {line}")
                peer = failure.peer(line)
                described = _describe_peer(peer, npus)
                if described:
                    found.append(f"  peer: {described}")
                host = npus.get(peer.get("ip", ""), (None, 0))[0]
                if host is not None and host not in hosts:
                    hosts.append(host)
    return found, hosts


def _describe_peer(peer: Mapping[str, str], npus: NpuAddresses) -> str:
    parts = []
    if "rank" in peer:
        parts.append(f"rank {peer['rank']}")
    if "server" in peer:
        parts.append(f"server {peer['server']}")
    if "npu" in peer:
        parts.append(f"NPU {peer['npu']}")
    if "ip" in peer:
        where = ""
        if peer["ip"] in npus:
            host, npu = npus[peer["ip"]]
            where = f" (= {host} NPU {npu}; its port's history: hccn_tool -i {npu} -link_stat -g on {host})"
        parts.append(f"NPU address {peer['ip']}{where}")
    return ", ".join(parts)
