#!/bin/sh
# Build step of the vllm-ascend image: install the runtime OS packages the base image lacks.
#
# apt (Ubuntu bases) installs $APT_PACKAGES, yum/dnf (openEuler bases) $RPM_PACKAGES; packages already in
# the base are left alone, so a base that carries them needs no package repository at all. For air-gapped
# builds, APT_SOURCE (one sources.list line, e.g. "deb [trusted=yes] http://mirror.lan/ubuntu jammy main")
# or YUM_BASEURL (a repository URL) replace the distribution's repositories for this step only.
set -eu

missing=""
if command -v apt-get >/dev/null 2>&1; then
    for p in ${APT_PACKAGES:-}; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
            missing="$missing $p"
        fi
    done
    if [ -z "$missing" ]; then
        echo "install-os-packages: already present: ${APT_PACKAGES:-}"
        exit 0
    fi
    if [ -n "${APT_SOURCE:-}" ]; then
        mkdir -p /tmp/provision-apt/parts.d
        echo "$APT_SOURCE" >/tmp/provision-apt/sources.list
        {
            echo 'Dir::Etc::SourceList "/tmp/provision-apt/sources.list";'
            echo 'Dir::Etc::SourceParts "/tmp/provision-apt/parts.d";'
        } >/tmp/provision-apt/apt.conf
        APT_CONFIG=/tmp/provision-apt/apt.conf
        export APT_CONFIG
    fi
    echo "install-os-packages: apt-get install$missing"
    apt-get update
    # shellcheck disable=SC2086  # a list of package names
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing
    rm -rf /var/lib/apt/lists/* /tmp/provision-apt
elif command -v rpm >/dev/null 2>&1; then
    for p in ${RPM_PACKAGES:-}; do
        rpm -q "$p" >/dev/null 2>&1 || missing="$missing $p"
    done
    if [ -z "$missing" ]; then
        echo "install-os-packages: already present: ${RPM_PACKAGES:-}"
        exit 0
    fi
    yum=yum
    command -v dnf >/dev/null 2>&1 && yum=dnf
    repo=""
    if [ -n "${YUM_BASEURL:-}" ]; then
        repo="--disablerepo=* --repofrompath=provision-build,$YUM_BASEURL"
        # A mirror of the distribution carries the distribution's signatures.
        key=/etc/pki/rpm-gpg/RPM-GPG-KEY-openEuler
        if [ -f "$key" ]; then repo="$repo --setopt=provision-build.gpgkey=file://$key"; fi
    fi
    echo "install-os-packages: $yum install$missing"
    # shellcheck disable=SC2086  # option and package lists
    "$yum" install -y $repo $missing
    "$yum" clean all
else
    echo "install-os-packages: neither apt-get nor rpm in the base image" >&2
    exit 1
fi
