"""OpenPGP key fingerprints: the one home for reading and comparing them.

A fingerprint pins a key without trusting where it was downloaded from: ``bundle verify --key`` pins a
bundle's signer, ``openeuler_repos_gpg_key_fingerprint`` the openEuler repositories' signing key. The
fingerprint of a primary key is computed as RFC 4880 section 12.2 (v4: SHA-1 over ``0x99``, the two-octet
length and the public-key packet's body) and RFC 9580 section 5.5.4 (v6: SHA-256 over ``0x9B``, a
four-octet length and the body), from the key's own bytes: what ``gpg --fingerprint`` prints.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re

_FINGERPRINT = re.compile(r"^(?:0x)?([0-9A-Fa-f]{40}|[0-9A-Fa-f]{64})$")
_BEGIN = "-----BEGIN PGP PUBLIC KEY BLOCK-----"
_END = "-----END PGP PUBLIC KEY BLOCK-----"
PUBLIC_KEY = 6  # packet tag of a primary public key (14 is a subkey: not what a pin names)


def normalize_fingerprint(value: str) -> str | None:
    """``value`` as upper-case hex without spaces or ``0x`` (``gpg --fingerprint`` prints groups of four);
    None when it is no fingerprint (40 hex digits for a v4 key, 64 for a v6 one)."""
    found = _FINGERPRINT.match(re.sub(r"\s", "", value))
    return found.group(1).upper() if found else None


def dearmor(text: str) -> bytes:
    """The bytes of every ``PUBLIC KEY BLOCK`` in ``text``, concatenated; ValueError when there is none or
    one is not valid base64."""
    blocks: list[bytes] = []
    lines = text.replace("\r\n", "\n").split("\n")
    index = 0
    while index < len(lines):
        if lines[index].strip() != _BEGIN:
            index += 1
            continue
        index += 1
        while index < len(lines) and lines[index].strip():  # armor headers ("Comment: ...") up to a blank
            if ":" not in lines[index]:
                break  # no header and no blank line: the data starts here
            index += 1
        data: list[str] = []
        while index < len(lines) and lines[index].strip() != _END:
            line = lines[index].strip()
            if line.startswith("=") and len(line) == 5:  # the CRC-24 line closes the data
                index += 1
                continue
            data.append(line)
            index += 1
        try:
            blocks.append(base64.b64decode("".join(data), validate=True))
        except binascii.Error as exc:
            raise ValueError(f"not an armored OpenPGP key: {exc}") from None
    if not blocks:
        raise ValueError(f"not an armored OpenPGP key (no {_BEGIN} line)")
    return b"".join(blocks)


def _packets(data: bytes) -> list[tuple[int, bytes]]:
    """(tag, body) of each packet (RFC 4880 section 4.2: old and new packet headers)."""
    packets: list[tuple[int, bytes]] = []
    at = 0
    while at < len(data):
        first = data[at]
        if not first & 0x80:
            raise ValueError(f"not an OpenPGP packet at byte {at}")
        if first & 0x40:  # new format
            tag, at = first & 0x3F, at + 1
            octet = data[at]
            if octet < 192:
                length, at = octet, at + 1
            elif octet < 224:
                length, at = ((octet - 192) << 8) + data[at + 1] + 192, at + 2
            elif octet == 255:
                length, at = int.from_bytes(data[at + 1 : at + 5], "big"), at + 5
            else:
                raise ValueError("a partial-length packet: not a key")
        else:  # old format
            tag, kind, at = (first >> 2) & 0x0F, first & 0x03, at + 1
            if kind == 3:
                length = len(data) - at
            else:
                size = (1, 2, 4)[kind]
                length, at = int.from_bytes(data[at : at + size], "big"), at + size
        if at + length > len(data):
            raise ValueError("a packet runs past the end of the key")
        packets.append((tag, data[at : at + length]))
        at += length
    return packets


def key_fingerprints(text: str) -> list[str]:
    """The fingerprints of the primary keys an armored key file holds, in order (upper-case hex);
    ValueError when it is no OpenPGP key."""
    found: list[str] = []
    for tag, body in _packets(dearmor(text)):
        if tag != PUBLIC_KEY or not body:
            continue
        if body[0] == 4:
            found.append(hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper())
        elif body[0] == 6:
            found.append(hashlib.sha256(b"\x9b" + len(body).to_bytes(4, "big") + body).hexdigest().upper())
    if not found:
        raise ValueError("the file holds no OpenPGP public key")
    return found
