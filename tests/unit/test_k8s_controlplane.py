"""The test control plane's failed starts (provision_sim.k8s.controlplane): clear, and nothing left running.

Real etcd (Debian's), stand-ins for the Kubernetes binaries: an apiserver that exits at once must fail the
start with its own words, and the etcd started before it must be stopped.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

from provision_sim.k8s import build
from provision_sim.k8s.controlplane import ControlPlane, ControlPlaneError

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd not installed (.ci/apt-packages.txt)"),
]


@pytest.fixture
def broken_apiserver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path / "cache"))

    def stand_ins(_say: build.Progress) -> tuple[dict[str, float], str]:
        (build.build_dir() / "bin").mkdir()
        for name in build.COMPONENTS:
            build.binary(name).write_text("#!/bin/sh\necho 'Error: unknown flag: --made-up' >&2\nexit 1\n")
            build.binary(name).chmod(0o755)
        return {}, "test"

    monkeypatch.setattr(build, "_build", stand_ins)
    build.prepare()
    return tmp_path / "plane"


def test_a_component_that_exits_fails_the_start_and_nothing_is_left(broken_apiserver: Path) -> None:
    with pytest.raises(ControlPlaneError) as failure:
        ControlPlane.start(broken_apiserver, timeout=60)
    message = str(failure.value)
    assert message.startswith("kube-apiserver exited with 1 while starting")
    assert "Error: unknown flag: --made-up" in message
    assert str(broken_apiserver / "kube-apiserver.log") in message
    assert (broken_apiserver / "etcd").is_dir(), "etcd never started"
    assert not _etcd_pids(broken_apiserver / "etcd"), "the etcd started for it is still running"
    # What it wrote for its users: a kubeconfig naming the server and the CA, private to its owner.
    kubeconfig = broken_apiserver / "kubeconfig"
    assert oct(kubeconfig.stat().st_mode & 0o777) == "0o600"
    cluster = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]
    assert cluster["server"].startswith("https://127.0.0.1:")
    assert cluster["certificate-authority"] == str(broken_apiserver / "pki" / "ca.crt")
    assert oct((broken_apiserver / "pki" / "ca.key").stat().st_mode & 0o777) == "0o600"


def _etcd_pids(data_dir: Path) -> set[int]:
    pids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and os.path.basename(argv[0]) == b"etcd" and f"--data-dir={data_dir}".encode() in argv:
                pids.add(int(entry.name))
    return pids


def test_the_serving_certificate_names_the_address_the_apiserver_listens_on(tmp_path: Path) -> None:
    from cryptography import x509

    from provision_sim.k8s.controlplane import _write_pki

    pki = _write_pki(tmp_path / "pki", "10.200.7.254")
    cert = x509.load_pem_x509_certificate((pki / "apiserver.crt").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    addresses = {str(a) for a in names.get_values_for_type(x509.IPAddress)}
    assert {"127.0.0.1", "10.200.7.254", "10.0.0.1"} == addresses
