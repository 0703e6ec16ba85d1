"""Weights from a mirror: the profile fields model_url / model_sha256 and their refusals by
``provision validate`` (before any host is touched), the role's variables, and the simulated mirror's
model archive (:mod:`provision_sim.mirror.weights`)."""

from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from provision.inventory.schema import NpuPool, ServingProfile
from provision.serving import plan
from provision_sim.mirror import weights
from tests.helpers import validate

pytestmark = pytest.mark.unit

SHA = "7bef9598772b507475c36c43d113e5987957344a42d36e1550121bf3f53327ea"


# --------------------------------------------------------------------------------------------- schema

GOOD: list[dict[str, Any]] = [
    {"model": "/data/models/m", "model_url": "http://mirror.lan/models/m.tar"},
    {"model": "/data/models/m", "model_url": "https://mirror.lan/m.tar.gz", "model_sha256": SHA},
    {"model": "/data/models/m", "model_url": "file:///srv/mirror/m.tgz", "model_sha256": SHA.upper()},
    {"model": "/data/models/m", "model_url": "http://10.0.0.1:8080/m.zip"},
]


@pytest.mark.parametrize("fields", GOOD)
def test_schema_accepts(fields: dict[str, Any]) -> None:
    profile = ServingProfile.model_validate(fields)
    assert profile.model_url == fields["model_url"]


BAD: list[tuple[str, dict[str, Any], str, str]] = [
    ("relative-model", {"model": "models/m", "model_url": "http://m/m.tar"}, "model_url", "absolute path"),
    ("hub-id-model", {"model": "org/name", "model_url": "http://m/m.tar"}, "model_url", "not 'org/name'"),
    ("ftp", {"model": "/m", "model_url": "ftp://m/m.tar"}, "model_url", "http://, https:// or file://"),
    ("no-host", {"model": "/m", "model_url": "http:///m.tar"}, "model_url", "must name a host"),
    ("file-with-host", {"model": "/m", "model_url": "file://srv/m.tar"}, "model_url", "file:///srv/m.tar"),
    ("not-an-archive", {"model": "/m", "model_url": "http://m/model.safetensors"}, "model_url", ".tar.gz"),
    ("a-folder", {"model": "/m", "model_url": "http://m/models/"}, "model_url", "archive"),
    ("query", {"model": "/m", "model_url": "http://m/m.tar?x=1"}, "model_url", "archive"),
    (
        "short-sha",
        {"model": "/m", "model_url": "http://m/m.tar", "model_sha256": "abc"},
        "model_sha256",
        "64 hex",
    ),
    (
        "sha-with-prefix",
        {"model": "/m", "model_url": "http://m/m.tar", "model_sha256": f"sha256:{SHA}"},
        "model_sha256",
        "64 hex",
    ),
    ("sha-without-url", {"model": "/m", "model_sha256": SHA}, "model_sha256", "model_url, which is not set"),
]


