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

from ansible.module_utils.parsing.convert_bool import boolean
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

from provision.inventory.rules import (
    WEEK_S,
    control_problem,
    env_problems,
    interpreter_problem,
    name_problem,
)

HOST_GROUP = "npu_nodes"
"""Every NPU server is in this group; the playbooks target it."""
FACTS_VARIABLE = "bootstrap_facts"
"""What ``provision bootstrap`` discovered on a node (host_vars): data from the node, never a template."""

OWNED_PREFIXES = (
    "provision_",
    "ascend_",
    "preflight_",
    "openeuler_repos_",
    "cann_",
    "npu_pools_",
    "container_runtime_",
    "vllm_serve_",
    "monitoring_",
)
GROUP_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DRIVER_VERSION = re.compile(r"^\d+\.\d+(\.[0-9A-Za-z]+){0,3}$")  # 25.0.rc1.1, 25.5.1, 24.1.rc1
FIRMWARE_VERSION = re.compile(r"^\d+\.\d+\.\d+(\.\d+){0,2}$")  # 7.7.0.1.231
CANN_VERSION = re.compile(r"^\d+\.\d+\.(\d+|RC\d+|rc\d+)(\.[0-9A-Za-z]+)?$")  # 9.1.0, 8.2.RC1, 8.3.RC2
SHA256 = re.compile(r"^[0-9A-Fa-f]{64}$")
# An OpenPGP v4 fingerprint: 40 hex digits, optionally in gpg --fingerprint's groups of four.
FINGERPRINT = re.compile(r"^[0-9A-Fa-f]{4}( {0,2}[0-9A-Fa-f]{4}){9}$")
# Archives a profile's model_url may name (what ansible.builtin.unarchive extracts on the node).
MODEL_ARCHIVES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar.zst", ".zip")


def _url(value: str) -> str:
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https", "file") or any(c.isspace() for c in value):
        raise ValueError("must be an http://, https:// or file:// URL")
    if parsed.scheme != "file" and not parsed.netloc:
        raise ValueError("must name a host, e.g. http://mirror.example.com/openeuler")
    return value


def _pattern(regex: re.Pattern[str], example: str) -> AfterValidator:
    def check(value: str) -> str:
        # fullmatch: a pattern ending in $ alone lets a trailing newline through
        if not regex.fullmatch(value):
            raise ValueError(f"must look like {example}")
        return value

    return AfterValidator(check)


def _ansible_bool(value: Any) -> bool:
    """A bool as Ansible reads one (``| bool``, role argument specs): INI's ``false``, ``yes``, ``on`` ..."""
    try:
        return bool(boolean(value, strict=True))
    except TypeError:
        raise ValueError("must be true or false") from None


AnsibleBool = Annotated[bool, BeforeValidator(_ansible_bool)]
Url = Annotated[str, AfterValidator(_url)]
# '' = none (the role pulls from a registry); one type, so a bad URL gets one message, not one per branch.
UrlOrEmpty = Annotated[str, AfterValidator(lambda value: value and _url(value))]
DriverVersion = Annotated[str, _pattern(DRIVER_VERSION, "25.0.rc1.1 or 25.5.1")]
FirmwareVersion = Annotated[str, _pattern(FIRMWARE_VERSION, "7.7.0.1.231")]
CannVersion = Annotated[str, _pattern(CANN_VERSION, "9.1.0 or 8.2.RC1")]
Port = Annotated[int, Field(ge=1024, le=65535)]
Sha256 = Annotated[str, _pattern(SHA256, "64 hex digits (sha256sum's first column)")]


def _fingerprint(value: str) -> str:
    if value and not FINGERPRINT.match(value):  # '' = not pinned (the role's default)
        raise ValueError("must be a key fingerprint: 40 hex digits, as gpg --fingerprint prints them")
    return value


Fingerprint = Annotated[str, AfterValidator(_fingerprint)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _plain_text(value: str) -> str:
    problem = control_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _name(kind: str) -> AfterValidator:
    def check(value: str) -> str:
        problem = name_problem(kind, value)
        if problem is not None:
            raise ValueError(problem)
        return value

    return AfterValidator(check)


PlainText = Annotated[str, AfterValidator(_plain_text)]
"""A string that is written into a unit, env, args or shell file: no control characters."""
Seconds = Annotated[float, Field(gt=0, le=WEEK_S)]


class NpuPool(_Strict):
    """A named set of NPUs on one node, served by one engine instance on one port."""

    name: Annotated[str, _name("pool")]
    devices: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]
    port: Port
    profile: str | None = None


