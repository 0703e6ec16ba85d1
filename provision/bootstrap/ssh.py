"""SSH with paramiko: reach a host, check its key before anything is sent, log in, run commands as root.

Failures become the typed errors of :mod:`provision.bootstrap.errors`, each saying which host and why:
:class:`Unreachable` (refused, no answer, no route, not SSH), :class:`AuthFailed` (password or key
rejected, or that method disabled), :class:`SudoMissing` (no sudo, not in sudoers, sudo password refused).
"""

from __future__ import annotations

import errno
import re
import shlex
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass

import paramiko

from provision.bootstrap.credentials import PasswordSource, Secret, scrub
from provision.bootstrap.errors import AuthFailed, StepFailed, SudoMissing, Unreachable
from provision.bootstrap.hostkeys import PublicKey, algorithms_for, known_hosts_name
from provision.errors import InputError

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_USER = re.compile(r"^[a-z_][a-z0-9_.-]*\$?$")


@dataclass(frozen=True, slots=True)
class Target:
    """One host to bootstrap: its inventory name, where SSH reaches it, and who logs in (None: default)."""

    name: str
    address: str
    port: int = 22
    user: str | None = None

    @property
    def known_hosts_name(self) -> str:
        return known_hosts_name(self.address, self.port)

    def __str__(self) -> str:
        where = self.address if self.port == 22 else f"{self.address}:{self.port}"
        return where if self.name == self.address else f"{self.name} ({where})"


def parse_target(spec: str, default_port: int = 22) -> Target:
    """``[NAME=][USER@]ADDRESS[:PORT]`` (an IPv6 address in brackets: ``[fd00::1]:22``)."""
    text = spec.strip()
    name: str | None = None
    if "=" in text:
        name, text = (part.strip() for part in text.split("=", 1))
    user: str | None = None
    if "@" in text:
        user, text = text.rsplit("@", 1)
        if not _USER.match(user):
            raise InputError(f"host {spec!r}: {user!r} is not a user name")
    port = default_port
    if text.startswith("["):
        address, _, rest = text[1:].partition("]")
        if rest:
            port = _port(spec, rest.removeprefix(":"))
    elif text.count(":") == 1:
        address, port_text = text.split(":")
        port = _port(spec, port_text)
    else:
        address = text
    if not address or any(c.isspace() for c in address):
        raise InputError(f"host {spec!r}: no address")
    name = name or address
    if not _NAME.match(name) and name != address:
        raise InputError(
            f"host {spec!r}: inventory name {name!r} may hold letters, digits, '_', '.', '-' only"
        )
    return Target(name=name, address=address, port=port, user=user)


