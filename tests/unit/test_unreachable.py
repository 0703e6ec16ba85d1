"""What an unreachable result says failed: the connection plugins' verbatim messages (ansible-core's ssh
plugin, Mitogen), as ansible-runner hands them over in ``runner_on_unreachable``'s ``res.msg``."""

from __future__ import annotations

import pytest

from provision.runner.unreachable import classify

pytestmark = pytest.mark.unit

# Captured from real runs against loopback (port 1; a listener that closes at once) and from ssh's own words.
MESSAGES = [
    (
        "Task failed: EOF on stream; last 100 lines received:\nssh: connect to host 127.0.0.1 port 1: "
        "Connection refused",
        "connection refused",
        "ssh: connect to host 127.0.0.1 port 1: Connection refused",
    ),
    (
        "Failed to connect to the host via ssh: ssh: connect to host 127.0.0.1 port 1: Connection refused",
        "connection refused",
        "ssh: connect to host 127.0.0.1 port 1: Connection refused",
    ),
    (
        "Failed to connect to the host via ssh: kex_exchange_identification: read: "
        "Connection reset by peer\r\n"
        "Connection reset by 127.0.0.1 port 40111",
        "connection closed before SSH began",
        "kex_exchange_identification: read: Connection reset by peer",
    ),
    (
        "Failed to connect to the host via ssh: ssh: connect to host 10.0.0.9 port 22: Connection timed out",
        "timed out",
        "ssh: connect to host 10.0.0.9 port 22: Connection timed out",
    ),
    (
        "Failed to connect to the host via ssh: No ED25519 host key is known for 10.0.0.2 and you have "
        "requested strict checking.\r\nHost key verification failed.",
        "host key not trusted",
        "No ED25519 host key is known for 10.0.0.2 and you have requested strict checking.",
    ),
    (
        "Failed to connect to the host via ssh: provision@10.0.0.2: Permission denied (publickey,password).",
        "authentication failed",
        "provision@10.0.0.2: Permission denied (publickey,password).",
    ),
    (
        "Failed to connect to the host via ssh: ssh: Could not resolve hostname node9: Name or service not "
        "known",
        "name not resolved",
        "ssh: Could not resolve hostname node9: Name or service not known",
    ),
    (
        "Task failed: EOF on stream; last 100 lines received:\nssh: connect to host 10.0.0.3 port 22: No "
        "route to host",
        "no route to host",
        "ssh: connect to host 10.0.0.3 port 22: No route to host",
    ),
]


@pytest.mark.parametrize(("message", "kind", "evidence"), MESSAGES)
def test_the_cause_is_named_with_ssh_s_own_line(message: str, kind: str, evidence: str) -> None:
    found = classify(message)
    assert (found.kind, found.evidence) == (kind, evidence)
    assert str(found) == f"{kind}: {evidence}"
    assert "EOF on stream" not in str(found) and "Failed to connect" not in str(found)


def test_an_unknown_message_is_kept_without_the_transport_wrapper() -> None:
    found = classify("Task failed: EOF on stream; last 100 lines received:\nsomething new happened")
    assert str(found) == "something new happened"
    assert str(classify("")) == "unreachable (no message)"
