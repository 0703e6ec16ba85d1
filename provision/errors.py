"""The small exception tree of provision. The CLI turns these into messages and exit codes."""

from __future__ import annotations


class ProvisionError(Exception):
    """Base of every error provision raises on purpose."""

    exit_code = 1


class InputError(ProvisionError):
    """Bad input from the user (inventory, options, files): exit code 2, no host touched."""

    exit_code = 2


class EnvironmentProblem(ProvisionError):
    """Something missing on the controller (a tool, root, a package): exit code 2."""

    exit_code = 2
