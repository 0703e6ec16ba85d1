"""Why a host could not be bootstrapped: one class per failure a person must act on differently.

Every class is a :class:`~provision.errors.ProvisionError` with a ``kind`` (the short label of the result
table) and a message that says what happened on which host and what to do. Messages never carry a secret.
"""

from __future__ import annotations

from provision.errors import ProvisionError


class BootstrapError(ProvisionError):
    """A host could not be bootstrapped (the other hosts go on)."""

    kind = "failed"


class Unreachable(BootstrapError):
    """No SSH server answered: down, wrong address, closed port, or not SSH."""

    kind = "unreachable"


class HostKeyChanged(BootstrapError):
    """The host presents another key than the one recorded or pinned: possibly a man-in-the-middle."""

    kind = "HOST KEY CHANGED"


class HostKeyUntrusted(BootstrapError):
    """A host key nobody vouched for (no --host-key, known_hosts entry or --trust-on-first-use)."""

    kind = "host key not trusted"


class AuthFailed(BootstrapError):
    """The host refused the login (wrong password or key, or that login method is disabled)."""

    kind = "login refused"


class SudoMissing(BootstrapError):
    """Logged in, but the user cannot become root (no sudo, not in sudoers, wrong sudo password)."""

    kind = "no sudo"


class StepFailed(BootstrapError):
    """A step on the node failed (package install, user, sudoers, key check, hardening, discovery)."""

    kind = "failed"
