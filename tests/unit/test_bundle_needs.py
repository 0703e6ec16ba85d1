"""What an inventory's nodes need from the bundle (``provision.bundle.needs.plan``), decided from the
inventory and the version lock alone: per OS flavour and arch, NPU line, stack, monitoring, serving pools."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.ascend import lock
from provision.bundle import needs
from provision.errors import InputError
from provision.inventory.validate import check
from tests.helpers import API_KEY_VARS, write_tree

pytestmark = pytest.mark.unit

LOCKED = lock.default_stack()
SHA = "ab" * 32


def facts(os_id: str, version: str, arch: str = "aarch64") -> str:
    return f"bootstrap_facts:\n  arch: {arch}\n  os: {{id: {os_id}, version: '{version}'}}\n"


def plan_of(
    tmp_path: Path, files: dict[str, str], os_names: dict[str, str] | None = None, arch: str | None = None
) -> needs.Plan:
    return needs.plan(check(write_tree(tmp_path, files)), os_names=os_names, arch=arch)


def paths(node: needs.NodeNeeds, kind: str) -> list[str]:
    return [need.path for need in node.needs if need.kind == kind]


def test_a_node_whose_line_is_its_pci_bus_needs_one_driver_firmware_and_ops_of_any_line(
    tmp_path: Path,
) -> None:
    """The roles read the NPU line from the node's PCI bus, which no bundle build sees: each line's vendor
    file is one of a group, of which the node needs one; the toolkit, NNAL and runtime are the same file."""
    plan = plan_of(
        tmp_path,
        {"inventory.ini": "[npu_nodes]\nnode1\n", "host_vars/node1.yml": facts("openEuler", "22.03")},
    )
    (node,) = plan.nodes
    d, f, c = LOCKED["driver"], LOCKED["firmware"], LOCKED["cann"]
    groups: dict[str, list[str]] = {}
    for need in node.needs:
        if need.kind == "run-file":
            groups.setdefault(need.one_of or need.path, []).append(need.path.removeprefix("ascend/"))
    assert groups == {
        f"NPU driver {d} (aarch64)": [
            f"Ascend-hdk-910b-npu-driver_{d}_linux-aarch64.run",
            f"Atlas-A3-hdk-npu-driver_{d}_linux-aarch64.run",
            f"Ascend-hdk-310p-npu-driver_{d}_linux-aarch64.run",
        ],
        f"NPU firmware {f} (aarch64)": [
            f"Ascend-hdk-910b-npu-firmware_{f}.run",
            f"Atlas-A3-hdk-npu-firmware_{f}.run",
            f"Ascend-hdk-310p-npu-firmware_{f}.run",
        ],
        f"ascend/Ascend-cann-toolkit_{c}_linux-aarch64.run": [f"Ascend-cann-toolkit_{c}_linux-aarch64.run"],
        f"CANN ops {c} (aarch64)": [
            f"Ascend-cann-910b-ops_{c}_linux-aarch64.run",
            f"Ascend-cann-A3-ops_{c}_linux-aarch64.run",
            f"Ascend-cann-310p-ops_{c}_linux-aarch64.run",
        ],
        f"ascend/Ascend-cann-nnal_{LOCKED['nnal']}_linux-aarch64.run": [
            f"Ascend-cann-nnal_{LOCKED['nnal']}_linux-aarch64.run"
        ],
        f"ascend/Ascend-docker-runtime_{LOCKED['docker_runtime']}_linux-aarch64.run": [
            f"Ascend-docker-runtime_{LOCKED['docker_runtime']}_linux-aarch64.run"
        ],
    }
    # a bundle with one line's files is complete for the node
    one_line = [
        f"{n.path.replace('*', 'SP4')}/{n.marker}" if n.kind == "os-repo" else n.path
        for n in node.needs
        if n.kind != "run-file" or "910b" in n.path or not n.one_of
    ]
    assert needs.missing(plan, one_line) == {}
    without_ops = [p for p in one_line if "-ops_" not in p]
    assert [n.path for n in needs.missing(plan, without_ops)["node1"]] == [
        f"ascend/Ascend-cann-{line}-ops_{c}_linux-aarch64.run" for line in ("910b", "A3", "310p")
    ]


def test_openeuler_a2_node_needs_the_repos_and_the_locked_run_files(tmp_path: Path) -> None:
    plan = plan_of(
        tmp_path,
        {
            "inventory.ini": "[npu_nodes]\nnode1\n",
            "host_vars/node1.yml": facts("openEuler", "22.03")
            + "ascend_driver_chip: 910b\ncann_chip: 910b\n",
        },
    )
    (node,) = plan.nodes
    assert (node.host, node.os, node.arch, node.stack) == ("node1", "openeuler-22.03", "aarch64", "0.23.0")
    assert paths(node, "os-repo") == [
        f"openeuler/openEuler-22.03-*/{section}/aarch64"
        for section in ("OS", "everything", "update", "EPOL/main")
    ]
    d, f, c = LOCKED["driver"], LOCKED["firmware"], LOCKED["cann"]
    assert paths(node, "run-file") == [
        f"ascend/Ascend-hdk-910b-npu-driver_{d}_linux-aarch64.run",
        f"ascend/Ascend-hdk-910b-npu-firmware_{f}.run",
        f"ascend/Ascend-cann-toolkit_{c}_linux-aarch64.run",
        f"ascend/Ascend-cann-910b-ops_{c}_linux-aarch64.run",
        f"ascend/Ascend-cann-nnal_{LOCKED['nnal']}_linux-aarch64.run",
        f"ascend/Ascend-docker-runtime_{LOCKED['docker_runtime']}_linux-aarch64.run",
    ]
    assert paths(node, "image") == [] and paths(node, "exporter") == [] and paths(node, "weights") == []


def test_ubuntu_x86_node_with_monitoring_needs_apt_suites_and_the_exporter(tmp_path: Path) -> None:
    plan = plan_of(
        tmp_path,
        {
            "inventory.ini": "[npu_nodes]\nnode1\n",
            "host_vars/node1.yml": facts("ubuntu", "22.04", "x86_64")
            + "monitoring_enabled: true\nmonitoring_npu_exporter_checksum: "
            + SHA
            + "\n",
        },
    )
    (node,) = plan.nodes
    assert paths(node, "os-repo") == [
        "ubuntu/dists/jammy",
        "ubuntu/dists/jammy-updates",
        "ubuntu/dists/jammy-security",
    ]
    assert {need.deb_arch for need in node.needs if need.kind == "os-repo"} == {"amd64"}
    (exporter,) = [need for need in node.needs if need.kind == "exporter"]
    assert (exporter.path, exporter.sha256) == ("ascend/npu-exporter", SHA)
    assert all(p.endswith(("x86_64.run", ".run")) for p in paths(node, "run-file"))
    assert f"ascend/Ascend-cann-toolkit_{LOCKED['cann']}_linux-x86_64.run" in paths(node, "run-file")


def test_a3_line_unlocked_versions_and_pinned_checksums(tmp_path: Path) -> None:
    name = "Atlas-A3-hdk-npu-driver_25.0.rc1.3_linux-aarch64.run"
    plan = plan_of(
        tmp_path,
        {
            "inventory.ini": "[npu_nodes]\nnode1\n",
            "host_vars/node1.yml": facts("openEuler", "24.03")
            + "provision_allow_unlocked_versions: true\nascend_driver_version: 25.0.rc1.3\n"
            + "ascend_driver_chip: a3\ncann_install_nnal: false\n"
            + f"ascend_driver_checksums: {{'{name}': '{SHA}'}}\n",
        },
    )
    (node,) = plan.nodes
    run_files = {need.path: need for need in node.needs if need.kind == "run-file"}
    assert run_files[f"ascend/{name}"].sha256 == SHA
    assert run_files[f"ascend/{name}"].pinned_in == "ascend_driver_checksums"
    assert not any("nnal" in path for path in run_files)
    assert paths(node, "os-repo")[0] == "openeuler/openEuler-24.03-*/OS/aarch64"


def test_serving_pools_need_the_image_the_check_image_and_the_weights(tmp_path: Path) -> None:
    plan = plan_of(
        tmp_path,
        {
            "inventory.ini": "[npu_nodes]\nnode1\nnode2\n",
            "group_vars/npu_nodes.yml": facts("openEuler", "22.03")
            + API_KEY_VARS
            + "vllm_serve_image: registry.lan/vllm-ascend:test\n"
            + "container_runtime_verify_image: busybox:1\n"
            + "npu_pools_list: [{name: chat, devices: [0], port: 8000, profile: small}]\n"
            + "vllm_serve_profiles:\n  small: {model: /data/models/small, "
            + f"model_url: 'http://m.lan/models/small.tar', model_sha256: '{SHA}'}}\n",
        },
    )
    assert [node.host for node in plan.nodes] == ["node1", "node2"]
    node = plan.nodes[0]
    assert paths(node, "image") == ["images/vllm-ascend_test.tar", "images/busybox_1.tar"]
    # Which variable names each image: bundle serve prints its *_url for it.
    assert [need.variables for need in node.needs if need.kind == "image"] == [
        ("vllm_serve_image",),
        ("container_runtime_verify_image",),
    ]
    (weights,) = [need for need in node.needs if need.kind == "weights"]
    assert (weights.path, weights.sha256) == ("models/small.tar", SHA)
    # Two nodes need the same files: gathered once.
    assert len(plan.unique()) == len(node.needs)


def test_the_default_serving_image_is_the_locked_tag(tmp_path: Path) -> None:
    plan = plan_of(
        tmp_path,
        {
            "inventory.ini": "[npu_nodes]\nnode1\n",
            "host_vars/node1.yml": facts("openEuler", "22.03")
            + "npu_pools_list: [{name: chat, devices: [0, 1, 2, 3, 4, 5, 6, 7], port: 8000, "
            + "profile: chat-32b-tp8}]\n"
            + API_KEY_VARS,
        },
    )
    (image,) = paths(plan.nodes[0], "image")
    assert image == f"images/vllm-ascend_0.23.0-cann{LOCKED['cann']}-openeuler24.03-arm64.tar"
    # container_runtime_verify_image defaults to the serving image: one file for both
    (need,) = [need for need in plan.nodes[0].needs if need.kind == "image"]
    assert need.variables == ("vllm_serve_image", "container_runtime_verify_image")


def test_os_and_arch_options_fill_what_the_inventory_does_not_say(tmp_path: Path) -> None:
    files = {"inventory.ini": "[npu_nodes]\nnode1\nnode2\n"}
    plan = plan_of(tmp_path, files, os_names={"node2": "ubuntu-22.04", "": "openeuler-22.03"}, arch="x86_64")
    assert [(n.host, n.os, n.arch) for n in plan.nodes] == [
        ("node1", "openeuler-22.03", "x86_64"),
        ("node2", "ubuntu-22.04", "x86_64"),
    ]


def test_a_node_of_unknown_os_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(InputError) as refused:
        plan_of(
            tmp_path,
            {"inventory.ini": "[npu_nodes]\nnode1\nnode2\n", "host_vars/node2.yml": facts("centos", "9")},
            os_names={"ghost": "ubuntu-22.04"},
        )
    text = str(refused.value)
    assert refused.value.exit_code == 2
    assert "node1: its OS is not in the inventory (no bootstrap_facts.os): give --os" in text
    assert "node2: OS centos-9 is not supported" in text
    assert "--os ghost=ubuntu-22.04: ghost is not a host of group npu_nodes" in text


@pytest.mark.parametrize(
    ("rel", "wanted"),
    [
        ("Release", True),
        ("InRelease", True),
        ("main/binary-arm64/Packages.gz", True),
        ("main/binary-all/Packages", True),
        ("main/i18n/Translation-en.bz2", True),
        ("main/dep11/Components-arm64.yml.gz", True),
        ("main/binary-amd64/Packages.gz", False),
        ("Contents-amd64.gz", False),
        ("main/Contents-udeb-amd64.gz", False),
        ("main/dep11/Components-amd64.yml.gz", False),
    ],
)
def test_an_apt_suite_keeps_all_but_other_architectures_indexes(rel: str, wanted: bool) -> None:
    assert needs.apt_file_wanted(rel, "arm64") is wanted