# Profile field -> the vLLM flag it becomes (provision.serving.profiles builds the command line from this).
PROFILE_FLAGS: dict[str, str] = {
    "model": "--model",
    "served_model_name": "--served-model-name",
    "tensor_parallel_size": "--tensor-parallel-size",
    "data_parallel_size": "--data-parallel-size",
    "pipeline_parallel_size": "--pipeline-parallel-size",
    "distributed_executor_backend": "--distributed-executor-backend",
    "data_parallel_size_local": "--data-parallel-size-local",
    "data_parallel_rpc_port": "--data-parallel-rpc-port",
    "enable_expert_parallel": "--enable-expert-parallel",
    "quantization": "--quantization",
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "max_model_len": "--max-model-len",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "block_size": "--block-size",
    "dtype": "--dtype",
    "enforce_eager": "--enforce-eager",
    "trust_remote_code": "--trust-remote-code",
    "additional_config": "--additional-config",
}
# Flags the pool, the node or the role set (never a profile's extra_args), and what sets them.
MANAGED_FLAGS: dict[str, str] = {
    "--port": "the pool's port",
    "--host": "vllm_serve_bind_host",
    "--api-key": "vllm_serve_api_key (kept out of the command line)",
    "--data-parallel-address": "the head node of a multi-node profile",
    "--data-parallel-start-rank": "the node's rank in a multi-node profile",
    "--headless": "the node's rank in a multi-node profile",
}
# vLLM's short aliases of the flags above.
FLAG_ALIASES = {
    "-tp": "--tensor-parallel-size",
    "-dp": "--data-parallel-size",
    "-pp": "--pipeline-parallel-size",
    "-dpl": "--data-parallel-size-local",
    "-ep": "--enable-expert-parallel",
    "-q": "--quantization",
}


def _flag_of(arg: str) -> str | None:
    """The canonical long flag of a command-line word (``--max_num_seqs=4`` -> ``--max-num-seqs``)."""
    if not arg.startswith("-") or arg == "-" or arg[1:2].isdigit():
        return None
    name = arg.split("=", 1)[0]
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
        if name.startswith("--no-"):
            name = "--" + name[5:]
    return FLAG_ALIASES.get(name, name)


