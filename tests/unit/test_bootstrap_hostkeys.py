"""Host key fingerprints, known_hosts reading/appending, and the trust decision of `provision bootstrap`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from provision.bootstrap.errors import HostKeyChanged, HostKeyUntrusted
from provision.bootstrap.hostkeys import (
    KnownHosts,
    PublicKey,
    TrustPolicy,
    algorithms_for,
    fingerprint,
    known_hosts_name,
    parse_fingerprint,
    parse_known_hosts,
    parse_pins,
)
from provision.errors import InputError
from provision_sim.nodes import new_key_pair

pytestmark = pytest.mark.unit

# A key made with `ssh-keygen -t ed25519`; `ssh-keygen -lf` printed the fingerprint below.
ED25519 = "AAAAC3NzaC1lZDI1NTE5AAAAIGtBDi81hrwmdjLA2YXtPEbkewvzozOvQnbSaUrewbmV"
ED25519_FP = "SHA256:dlZdUV/6Zeev7vNehIwM91qmkB1S6T/LiUiD8S/QVjA"
RSA = (
    "AAAAB3NzaC1yc2EAAAADAQABAAABAQC6lt4Nc/+WLbVxM85ROnGTsLudymogidfAghAnD0CtMfIMwFSKlggQ+zlMlb"
    "gtrwm/dC58mjuZ6RRLumIdy+sSsVH0+ciskXgoejpcx3RJ2/muvGxooM1Ah2An6PUao2Lq/q2yO1Jxav/g95NBVHWB"
    "eIUn8wH1+seuJRRQMNjOF2PYQmhultLBXX1/bOqas1QoKmbQZRMrP2L47J3y7GZk5w7g7syD4ol/DR0nHyh90kpZZA"
    "OCU3A/eOTGgGl+W+45MjTY6J6Z0QDF8GXSi59a8Yfrl3YOYXGS0hVexFIJ//St1Y8aG9EaXfbVScSeRY7LdSMCX6LO"
    "LYFocWUoL1ET"
)
# The ed25519 key hashed by `ssh-keygen -H` for the name 10.0.0.5.
HASHED_10_0_0_5 = "|1|bFYnQiUOeD6eCj0R1E0G6V62KjA=|ZU4FYsJFzZ4o9pPn0Gl408KLNxg="


def key(text: str = ED25519, key_type: str = "ssh-ed25519") -> PublicKey:
    return PublicKey.from_base64(key_type, text)


def other_key() -> PublicKey:
    return key(new_key_pair("x").public_line.split()[1])


def test_fingerprint_is_the_one_ssh_keygen_prints() -> None:
    assert key().fingerprint == ED25519_FP


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen (openssh-client)")
def test_fingerprint_of_fresh_keys_matches_ssh_keygen(tmp_path: Path) -> None:
    for _ in range(3):
        line = new_key_pair("t").public_line
        (tmp_path / "k.pub").write_text(line + "\n")
        printed = subprocess.run(
            ["ssh-keygen", "-lf", str(tmp_path / "k.pub")], capture_output=True, text=True, check=True
        ).stdout.split()[1]
        assert fingerprint(PublicKey.from_base64("ssh-ed25519", line.split()[1]).blob) == printed


@pytest.mark.parametrize(
    "bad", ["", "MD5:aa:bb", "SHA256:short", f"{ED25519_FP}x", "sha256:" + ED25519_FP[7:]]
)
def test_bad_fingerprints_are_input_errors(bad: str) -> None:
    with pytest.raises(InputError, match="expected SHA256:<43 base64 characters>"):
        parse_fingerprint(bad)


def test_pins_per_host_and_for_any_host() -> None:
    per_host, anywhere = parse_pins([f"node1={ED25519_FP}", f" {ED25519_FP} ", f"10.0.0.9={ED25519_FP}"])
    assert per_host == {"node1": {ED25519_FP}, "10.0.0.9": {ED25519_FP}}
    assert anywhere == {ED25519_FP}


def test_known_hosts_names_and_algorithms() -> None:
    assert known_hosts_name("10.0.0.1", 22) == "10.0.0.1"
    assert known_hosts_name("10.0.0.1", 2222) == "[10.0.0.1]:2222"
    assert algorithms_for(["ssh-rsa", "ssh-ed25519"]) == [
        "rsa-sha2-512",
        "rsa-sha2-256",
        "ssh-rsa",
        "ssh-ed25519",
    ]


# --- known_hosts files ---------------------------------------------------------------------------------


KNOWN = f"""\
# the lab
10.0.0.1 ssh-ed25519 {ED25519}
[10.0.0.2]:2222,node2 ssh-ed25519 {ED25519} a comment
{HASHED_10_0_0_5} ssh-ed25519 {ED25519} hashed
10.0.1.*,!10.0.1.7 ssh-ed25519 {ED25519}
@revoked 10.0.0.66 ssh-ed25519 {ED25519}
@cert-authority *.lab ssh-ed25519 {ED25519}
broken line
10.0.0.3 ssh-ed25519 !!!notbase64!!!
"""


@pytest.mark.parametrize(
    ("name", "lines"),
    [
        ("10.0.0.1", [2]),
        ("[10.0.0.2]:2222", [3]),
        ("10.0.0.2", []),
        ("node2", [3]),
        ("10.0.0.5", [4]),
        ("10.0.0.6", []),
        ("10.0.1.4", [5]),
        ("10.0.1.7", []),
        ("10.0.0.66", [6]),
        ("gpu.lab", [7]),
        ("10.0.0.3", []),
    ],
)
def test_lookup_reads_known_hosts_as_ssh_does(tmp_path: Path, name: str, lines: list[int]) -> None:
    path = tmp_path / "known_hosts"
    path.write_text(KNOWN)
    assert [e.line for e in KnownHosts(path).lookup(name)] == lines


def test_markers_are_kept() -> None:
    entries = parse_known_hosts(KNOWN, Path("kh"))
    assert [e.marker for e in entries] == [None, None, None, None, "@revoked", "@cert-authority"]


def test_add_appends_and_never_rewrites(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "known_hosts"
    store = KnownHosts(path)
    store.add("10.0.0.1", key())
    path.write_text(path.read_text() + "# my comment, no newline at the end")
    store.add("10.0.0.1", key())  # already there: nothing written
    store.add("[10.0.0.2]:2222", key())
    assert path.read_text() == (
        f"10.0.0.1 ssh-ed25519 {ED25519}\n# my comment, no newline at the end\n"
        f"[10.0.0.2]:2222 ssh-ed25519 {ED25519}\n"
    )


# --- the trust decision ----------------------------------------------------------------------------------


def policy(tmp_path: Path, **kwargs: object) -> TrustPolicy:
    return TrustPolicy(record=KnownHosts(tmp_path / "known_hosts"), **kwargs)  # type: ignore[arg-type]


def test_recorded_key_is_trusted_without_recording_again(tmp_path: Path) -> None:
    (tmp_path / "known_hosts").write_text(f"10.0.0.1 ssh-ed25519 {ED25519}\n")
    verdict = policy(tmp_path).verify("node1", "10.0.0.1", key())
    assert (verdict.record, verdict.fingerprint) == (False, ED25519_FP)
    assert verdict.trusted_by == f"known_hosts {tmp_path / 'known_hosts'}:1"


def test_key_from_a_trusted_file_is_recorded(tmp_path: Path) -> None:
    vendor = tmp_path / "vendor_known_hosts"
    vendor.write_text(f"# delivery sheet\n10.0.0.1 ssh-ed25519 {ED25519}\n")
    verdict = policy(tmp_path, trusted=[KnownHosts(vendor)]).verify("node1", "10.0.0.1", key())
    assert verdict.record and verdict.trusted_by == f"known_hosts {vendor}:2"


def test_changed_key_is_refused_loudly(tmp_path: Path) -> None:
    (tmp_path / "known_hosts").write_text(f"\n10.0.0.1 ssh-ed25519 {ED25519}\n")
    intruder = other_key()
    with pytest.raises(HostKeyChanged) as caught:
        policy(tmp_path, trust_on_first_use=True).verify("node1", "10.0.0.1", intruder)
    message = str(caught.value)
    assert message.startswith("HOST KEY CHANGED for node1 (10.0.0.1)")
    assert f"{tmp_path / 'known_hosts'}:2 records {ED25519_FP}" in message
    assert f"now presents {intruder.fingerprint}" in message
    assert "man-in-the-middle" in message and "nothing was sent to the host" in message
    assert f"ssh-keygen -R '10.0.0.1' -f {tmp_path / 'known_hosts'}" in message
    assert caught.value.kind == "HOST KEY CHANGED"


def test_changed_key_in_a_trusted_file_is_refused_too(tmp_path: Path) -> None:
    vendor = tmp_path / "vendor"
    vendor.write_text(f"10.0.0.1 ssh-ed25519 {ED25519}\n")
    with pytest.raises(HostKeyChanged, match="HOST KEY CHANGED"):
        policy(tmp_path, trusted=[KnownHosts(vendor)]).verify("node1", "10.0.0.1", other_key())


def test_pinned_fingerprint(tmp_path: Path) -> None:
    good = policy(tmp_path, pins={"node1": {ED25519_FP}}).verify("node1", "10.0.0.1", key())
    assert good.record and good.trusted_by == "--host-key"
    by_address = policy(tmp_path, pins={"10.0.0.1": {ED25519_FP}}).verify("node1", "10.0.0.1", key())
    assert by_address.trusted_by == "--host-key"
    anywhere = policy(tmp_path, pinned_anywhere={ED25519_FP}).verify("node1", "10.0.0.1", key())
    assert anywhere.trusted_by == "--host-key"
    with pytest.raises(HostKeyChanged, match=r"HOST KEY MISMATCH for node1 \(10.0.0.1\).*--host-key pins"):
        policy(tmp_path, pins={"node1": {ED25519_FP}}, trust_on_first_use=True).verify(
            "node1", "10.0.0.1", other_key()
        )


def test_unknown_key_needs_a_decision(tmp_path: Path) -> None:
    with pytest.raises(HostKeyUntrusted) as caught:
        policy(tmp_path).verify("node1", "10.0.0.1", key())
    message = str(caught.value)
    assert f"unknown host key {ED25519_FP}" in message
    assert f"--host-key node1={ED25519_FP}" in message and "--trust-on-first-use" in message
    tofu = policy(tmp_path, trust_on_first_use=True).verify("node1", "10.0.0.1", key())
    assert tofu.record and tofu.trusted_by == "trusted on first use"


def test_first_use_never_overrides_a_known_key_of_another_type(tmp_path: Path) -> None:
    (tmp_path / "known_hosts").write_text(f"10.0.0.1 ssh-rsa {RSA}\n")
    store = policy(tmp_path, trust_on_first_use=True)
    assert store.known_key_types("10.0.0.1") == ["ssh-rsa"]
    with pytest.raises(HostKeyUntrusted, match="only ssh-rsa keys are known"):
        store.verify("node1", "10.0.0.1", key())


def test_revoked_key_is_refused(tmp_path: Path) -> None:
    (tmp_path / "known_hosts").write_text(f"@revoked * ssh-ed25519 {ED25519}\n")
    with pytest.raises(HostKeyChanged, match="marks @revoked"):
        policy(tmp_path, trust_on_first_use=True).verify("node1", "10.0.0.1", key())
