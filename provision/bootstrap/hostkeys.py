"""Host keys: SHA256 fingerprints, known_hosts files, and the decision whether to trust a host.

A host key is trusted when it matches (first hit wins)

1. the known_hosts file provision records keys in (``--known-hosts``; later ``provision apply`` runs check
   against the same file),
2. a known_hosts file the user vouches for (``--trust-known-hosts``, e.g. ``~/.ssh/known_hosts`` or one made
   from the vendor's delivery sheet),
3. a fingerprint given on the command line (``--host-key [HOST=]SHA256:...``),
4. nothing, with ``--trust-on-first-use``.

A key that differs from one recorded for the same host and key type, or from a fingerprint pinned for the
host, is refused as a possible man-in-the-middle (:class:`HostKeyChanged`) before anything is sent to the
host: no password, no key signature. Trust on first use never overrides a known key.

known_hosts files are read as OpenSSH reads them (plain and hashed names, ``[host]:port``, patterns with
``*``/``?``/``!``, ``@revoked``) and only ever appended to, never rewritten: comments and other entries stay.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from provision.bootstrap.errors import HostKeyChanged, HostKeyUntrusted
from provision.errors import InputError

FINGERPRINT = re.compile(r"^SHA256:[A-Za-z0-9+/]{43}$")

# known_hosts key type -> the host key algorithms that negotiate that key (RSA keys sign with SHA-2).
_ALGORITHMS: Mapping[str, tuple[str, ...]] = {
    "ssh-rsa": ("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"),
}


def fingerprint(blob: bytes) -> str:
    """OpenSSH's SHA256 fingerprint of a key blob (``ssh-keygen -lf``): ``SHA256:`` + base64, no '='."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def parse_fingerprint(text: str) -> str:
    """Check a ``SHA256:...`` fingerprint as ``ssh-keygen -lf`` prints it; InputError otherwise."""
    value = text.strip()
    if not FINGERPRINT.match(value):
        raise InputError(
            f"host key fingerprint {value!r}: expected SHA256:<43 base64 characters>, as "
            "`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` prints it on the node's console"
        )
    return value


def parse_pins(values: Iterable[str]) -> tuple[dict[str, set[str]], set[str]]:
    """``--host-key`` values: ``HOST=SHA256:...`` pins a host; a bare ``SHA256:...`` is good for any host."""
    per_host: dict[str, set[str]] = {}
    anywhere: set[str] = set()
    for value in values:
        host, sep, fp = value.rpartition("=")
        if sep and host:
            per_host.setdefault(host.strip(), set()).add(parse_fingerprint(fp))
        else:
            anywhere.add(parse_fingerprint(value))
    return per_host, anywhere


def known_hosts_name(address: str, port: int) -> str:
    """The name OpenSSH looks up: ``10.0.0.1``, or ``[10.0.0.1]:2222`` off port 22."""
    return address if port == 22 else f"[{address}]:{port}"


def algorithms_for(key_types: Iterable[str]) -> list[str]:
    """Host key algorithms that make a server present a key of one of ``key_types``."""
    out: list[str] = []
    for key_type in key_types:
        for algorithm in _ALGORITHMS.get(key_type, (key_type,)):
            if algorithm not in out:
                out.append(algorithm)
    return out


@dataclass(frozen=True, slots=True)
class PublicKey:
    """A host's public key as the SSH protocol gives it: type name and blob."""

    key_type: str
    blob: bytes

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.blob)

    @property
    def base64(self) -> str:
        return base64.b64encode(self.blob).decode()

    @classmethod
    def from_base64(cls, key_type: str, text: str) -> PublicKey:
        return cls(key_type, base64.b64decode(text, validate=True))


@dataclass(frozen=True, slots=True)
class Entry:
    """One key line of a known_hosts file."""

    path: Path
    line: int
    patterns: tuple[str, ...]
    key: PublicKey
    marker: str | None = None

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    def matches(self, name: str) -> bool:
        return _names_match(self.patterns, name)


def _names_match(patterns: Sequence[str], name: str) -> bool:
    """OpenSSH's host matching: hashed entries, wildcards, and negations that veto a match."""
    matched = False
    for pattern in patterns:
        if pattern.startswith("|1|"):
            if _hashed_match(pattern, name):
                matched = True
            continue
        negated = pattern.startswith("!")
        bare = pattern[1:] if negated else pattern
        if _wildcard(bare).fullmatch(name.lower()):
            if negated:
                return False
            matched = True
    return matched


def _wildcard(pattern: str) -> re.Pattern[str]:
    """OpenSSH patterns know ``*`` and ``?`` only (``[host]:port`` brackets are literal)."""
    parts = [".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern.lower()]
    return re.compile("".join(parts))


def _hashed_match(pattern: str, name: str) -> bool:
    try:
        _, _, salt_b64, hash_b64 = pattern.split("|", 3)
        salt = base64.b64decode(salt_b64)
        expected = base64.b64decode(hash_b64)
    except (ValueError, binascii.Error):
        return False
    return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), expected)


