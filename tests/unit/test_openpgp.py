"""``provision.openpgp``: the fingerprints of a key file, computed from its bytes, are the ones gpg prints
(the pin of the openEuler repositories' key and of a bundle's signer rests on it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from provision import openpgp
from tests.helpers import gnupg_home, load_module

pytestmark = pytest.mark.unit
ROOT = Path(__file__).parents[2]
FILTER = load_module("provision_filter_openeuler_repos", ROOT / "plugins/filter/openeuler_repos.py")


def gpg_key(
    request: pytest.FixtureRequest, tmp_path: Path, uids: list[str], algo: str
) -> tuple[str, list[str]]:
    """An armored export of new keys (each with an encryption subkey), and gpg's own fingerprints of them."""
    home = gnupg_home(request, tmp_path)
    gpg = ["gpg", "--homedir", str(home), "--batch", "--pinentry-mode", "loopback", "--passphrase", ""]
    for uid in uids:
        subprocess.run([*gpg, "--quick-generate-key", uid, algo, "sign", "never"], check=True)
        listed = subprocess.run([*gpg, "--with-colons", "--fingerprint", uid], capture_output=True, text=True)
        primary = next(line.split(":")[9] for line in listed.stdout.splitlines() if line.startswith("fpr:"))
        sub = "cv25519" if algo == "ed25519" else algo
        subprocess.run([*gpg, "--quick-add-key", primary, sub, "encr", "never"], check=True)
    listed = subprocess.run([*gpg, "--with-colons", "--fingerprint", *uids], capture_output=True, text=True)
    lines = listed.stdout.splitlines()
    # the fpr: line right after each pub: line is the primary key's (the one after sub: a subkey's)
    primaries = [lines[i + 1].split(":")[9] for i, line in enumerate(lines) if line.startswith("pub:")]
    armored = subprocess.run([*gpg, "--armor", "--export", *uids], capture_output=True, text=True, check=True)
    return armored.stdout, primaries


@pytest.mark.skipif(shutil.which("gpg") is None, reason="gpg is not installed")
@pytest.mark.parametrize("algo", ["ed25519", "rsa2048"])
def test_fingerprints_are_gpgs_for_every_primary_key_and_no_subkey(
    request: pytest.FixtureRequest, tmp_path: Path, algo: str
) -> None:
    armored, primaries = gpg_key(request, tmp_path, ["one@test", "two@test"], algo)
    assert len(primaries) == 2
    assert openpgp.key_fingerprints(armored) == primaries
    # A comment header, CRLF line ends and text around the block (a web page) do not matter.
    framed = "see below\r\n" + armored.replace("\n", "\r\n").replace(
        "-----\r\n\r\n", "-----\r\nComment: the site key\r\n\r\n", 1
    )
    assert FILTER.openeuler_repos_key_fingerprints(framed) == primaries


def test_what_is_no_key_gives_no_fingerprint() -> None:
    for text in ("", "<html>404 Not Found</html>", "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n!!!\n"):
        assert FILTER.openeuler_repos_key_fingerprints(text) == []
        with pytest.raises(ValueError):
            openpgp.key_fingerprints(text)


def test_a_fingerprint_is_read_as_gpg_prints_it() -> None:
    fpr = "0123456789ABCDEF0123456789ABCDEF01234567"
    spaced = "0123 4567 89AB CDEF 0123  4567 89AB CDEF 0123 4567"
    assert openpgp.normalize_fingerprint(spaced) == fpr
    assert openpgp.normalize_fingerprint("0x" + fpr.lower()) == fpr
    assert openpgp.normalize_fingerprint(fpr[:-1]) is None
    assert openpgp.normalize_fingerprint("bundle@test") is None
