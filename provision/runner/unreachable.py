"""Why a host was unreachable, in the words an operator acts on: connection refused, timed out, host key,
authentication, name resolution, no route, connection closed before SSH began.

Ansible reports an unreachable host with its connection plugin's message: the ssh plugin's "Failed to
connect to the host via ssh: ..." or "Data could not be sent to remote host ...", Mitogen's "EOF on stream;
last 100 lines received: ..." followed by what ssh printed. The cause is in ssh's own line inside; this module
finds it, names the kind, and keeps that line as the evidence. A message it does not recognise is kept as it
is, without the transport's wrapper.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The transport's wrappers around what ssh said: removed, they name no cause.
_WRAPPERS = (
    re.compile(r"^Task failed:\s*", re.I),
    re.compile(r"^EOF on stream; last \d+ lines received:\s*", re.I),
    re.compile(r"^Failed to connect to the host via ssh:\s*", re.I),
    re.compile(r"^Data could not be sent to remote host \"[^\"]*\"\..*?ssh:\s*", re.I | re.S),
)

# (kind, what ssh or Mitogen prints for it), first match wins: a host key problem is named before the
# connection close that follows it.
_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "host key not trusted",
        re.compile(
            r"Host key verification failed|REMOTE HOST IDENTIFICATION HAS CHANGED|host key is known|"
            r"No \S+ host key is known|unrecognized or mismatching host key|host key checking is enabled",
            re.I,
        ),
    ),
    (
        "authentication failed",
        re.compile(r"Permission denied \(|Too many authentication failures|password was requested", re.I),
    ),
    ("connection refused", re.compile(r"Connection refused", re.I)),
    ("timed out", re.compile(r"timed out|Connection timeout|timeout waiting", re.I)),
    ("name not resolved", re.compile(r"Could not resolve hostname|Name or service not known", re.I)),
    ("no route to host", re.compile(r"No route to host|Network is unreachable", re.I)),
    (
        "connection closed before SSH began",
        re.compile(
            r"kex_exchange_identification|Connection closed by|Connection reset by peer|"
            r"ssh_exchange_identification",
            re.I,
        ),
    ),
)


@dataclass(frozen=True, slots=True)
class Unreachable:
    kind: str
    """One of the kinds above, or ``unreachable`` when the message names none of them."""
    evidence: str
    """The line of the message that says it (for ``unreachable``: the whole message, unwrapped)."""

    def __str__(self) -> str:
        if self.kind == "unreachable":
            return self.evidence or "unreachable (no message)"
        return f"{self.kind}: {self.evidence}"


def unwrap(message: str) -> str:
    """``message`` without the connection plugin's wrappers."""
    text = message.strip()
    changed = True
    while changed:
        changed = False
        for wrapper in _WRAPPERS:
            stripped = wrapper.sub("", text, count=1)
            if stripped != text:
                text, changed = stripped.strip(), True
    return text


def classify(message: str) -> Unreachable:
    """What failed, from an unreachable result's message."""
    text = unwrap(message)
    lines = [line.strip() for line in text.replace("\r", "\n").splitlines() if line.strip()]
    for kind, pattern in _KINDS:
        for line in lines:
            if pattern.search(line):
                return Unreachable(kind, line)
    return Unreachable("unreachable", "\n".join(lines))