def parse_known_hosts(text: str, path: Path) -> list[Entry]:
    """Key lines of a known_hosts file (comments, blank and unreadable lines are skipped, as ssh does)."""
    entries: list[Entry] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        fields = raw.split()
        if not fields or fields[0].startswith("#"):
            continue
        marker = None
        if fields[0].startswith("@"):
            marker, fields = fields[0], fields[1:]
        if len(fields) < 3:
            continue
        try:
            key = PublicKey.from_base64(fields[1], fields[2])
        except (ValueError, binascii.Error):
            continue
        entries.append(Entry(path, number, tuple(fields[0].split(",")), key, marker))
    return entries


@dataclass
class KnownHosts:
    """A known_hosts file: looked up as ssh does, appended to (never rewritten) under a lock."""

    path: Path
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def entries(self) -> list[Entry]:
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise InputError(f"{self.path}: cannot read known_hosts: {exc.strerror}") from None
        return parse_known_hosts(text, self.path)

    def lookup(self, name: str) -> list[Entry]:
        return [e for e in self.entries() if e.matches(name)]

    def add(self, name: str, key: PublicKey, comment: str = "") -> None:
        """Append ``name key`` unless that exact key is already recorded for the name."""
        with self._lock:
            if any(e.key == key and e.marker is None for e in self.lookup(name)):
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            existing = self.path.read_bytes() if self.path.exists() else b""
            line = f"{name} {key.key_type} {key.base64}{f' {comment}' if comment else ''}\n"
            with self.path.open("a", encoding="utf-8") as out:
                if existing and not existing.endswith(b"\n"):
                    out.write("\n")
                out.write(line)


@dataclass(frozen=True, slots=True)
class Verdict:
    """A trusted host key: why it is trusted, and whether it still has to be recorded."""

    key: PublicKey
    trusted_by: str
    record: bool

    @property
    def fingerprint(self) -> str:
        return self.key.fingerprint


@dataclass(frozen=True)
class TrustPolicy:
    """Where trust in host keys comes from (see the module docstring)."""

    record: KnownHosts
    trusted: Sequence[KnownHosts] = ()
    pins: Mapping[str, Collection[str]] = field(default_factory=dict)
    """Fingerprints pinned per host (inventory name or address)."""
    pinned_anywhere: Collection[str] = ()
    """Fingerprints given without a host: good for any host."""
    trust_on_first_use: bool = False

    def known_key_types(self, name: str) -> list[str]:
        """Key types known for ``name``, record first: ask the server for one of these."""
        types: list[str] = []
        for source in (self.record, *self.trusted):
            for entry in source.lookup(name):
                if entry.marker is None and entry.key.key_type not in types:
                    types.append(entry.key.key_type)
        return types

    def verify(self, host: str, name: str, key: PublicKey) -> Verdict:
        """Trust ``key`` presented by ``host`` (known_hosts ``name``), or raise HostKeyChanged/Untrusted."""
        fp = key.fingerprint
        entries = [e for source in (self.record, *self.trusted) for e in source.lookup(name)]
        for entry in entries:
            if entry.marker == "@revoked" and entry.key == key:
                raise HostKeyChanged(
                    f"{host} ({name}) presents host key {fp}, which {entry.where} marks @revoked: refused; "
                    "nothing was sent to the host"
                )
        plain = [e for e in entries if e.marker is None]
        for entry in plain:
            if entry.key.key_type == key.key_type and entry.key != key:
                raise HostKeyChanged(_changed_message(host, name, key, entry))
        pinned = {*self.pins.get(host, ()), *self.pins.get(name, ())}
        if pinned and fp not in pinned:
            raise HostKeyChanged(
                f"HOST KEY MISMATCH for {host} ({name}): it presents {fp}, but --host-key pins "
                f"{', '.join(sorted(pinned))}. This may be a man-in-the-middle attack; nothing was sent to "
                "the host. Check the fingerprint on the node's console."
            )
        for entry in plain:
            if entry.key == key:
                recorded = entry.path == self.record.path
                return Verdict(key, f"known_hosts {entry.where}", record=not recorded)
        if pinned or fp in self.pinned_anywhere:
            return Verdict(key, "--host-key", record=True)
        if plain:
            types = ", ".join(sorted({e.key.key_type for e in plain}))
            raise HostKeyUntrusted(
                f"{host} ({name}) presents a {key.key_type} host key {fp}, but only {types} keys are known "
                f"for it ({plain[0].where}): refused even with --trust-on-first-use. If the host really "
                f"changed, check the fingerprint on its console and pass --host-key {host}={fp}"
            )
        if self.trust_on_first_use:
            return Verdict(key, "trusted on first use", record=True)
        raise HostKeyUntrusted(
            f"{host} ({name}) presents the unknown host key {fp} ({key.key_type}). Check it on the node's "
            "console (`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`), then pass "
            f"--host-key {host}={fp}, a known_hosts file with --trust-known-hosts, or --trust-on-first-use"
        )


def _changed_message(host: str, name: str, key: PublicKey, entry: Entry) -> str:
    return (
        f"HOST KEY CHANGED for {host} ({name}): {entry.where} records {entry.key.fingerprint}, the host now "
        f"presents {key.fingerprint} ({key.key_type}). This may be a man-in-the-middle attack; nothing was "
        "sent to the host. If the node was reinstalled, check the new fingerprint on its console, then "
        f"remove the old entry: ssh-keygen -R '{name}' -f {entry.path}"
    )
