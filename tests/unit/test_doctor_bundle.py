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


# Every other kind a node's configs, journals and shell history show, in the formats the tools write them.
HF_TOKEN = "hf_PlantedHubToken0123456789abcdefgh"
DOCKER_AUTH = "b3BzOnBsYW50ZWQtcmVnaXN0cnktcHc="  # base64 of ops:planted-registry-pw
JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJwbGFudGVkIn0.cGxhbnRlZC1zaWduYXR1cmU"
MS_TOKEN = "ms-3c9d2f1a-1b2c-4d5e-8f90-0a1b2c3d4e5f"
PLANTED_KINDS = {
    # docker's ~/.docker/config.json after `docker login`: base64 user:password per registry, an OAuth token
    "docker auths": (
        json.dumps(
            {
                "auths": {
                    "https://index.docker.io/v1/": {"auth": DOCKER_AUTH},
                    "swr.cn-south-1.myhuaweicloud.com": {"identitytoken": "planted-identity-token-42"},
                },
                "credsStore": "desktop",
            },
            indent="\t",
        ),
        [DOCKER_AUTH, "planted-identity-token-42"],
    ),
    # curl -v prints the request headers it sends after "> "
    "curl -v": (
        "> GET /v1/models HTTP/1.1\n> Host: 10.0.0.5:8000\n> Authorization: Basic cGxhbnRlZDpiYXNpYw==\n"
        "> Proxy-Authorization: Basic cGxhbnRlZDpwcm94eQ==\n> User-Agent: curl/8.5.0\n"
        "< HTTP/1.1 200 OK\n< set-cookie: session=planted-session-cookie; Path=/",
        ["cGxhbnRlZDpiYXNpYw==", "cGxhbnRlZDpwcm94eQ==", "planted-session-cookie"],
    ),
    "bearer in JSON": (
        '{"headers": {"Authorization": "Bearer planted-json-bearer"}}',
        ["planted-json-bearer"],
    ),
    "URL credentials": (
        "pip install --index-url https://ops:planted-pip-pw@pypi.example/simple vllm\n"
        "git clone https://x-access-token:planted-git-token@git.example/ops/models.git\n"
        "Environment=https_proxy=http://ops:planted-proxy-pw@proxy.example:3128",
        ["planted-pip-pw", "planted-git-token", "planted-proxy-pw"],
    ),
    "Hugging Face": (
        f"Environment=HF_TOKEN={HF_TOKEN}\nHUGGING_FACE_HUB_TOKEN='planted-legacy-hub-token'\n"
        f"huggingface-cli login --token {HF_TOKEN}\nINFO fetching with {HF_TOKEN}",
        [HF_TOKEN, "planted-legacy-hub-token"],
    ),
    "ModelScope": (
        f"export MODELSCOPE_API_TOKEN={MS_TOKEN}\nmodelscope login --token {MS_TOKEN}\n"
        f"uploaded by {MS_TOKEN}",
        [MS_TOKEN],
    ),
    "registry": (
        "docker login -u ops -p planted-docker-pw swr.example\n"
        "docker login -u ops -p dckr_pat_PlantedPersonalAccessToken1 docker.io\n"
        f'level=debug msg="token: {JWT}"\n'
        "PROVISION_REGISTRY_PASSWORD=planted-registry-env",
        ["planted-docker-pw", "dckr_pat_PlantedPersonalAccessToken1", JWT, "planted-registry-env"],
    ),
    "vLLM keys": (
        "ExecStart=/opt/vllm/bin/vllm serve /models/q --api-key=planted-argv-key --port 8000\n"
        "VLLM_API_KEY='planted-env-key'\nOPENAI_API_KEY=planted-openai-key",
        ["planted-argv-key", "planted-env-key", "planted-openai-key"],
    ),
    "vault passwords": (
        "ANSIBLE_VAULT_PASSWORD=planted-vault-pw\nvault_password: planted-vault-pw-2",
        ["planted-vault-pw", "planted-vault-pw-2"],
    ),
}


