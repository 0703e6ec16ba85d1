"""The engine's build and push streams (verbatim events of dockerd 20.10), and registry credentials."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from provision.errors import InputError
from provision.image import registry
from provision.image.build import BuildStream, check_labels
from provision.image.spec import default_target

pytestmark = pytest.mark.unit

# Recorded from dockerd 20.10.24 (Debian docker.io) through the docker SDK, decode=True.
BUILD_COLD: list[dict[str, Any]] = [
    {"stream": "Step 1/4 : FROM provision-test/debian-python:bookworm"},
    {"stream": "\n"},
    {"stream": " ---> 10e37b48c8c8\n"},
    {"stream": "Step 2/4 : ARG X=1"},
    {"stream": "\n"},
    {"stream": " ---> Running in a709de965b6e\n"},
    {"stream": "Removing intermediate container a709de965b6e\n"},
    {"stream": " ---> fd17561afd3f\n"},
    {"stream": "Step 3/4 : RUN echo hello $X"},
    {"stream": "\n"},
    {"stream": " ---> Running in 6b16c0f6cf01\n"},
    {"stream": "hello 1\n"},
    {"stream": "Removing intermediate container 6b16c0f6cf01\n"},
    {"stream": " ---> 000c61ff65fc\n"},
    {"stream": "Step 4/4 : LABEL a=b"},
    {"stream": "\n"},
    {"stream": " ---> Running in dbce72a0249b\n"},
    {"stream": "Removing intermediate container dbce72a0249b\n"},
    {"stream": " ---> 583fa043916e\n"},
    {"aux": {"ID": "sha256:583fa043916ef4285e6db31cd3d8d7e5adeb276f147a64b16c20ae11691b455d"}},
    {"stream": "Successfully built 583fa043916e\n"},
    {"stream": "Successfully tagged cap:1\n"},
]
BUILD_CACHED: list[dict[str, Any]] = [
    {"stream": "Step 1/4 : FROM provision-test/debian-python:bookworm"},
    {"stream": "\n"},
    {"stream": " ---> 10e37b48c8c8\n"},
    {"stream": "Step 2/4 : ARG X=1"},
    {"stream": "\n"},
    {"stream": " ---> Using cache\n"},
    {"stream": " ---> fd17561afd3f\n"},
    {"stream": "Step 3/4 : RUN echo hello $X"},
    {"stream": "\n"},
    {"stream": " ---> Using cache\n"},
    {"stream": " ---> 000c61ff65fc\n"},
    {"stream": "Step 4/4 : LABEL a=b"},
    {"stream": "\n"},
    {"stream": " ---> Using cache\n"},
    {"stream": " ---> 583fa043916e\n"},
    {"aux": {"ID": "sha256:583fa043916ef4285e6db31cd3d8d7e5adeb276f147a64b16c20ae11691b455d"}},
    {"stream": "Successfully built 583fa043916e\n"},
    {"stream": "Successfully tagged cap:1\n"},
]
BUILD_ERROR: list[dict[str, Any]] = [
    {"stream": "Step 1/2 : FROM provision-test/debian-python:bookworm"},
    {"stream": "\n"},
    {"stream": " ---> 10e37b48c8c8\n"},
    {"stream": "Step 2/2 : RUN echo failing; exit 3"},
    {"stream": "\n"},
    {"stream": " ---> Running in d202694b6355\n"},
    {"stream": "failing\n"},
    {
        "errorDetail": {
            "code": 3,
            "message": "The command '/bin/sh -c echo failing; exit 3' returned a non-zero code: 3",
        },
        "error": "The command '/bin/sh -c echo failing; exit 3' returned a non-zero code: 3",
    },
]
PUSH_OK: list[dict[str, Any]] = [
    {"status": "The push refers to repository [127.0.0.1:46263/cap]"},
    {"status": "Preparing", "progressDetail": {}, "id": "7de035a25cf1"},
    {
        "status": "Pushing",
        "progressDetail": {"current": 554496, "total": 188512682},
        "progress": "[>                                                  ]  554.5kB/188.5MB",
        "id": "7de035a25cf1",
    },
    {
        "status": "Pushing",
        "progressDetail": {"current": 1607168, "total": 188512682},
        "progress": "[>                                                  ]  1.607MB/188.5MB",
        "id": "7de035a25cf1",
    },
    {"status": "Pushed", "progressDetail": {}, "id": "7de035a25cf1"},
    {
        "status": "1: digest: sha256:7eb05d72d218af99f84d4ac75ae3ceaa9b1e55403002ed2ae097a7e4378073e6 "
        "size: 529"
    },
    {
        "progressDetail": {},
        "aux": {
            "Tag": "1",
            "Digest": "sha256:7eb05d72d218af99f84d4ac75ae3ceaa9b1e55403002ed2ae097a7e4378073e6",
            "Size": 529,
        },
    },
]
PUSH_DENIED: list[dict[str, Any]] = [
    {"status": "The push refers to repository [127.0.0.1:46263/cap]"},
    {"status": "Preparing", "progressDetail": {}, "id": "7de035a25cf1"},
    {"errorDetail": {"message": "no basic auth credentials"}, "error": "no basic auth credentials"},
]


def _fold(chunks: list[dict[str, Any]]) -> tuple[BuildStream, list[str]]:
    state = BuildStream()
    kinds = [event.kind for chunk in chunks for event in state.feed(chunk)]
    return state, kinds


def test_cold_build_stream() -> None:
    state, kinds = _fold(BUILD_COLD)
    assert (state.step, state.total, state.cached, state.rebuilt) == (4, 4, 0, 3)
    assert state.image_id == "sha256:583fa043916ef4285e6db31cd3d8d7e5adeb276f147a64b16c20ae11691b455d"
    assert kinds.count("step") == 4
    assert "hello 1" in state.lines
    assert not state.error


def test_cached_build_stream_counts_cache_hits() -> None:
    state, kinds = _fold(BUILD_CACHED)
    assert (state.cached, state.rebuilt) == (3, 0)
    assert kinds.count("cached") == 3
    assert state.image_id.startswith("sha256:583fa043")


def test_failed_build_stream_keeps_the_error_and_output() -> None:
    state, kinds = _fold(BUILD_ERROR)
    assert kinds[-1] == "error"
    assert state.error.endswith("returned a non-zero code: 3")
    assert (state.step, state.total) == (2, 2)
    assert not state.image_id
    assert "failing" in state.tail()


def test_podman_step_lines() -> None:
    state = BuildStream()
    events = state.feed({"stream": "STEP 2/9: RUN true\n--> Using cache 4a2b\n"})
    assert [e.kind for e in events] == ["step", "cached"]
    assert (state.step, state.total) == (2, 9)
    state.feed({"stream": "STEP 3/9: COPY a /a\n--> 5b3c4d5e6f7a\n"})
    assert (state.cached, state.rebuilt) == (1, 1)


def test_push_progress_is_one_line_per_layer_state() -> None:
    layers = registry.LayerProgress()
    lines = [line for event in PUSH_OK if (line := layers.feed(event))]
    assert lines == ["7de035a25cf1: Preparing", "7de035a25cf1: Pushed"]
    assert registry.stream_error(PUSH_DENIED[-1]) == "no basic auth credentials"
    assert all(registry.stream_error(event) is None for event in PUSH_OK)


def test_push_result_by_digest() -> None:
    result = registry.PushResult("127.0.0.1:5000/team/vllm-ascend:0.23.0-x", "sha256:abc", 1)
    assert result.by_digest == "127.0.0.1:5000/team/vllm-ascend@sha256:abc"


def test_check_labels() -> None:
    target = default_target()
    assert check_labels(target.labels(), target) == []
    labels = {**target.labels(), "provision.stack.cann": "8.3.RC2"}
    assert check_labels(labels, target) == ["provision.stack.cann: '8.3.RC2' (lock: '9.1.0')"]


# ----------------------------------------------------------------------------------------- credentials

SECRET = "pl4nted-S3cret!"


def test_credentials_never_show_the_password() -> None:
    creds = registry.Credentials("ci", SECRET)
    assert SECRET not in repr(creds)
    assert SECRET not in str(creds)
    assert creds.auth_config() == {"username": "ci", "password": SECRET}


def test_redactor() -> None:
    redact = registry.Redactor([SECRET, ""])
    assert redact(f"error: login {SECRET} refused; {SECRET}") == "error: login ****** refused; ******"
    redact.add("xy")  # too short to mask meaningfully: ignored, never masks every 'xy'
    assert redact("xyz") == "xyz"


def test_credentials_from_env(tmp_path: Path) -> None:
    assert registry.credentials_from_env({}) is None
    creds = registry.credentials_from_env(
        {"PROVISION_REGISTRY_USER": "ci", "PROVISION_REGISTRY_PASSWORD": SECRET}
    )
    assert creds is not None and creds.password == SECRET
    secret_file = tmp_path / "pw"
    secret_file.write_text(SECRET + "\n")
    from_file = registry.credentials_from_env(
        {"PROVISION_REGISTRY_USER": "ci", "PROVISION_REGISTRY_PASSWORD_FILE": str(secret_file)}
    )
    assert from_file is not None and from_file.password == SECRET
    with pytest.raises(InputError, match="PROVISION_REGISTRY_PASSWORD"):
        registry.credentials_from_env({"PROVISION_REGISTRY_USER": "ci"})


def _vault_encrypt(plaintext: str, password: str) -> bytes:
    from ansible.parsing.vault import VaultLib, VaultSecret

    vault = VaultLib([("default", VaultSecret(password.encode()))])
    encrypted: bytes = vault.encrypt(plaintext.encode())
    return encrypted


def test_credentials_from_an_ansible_vault_file(tmp_path: Path) -> None:
    password_file = tmp_path / "vault-pass"
    password_file.write_text("vault-pw\n")
    vault_file = tmp_path / "registry.yml"
    vault_file.write_bytes(_vault_encrypt(f"registry_user: ci\nregistry_password: '{SECRET}'\n", "vault-pw"))
    assert SECRET.encode() not in vault_file.read_bytes()
    creds = registry.credentials_from_vault(vault_file, password_file)
    assert (creds.username, creds.password) == ("ci", SECRET)
    assert creds.source == f"vault {vault_file}"
    wrong = tmp_path / "wrong-pass"
    wrong.write_text("nope\n")
    with pytest.raises(InputError, match="cannot decrypt") as excinfo:
        registry.credentials_from_vault(vault_file, wrong)
    assert SECRET not in str(excinfo.value)
    with pytest.raises(InputError, match="vault-password-file"):
        registry.credentials_from_vault(vault_file, None)
