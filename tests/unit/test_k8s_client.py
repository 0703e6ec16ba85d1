"""``provision k8s diff|apply`` before the first request: the kubeconfig read as kubectl reads it (current
context, paths relative to the file, ``$KUBECONFIG``), what it cannot honour refused with file and field
(exit 2), an unreachable apiserver reported without a traceback (exit 1), and the diff's path listing."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from provision.errors import InputError
from provision.k8s.client import kubeconfig_path, load_config, path_of
from provision.k8s.sync import _without_repeated_metrics, differences, project
from tests.helpers import run_cli

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).parents[2] / "examples"


def _kubeconfig(folder: Path, user: dict[str, object], server: str = "https://127.0.0.1:1") -> Path:
    path = folder / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "rack",
                "contexts": [{"name": "rack", "context": {"cluster": "c", "user": "u"}}],
                "clusters": [{"name": "c", "cluster": {"server": server, "certificate-authority": "ca.crt"}}],
                "users": [{"name": "u", "user": user}],
            }
        ),
        encoding="utf-8",
    )
    return path


def test_token_and_paths_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("s3cret\n", encoding="utf-8")
    config = load_config(_kubeconfig(tmp_path, {"tokenFile": "token"}))
    assert config.server == "https://127.0.0.1:1"
    assert config.token == "s3cret"
    assert config.ca_file == str(tmp_path / "ca.crt")


def test_client_certificate_data_is_decoded(tmp_path: Path) -> None:
    pem = b"-----BEGIN CERTIFICATE-----\n"
    config = load_config(_kubeconfig(tmp_path, {"client-certificate-data": base64.b64encode(pem).decode()}))
    assert config.cert_data == pem
    with pytest.raises(InputError, match="client-key-data: not base64"):
        load_config(_kubeconfig(tmp_path, {"client-key-data": "@@"}))


@pytest.mark.parametrize(
    ("user", "message"),
    [
        ({"exec": {"command": "aws"}}, "users[u].exec: not supported"),
        ({"auth-provider": {"name": "gcp"}}, "users[u].auth-provider: not supported"),
    ],
)
def test_plugins_are_refused_by_name(tmp_path: Path, user: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_config(_kubeconfig(tmp_path, user))


def test_kubeconfig_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    assert kubeconfig_path(None) == tmp_path / "a"
    assert kubeconfig_path(tmp_path / "given") == tmp_path / "given"


def test_apply_refuses_before_any_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _kubeconfig(tmp_path, {"exec": {"command": "aws"}})
    inventory = str(EXAMPLES / "inventory.ini")
    assert run_cli(["k8s", "apply", inventory, "--kubeconfig", str(config)], monkeypatch) == 2
    assert f"{config}: users[u].exec: not supported" in capsys.readouterr().err
    assert run_cli(["k8s", "apply", inventory, "--pool", "chat", "--prune"], monkeypatch) == 2
    assert "--prune with --pool" in capsys.readouterr().err
    missing = tmp_path / "none"
    assert run_cli(["k8s", "diff", inventory, "--kubeconfig", str(missing)], monkeypatch) == 2
    assert f"{missing}: cannot read the kubeconfig" in capsys.readouterr().err


def test_missing_ca_file_names_the_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _kubeconfig(tmp_path, {"token": "t"})
    code = run_cli(["k8s", "diff", str(EXAMPLES / "inventory.ini"), "--kubeconfig", str(config)], monkeypatch)
    err = capsys.readouterr().err
    assert code == 2
    assert f"{config}: certificate-authority {tmp_path / 'ca.crt'}: No such file or directory" in err


def test_unreachable_apiserver_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _kubeconfig(tmp_path, {"token": "t"}, server="http://127.0.0.1:1")
    (tmp_path / "ca.crt").write_text(_self_signed(), encoding="utf-8")
    code = run_cli(["k8s", "diff", str(EXAMPLES / "inventory.ini"), "--kubeconfig", str(config)], monkeypatch)
    err = capsys.readouterr().err
    assert code == 1
    assert "cannot reach http://127.0.0.1:1" in err and "Traceback" not in err


def _self_signed() -> str:
    """A CA certificate (the kubeconfig names one; plain http never uses it)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def test_paths_of_core_and_group_kinds() -> None:
    meta = {"name": "vllm-chat", "namespace": "serving"}
    assert path_of({"apiVersion": "v1", "kind": "Service", "metadata": meta}) == (
        "/api/v1/namespaces/serving/services/vllm-chat"
    )
    assert path_of(
        {"apiVersion": "autoscaling/v2beta2", "kind": "HorizontalPodAutoscaler", "metadata": meta}, ""
    ) == ("/apis/autoscaling/v2beta2/namespaces/serving/horizontalpodautoscalers")


def test_differences_name_the_changed_paths() -> None:
    before = {"spec": {"replicas": 1, "ports": [{"port": 8000}], "same": "x"}}
    after = {"spec": {"replicas": 2, "ports": [{"port": 8001}], "same": "x", "new": True}}
    assert differences(before, after) == ["spec.new", "spec.ports[0].port", "spec.replicas"]
    assert differences(before, before) == []


def test_projection_keeps_only_the_fields_provision_owns() -> None:
    live = {
        "spec": {
            "replicas": 3,  # the autoscaler's
            "clusterIP": "10.0.0.7",  # the server's
            "ports": [{"name": "http", "port": 8000, "protocol": "TCP", "nodePort": 30001}],
            "finalizers": ["a", "b"],
        }
    }
    owned = {
        "f:spec": {
            "f:ports": {'k:{"port":8000,"protocol":"TCP"}': {".": {}, "f:name": {}, "f:port": {}}},
            "f:finalizers": {'v:"a"': {}},
        }
    }
    assert project(live, owned) == {
        "spec": {"ports": [[{"name": "http", "port": 8000}]], "finalizers": [True]}
    }
    changed = {**live, "spec": {**live["spec"], "replicas": 1, "clusterIP": "10.0.0.9"}}
    assert differences(project(live, owned), project(changed, owned)) == []
    moved = {**live, "spec": {**live["spec"], "ports": [{"name": "http", "port": 8001, "protocol": "TCP"}]}}
    assert differences(project(live, owned), project(moved, owned)) == ["spec.ports[0]"]


def test_a_repeated_hpa_metric_is_read_once_a_changed_one_still_differs() -> None:
    # 1.20's answer to a dry-run apply of a v2beta2 HPA repeats each metric (its annotation's copy).
    metric = {"type": "External", "external": {"metric": {"name": "queue"}, "target": {"value": "4"}}}
    live = {"kind": "HorizontalPodAutoscaler", "spec": {"maxReplicas": 4, "metrics": [metric]}}
    answer = {**live, "spec": {**live["spec"], "metrics": [metric, metric]}}
    assert differences(live, _without_repeated_metrics(answer)) == []
    retargeted = {**metric, "external": {**metric["external"], "target": {"value": "8"}}}
    changed = {**live, "spec": {**live["spec"], "metrics": [metric, retargeted]}}
    assert differences(live, _without_repeated_metrics(changed)) == ["spec.metrics"]
    deployment = {"kind": "Deployment", "spec": {"metrics": [1, 1]}}
    assert _without_repeated_metrics(deployment) is deployment
