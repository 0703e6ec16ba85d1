"""The Kubernetes build cache of the test rig (provision_sim.k8s.build): cached, locked, clear on failure.

The real build (tens of minutes) is proven by the control plane's tests; here its cache logic runs on a fake
cache folder, with the build step replaced by one that writes stand-in binaries.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from provision_sim.k8s import build

pytestmark = pytest.mark.unit


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path))
    return tmp_path


def _fake_build(calls: list[float], seconds: float = 0.0):  # type: ignore[no-untyped-def]
    def fake(_say: build.Progress) -> tuple[dict[str, float], str]:
        calls.append(time.monotonic())
        time.sleep(seconds)
        (build.build_dir() / "bin").mkdir(exist_ok=True)
        for name in build.COMPONENTS:
            path = build.binary(name)
            path.write_text("#!/bin/sh\n")
            path.chmod(0o755)
        return {"fetch": 0.1}, "1.20.5+really1.20.2-1"

    return fake


def test_the_cache_is_keyed_on_the_source_tarball(cache: Path) -> None:
    assert build.build_dir() == cache / build.SOURCE_SHA256
    assert build.binary("kube-apiserver") == cache / build.SOURCE_SHA256 / "bin" / "kube-apiserver"
    with pytest.raises(ValueError, match="kubectl is not one of"):
        build.binary("kubectl")


def test_a_second_prepare_returns_at_once(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[float] = []
    monkeypatch.setattr(build, "_build", _fake_build(calls))
    first = build.prepare()
    assert not first.cached and len(calls) == 1
    stamp = json.loads(build.stamp_path().read_text())
    assert stamp["spec"] == dict(build.SPEC)
    assert stamp["debian_version"] == "1.20.5+really1.20.2-1"
    assert set(stamp["binaries"]) == set(build.COMPONENTS)
    again = build.prepare()
    assert again.cached and again.seconds < 1 and len(calls) == 1
    assert again.binaries == first.binaries


def test_concurrent_callers_build_once(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[float] = []
    monkeypatch.setattr(build, "_build", _fake_build(calls, seconds=0.5))
    reports: list[build.BuildReport] = []
    threads = [threading.Thread(target=lambda: reports.append(build.prepare())) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1
    assert sorted(report.cached for report in reports) == [False, True, True]


def test_a_stamp_of_another_recipe_or_a_missing_binary_is_built_again(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[float] = []
    monkeypatch.setattr(build, "_build", _fake_build(calls))
    build.prepare()
    build.binary("kube-controller-manager").unlink()
    assert not build.is_built()
    build.prepare()
    stamp = json.loads(build.stamp_path().read_text())
    build.stamp_path().write_text(json.dumps({**stamp, "spec": {**stamp["spec"], "recipe": "0"}}))
    assert not build.is_built()
    assert not build.prepare().cached
    assert len(calls) == 3


def test_a_failed_build_leaves_no_stamp_and_says_which_step(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(_say: build.Progress) -> tuple[dict[str, float], str]:
        build.run_step(
            ["sh", "-c", "echo 'undefined: openapi.GetOpenAPIDefinitions'; exit 2"], "build kube-apiserver"
        )
        raise AssertionError("not reached")

    monkeypatch.setattr(build, "_build", failing)
    with pytest.raises(build.BuildError) as failure:
        build.prepare()
    assert "could not build kube-apiserver (2)" in str(failure.value)
    assert "undefined: openapi.GetOpenAPIDefinitions" in str(failure.value)
    assert not build.stamp_path().exists() and not build.is_built()


def test_a_hung_step_is_ended() -> None:
    began = time.monotonic()
    with pytest.raises(build.BuildError, match=r"could not fetch \(killed after 0 s\)"):
        build.run_step(["sleep", "30"], "fetch", timeout=0.3)
    assert time.monotonic() - began < 10


def test_openapi_inputs_are_found_as_kubernetes_own_makefile_finds_them(tmp_path: Path) -> None:
    def go(path: str, text: str) -> None:
        file = tmp_path / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text)

    tagged = "// +k8s:openapi-gen=true\n\npackage v1\n"
    go("staging/src/k8s.io/api/core/v1/doc.go", tagged)
    go("pkg/apis/abac/v1beta1/doc.go", tagged)
    go("staging/src/k8s.io/code-generator/_examples/apis/doc.go", tagged)  # excluded, as upstream does
    go("staging/src/k8s.io/sample-apiserver/pkg/apis/doc.go", tagged)
    go("vendor/github.com/other/doc.go", tagged)  # third-party vendor: never an input
    go("_output/local/doc.go", tagged)
    go("pkg/untagged/doc.go", "package untagged // mentions +k8s:openapi-gen= only in prose\n")
    assert build.openapi_dirs(tmp_path) == ["pkg/apis/abac/v1beta1", "vendor/k8s.io/api/core/v1"]