def _port(spec: str, text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise InputError(f"host {spec!r}: port {text!r} is not a number from 1 to 65535")
    return int(text)


def open_transport(
    target: Target, *, timeout: float, key_types: Sequence[str] = ()
) -> tuple[paramiko.Transport, PublicKey]:
    """TCP + SSH handshake (no authentication yet); the server's host key for checking."""
    try:
        sock = socket.create_connection((target.address, target.port), timeout=timeout)
    except ConnectionRefusedError:
        raise Unreachable(
            f"{target}: connection refused on port {target.port} (no SSH server listens there)"
        ) from None
    except TimeoutError:
        raise Unreachable(
            f"{target}: no answer within {timeout:g} s (host down, wrong address, or a firewall drops SSH)"
        ) from None
    except socket.gaierror as exc:
        raise Unreachable(f"{target}: cannot resolve {target.address}: {exc.strerror}") from None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            reason = f"{reason} (host down or wrong address)"
        raise Unreachable(f"{target}: cannot connect: {reason}") from None
    transport = paramiko.Transport(sock)
    transport.banner_timeout = timeout
    transport.handshake_timeout = timeout
    transport.auth_timeout = timeout
    if key_types:
        options = transport.get_security_options()
        offered = list(options.key_types)
        preferred = [a for a in algorithms_for(key_types) if a in offered]
        options.key_types = [*preferred, *(a for a in offered if a not in preferred)]
    try:
        transport.start_client(timeout=timeout)
        server_key = transport.get_remote_server_key()
    except (paramiko.SSHException, EOFError, OSError) as exc:
        transport.close()
        raise Unreachable(f"{target}: no SSH handshake: {exc or type(exc).__name__}") from None
    return transport, PublicKey(server_key.get_name(), server_key.asbytes())


def login(
    transport: paramiko.Transport,
    target: Target,
    user: str,
    *,
    key: paramiko.PKey | None,
    password: PasswordSource | None,
) -> str:
    """Authenticate with ``key``, else (or when the key is refused) the password; return the method."""
    tried: list[str] = []
    if key is not None:
        try:
            transport.auth_publickey(user, key)
            return "key"
        except paramiko.BadAuthenticationType as exc:
            tried.append(f"key login is disabled (the host accepts: {', '.join(exc.allowed_types)})")
        except paramiko.AuthenticationException:
            tried.append("the key was rejected")
        except paramiko.SSHException as exc:
            raise Unreachable(f"{target}: SSH failed during login: {exc}") from None
    secret = password.get() if password is not None and password.available else None
    if secret is not None:
        try:
            transport.auth_password(user, secret.reveal())
            return "password"
        except paramiko.BadAuthenticationType as exc:
            tried.append(
                f"password login is disabled for {user} (the host accepts: {', '.join(exc.allowed_types)})"
            )
        except paramiko.AuthenticationException:
            tried.append(
                f"wrong password for {user} (or the host does not allow {user} to log in with a password)"
            )
        except paramiko.SSHException as exc:
            raise Unreachable(f"{target}: SSH failed during login: {exc}") from None
    if not tried:
        raise AuthFailed(
            f"{target}: no credentials for {user}: give --key, --password-file or --password-env "
            "(or run on a terminal to be asked for the password)"
        )
    raise AuthFailed(f"{target}: login as {user} refused: {'; '.join(tried)}")


@dataclass(frozen=True, slots=True)
class Result:
    """A finished remote command (output already scrubbed of secrets)."""

    rc: int
    out: str
    err: str

    def tail(self, lines: int = 12) -> str:
        text = (self.err.strip() or self.out.strip()) or f"exit code {self.rc}"
        return "\n".join(text.splitlines()[-lines:])


class Session:
    """An authenticated connection; runs commands as the login user, or as root (:meth:`as_root`)."""

    def __init__(
        self, transport: paramiko.Transport, target: Target, user: str, secrets: list[Secret]
    ) -> None:
        self.transport = transport
        self.target = target
        self.user = user
        self.secrets = secrets
        self.mode = "user"
        """``user``; after :meth:`become_root`: ``root``, ``sudo`` (no password) or ``sudo-password``."""
        self._sudo_password: Secret | None = None
        self.login = user
        """How the session got in, for the record (``root with password, root``)."""

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, command: str, *, stdin: bytes = b"", timeout: float = 60) -> Result:
        """Run ``command`` (through the login shell) and wait for it; stdout/stderr read as they come."""
        try:
            channel = self.transport.open_session(timeout=timeout)
            channel.exec_command(command)
            if stdin:
                channel.sendall(stdin)
            channel.shutdown_write()
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise StepFailed(f"{self.target}: the SSH connection failed: {exc}") from None
        out, err = bytearray(), bytearray()
        deadline = time.monotonic() + timeout
        try:
            while True:
                busy = False
                while channel.recv_ready():
                    out += channel.recv(65536)
                    busy = True
                while channel.recv_stderr_ready():
                    err += channel.recv_stderr(65536)
                    busy = True
                if (
                    channel.exit_status_ready()
                    and not channel.recv_ready()
                    and not channel.recv_stderr_ready()
                ):
                    break
                if channel.closed and not busy:
                    break
                if time.monotonic() > deadline:
                    raise StepFailed(f"{self.target}: a command did not finish within {timeout:g} s")
                if not busy:
                    time.sleep(0.01)
            rc = channel.recv_exit_status() if channel.exit_status_ready() else -1
        finally:
            channel.close()
        return Result(
            rc,
            scrub(out.decode(errors="replace"), self.secrets),
            scrub(err.decode(errors="replace"), self.secrets),
        )

    def become_root(self, password: PasswordSource | None) -> None:
        """Find how this user becomes root: is root, sudo without or with password; else SudoMissing."""
        if self.run("id -u").out.strip() == "0":
            self.mode = "root"
            return
        probe = self.run("sudo -n true")
        if probe.rc == 0:
            self.mode = "sudo"
            return
        if probe.rc == 127 or "not found" in probe.err:
            raise SudoMissing(
                f"{self.target}: sudo is not installed and {self.user} is not root: log in as root "
                "(--user root, or root@ADDRESS) so bootstrap can install it"
            )
        secret = password.get() if password is not None and password.available else None
        if secret is None:
            raise SudoMissing(
                f"{self.target}: {self.user} needs a password for sudo: give it with --password-file or "
                "--password-env (or on the prompt)"
            )
        if secret not in self.secrets:
            self.secrets.append(secret)
        check = self.run("sudo -S -p '' true", stdin=(secret.reveal() + "\n").encode())
        if check.rc == 0:
            self.mode = "sudo-password"
            self._sudo_password = secret
            return
        said = _sudo_complaint(check.err)
        if "sudoers" in said or "may not run" in said or "not allowed" in said:
            raise SudoMissing(
                f"{self.target}: {self.user} has no sudo rights (sudo: {said}); log in as root or as a "
                "user allowed to use sudo"
            )
        if "incorrect password" in said or "no password" in said:
            raise SudoMissing(f"{self.target}: sudo refused the password of {self.user} (sudo: {said})")
        raise SudoMissing(f"{self.target}: {self.user} cannot use sudo (sudo: {said})")

    def root(self, script: str, args: Sequence[str] = (), *, timeout: float = 120) -> Result:
        """Run a POSIX sh ``script`` with ``args`` as root (directly, or through sudo)."""
        inner = " ".join(["sh", "-c", shlex.quote(script), "sh", *(shlex.quote(a) for a in args)])
        if self.mode == "root":
            return self.run(inner, timeout=timeout)
        if self.mode == "sudo":
            return self.run(f"sudo -n -- {inner}", timeout=timeout)
        if self.mode == "sudo-password" and self._sudo_password is not None:
            # The script's first act is `exec </dev/null`: if sudo did not need the password after all,
            # nothing in the script ever reads it.
            return self.run(
                f"sudo -S -p '' -- {inner}",
                stdin=(self._sudo_password.reveal() + "\n").encode(),
                timeout=timeout,
            )
        raise StepFailed(f"{self.target}: internal error: not root yet (call become_root first)")


def _sudo_complaint(err: str) -> str:
    lines = [line.strip() for line in err.splitlines() if line.strip()]
    useful = [line for line in lines if "lecture" not in line.lower()]
    text = "; ".join(useful[-2:]) if useful else "no message"
    return text.removeprefix("sudo: ")
