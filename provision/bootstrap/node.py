"""Bootstrap one host: trusted host key -> login -> root -> deploy user, key, sudo, python3 -> proof ->
optional hardening -> discovery.

Order matters for safety: the host key is checked before any credential is sent; sshd is hardened (no root
login, no password login) only after a *fresh* connection as the deploy user with the deploy key ran
``sudo -n true``, and proven again afterwards (else the change is rolled back over the still-open session),
so a node can never be locked out.

Each step is a small POSIX sh script run as root that changes only what is not yet as wanted and prints
``@@@change <what>`` for each change, so a second run reports "no change". A host that the deploy user can
already reach (key + passwordless sudo) is re-checked through it: the initial password is not needed again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import paramiko

from provision.ascend.npu_smi import ParseError
from provision.bootstrap.credentials import DeployKey, PasswordSource, Secret
from provision.bootstrap.discover import DISCOVERY_SCRIPT, parse_discovery
from provision.bootstrap.errors import BootstrapError, HostKeyChanged, StepFailed, Unreachable
from provision.bootstrap.hostkeys import PublicKey, TrustPolicy, Verdict
from provision.bootstrap.ssh import Result, Session, Target, login, open_transport
from provision.scripts import node_script

CHANGE = "@@@change "
RELOAD_GRACE_S = 15.0
"""How long sshd may take to listen again after a reload."""
Report = Callable[[str, str], None]
"""``report(host, what is happening)``: live progress."""

PACKAGES_SCRIPT = node_script("bootstrap_packages.sh")

USER_SCRIPT = node_script("bootstrap_user.sh")

AUTHORIZED_KEY_SCRIPT = node_script("bootstrap_authorized_key.sh")

SUDOERS_SCRIPT = node_script("bootstrap_sudoers.sh")

HARDEN_BEGIN = "# BEGIN provision bootstrap: hardening (first value wins in sshd_config)"
HARDEN_END = "# END provision bootstrap"
HARDEN_SETTINGS = ("PermitRootLogin no", "PasswordAuthentication no", "KbdInteractiveAuthentication no")

# The block goes first in sshd_config: sshd keeps the first value it reads for each keyword, so it wins over
# later lines and over drop-ins included further down.
HARDEN_SCRIPT = node_script("bootstrap_harden.sh")

UNHARDEN_SCRIPT = node_script("bootstrap_unharden.sh")


@dataclass(frozen=True)
class Options:
    """Everything a host's bootstrap needs besides its :class:`Target`."""

    policy: TrustPolicy
    deploy_user: str
    deploy_key: DeployKey
    login_user: str = "root"
    login_key: paramiko.PKey | None = None
    password: PasswordSource | None = None
    harden: bool = False
    timeout: float = 15.0
    install_timeout: float = 900.0

    @property
    def sudoers_file(self) -> str:
        return f"/etc/sudoers.d/90-provision-{self.deploy_user.replace('.', '_')}"

    @property
    def sudoers_line(self) -> str:
        return f"{self.deploy_user} ALL=(ALL:ALL) NOPASSWD: ALL"


@dataclass
class HostResult:
    """What happened on one host."""

    target: Target
    fingerprint: str | None = None
    trusted_by: str | None = None
    login: str | None = None
    """How we got in: ``deploy key`` (already bootstrapped), or ``<user> with password/key``."""
    changes: list[str] = field(default_factory=list)
    facts: dict[str, Any] | None = None
    error: BootstrapError | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


def bootstrap_host(target: Target, options: Options, report: Report) -> HostResult:
    """Run every step on one host; a :class:`BootstrapError` ends up in ``result.error``, never raised."""
    result = HostResult(target)
    started = time.monotonic()
    try:
        _bootstrap(target, options, report, result)
    except BootstrapError as exc:
        result.error = exc
    except Exception as exc:  # one host's surprise must not stop the others
        result.error = StepFailed(f"{target}: unexpected error: {type(exc).__name__}: {exc}")
    result.seconds = time.monotonic() - started
    report(target.name, "failed" if result.error else "done")
    return result


def _bootstrap(target: Target, options: Options, report: Report, result: HostResult) -> None:
    report(target.name, f"connecting to {target.address}:{target.port}")
    key_types = options.policy.known_key_types(target.known_hosts_name)
    transport, server_key = open_transport(target, timeout=options.timeout, key_types=key_types)
    session: Session | None = None
    try:
        verdict = _trust(target, options, server_key, result, report)
        session = _deploy_session(transport, target, options)
        already = session is not None
        if session is not None:
            result.login = f"{options.deploy_user} with the deploy key"
            report(target.name, "already bootstrapped: re-checking through the deploy user")
        else:
            session = _first_contact(transport, target, options, verdict.key, report)
            result.login = session.login
        _steps(session, options, report, result)
        if not already:
            report(target.name, "proving the deploy key on a new connection")
            _prove(target, options, verdict.key, session.secrets)
        if options.harden:
            _harden(session, target, options, verdict.key, report, result)
        report(target.name, "discovering hardware")
        result.facts = _discover(session)
        result.facts["host_key"] = verdict.fingerprint
    finally:
        if session is not None:
            session.close()
        transport.close()


def _trust(target: Target, options: Options, key: PublicKey, result: HostResult, report: Report) -> Verdict:
    result.fingerprint = key.fingerprint
    report(target.name, f"host key {key.fingerprint}")
    verdict = options.policy.verify(target.name, target.known_hosts_name, key)
    result.trusted_by = verdict.trusted_by
    report(target.name, f"host key trusted: {verdict.trusted_by}")
    if verdict.record:
        options.policy.record.add(target.known_hosts_name, key)
        result.changes.append(f"recorded host key {key.fingerprint} ({verdict.trusted_by})")
    return verdict


