"""Prometheus node_exporter on the simulated cluster's mirror, under each distribution's own package and unit.

The monitoring role installs "the distribution's node_exporter" (``monitoring_node_exporter``) from the node's
configured repositories, so the mirror carries it for both flavours, named as the real repositories name it:

- **Ubuntu 22.04**: ``prometheus-node-exporter`` (jammy, universe, 1.3.1-1ubuntu0.22.04.x;
  packages.ubuntu.com/jammy/prometheus-node-exporter), the Debian package: binary
  ``/usr/bin/prometheus-node-exporter``, unit ``prometheus-node-exporter.service`` (``User=prometheus``,
  ``ExecStart=/usr/bin/prometheus-node-exporter $ARGS``, ``ARGS`` from
  ``/etc/default/prometheus-node-exporter``), enabled and started by its postinst. The mirror carries
  Debian bookworm's deb as it is (the nodes are bookworm underneath): its dependencies (``adduser``,
  ``libc6``, ``init-system-helpers``) are all in the node base (openssh-server depends on adduser).
- **openEuler**: src-openeuler/node_exporter (mirrored at github.com/openeuler-mirror/node_exporter,
  ``golang-github-prometheus-node_exporter.spec``, branches ``openEuler-22.03-LTS`` on) builds the rpm
  ``golang-github-prometheus-node_exporter`` (``Provides: node_exporter``) with binary
  ``/usr/sbin/node_exporter``, unit ``node_exporter.service`` (``User=node_exporter``,
  ``EnvironmentFile=/etc/sysconfig/node_exporter``, ``ExecStart=/usr/sbin/node_exporter $OPTIONS``,
  ``Restart=always``) and a ``%pre`` that creates the ``node_exporter`` user and
  ``/var/lib/node_exporter/textfile_collector``; its ``%post`` is ``%systemd_post``, which only applies the
  preset, so nothing starts it. openEuler's own PilotGo-plugin-prometheus installs it by that name (``yum
  install -y golang-github-prometheus-node_exporter``, then ``systemctl start node_exporter``). The mirror's
  rpm has that layout and those scripts with **Debian's node_exporter binary** inside (the same upstream
  program, built by Debian; the nodes run bookworm's glibc binaries), repacked like the mirror's other rpms.

Both listen on node_exporter's default ``--web.listen-address=:9100``; neither package changes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from provision_sim.mirror.repos import Package

DEB = "prometheus-node-exporter"
"""Debian's and Ubuntu's package (and its systemd unit's name)."""
DEB_BINARY = "/usr/bin/prometheus-node-exporter"
RPM = "golang-github-prometheus-node_exporter"
"""openEuler's binary rpm, from src-openeuler/node_exporter."""
RPM_UNIT = "node_exporter.service"
RPM_BINARY = "/usr/sbin/node_exporter"
TEXTFILE_DIR = "/var/lib/node_exporter/textfile_collector"

# openEuler's node_exporter.service and sysconfig.node_exporter (src-openeuler/node_exporter), as installed.
RPM_UNIT_TEXT = f"""[Unit]
Description=Node Exporter

[Service]
User=node_exporter
EnvironmentFile=/etc/sysconfig/node_exporter
ExecStart={RPM_BINARY} $OPTIONS
Restart=always

[Install]
WantedBy=multi-user.target
"""
RPM_SYSCONFIG = f'OPTIONS="--collector.textfile.directory {TEXTFILE_DIR}"\n'
# The spec's %pre (a %post here: the mirror's rpms have one scriptlet); no %systemd_post preset, so, as on
# openEuler, installing does not start the service: the monitoring role enables and starts it.
RPM_POST = f"""\
getent group node_exporter >/dev/null || groupadd -r node_exporter
getent passwd node_exporter >/dev/null || \\
    useradd -rg node_exporter -d /var/lib/node_exporter -s /sbin/nologin \\
            -c "Prometheus node exporter" node_exporter
mkdir -p {TEXTFILE_DIR}
chgrp node_exporter {TEXTFILE_DIR}
chmod 771 {TEXTFILE_DIR}
systemctl daemon-reload >/dev/null 2>&1 || :
"""


def rpm_package(deb_version: str) -> Package:
    """openEuler's ``golang-github-prometheus-node_exporter`` around Debian's binary of ``deb_version``
    (``1.5.0-1+b6`` -> rpm version ``1.5.0``, the upstream release)."""
    from provision_sim.mirror.repos import Package  # repos imports this module

    version = deb_version.split(":")[-1].split("-")[0].split("+")[0]
    return Package(
        "Exporter for machine metrics (openEuler's layout, Debian's node_exporter binary)",
        version,
        files={
            f"/usr/lib/systemd/system/{RPM_UNIT}": (RPM_UNIT_TEXT, 0o644),
            "/etc/sysconfig/node_exporter": (RPM_SYSCONFIG, 0o644),
        },
        debs=(DEB,),
        deb_files={RPM_BINARY: DEB_BINARY},
        provides=("node_exporter", f"node_exporter = {version}"),
        # Which section of a release lists it was not checked here; the repos role enables all four.
        sections=("everything", "EPOL/main"),
        post=RPM_POST,
    )
