"""Image targets from the version lock: tags, build arguments, labels, and the Dockerfile that must agree."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provision.ascend import lock
from provision.cli.image import register
from provision.errors import InputError
from provision.image import spec
from provision.image.context import make_context
from tests.helpers import cli_app

pytestmark = pytest.mark.unit
ROOT = Path(__file__).parents[2]
DOCKERFILE = ROOT / "Dockerfile"


@pytest.mark.parametrize(
    ("os_variant", "soc", "arch", "tag"),
    [
        ("openeuler24.03", "910b", "arm64", "0.23.0-cann9.1.0-openeuler24.03-arm64"),
        ("ubuntu22.04", "910b", "aarch64", "0.23.0-cann9.1.0-ubuntu22.04-arm64"),
        ("openeuler24.03", "a3", "arm64", "0.23.0-cann9.1.0-a3-openeuler24.03-arm64"),
        ("ubuntu22.04", "a3", "x86_64", "0.23.0-cann9.1.0-a3-ubuntu22.04-amd64"),
        ("openeuler24.03", "310p", "arm64", "0.23.0-cann9.1.0-310p-openeuler24.03-arm64"),
    ],
)
def test_tag_carries_the_lock(os_variant: str, soc: str, arch: str, tag: str) -> None:
    target = spec.Target("0.23.0", os_variant, soc, arch)
    assert target.tag == tag
    assert target.reference == f"vllm-ascend:{tag}"


def test_base_image_of_the_default_target_is_the_locks() -> None:
    target = spec.default_target()
    assert target.base_image == "quay.io/ascend/cann:9.1.0-910b-openeuler24.03-py3.12"
    a3 = spec.default_target(soc="a3", os_variant="ubuntu22.04")
    assert a3.base_image == "quay.io/ascend/cann:9.1.0-a3-ubuntu22.04-py3.12"
    assert a3.build_args()["SOC_VERSION"] == "ascend910_9391"
    duo = spec.default_target(soc="310p")
    assert duo.base_image == "quay.io/ascend/cann:9.1.0-310p-openeuler24.03-py3.12"
    assert duo.build_args()["SOC_VERSION"] == "ascend310p1"


def test_dockerfile_defaults_equal_the_lock() -> None:
    """`docker build .` (and the CI workflow without args) builds exactly the lock's default stack."""
    declared = spec.dockerfile_args(DOCKERFILE)
    for name, value in spec.default_target().build_args().items():
        assert name in declared, f"{name} is not an ARG of the Dockerfile"
        assert declared[name] == value, f"ARG {name}: Dockerfile {declared[name]!r}, lock {value!r}"
    stack = lock.default_stack()
    assert declared["PIP_PACKAGES"] == (
        f"vllm=={stack['vllm']} vllm-ascend=={stack['vllm_ascend']} "
        f"torch=={stack['torch']} torch-npu=={stack['torch_npu']}"
    )


def test_every_stack_label_is_set_by_the_dockerfile() -> None:
    text = DOCKERFILE.read_text()
    for key in spec.default_target().labels():
        assert re.search(rf"^\s*{re.escape(key)}=", text, re.MULTILINE), key