def _deploy_session(transport: paramiko.Transport, target: Target, options: Options) -> Session | None:
    """A session as the deploy user when its key and passwordless sudo already work, else None."""
    try:
        transport.auth_publickey(options.deploy_user, options.deploy_key.pkey)
    except paramiko.AuthenticationException:
        return None
    except paramiko.SSHException:
        return None
    session = Session(transport, target, options.deploy_user, [])
    if session.run("sudo -n true").rc != 0:
        # Logged in but not (yet) root: a previous run stopped half-way. Start over on a new connection.
        return None
    session.mode = "sudo"
    return session


def _first_contact(
    transport: paramiko.Transport, target: Target, options: Options, key: PublicKey, report: Report
) -> Session:
    user = target.user or options.login_user
    # sshd allows one user name per connection ("Change of username ... not allowed"): the deploy user was
    # tried on the first one, so log in on a new connection (same host key required).
    transport.close()
    transport = _reconnect(target, options, key)
    report(target.name, f"logging in as {user}")
    method = login(transport, target, user, key=options.login_key, password=options.password)
    secrets: list[Secret] = options.password.known() if options.password is not None else []
    session = Session(transport, target, user, list(secrets))
    session.become_root(options.password)
    via = {"root": "root", "sudo": "sudo", "sudo-password": "sudo with password"}[session.mode]
    session.login = f"{user} with {method}, {via}"
    report(target.name, f"logged in as {session.login}")
    return session


def _reconnect(target: Target, options: Options, key: PublicKey) -> paramiko.Transport:
    """A new connection to a host whose key was already trusted: it must present the same key."""
    transport, seen = open_transport(target, timeout=options.timeout, key_types=[key.key_type])
    if seen != key:
        transport.close()
        raise HostKeyChanged(
            f"{target}: the host key changed during bootstrap ({key.fingerprint} -> {seen.fingerprint}): "
            "possible man-in-the-middle; stopped"
        )
    return transport


def _steps(session: Session, options: Options, report: Report, result: HostResult) -> None:
    report(session.target.name, "checking python3 and sudo")
    _step(
        session, "install python3/sudo", PACKAGES_SCRIPT, ["python3", "sudo"], result, options.install_timeout
    )
    report(session.target.name, f"deploy user {options.deploy_user}")
    _step(session, "create the deploy user", USER_SCRIPT, [options.deploy_user], result)
    key = options.deploy_key
    _step(
        session,
        "authorize the deploy key",
        AUTHORIZED_KEY_SCRIPT,
        [options.deploy_user, key.public_line, key.public_blob],
        result,
    )
    _step(
        session,
        "passwordless sudo for the deploy user",
        SUDOERS_SCRIPT,
        [options.sudoers_file, f"# Written by provision bootstrap.\n{options.sudoers_line}"],
        result,
    )


def _step(
    session: Session,
    what: str,
    script: str,
    args: Sequence[str],
    result: HostResult,
    timeout: float = 120,
) -> Result:
    done = session.root(script, args, timeout=timeout)
    if done.rc != 0:
        raise StepFailed(f"{session.target}: {what} failed (exit code {done.rc}):\n{done.tail()}")
    result.changes += [
        line.removeprefix(CHANGE).strip() for line in done.out.splitlines() if line.startswith(CHANGE)
    ]
    return done


def _prove(target: Target, options: Options, key: PublicKey, secrets: list[Secret]) -> None:
    """A fresh connection as the deploy user with the deploy key, same host key, ``sudo -n true``."""
    transport = _reconnect(target, options, key)
    try:
        try:
            transport.auth_publickey(options.deploy_user, options.deploy_key.pkey)
        except paramiko.SSHException as exc:
            raise StepFailed(
                f"{target}: the deploy key does not work for {options.deploy_user} "
                f"({exc or type(exc).__name__}); nothing was hardened"
            ) from None
        check = Session(transport, target, options.deploy_user, secrets).run("sudo -n true")
        if check.rc != 0:
            raise StepFailed(
                f"{target}: {options.deploy_user} logs in but `sudo -n true` fails ({check.tail()}); "
                "nothing was hardened"
            )
    finally:
        transport.close()


def _harden(
    session: Session,
    target: Target,
    options: Options,
    key: PublicKey,
    report: Report,
    result: HostResult,
) -> None:
    report(target.name, "hardening sshd")
    block = "\n".join([HARDEN_BEGIN, *HARDEN_SETTINGS, HARDEN_END])
    before = len(result.changes)
    _step(session, "harden sshd", HARDEN_SCRIPT, [HARDEN_BEGIN, HARDEN_END, block], result)
    if len(result.changes) == before:
        return
    try:
        # sshd re-executes itself on reload: for a moment nothing listens on the port.
        deadline = time.monotonic() + RELOAD_GRACE_S
        while True:
            try:
                _prove(target, options, key, session.secrets)
                break
            except Unreachable:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    except BootstrapError as exc:
        session.root(UNHARDEN_SCRIPT)
        raise StepFailed(
            f"{target}: after hardening the deploy user could not get in ({exc}); sshd_config restored"
        ) from None


def _discover(session: Session) -> dict[str, Any]:
    done = session.root(DISCOVERY_SCRIPT, timeout=120)
    if done.rc != 0:
        raise StepFailed(f"{session.target}: discovery failed (exit code {done.rc}):\n{done.tail()}")
    try:
        return parse_discovery(done.out)
    except ParseError as exc:
        raise StepFailed(f"{session.target}: discovery output not understood: {exc}") from None
