"""The rig's Kubernetes node, in the parts that need no node: what it writes for the kubelet."""

from __future__ import annotations

import json

import pytest

from provision_sim.k8s import node

pytestmark = pytest.mark.unit


def test_each_node_number_gets_its_own_pod_subnet() -> None:
    subnets = [
        json.dumps(node._cni_config(str(s))) for s in list(node.POD_NETWORK.subnets(new_prefix=24))[1:3]
    ]
    assert '"10.244.1.0/24"' in subnets[0] and '"10.244.2.0/24"' in subnets[1]
    plugins = [p["type"] for p in node._cni_config("10.244.1.0/24")["plugins"]]
    assert plugins == ["bridge", "portmap"]


def test_kernel_flags_are_shown_only_where_they_differ() -> None:
    script = node._kernel_flags_script()
    for key, value in node.KERNEL_FLAGS.items():
        assert f'if [ "$(cat /proc/sys/{key})" != {value} ]; then' in script
        assert f"mount --bind /run/provision-rig/kernel/{key.replace('/', '.')} /proc/sys/{key}" in script
    assert script.startswith("#!/bin/sh\n") and "set -eu" in script


def test_kubelet_unit_runs_against_containerd_with_the_node_address() -> None:
    unit = node._kubelet_unit("node3", "10.200.4.13")
    start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    flags = start.split()[1:]
    assert "--container-runtime-endpoint=unix:///run/containerd/containerd.sock" in flags
    assert "--node-ip=10.200.4.13" in flags and "--hostname-override=node3" in flags
    assert f"ExecStartPre={node.KERNEL_FLAGS_SCRIPT}" in unit
    assert "Requires=containerd.service" in unit


def test_containerd_keeps_debians_cni_folders_and_names_the_pause_image() -> None:
    config = node.CONTAINERD_CONFIG
    assert f'sandbox_image = "{node.PAUSE_IMAGE}"' in config
    assert 'bin_dir = "/usr/lib/cni"' in config and "restrict_oom_score_adj = true" in config


def test_kube_proxy_unit_leaves_the_shared_kernels_conntrack_alone() -> None:
    unit = node._kube_proxy_unit("node3", "10.200.4.13")
    start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    flags = start.split()[1:]
    assert start.split()[0] == f"ExecStart={node.KUBE_PROXY}"
    assert "--proxy-mode=iptables" in flags and f"--cluster-cidr={node.POD_NETWORK}" in flags
    assert "--hostname-override=node3" in flags and "--bind-address=10.200.4.13" in flags
    # Every node shares the host's kernel: kube-proxy must not resize its conntrack table for all of them.
    assert {"--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0"} <= set(flags)
    # Its metrics and health ports answer on the node's loopback only, as kubeadm's defaults do.
    assert {"--metrics-bind-address=127.0.0.1:10249", "--healthz-bind-address=127.0.0.1:10256"} <= set(flags)