def test_layer_order_puts_the_scripts_last() -> None:
    """An entrypoint change must rebuild one step: the COPY of the scripts is the last instruction."""
    instructions = [
        line.split()[0]
        for line in re.sub(r"\\\n", " ", DOCKERFILE.read_text()).splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert instructions[-1] == "COPY"
    text = DOCKERFILE.read_text()
    assert text.index("container/entrypoint.sh") > text.index("pip install")
    assert 'CMD ["/bin/bash"]' not in text


def test_every_stack_and_variant_is_listed() -> None:
    targets = spec.lock_targets("arm64")
    assert len(targets) == len(lock.stack_names()) * len(spec.OS_VARIANTS) * len(spec.SOCS)
    assert len({t.reference for t in targets}) == len(targets)


def test_overrides_are_checked_against_the_dockerfile() -> None:
    known = list(spec.dockerfile_args(DOCKERFILE))
    target = spec.default_target()
    args = spec.resolve_build_args(
        target,
        spec.Overrides(
            base_image="mirror.lan/cann:9.1.0", pip_packages="six", mirrors={"PIP_INDEX_URL": "x"}
        ),
        known,
    )
    assert args["BASE_IMAGE"] == "mirror.lan/cann:9.1.0"
    assert args["PIP_PACKAGES"] == "six"
    with pytest.raises(InputError, match="NOT_AN_ARG"):
        spec.resolve_build_args(target, spec.Overrides(extra={"NOT_AN_ARG": "1"}), known)
    with pytest.raises(InputError, match="mirror setting"):
        spec.resolve_build_args(target, spec.Overrides(mirrors={"BASE_IMAGE": "x"}), known)


@pytest.mark.parametrize(
    "value",
    [
        "https://user:hunter22@mirror.lan/simple",
        "https://pypi.org/simple http://u:p4ss@10.0.0.1/simple",
        "deb [trusted=yes] http://ci:s3cret@apt.lan/ubuntu jammy main",
    ],
)
def test_credentials_in_urls_are_refused(value: str) -> None:
    with pytest.raises(InputError, match="docker history"):
        spec.check_no_credentials("PIP_INDEX_URL", value)
    assert "hunter22" not in _message(value)


def _message(value: str) -> str:
    try:
        spec.check_no_credentials("X", value)
    except InputError as exc:
        return str(exc)
    return ""


def test_plain_urls_pass() -> None:
    spec.check_no_credentials("PIP_INDEX_URL", "https://mirror.lan/simple https://user@mirror.lan/x")


@pytest.mark.parametrize(
    ("repository", "registry", "path"),
    [
        ("vllm-ascend", None, "vllm-ascend"),
        ("team/vllm-ascend", None, "team/vllm-ascend"),
        ("127.0.0.1:5000/vllm-ascend", "127.0.0.1:5000", "vllm-ascend"),
        ("registry.example/team/vllm-ascend", "registry.example", "team/vllm-ascend"),
        ("localhost/vllm-ascend", "localhost", "vllm-ascend"),
    ],
)
def test_split_registry(repository: str, registry: str | None, path: str) -> None:
    assert spec.split_registry(repository) == (registry, path)
    spec.validate_repository(repository)


@pytest.mark.parametrize("bad", ["", "Vllm", "vllm-ascend:tag", "repo@sha256:abc", "a//b"])
def test_bad_repositories_are_refused(bad: str) -> None:
    with pytest.raises(InputError):
        spec.validate_repository(bad)


@pytest.mark.parametrize(
    ("platform", "arch"), [("linux/arm64", "arm64"), ("linux/arm64/v8", "arm64"), ("linux/amd64", "amd64")]
)
def test_parse_platform(platform: str, arch: str) -> None:
    assert spec.parse_platform(platform) == ("linux", arch)


@pytest.mark.parametrize("bad", ["arm64", "windows/amd64", "linux/riscv64"])
def test_bad_platforms_are_refused(bad: str) -> None:
    with pytest.raises(InputError):
        spec.parse_platform(bad)


def test_unknown_stack_os_soc_are_refused() -> None:
    for kwargs in ({"stack": "9.9.9"}, {"os_variant": "centos7"}, {"soc": "310"}):
        with pytest.raises(InputError):
            spec.default_target(**kwargs)  # type: ignore[arg-type]


def test_dockerfile_args_parser() -> None:
    text = 'ARG A=1\nARG B="x ${A}"\nFROM ${B}\nARG A\nARG C\nRUN echo \\\n  hi\nARG D=${A}-$B\n'
    assert spec.dockerfile_args(text) == {"A": "1", "B": "x 1", "C": None, "D": "1-x 1"}


def test_context_holds_the_dockerfile_and_scripts_only_and_is_reproducible() -> None:
    first, second = make_context(ROOT), make_context(ROOT)
    assert first.data == second.data
    assert "Dockerfile" in first.files
    assert "container/entrypoint.sh" in first.files
    assert all(f == "Dockerfile" or f.startswith("container/") for f in first.files)


def test_cli_args_formats() -> None:
    runner = CliRunner()
    lines = runner.invoke(cli_app(register), ["image", "args"])
    assert lines.exit_code == 0, lines.output
    assert "VLLM_ASCEND_VERSION=0.23.0" in lines.output.splitlines()
    as_json = json.loads(runner.invoke(cli_app(register), ["image", "args", "--format", "json"]).output)
    assert as_json["reference"] == "vllm-ascend:0.23.0-cann9.1.0-openeuler24.03-arm64"
    assert as_json["platform"] == "linux/arm64"
    bake = runner.invoke(
        cli_app(register),
        ["image", "args", "--format", "bake", "--repository", "ghcr.io/o/vllm-ascend", "--revision", "abc"],
    )
    target = json.loads(bake.output)["target"]["vllm-ascend"]
    assert target["platforms"] == ["linux/arm64"]
    assert target["tags"] == ["ghcr.io/o/vllm-ascend:0.23.0-cann9.1.0-openeuler24.03-arm64"]
    assert target["args"]["REVISION"] == "abc"
    assert target["args"]["TORCH_NPU_VERSION"] == "2.10.0.post4"
    bad = runner.invoke(cli_app(register), ["image", "args", "--format", "yaml"])
    assert bad.exit_code != 0
