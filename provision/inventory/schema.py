"""The typed schema of the variables `provision` owns, and the inventory-wide checks.

Ownership: a variable is ours when its name starts with ``provision_``, ``ascend_`` or a role's name
followed by ``_`` (``npu_pools_list``, ``cann_version`` ...). Other variables (``ansible_*``, the user's
own) are left alone. Ours are checked for spelling (against this schema and the roles' defaults), type,
range and consistency: NPU pools within the node's NPU count, no NPU in two pools, unique ports, profiles
that exist and fit their pool, versions that form a known-good stack, mirror URLs that are URLs.

Pydantic does the per-field typing; the cross-field checks are plain functions so each error can point at
the exact value (and so at its file and line).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from urllib.parse import urlparse

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool

HOST_GROUP = "npu_nodes"
"""Every NPU server is in this group; the playbooks target it."""

OWNED_PREFIXES = (
    "provision_",
    "ascend_",
    "preflight_",
    "openeuler_repos_",
    "cann_",
    "npu_pools_",
    "container_runtime_",
    "vllm_serve_",
)
GROUP_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DRIVER_VERSION = re.compile(r"^\d+\.\d+(\.[0-9A-Za-z]+){0,3}$")  # 25.0.rc1.1, 25.5.1, 24.1.rc1
FIRMWARE_VERSION = re.compile(r"^\d+\.\d+\.\d+(\.\d+){0,2}$")  # 7.7.0.1.231
CANN_VERSION = re.compile(r"^\d+\.\d+\.(\d+|RC\d+|rc\d+)(\.[0-9A-Za-z]+)?$")  # 9.1.0, 8.2.RC1, 8.3.RC2
POOL_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


def _url(value: str) -> str:
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https", "file") or any(c.isspace() for c in value):
        raise ValueError("must be an http://, https:// or file:// URL")
    if parsed.scheme != "file" and not parsed.netloc:
        raise ValueError("must name a host, e.g. http://mirror.example.com/openeuler")
    return value


def _pattern(regex: re.Pattern[str], example: str) -> AfterValidator:
    def check(value: str) -> str:
        if not regex.match(value):
            raise ValueError(f"must look like {example}")
        return value

    return AfterValidator(check)


Url = Annotated[str, AfterValidator(_url)]
DriverVersion = Annotated[str, _pattern(DRIVER_VERSION, "25.0.rc1.1 or 25.5.1")]
FirmwareVersion = Annotated[str, _pattern(FIRMWARE_VERSION, "7.7.0.1.231")]
CannVersion = Annotated[str, _pattern(CANN_VERSION, "9.1.0 or 8.2.RC1")]
Port = Annotated[int, Field(ge=1024, le=65535)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NpuPool(_Strict):
    """A named set of NPUs on one node, served by one engine instance on one port."""

    name: Annotated[str, _pattern(POOL_NAME, "chat or deepseek-r1 (lower case, digits, '-')")]
    devices: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]
    port: Port
    profile: str | None = None


class ServingProfile(_Strict):
    """The vLLM serving knobs of one profile (real vLLM flags; see FACTS.md §1, §5)."""

    model: str
    served_model_name: str | None = None
    tensor_parallel_size: Annotated[int, Field(ge=1)] = 1
    data_parallel_size: Annotated[int, Field(ge=1)] = 1
    pipeline_parallel_size: Annotated[int, Field(ge=1)] = 1
    nodes: Annotated[int, Field(ge=1)] = 1
    enable_expert_parallel: StrictBool = False
    quantization: Literal["ascend"] | None = None
    weights_quantization: Literal["w8a8", "w4a8", "w4a4", "w8a8-dynamic"] | None = None
    max_num_seqs: Annotated[int, Field(ge=1)] | None = None
    max_num_batched_tokens: Annotated[int, Field(ge=1)] | None = None
    max_model_len: Annotated[int, Field(ge=1)] | None = None
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] | None = None
    block_size: Annotated[int, Field(ge=16, multiple_of=16)] | None = None
    trust_remote_code: StrictBool = False
    additional_config: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, str | int | float] = Field(default_factory=dict)
    extra_args: list[str] = Field(default_factory=list)


class HostSettings(BaseModel):
    """The inventory variables provision reads, as one host sees them after group/host merging."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    provision_stack: str | None = None
    provision_allow_unlocked_versions: StrictBool = False
    provision_mirror_url: Url | None = None
    ascend_npu_count: Annotated[int, Field(ge=1, le=16)] = 8
    ascend_driver_version: DriverVersion | None = None
    ascend_driver_firmware_version: FirmwareVersion | None = None
    cann_version: CannVersion | None = None
    openeuler_repos_mirror_url: Url | None = None
    npu_pools_list: list[NpuPool] = Field(default_factory=list)
    vllm_serve_profiles: dict[str, ServingProfile] = Field(default_factory=dict)


# Inventory variable -> the version-lock key it must agree with.
LOCKED_VERSIONS = {
    "ascend_driver_version": "driver",
    "ascend_driver_firmware_version": "firmware",
    "cann_version": "cann",
}
