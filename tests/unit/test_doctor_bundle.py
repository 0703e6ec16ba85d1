"""The support bundle: every planted secret is gone from every file of the tar.gz; the rest stays readable."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from provision.doctor.bundle import REDACTED, NodeBundle, redact, write_bundle
from provision.doctor.probe import collect
from tests.helpers import probe_section
from tests.unit.test_doctor_match import HEALTHY_ENGINE, node_probe

pytestmark = pytest.mark.unit

API_KEY = "sk-live-9f8e7d6c5b4a"
VAULT = """$ANSIBLE_VAULT;1.1;AES256
          62313365396662343061393464336163383764373764613633653634306231386433626436623361
          6134333665353966363534333632666535333761666131620a663537646436643839616332333936"""
PRIVATE_KEY = """-----BEGIN OPENSSH PRIVATE KEY-----
b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW
-----END OPENSSH PRIVATE KEY-----"""
PLANTED = {
    "vllm_serve_api_key: " + API_KEY: API_KEY,
    "VLLM_API_KEY=envkey-5566778899": "envkey-5566778899",
    "curl -H 'Authorization: Bearer tok-112233445566' http://x:8000/v1/models": "tok-112233445566",
    "--api-key cli-key-abcdef1234": "cli-key-abcdef1234",
    # vLLM logs its arguments at start (https://github.com/vllm-project/vllm-ascend/issues/309 shows the line)
    "INFO 03-12 05:30:53 [api_server.py:913] args: Namespace(port=8000, api_key=['ns-key-77889900'])": (
        "ns-key-77889900"
    ),
    '{"registry_password": "hunter2hunter2", "user": "admin"}': "hunter2hunter2",
    "db_token=tkn-0099887766": "tkn-0099887766",
    VAULT: "62313365396662343061393464336163",
    PRIVATE_KEY: "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW",
}


def test_redact_removes_each_kind_of_secret_and_keeps_the_rest() -> None:
    for text, secret in PLANTED.items():
        cleaned = redact(text)
        assert secret not in cleaned, text
        assert REDACTED in cleaned
    assert redact("INFO Platform plugin ascend is activated") == "INFO Platform plugin ascend is activated"
    assert redact("my-site-secret-value in a log", secrets=["my-site-secret-value"]) == f"{REDACTED} in a log"


def test_the_bundle_holds_no_planted_secret(tmp_path: Path) -> None:
    planted = list(PLANTED)
    probe = node_probe(engine=[*HEALTHY_ENGINE, *planted[:5]], extra=probe_section("fact site", planted[5]))
    probe += probe_section("record", json.dumps({"inputs": {"cann_password": "pw-in-record-1234"}}))
    probe += probe_section("daemon.json", VAULT + "\n" + PRIVATE_KEY)
    inventory_only = "a-secret-only-the-inventory-knows"
    nodes = [
        NodeBundle(
            "node1", probe=probe, facts=collect(probe), findings=[{"id": "x", "evidence": planted[:2]}]
        ),
        NodeBundle("node2", error=f"unreachable: ssh said {inventory_only}"),
    ]
    path = tmp_path / "support.tar.gz"
    manifest = write_bundle(path, nodes, secrets=[inventory_only])
    with tarfile.open(path) as tar:
        names = tar.getnames()
        contents = {name: tar.extractfile(name).read().decode() for name in names}  # type: ignore[union-attr]
    assert names[0] == "manifest.json"
    assert {"node1/probe.txt", "node1/facts.json", "node1/findings.json"} <= set(names)
    assert json.loads(contents["manifest.json"])["hosts"] == [
        {"host": "node1", "error": None},
        {"host": "node2", "error": f"unreachable: ssh said {REDACTED}"},
    ]
    assert set(manifest["files"]) == set(names) - {"manifest.json"}
    for secret in [*PLANTED.values(), "pw-in-record-1234", inventory_only]:
        for name, text in contents.items():
            assert secret not in text, f"{secret} survived in {name}"
    assert "Platform plugin ascend is activated" in contents["node1/probe.txt"]
    assert path.stat().st_mode & 0o777 == 0o600