@pytest.mark.parametrize(("fields", "field", "message"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_schema_rejects(fields: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(ValidationError) as info:
        ServingProfile.model_validate(fields)
    errors = info.value.errors()
    assert [error["loc"] for error in errors] == [(field,)], errors
    assert message in errors[0]["msg"]


def test_instances_carry_the_url_and_a_lower_case_sha() -> None:
    user = {"mirrored": {"model": "/data/m", "model_url": "http://m/m.tar", "model_sha256": SHA.upper()}}
    pool = NpuPool(name="chat", devices=[0], port=8000, profile="mirrored")
    (instance,) = plan.pool_plans([pool], user)
    assert (instance.model, instance.model_url, instance.model_sha256) == ("/data/m", "http://m/m.tar", SHA)
    assert "--model" in instance.args and not any("m.tar" in arg for arg in instance.args)
    pool = NpuPool(name="c", devices=list(range(8)), port=8000, profile="chat-32b-tp8")
    shipped = plan.pool_plans([pool])
    assert (shipped[0].model_url, shipped[0].model_sha256) == ("", "")


# --------------------------------------------------------------------------------------------- validate (CLI)


VALIDATE_CASES: list[tuple[str, str, list[str]]] = [
    (
        "relative-model",
        'mirrored: {model: weights/r1, model_url: "http://mirror.lan/r1.tar"}',
        [
            "vllm_serve_profiles.mirrored",
            "model_url",
            "absolute path of their folder on the node, not 'weights/r1'",
        ],
    ),
    (
        "bad-scheme",
        'mirrored: {model: /data/r1, model_url: "sftp://mirror.lan/r1.tar"}',
        ["vllm_serve_profiles.mirrored", "model_url", "must be an http://, https:// or file:// URL"],
    ),
    (
        "bad-sha",
        'mirrored: {model: /data/r1, model_url: "http://mirror.lan/r1.tar", model_sha256: "not-a-sha"}',
        ["vllm_serve_profiles.mirrored", "model_sha256", "64 hex digits"],
    ),
]


@pytest.mark.parametrize(
    ("profile", "expected"), [c[1:] for c in VALIDATE_CASES], ids=[c[0] for c in VALIDATE_CASES]
)
def test_validate_names_profile_and_field(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    profile: str,
    expected: list[str],
) -> None:
    group_vars = f"""\
    npu_pools_list: [{{name: chat, devices: [0], port: 8000, profile: mirrored}}]
    vllm_serve_profiles:
      {profile}
    """
    assert validate(tmp_path, group_vars, monkeypatch) == 2
    output = capsys.readouterr()
    text = output.out + output.err
    for fragment in expected:
        assert fragment in text, text


def test_validate_refuses_a_negative_reserve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert validate(tmp_path, "vllm_serve_model_reserve_mb: -1\n", monkeypatch) == 2
    output = capsys.readouterr()
    assert "vllm_serve_model_reserve_mb = -1" in output.out + output.err, output.out + output.err


def test_validate_accepts_a_mirrored_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    group_vars = f"""\
    npu_pools_list: [{{name: chat, devices: [0], port: 8000, profile: mirrored}}]
    vllm_serve_profiles:
      mirrored: {{model: /data/models/smollm2, model_url: "http://mirror.lan/models/smollm2.tar",
                  model_sha256: {SHA}}}
    vllm_serve_model_reserve_mb: 4096
    """
    code = validate(tmp_path, group_vars, monkeypatch)
    output = capsys.readouterr()
    assert code == 0, output.out + output.err


# --------------------------------------------------------------------------------------------- the role

ROLE = Path(__file__).parents[2] / "roles" / "vllm_serve"


def test_role_fetches_weights_before_configure_with_its_own_tag() -> None:
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())

    def file_of(task: dict[str, Any]) -> str | None:
        """The tasks file an import_tasks or include_tasks (``file:`` form) names."""
        imported = task.get("ansible.builtin.import_tasks")
        included = task.get("ansible.builtin.include_tasks")
        return str(imported) if imported else (included or {}).get("file")

    steps = {file_of(task): task for task in tasks if file_of(task)}
    files = list(steps)
    assert files.index("check.yml") < files.index("model.yml") < files.index("configure.yml")
    assert steps["model.yml"]["tags"] == ["vllm_serve_model"]
    # included: its tasks carry the tag too (apply), so --tags vllm_serve_model reaches them
    assert steps["model.yml"]["ansible.builtin.include_tasks"]["apply"]["tags"] == ["vllm_serve_model"]


# --------------------------------------------------------------------------------------------- sim archive


def _model(folder: Path) -> Path:
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text('{"hidden_size": 8}\n')
    (folder / "model.safetensors").write_bytes(bytes(range(256)) * 64)
    (folder / "sub" / "tokenizer.json").write_text("{}\n")
    return folder


def test_archive_holds_the_folder_and_is_deterministic(tmp_path: Path) -> None:
    model = _model(tmp_path / "smollm2")
    first = weights.build_model_archive(model, tmp_path / "a" / "smollm2.tar")
    second = weights.build_model_archive(model, tmp_path / "b" / "smollm2.tar")
    assert first.sha256 == second.sha256 == hashlib.sha256(first.path.read_bytes()).hexdigest()
    with tarfile.open(first.path) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert sorted(members) == [
            "smollm2",
            "smollm2/config.json",
            "smollm2/model.safetensors",
            "smollm2/sub",
            "smollm2/sub/tokenizer.json",
        ]
        assert {(m.uid, m.gid) for m in members.values()} == {(0, 0)}
        data = tar.extractfile(members["smollm2/model.safetensors"])
        assert data is not None and data.read() == (model / "model.safetensors").read_bytes()


def test_archive_is_cached_and_published_with_its_sha256sums(tmp_path: Path) -> None:
    model = _model(tmp_path / "smollm2")
    cache = tmp_path / "cache"
    built = weights.ensure_model_archive(cache, model)
    again = weights.ensure_model_archive(cache, model)
    assert (again.path, again.sha256, again.seconds) == (built.path, built.sha256, 0.0)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    assert weights.publish(mirror, built) == "models/smollm2.tar"
    assert weights.publish(mirror, built) == "models/smollm2.tar"
    served = mirror / "models" / "smollm2.tar"
    assert served.stat().st_ino == built.path.stat().st_ino  # a hard link, no second copy
    assert (mirror / "models" / "sha256sums.txt").read_text() == f"{built.sha256}  smollm2.tar\n"
    (model / "config.json").write_text('{"hidden_size": 16}\n')  # a new model: a new archive, old one gone
    rebuilt = weights.ensure_model_archive(cache, model)
    assert rebuilt.sha256 != built.sha256 and not built.path.exists()