@pytest.mark.parametrize("kind", sorted(PLANTED_KINDS))
def test_redact_removes_every_kind_of_credential(kind: str) -> None:
    text, secrets = PLANTED_KINDS[kind]
    cleaned = redact(text)
    for secret in secrets:
        assert secret not in cleaned, cleaned
    assert REDACTED in cleaned


def test_what_is_not_a_secret_stays_readable() -> None:
    kept = [
        "vllm serve /models/q --api-key-file /etc/provision/serve/a/key --port 8000",
        "echo x | docker login --password-stdin -u ops swr.example",
        "ExecStart=/usr/bin/docker run --rm -p 8000:8000 --name vllm-a image",
        "Dec 03 10:00:00 node1 sshd[1]: Failed password for root from 10.0.0.9 port 5 ssh2",
        "see https://github.com/vllm-project/vllm-ascend/issues/309",
        "> Host: 10.0.0.5:8000",
        '"credsStore": "desktop"',
    ]
    for line in kept:
        assert redact(line) == line


def test_a_bundle_of_every_kind_holds_none_of_them(tmp_path: Path) -> None:
    probe = "".join(probe_section(kind, text) for kind, (text, _) in PLANTED_KINDS.items())
    path = tmp_path / "support.tar.gz"
    write_bundle(
        path, [NodeBundle("node1", probe=probe, facts={"raw": probe}, findings=[{"evidence": probe}])]
    )
    with tarfile.open(path) as tar:
        members = tar.getmembers()
        contents = {m.name: tar.extractfile(m).read() for m in members}  # type: ignore[union-attr]
    assert {"manifest.json", "node1/probe.txt", "node1/facts.json", "node1/findings.json"} == set(contents)
    planted = [secret for _, secrets in PLANTED_KINDS.values() for secret in secrets]
    for name, data in contents.items():
        for secret in planted:
            # facts.json and findings.json are JSON: a secret could survive escaped; both forms are looked for
            for form in {secret, json.dumps(secret)[1:-1]}:
                assert form.encode() not in data, f"{secret} survived in {name}"
    assert all(m.mode == 0o600 for m in members)


def test_the_bundle_file_is_created_0600_whatever_the_umask_and_never_widened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    path = tmp_path / "support.tar.gz"
    path.write_text("an older bundle, left readable")
    path.chmod(0o644)
    seen: list[tuple[str, int]] = []
    original = tarfile.TarFile.addfile

    def addfile(self: tarfile.TarFile, tarinfo: tarfile.TarInfo, fileobj: object = None) -> None:
        # while the content is being written, every file in the folder is already private
        seen.extend((p.name, p.stat().st_mode & 0o777) for p in tmp_path.iterdir() if p != path)
        original(self, tarinfo, fileobj)  # type: ignore[arg-type]

    def no_chmod(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the bundle is chmod'ed after it was created")

    monkeypatch.setattr(tarfile.TarFile, "addfile", addfile)
    monkeypatch.setattr(os, "chmod", no_chmod)
    monkeypatch.setattr(Path, "chmod", no_chmod)
    old_umask = os.umask(0)
    try:
        write_bundle(path, [NodeBundle("node1", probe=f"VLLM_API_KEY={API_KEY}")])
    finally:
        os.umask(old_umask)
    assert seen and all(mode == 0o600 for _, mode in seen), seen
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["support.tar.gz"], "no partial file is left"
    with tarfile.open(path) as tar:
        assert "node1/probe.txt" in tar.getnames()


def test_a_failed_write_leaves_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args: object, **_kwargs: object) -> None:
        raise OSError("No space left on device")

    monkeypatch.setattr(tarfile.TarFile, "addfile", broken)
    with pytest.raises(OSError, match="No space left"):
        write_bundle(tmp_path / "support.tar.gz", [NodeBundle("node1", probe="x")])
    assert list(tmp_path.iterdir()) == []
