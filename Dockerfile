# The vllm-ascend serving image: a CANN base image, vllm + vllm-ascend + torch-npu pinned by the version lock
# (provision/data/versions.yml), an entrypoint that serves, and a HEALTHCHECK that tells loading from dead.
#
# `provision image build` passes every ARG below from the lock; the defaults here are the lock's default stack
# (a unit test keeps them equal), so `docker build .` and the CI workflow build the same image. Air-gapped
# sites override BASE_IMAGE, PIP_INDEX_URL / PIP_EXTRA_INDEX_URL and APT_SOURCE / YUM_BASEURL. See docs/image.md.
#
# Layer order: OS packages -> Python packages -> user -> metadata -> labels -> scripts. Changing the
# entrypoint rebuilds the last step only; a new revision label the last two.

ARG CANN_VERSION=9.1.0
ARG SOC=910b
ARG BASE_OS=openeuler24.03
ARG PYTHON_VERSION=3.12
ARG BASE_IMAGE=quay.io/ascend/cann:${CANN_VERSION}-${SOC}-${BASE_OS}-py${PYTHON_VERSION}

FROM ${BASE_IMAGE}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Runtime OS packages: jemalloc (LD_PRELOAD by the entrypoint) and numactl, unless the base has them.
# APT_SOURCE (a sources.list line) or YUM_BASEURL (a repository URL) replace the distribution's repositories
# for this step (air-gapped sites); see container/install-os-packages.sh.
ARG APT_PACKAGES="libjemalloc2 numactl"
ARG RPM_PACKAGES="jemalloc numactl"
ARG APT_SOURCE=""
ARG YUM_BASEURL=""
COPY container/install-os-packages.sh /opt/provision/build/
RUN /opt/provision/build/install-os-packages.sh

# vllm, vllm-ascend and torch-npu, pinned by the lock. PIP_PACKAGES is the whole requirement list: a site with
# its own wheel builds (or a test with a local wheelhouse) replaces it; the label below records what was used.
# Never put credentials in an index URL: build arguments end up in the image history.
ARG VLLM_VERSION=0.23.0
ARG VLLM_ASCEND_VERSION=0.23.0
ARG TORCH_VERSION=2.10.0
ARG TORCH_NPU_VERSION=2.10.0.post4
ARG PIP_PACKAGES="vllm==${VLLM_VERSION} vllm-ascend==${VLLM_ASCEND_VERSION} torch==${TORCH_VERSION} torch-npu==${TORCH_NPU_VERSION}"
ARG PIP_INDEX_URL=""
ARG PIP_EXTRA_INDEX_URL="https://download.pytorch.org/whl/cpu/ https://mirrors.huaweicloud.com/ascend/repos/pypi"
ARG PIP_TRUSTED_HOST=""
# PIP_PACKAGES carries the pins (word splitting intended).
# hadolint ignore=DL3013,SC2086
RUN set -eu; \
    if [ -z "${PIP_INDEX_URL}" ]; then unset PIP_INDEX_URL; fi; \
    if [ -z "${PIP_EXTRA_INDEX_URL}" ]; then unset PIP_EXTRA_INDEX_URL; fi; \
    if [ -z "${PIP_TRUSTED_HOST}" ]; then unset PIP_TRUSTED_HOST; fi; \
    PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
        python3 -m pip install --no-cache-dir ${PIP_PACKAGES}; \
    python3 -m pip check || echo "warning: pip check reports conflicts (see above)"

# A non-root user. Ascend device nodes belong to the host's HwHiAiUser group: run with
# `--group-add <gid of HwHiAiUser on the host>` (the serving role does), or `--user 0` where a host needs root.
ARG APP_UID=10001
RUN useradd --create-home --uid "${APP_UID}" --user-group --shell /bin/bash vllm \
    && if getent group HwHiAiUser >/dev/null; then usermod -aG HwHiAiUser vllm; fi

ARG SOC_VERSION=ascend910b1
ENV SOC_VERSION=${SOC_VERSION} \
    TASK_QUEUE_ENABLE=1 \
    OMP_NUM_THREADS=1 \
    VLLM_PYTHON=python3 \
    PROVISION_RUN_DIR=/tmp/provision

USER ${APP_UID}:${APP_UID}
WORKDIR /home/vllm
EXPOSE 8000

# Loading (port refused while the engine lives) fails the probe but stays "starting" during the start
# period; ready = /health 200 and the model listed; dead = /health 5xx or the engine gone.
HEALTHCHECK --interval=30s --timeout=20s --start-period=60m --retries=3 \
    CMD ["python3", "/opt/provision/healthcheck.py"]
ENTRYPOINT ["/opt/provision/entrypoint.sh"]

# The whole version combination as labels. Declared this late so that a new revision rebuilds nothing above.
ARG NNAL_VERSION=9.1.0
ARG DRIVER_VERSION=25.5.1
ARG FIRMWARE_VERSION=7.8.0.6.201
ARG STACK=0.23.0
ARG BASE_IMAGE
ARG CANN_VERSION
ARG SOC
ARG BASE_OS
ARG PYTHON_VERSION
ARG REVISION=""
ARG SOURCE_URL=""
LABEL org.opencontainers.image.title="vllm-ascend" \
      org.opencontainers.image.description="vLLM on Ascend NPUs (vllm-ascend), serving by default" \
      org.opencontainers.image.version="${VLLM_ASCEND_VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${BASE_IMAGE}" \
      provision.stack="${STACK}" \
      provision.stack.vllm="${VLLM_VERSION}" \
      provision.stack.vllm-ascend="${VLLM_ASCEND_VERSION}" \
      provision.stack.torch="${TORCH_VERSION}" \
      provision.stack.torch-npu="${TORCH_NPU_VERSION}" \
      provision.stack.cann="${CANN_VERSION}" \
      provision.stack.nnal="${NNAL_VERSION}" \
      provision.stack.python="${PYTHON_VERSION}" \
      provision.stack.driver="${DRIVER_VERSION}" \
      provision.stack.firmware="${FIRMWARE_VERSION}" \
      provision.stack.soc="${SOC}" \
      provision.stack.os="${BASE_OS}" \
      provision.pip-packages="${PIP_PACKAGES}"

# The scripts last: editing the entrypoint or the healthcheck rebuilds this one step.
COPY container/entrypoint.sh container/ascend-env.sh container/healthcheck.py /opt/provision/