class ServingProfile(_Strict):
    """The vLLM serving knobs of one profile (real vLLM flags; see FACTS.md §1, §5).

    Shipped profiles live in ``provision/data/profiles/<name>.yml``; ``vllm_serve_profiles`` adds or
    overrides profiles in the inventory. Checks that need only the profile are validators here; checks
    against the pool (TP x DP x PP = NPUs) are in :mod:`provision.inventory.validate`.
    """

    description: PlainText | None = None
    model: Annotated[PlainText, Field(min_length=1)]
    model_url: Url | None = None
    model_sha256: Annotated[str, _pattern(SHA256, "64 hex digits (sha256sum's first column)")] | None = None
    served_model_name: Annotated[str, _name("served_model_name")] | None = None
    tensor_parallel_size: Annotated[int, Field(ge=1)] = 1
    data_parallel_size: Annotated[int, Field(ge=1)] = 1
    pipeline_parallel_size: Annotated[int, Field(ge=1)] = 1
    nodes: Annotated[int, Field(ge=1)] = 1
    distributed_executor_backend: Literal["mp", "ray"] | None = None
    data_parallel_size_local: Annotated[int | None, Field(ge=1, validate_default=True)] = None
    data_parallel_rpc_port: Port | None = None
    enable_expert_parallel: AnsibleBool = False
    quantization: Literal["ascend"] | None = None
    weights_quantization: Literal["w8a8", "w4a8", "w4a4", "w8a8-dynamic"] | None = None
    max_num_seqs: Annotated[int, Field(ge=1)] | None = None
    max_num_batched_tokens: Annotated[int, Field(ge=1)] | None = None
    max_model_len: Annotated[int, Field(ge=1)] | None = None
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] | None = None
    block_size: Annotated[int, Field(ge=16, multiple_of=16)] | None = None
    dtype: Literal["auto", "half", "float16", "bfloat16", "float", "float32"] | None = None
    enforce_eager: AnsibleBool = False
    trust_remote_code: AnsibleBool = False
    additional_config: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, str | int | float] = Field(default_factory=dict)
    extra_args: list[str] = Field(default_factory=list)
    load_budget_s: Seconds | None = None
    # Not a vLLM flag: the p99 time-to-first-token the monitoring role alerts above (default
    # monitoring_ttft_slo_ms).
    ttft_slo_ms: Annotated[float, Field(gt=0, le=WEEK_S * 1000)] | None = None

    @field_validator("model_url")
    @classmethod
    def _model_url_names_an_archive(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return value
        model = info.data.get("model")
        if model is not None and not model.startswith("/"):
            raise ValueError(
                f"weights downloaded from model_url need model: the absolute path of their folder on the "
                f"node, not {model!r}"
            )
        parsed = urlparse(value)
        if parsed.scheme == "file" and parsed.netloc:
            raise ValueError(f"a file:// URL names a path on the node: file:///{parsed.netloc}{parsed.path}")
        if parsed.query or parsed.fragment or not parsed.path.lower().endswith(MODEL_ARCHIVES):
            raise ValueError(f"must name an archive of the model folder ({', '.join(MODEL_ARCHIVES)})")
        return value

    @field_validator("model_sha256")
    @classmethod
    def _model_sha256_needs_url(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and "model_url" in info.data and info.data["model_url"] is None:
            raise ValueError("is the sha256 of the archive in model_url, which is not set")
        return value

    @field_validator("data_parallel_size_local")
    @classmethod
    def _dp_local_fits(cls, value: int | None, info: ValidationInfo) -> int | None:
        dp, nodes = info.data.get("data_parallel_size"), info.data.get("nodes")
        backend = info.data.get("distributed_executor_backend")
        if dp is None or nodes is None:
            return value
        if nodes > 1 and backend != "ray":
            if dp % nodes:
                raise ValueError(
                    f"a {nodes}-node profile with native data parallelism needs data_parallel_size "
                    f"({dp}) divisible by nodes (or distributed_executor_backend: ray)"
                )
            if value is not None and value * nodes != dp:
                raise ValueError(
                    f"data_parallel_size_local {value} x {nodes} nodes must equal data_parallel_size {dp}"
                )
        elif value is not None and value != dp:
            raise ValueError(
                f"on one node (or with ray) data_parallel_size_local must equal {dp} or be unset"
            )
        return value

    @field_validator("weights_quantization")
    @classmethod
    def _weights_need_flag(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("quantization") is None and "quantization" in info.data:
            raise ValueError(
                f"{value} weights from msModelSlim load only with quantization: ascend "
                "(vLLM --quantization ascend)"
            )
        return value

    @field_validator("max_num_batched_tokens")
    @classmethod
    def _batch_holds_seqs(cls, value: int | None, info: ValidationInfo) -> int | None:
        seqs = info.data.get("max_num_seqs")
        if value is not None and seqs is not None and value < seqs:
            raise ValueError(f"must be >= max_num_seqs ({seqs}): vLLM refuses a smaller token budget")
        return value

    @field_validator("env")
    @classmethod
    def _env_not_reserved(cls, value: dict[str, str | int | float]) -> dict[str, str | int | float]:
        problems = env_problems(value, owner="a profile's env")
        if problems:
            raise ValueError("; ".join(f"{path[-1]}: {why}" for path, why in problems))
        return value

    @field_validator("extra_args")
    @classmethod
    def _extra_args_do_not_conflict(cls, value: list[str]) -> list[str]:
        by_flag = {flag: name for name, flag in PROFILE_FLAGS.items()}
        problems = []
        for arg in value:
            problem = control_problem(arg)
            if problem is not None:
                problems.append(f"{arg!r} {problem}")
                continue
            flag = _flag_of(arg)
            if flag in by_flag:
                problems.append(f"{arg} conflicts with the profile field {by_flag[flag]}: set that instead")
            elif flag in MANAGED_FLAGS:
                problems.append(f"{arg} is set by {MANAGED_FLAGS[flag]}")
        if problems:
            raise ValueError("; ".join(problems))
        return value


# Ansible's connection_loader.find_plugin never finds these: 'smart' means ssh.
_CONNECTION_ALIASES = {"smart"}


def _text(value: Any) -> Any:
    """A host name or user written as a number (INI reads ``ansible_user=1000`` as an int) is still text."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _no_space(value: str) -> str:
    if not value or any(c.isspace() for c in value):
        raise ValueError("must be a host name or address, without spaces")
    return value


def _interpreter(value: str) -> str:
    problem = interpreter_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _connection(value: str) -> str:
    name = value.removeprefix("ansible.builtin.").removeprefix("ansible.legacy.")
    if name in _CONNECTION_ALIASES:
        return value
    if not _connection_plugin_exists(name):
        raise ValueError(
            "no such connection plugin in Ansible (ssh, local, paramiko_ssh ...) or its collections"
        )
    return value


def _connection_plugin_exists(name: str) -> bool:
    """Ask Ansible's connection_loader. A plain name in Ansible's or the configured plugin folders is found
    without the collection loader; only other names (a collection's, or one Ansible redirects to a
    collection, like docker) pay for starting it (0.3 s)."""
    from ansible.plugins.loader import connection_loader
    from ansible.utils.display import Display

    from provision.ansible_config import start_collection_loader

    display = Display()
    original = display.error_as_warning
    display.error_as_warning = lambda *args, **kwargs: None  # "Error loading plugin": our message says it
    try:
        try:
            return connection_loader.find_plugin(name) is not None
        except ImportError:  # the name resolves through ansible_collections, which is not set up yet
            pass
        start_collection_loader()
        return connection_loader.find_plugin(name) is not None
    finally:
        display.error_as_warning = original


class HostSettings(BaseModel):
    """The inventory variables provision reads, as one host sees them after group/host merging."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    provision_stack: str | None = None
    provision_allow_unlocked_versions: AnsibleBool = False
    provision_mirror_url: Url | None = None
    # Shown next to every J/token measured on this host's NPUs (`provision bench`), e.g. "simulated".
    provision_power_label: Annotated[str, BeforeValidator(_text), Field(min_length=1)] | None = None
    # The device plugin's resource for this node's NPUs in `provision k8s render` (CCE, HAMi: their own);
    # default: the NPU line's in provision/data/hardware.yml.
    provision_k8s_npu_resource: Annotated[str, _name("k8s_resource")] | None = None
    ascend_npu_count: Annotated[int, Field(ge=1, le=16)] = 8
    ascend_driver_version: DriverVersion | None = None
    ascend_driver_firmware_version: FirmwareVersion | None = None
    cann_version: CannVersion | None = None
    openeuler_repos_mirror_url: Url | None = None
    openeuler_repos_gpg_key_fingerprint: Fingerprint | None = None
    # Pinned sha256 per vendor file name: a malformed one fails get_url on every node, after earlier stages.
    ascend_driver_checksums: dict[str, Sha256] | None = None
    cann_checksums: dict[str, Sha256] | None = None
    container_runtime_checksums: dict[str, Sha256] | None = None
    npu_pools_list: list[NpuPool] = Field(default_factory=list)
    container_runtime_mirror_url: Url | None = None
    container_runtime_verify: Literal["changed", "always", "never"] | None = None
    container_runtime_verify_image_url: UrlOrEmpty | None = None
    container_runtime_default_runtime: AnsibleBool | None = None
    vllm_serve_profiles: dict[str, ServingProfile] = Field(default_factory=dict)
    vllm_serve_mode: Literal["container", "service"] | None = None
    vllm_serve_image_url: UrlOrEmpty | None = None
    vllm_serve_model_reserve_mb: Annotated[int, Field(ge=0)] | None = None
    vllm_serve_container_devices: Literal["auto", "runtime", "device"] | None = None
    # The words the serving container runs before the vLLM arguments; [] = read from the image (vllm_serve).
    vllm_serve_image_command: list[Annotated[str, BeforeValidator(_text), Field(min_length=1)]] | None = None
    # Ansible's own connection variables: a typo here fails on every host at the first SSH otherwise.
    ansible_host: Annotated[str, BeforeValidator(_text), AfterValidator(_no_space)] | None = None
    ansible_port: Annotated[int, Field(ge=1, le=65535)] | None = None
    ansible_user: Annotated[str, BeforeValidator(_text), Field(min_length=1)] | None = None
    ansible_python_interpreter: Annotated[str, AfterValidator(_interpreter)] | None = None
    ansible_connection: Annotated[str, AfterValidator(_connection)] | None = None


# Inventory variable -> the version-lock key it must agree with.
LOCKED_VERSIONS = {
    "ascend_driver_version": "driver",
    "ascend_driver_firmware_version": "firmware",
    "cann_version": "cann",
}
