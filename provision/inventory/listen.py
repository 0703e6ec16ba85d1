"""Where provision's listeners bind, and when an engine counts as open to the network without a key.

One home for three decisions (docs/security.md, "Listeners"):

- the **management address** of a node, the default bind address of every listener the roles start (the
  engines, the readiness endpoint, NPU-Exporter): the address Ansible reaches the node on (``ansible_host``,
  else the inventory name) when it is an IP literal; otherwise (a DNS name, nothing known) every address,
  ``0.0.0.0``, as before. A DNS name is not resolved: on the node it may resolve to another NIC, or to
  nothing.
- **loopback**: ``127.0.0.0/8``, ``::1`` and the names ``localhost`` (and its usual aliases). Every other
  value is reachable from the network: a wildcard (``0.0.0.0``, ``::``, ``""``), an address of a NIC, a name.
- where **the node itself** reaches a listener bound to an address (a wildcard: ``127.0.0.1``).
"""

from __future__ import annotations

import ipaddress

ANY = "0.0.0.0"
"""Every IPv4 address: the default where a node's management address is not an IP literal."""
WILDCARDS = frozenset({"", "0.0.0.0", "::", "[::]"})
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


def ip_literal(text: object) -> str | None:
    """``text`` as an IP address literal (``[::1]`` unbracketed), else None."""
    if not isinstance(text, str):
        return None
    candidate = text.strip()
    if candidate.startswith("[") and candidate.endswith("]"):
        candidate = candidate[1:-1]
    try:
        return str(ipaddress.ip_address(candidate))
    except ValueError:
        return None


def management_address(address: object, fallback: str = ANY) -> str:
    """The address listeners bind to by default: ``address`` (``ansible_host``, else the inventory name)
    when it is an IP literal, else ``fallback`` (every address)."""
    return ip_literal(address) or fallback


def loopback(address: object) -> bool:
    """Whether a listener bound to ``address`` is reachable from this node only."""
    if not isinstance(address, str):
        return False
    literal = ip_literal(address)
    if literal is not None:
        return ipaddress.ip_address(literal).is_loopback
    return address.strip().lower().rstrip(".") in LOOPBACK_NAMES


def local_address(bind: object) -> str:
    """Where the node itself reaches a listener bound to ``bind``: a wildcard is reached on ``127.0.0.1``,
    any other address on itself."""
    text = "" if bind is None else str(bind).strip()
    return "127.0.0.1" if text in WILDCARDS else text


def describe(bind: object) -> str:
    """``bind`` as the messages name it."""
    text = "" if bind is None else str(bind).strip()
    if text in WILDCARDS:
        return f"every address of the node ({text or 'empty'})"
    return text


def open_engine_problem(where: str) -> str:
    """Why an engine that listens on ``where`` (a :func:`describe` text) without an API key is refused, and
    the three ways out. The same words in ``provision validate``, the preflight role and the vllm_serve
    role."""
    return (
        f"the engines would listen on {where} without an API key: anyone who reaches the node can use them. "
        "Set vllm_serve_api_key (`provision serve key INVENTORY --vault-password-file FILE` writes a new "
        "one, encrypted with ansible-vault, into group_vars/npu_nodes/vllm_serve_api_key.yml), bind them "
        "to 127.0.0.1 (vllm_serve_bind_host), or accept the risk with "
        "vllm_serve_allow_unauthenticated: true (docs/security.md, Listeners)"
    )


def engine_problem(bind: object, has_key: bool, allow_unauthenticated: bool) -> str | None:
    """The refusal for engines bound to ``bind``, None when they have a key, listen on loopback only, or
    the inventory accepts the risk."""
    if has_key or allow_unauthenticated or loopback(bind):
        return None
    return open_engine_problem(describe(bind))
