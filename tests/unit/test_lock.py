"""The version lock with several releases: its entries, each one's HDK range, what validate makes of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provision.ascend import lock
from provision.ascend.hardware import load_hardware
from provision.image import spec
from tests.helpers import GOOD_INI, load_module, run_cli, write_tree

pytestmark = pytest.mark.unit
ROOT = Path(__file__).parents[2]

KEYS = {
    "kind", "vllm", "vllm_ascend", "torch", "torch_npu", "triton_ascend", "cann", "nnal", "python", "hdk",
    "driver", "firmware", "docker_runtime", "base_images", "sources",
}  # fmt: skip


def test_the_lock_holds_the_last_three_final_releases_and_the_newest_rc_oldest_first() -> None:
    assert lock.stack_names() == ["0.13.0", "0.18.0", "0.23.0", "0.25.1rc1"]
    assert [lock.stack(n)["kind"] for n in lock.stack_names()] == ["final", "final", "final", "rc"]
    assert lock.default_stack_name() == "0.23.0"


@pytest.mark.parametrize("name", lock.stack_names())
def test_every_entry_is_complete_with_its_own_driver_inside_its_hdk_lines(name: str) -> None:
    entry = lock.stack(name)
    assert set(entry) >= KEYS, KEYS - set(entry)
    assert entry["sources"], name
    assert lock.hdk_matches(str(entry["driver"]), entry["hdk"]), (name, entry["driver"], entry["hdk"])
    # vllm-ascend's release is its vllm's, an rc suffix aside
    assert str(entry["vllm_ascend"]).startswith(str(entry["vllm"]))


@pytest.mark.parametrize("name", lock.stack_names())
def test_every_hardware_line_and_base_os_has_the_base_image_of_that_release(name: str) -> None:
    entry = lock.stack(name)
    for model in load_hardware().models.values():
        for os_variant in spec.OS_VARIANTS:
            image = lock.base_image(name, model.base_image_tag, os_variant)
            assert image.startswith("quay.io/ascend/cann:"), image
            assert f"-{model.base_image_tag}-{os_variant}-py{entry['python']}" in image, image


def test_the_310p_base_of_the_rc_is_the_one_its_dockerfile_names_not_a_formula() -> None:
    # v0.25.1rc1 builds A2/A3 on CANN 9.0.1 but 310P on 9.1.0-beta.1 (Dockerfile.310p at the tag).
    a3 = lock.base_image("0.25.1rc1", "a3", "ubuntu22.04")
    assert a3 == "quay.io/ascend/cann:9.0.1-a3-ubuntu22.04-py3.12"
    assert (
        lock.base_image("0.25.1rc1", "310p", "openeuler24.03")
        == "quay.io/ascend/cann:9.1.0-beta.1-310p-openeuler24.03-py3.12"
    )
    older = spec.Target("0.18.0", "ubuntu22.04", "a3")
    assert older.base_image == "quay.io/ascend/cann:8.5.1-a3-ubuntu22.04-py3.11"


@pytest.mark.parametrize(
    ("version", "lines", "expected"),
    [
        ("25.5.1", ["25.5.X"], True),
        ("25.5.RC1", ["25.5.X"], True),
        ("25.0.rc1.1", ["25.0.X"], True),
        ("25.0.rc1.1", ["25.2.X", "25.5.X"], False),
        ("26.0.RC1", ["26.0.RC1"], True),
        ("26.0.rc1", ["26.0.RC1"], True),
        ("26.0.1", ["26.0.RC1"], False),
        ("26.1.0", ["26.1.0"], True),
        ("26.1.1", ["26.1.0"], False),
        ("25.5", ["25.5.X"], False),  # not a release of the line, a line
        ("25.51.0", ["25.5.X"], False),
    ],
)
def test_hdk_lines_are_matched_as_the_vendor_writes_them(
    version: str, lines: list[str], expected: bool
) -> None:
    assert lock.hdk_matches(version, lines) is expected


def test_a_driver_of_another_release_of_the_stacks_hdk_lines_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    files = {"inventory.ini": GOOD_INI, "group_vars/npu_nodes.yml": "ascend_driver_version: '25.3.1'\n"}
    assert run_cli(["validate", str(write_tree(tmp_path, files))], monkeypatch) == 0, capsys.readouterr().err


def test_a_driver_outside_the_stacks_hdk_lines_is_refused_naming_the_stack_and_its_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    files = {"inventory.ini": GOOD_INI, "host_vars/node2.yml": "ascend_driver_version: '25.0.rc1.1'\n"}
    assert run_cli(["validate", str(write_tree(tmp_path, files))], monkeypatch) == 2
    err = capsys.readouterr().err
    for text in (
        "host_vars/node2.yml:1",
        "host node2",
        "ascend_driver_version = '25.0.rc1.1'",
        "stack 0.23.0 (CANN 9.1.0) works with Ascend HDK 25.2.X, 25.3.X, 25.5.X",
        "provision_allow_unlocked_versions",
    ):
        assert text in err, (text, err)
    assert "Traceback" not in err


def test_the_same_driver_is_inside_an_older_stacks_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    files = {
        "inventory.ini": GOOD_INI,
        "group_vars/all.yml": "provision_stack: '0.18.0'\n",
        "host_vars/node2.yml": "ascend_driver_version: '25.0.rc1.1'\n"
        "ascend_driver_firmware_version: '7.7.0.1.231'\n",
    }
    assert run_cli(["validate", str(write_tree(tmp_path, files))], monkeypatch) == 0, capsys.readouterr().err


def test_a_cann_of_another_stack_is_refused_naming_the_selected_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    files = {
        "inventory.ini": GOOD_INI,
        "group_vars/all.yml": "provision_stack: '0.18.0'\n",
        "group_vars/npu_nodes.yml": "cann_version: '9.1.0'\n",
    }
    assert run_cli(["validate", str(write_tree(tmp_path, files))], monkeypatch) == 2
    assert "stack 0.18.0 pins cann 8.5.1" in capsys.readouterr().err


def test_the_roles_read_the_selected_stack() -> None:
    filters = load_module("provision_filter_ascend", ROOT / "plugins/filter/ascend.py")
    assert filters.ascend_locked_version("cann", "0.18.0") == "8.5.1"
    assert filters.ascend_locked_version("torch_npu", "0.25.1rc1") == "2.10.0.post2"
    assert filters.ascend_locked_version("cann", "") == "9.1.0"


def test_version_stacks_lists_every_entry_and_marks_the_default(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(["version", "--stacks"], monkeypatch) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines()[1:] if line.strip()}
    assert list(lines) == lock.stack_names()
    assert "(default)" in lines["0.23.0"] and "(default)" not in lines["0.18.0"]
    assert "8.5.1" in lines["0.18.0"] and "2.9.0" in lines["0.18.0"]
    assert " rc " in lines["0.25.1rc1"]

    assert run_cli(["version", "--stacks", "--json"], monkeypatch) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["name"], r["default"]) for r in rows] == [(n, n == "0.23.0") for n in lock.stack_names()]
    assert rows[0]["hdk"] == ["25.0.X", "25.2.X", "25.3.X", "25.5.X"]


@pytest.mark.parametrize("given", [None, "", "{{ stack_of_the_week }}"])
def test_a_host_naming_no_stack_runs_the_locks_default(given: str | None) -> None:
    chosen = lock.host_stack({"provision_stack": given} if given is not None else {})
    assert (chosen.name, chosen.chosen, chosen.known) == ("0.23.0", False, True)
    assert chosen.expected("cann") == lock.stack("0.23.0")["cann"]
    assert chosen.expected("driver") == lock.stack("0.23.0")["driver"]


def test_a_host_naming_a_stack_runs_that_entry_with_its_pinned_versions() -> None:
    chosen = lock.host_stack({"provision_stack": "0.13.0", "cann_version": "9.1.0"})
    assert (chosen.name, chosen.chosen) == ("0.13.0", True)
    assert chosen.expected("cann") == "8.5.0"  # the lock's pin; the override is the caller's to apply
    assert list(chosen.versions["hdk"]) == ["25.0.X", "25.2.X", "25.3.X", "25.5.X"]


def test_a_stack_outside_the_lock_is_named_with_no_versions() -> None:
    chosen = lock.resolve_stack("0.99.0")
    assert (chosen.name, chosen.chosen, chosen.known) == ("0.99.0", True, False)
    assert chosen.expected("driver") is None
    with pytest.raises(TypeError):
        chosen.versions["driver"] = "1"  # type: ignore[index]


# ------------------------------------------------------------------------------ sha256 of the vendor files


@pytest.mark.parametrize(
    "name",
    sorted(lock.sha256_pins())
    or [pytest.param("", marks=pytest.mark.skip(reason="the lock pins no vendor file yet (no public sums)"))],
)
def test_every_sha256_pin_of_the_lock_is_well_formed_and_names_a_vendor_file(name: str) -> None:
    """What the lock ships: each pin a vendor .run file's name (a typo in a name would pin nothing), its
    value 64 lower-case hex digits, its source in a comment above it."""
    sha = lock.sha256_pins()[name]
    assert lock.SHA256.match(sha), (name, sha)
    assert name.endswith(".run") and name.startswith(("Ascend-", "Atlas-A3-")), name
    text = (ROOT / "provision/data/versions.yml").read_text()
    before = text[: text.index(f'"{name}"')].rstrip().splitlines()[-1]
    assert before.lstrip().startswith("#"), f"{name}: no source comment above its pin"


def bad_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: str) -> None:
    """The shipped lock with ``table`` as its sha256 section, read afresh (the caller clears the cache)."""
    data = tmp_path / "data"
    data.mkdir()
    shipped = (ROOT / "provision/data/versions.yml").read_text()
    assert "\nsha256: {}\n" in shipped
    (data / "versions.yml").write_text(shipped.replace("\nsha256: {}\n", f"\nsha256:\n{table}"))
    monkeypatch.setattr(lock, "data_dir", lambda: data)
    lock.load_lock.cache_clear()


@pytest.mark.parametrize(
    ("table", "said"),
    [
        (
            '  "Ascend-hdk-910b-npu-driver_25.5.1_linux-aarch64.run": "abc"\n',
            "versions.yml: sha256.Ascend-hdk-910b-npu-driver_25.5.1_linux-aarch64.run = 'abc': must be 64 "
            "lower-case hex digits (sha256sum's first column)",
        ),
        (
            f'  "ascend/Ascend-cann-toolkit_9.1.0_linux-aarch64.run": "{"a" * 64}"\n',
            "versions.yml: sha256: 'ascend/Ascend-cann-toolkit_9.1.0_linux-aarch64.run': not a file name",
        ),
        (
            f'  "Ascend-cann-toolkit_9.1.0_linux-aarch64.run": "{"A" * 64}"\n',
            "must be 64 lower-case hex digits",
        ),
    ],
    ids=["short", "folder", "upper-case"],
)
def test_validate_refuses_a_malformed_pin_of_the_lock(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    table: str,
    said: str,
) -> None:
    bad_lock(tmp_path, monkeypatch, table)
    try:
        inventory = write_tree(tmp_path / "site", {"inventory.ini": GOOD_INI})
        assert run_cli(["validate", str(inventory)], monkeypatch) == 2
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err
    finally:
        lock.load_lock.cache_clear()


def test_a_pin_in_the_inventory_wins_over_the_lock_and_the_lock_over_the_mirror(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = "Ascend-hdk-910b-npu-driver_25.5.1_linux-aarch64.run"
    vendor, site = "a" * 64, "b" * 64
    monkeypatch.setattr(lock, "sha256_pins", lambda: {name: vendor})
    assert lock.file_pin(name) == lock.Pin(vendor, lock.LOCK_SOURCE)
    assert lock.file_pin(name, {name: site.upper()}, "ascend_driver_checksums") == lock.Pin(
        site, "ascend_driver_checksums"
    )
    assert lock.file_pin("Ascend-cann-nnal_9.1.0_linux-aarch64.run") == lock.Pin(None, "")
