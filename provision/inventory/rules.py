"""The one rule for every value that reaches a file, a command or a template on a node or the controller.

Whoever writes the inventory may run anything on the nodes; a node may run nothing on the controller. So:

- **names** that become file names, unit names, environment keys or container labels (pools, profiles, env
  keys, served model names) match a strict pattern, whole (``fullmatch``: ``$`` alone lets a trailing
  newline through);
- **values** that land in a unit, env, args or shell file hold no control character (a newline in a systemd
  unit's ``Description=`` starts a new directive; in an env file, a new variable);
- **values discovered on a node** (what ``provision bootstrap`` writes) are data, never templates: an
  interpreter path is a plain absolute path, discovered facts are written ``!unsafe`` and a discovered
  string that Ansible would template is refused;
- **container arguments** are an allow-list, not a deny-list;
- **numbers** that become timeouts are finite and within what systemd and docker take.

``provision validate`` (through :mod:`provision.inventory.validate`), the preflight role (the same code,
through its filter) and the serving role's filters (:mod:`provision.serving.profiles`,
:mod:`provision.serving.container`) all call these functions; nothing else decides them.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Path_ = tuple[str | int, ...]

POOL_NAME = re.compile(r"[a-z][a-z0-9-]{0,30}")
"""A pool: part of a unit (``vllm-<pool>.service``), a container, a folder and a file name."""
PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""A serving profile (a key of ``vllm_serve_profiles``, a file of ``provision/data/profiles``): shown in the
unit's ``Description=`` and the container's label."""
ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
"""An environment variable the role writes into an ``EnvironmentFile``."""
SERVED_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:+-]{0,127}")
"""``--served-model-name`` (``deepseek-ai/DeepSeek-R1``, ``smollm2``): also in the unit's ``Description=``."""
PLAIN_PATH = re.compile(r"/[A-Za-z0-9._+/-]*")
"""An absolute path with nothing a shell, a template or a unit file would read twice."""
LIBRARY_LIST = re.compile(r"[A-Za-z0-9._+/-]+(?:[ :][A-Za-z0-9._+/-]+)*")
"""``LD_PRELOAD``'s value: library names or paths, separated by spaces or colons (ld.so(8)); vllm-ascend's
image sets ``LD_PRELOAD=libjemalloc.so.2`` (FACTS.md §2), so it is allowed, but only as such a list."""
K8S_RESOURCE = re.compile(
    r"(?=[^/]{1,253}/)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
    r"/(?=.{1,63}$)[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)
"""An extended resource a Kubernetes device plugin advertises (``huawei.com/Ascend910``): a DNS-subdomain
prefix, ``/``, a name of at most 63 characters (Kubernetes' qualified name), as a pod's limits key."""

NAMES = {
    "pool": (POOL_NAME, "lower case letters, digits and '-', starting with a letter, at most 31 (chat)"),
    "profile": (PROFILE_NAME, "letters, digits, '.', '_' and '-', at most 64 (deepseek-r1-w8a8)"),
    "env": (ENV_NAME, "upper case letters, digits and '_', not starting with a digit (HCCL_CONNECT_TIMEOUT)"),
    "served_model_name": (
        SERVED_MODEL_NAME,
        "letters, digits and . _ / : + -, at most 128 (deepseek-ai/DeepSeek-R1)",
    ),
    "k8s_resource": (
        K8S_RESOURCE,
        "a domain, '/', then letters, digits, '-', '_' and '.', at most 63 (huawei.com/Ascend910)",
    ),
}

RESERVED_ENV: dict[str, str] = {
    "ASCEND_RT_VISIBLE_DEVICES": "the pool's devices (npu_pools_list)",
    "ASCEND_VISIBLE_DEVICES": "the pool's devices (npu_pools_list)",
    "VLLM_API_KEY": "vllm_serve_api_key (put it in ansible-vault; it is written to a root-only file)",
}
"""Environment variables neither a profile nor ``vllm_serve_env`` may set, and what sets them instead."""
LIBRARY_ENV = ("LD_PRELOAD",)
"""Environment variables whose value must be a :data:`LIBRARY_LIST`."""

_TEMPLATE_MARKERS = ("{{", "{%", "{#")
_INTERPRETER_AUTO = ("auto", "auto_silent", "auto_legacy", "auto_legacy_silent")


def name_problem(kind: str, value: object) -> str | None:
    """Why ``value`` is not a valid name of ``kind`` (a key of :data:`NAMES`), or None."""
    pattern, allowed = NAMES[kind]
    if not isinstance(value, str):
        return f"must be a string of {allowed}"
    if not pattern.fullmatch(value):
        shown = control_problem(value)
        label = kind.replace("_", " ")
        return shown or f"invalid {label if label.endswith('name') else label + ' name'}; allowed: {allowed}"
    return None


def control_problem(value: str) -> str | None:
    """Why ``value`` may not reach a unit, env, args or shell file: the first control character it holds
    (newline, carriage return, NUL, escape, the Unicode line separators), or None."""
    for char in value:
        code = ord(char)
        if code < 0x20 or code == 0x7F or 0x80 <= code < 0xA0 or char in "\u2028\u2029":
            return f"holds a control character ({_describe(char)}): not allowed in a value written to a file"
    return None


def _describe(char: str) -> str:
    names = {"\n": "a line break", "\r": "a carriage return", "\x00": "NUL", "\t": "a tab"}
    return names.get(char) or f"U+{ord(char):04X}"


def control_problems(value: Any, path: Path_ = ()) -> list[tuple[Path_, str]]:
    """Every string in ``value`` (mapping keys included) that holds a control character: (path, why)."""
    out: list[tuple[Path_, str]] = []
    for where, text in _strings(value, path):
        problem = control_problem(text)
        if problem is not None:
            out.append((where, problem))
    return out


def _strings(value: Any, path: Path_) -> Iterator[tuple[Path_, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str):
                yield (*path, key), key
            yield from _strings(item, (*path, str(key)))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _strings(item, (*path, index))


def env_key_problem(key: object, *, owner: str) -> str | None:
    """Why ``key`` may not be set in an instance's environment by ``owner`` (``vllm_serve_env`` or a profile's
    ``env``), or None."""
    problem = name_problem("env", key)
    if problem is not None:
        return problem
    assert isinstance(key, str)
    if key in RESERVED_ENV:
        return f"may not be set in {owner}: it is set by {RESERVED_ENV[key]}"
    return None


def env_value_problem(key: str, value: object) -> str | None:
    """Why ``value`` may not be the value of environment variable ``key``, or None."""
    if not isinstance(value, str | int | float):  # a bool is written true/false
        return "must be a string, a number or true/false"
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    text = str(value)
    problem = control_problem(text)
    if problem is not None:
        return problem
    if key in LIBRARY_ENV and not LIBRARY_LIST.fullmatch(text):
        return (
            "must be library names or absolute paths separated by spaces or colons "
            "(libjemalloc.so.2, /usr/lib64/libtcmalloc.so)"
        )
    return None


def env_problems(env: object, *, owner: str, path: Path_ = ()) -> list[tuple[Path_, str]]:
    """Every problem of an environment mapping set by ``owner``: (path of the key or value, why)."""
    if not isinstance(env, Mapping):
        return [(path, "must be a mapping of NAME: value")]
    out: list[tuple[Path_, str]] = []
    for key, value in env.items():
        problem = env_key_problem(key, owner=owner)
        if problem is not None:
            out.append(((*path, str(key)), problem))
            continue
        problem = env_value_problem(str(key), value)
        if problem is not None:
            out.append(((*path, str(key)), problem))
    return out


# --- what a node sends back -------------------------------------------------------------------------------


def is_template(value: object) -> bool:
    """Whether Ansible would template ``value``: a string with a Jinja marker that is trusted as a template
    (what an INI or YAML file says plainly; ``!unsafe`` values and values from a node's facts are not)."""
    if not isinstance(value, str) or not any(marker in value for marker in _TEMPLATE_MARKERS):
        return False
    try:
        from ansible.template import is_trusted_as_template
    except ImportError:  # pragma: no cover - ansible-core < 2.19 templates every string
        return True
    return bool(is_trusted_as_template(value))


def has_template_marker(value: str) -> bool:
    return any(marker in value for marker in _TEMPLATE_MARKERS)


def templates_in(value: Any, path: Path_ = ()) -> list[Path_]:
    """The paths of every string in ``value`` that Ansible would template (:func:`is_template`)."""
    return [where for where, text in _strings(value, path) if is_template(text)]


def interpreter_problem(value: object) -> str | None:
    """Why ``value`` may not be ``ansible_python_interpreter``: Ansible templates it on the controller
    before every task, so it must be a plain absolute path (words may follow it, as in ``/usr/bin/env
    python3``) or one of Ansible's ``auto`` modes."""
    auto = ", ".join(_INTERPRETER_AUTO)
    if not isinstance(value, str):
        return f"must be an absolute path (/usr/bin/python3) or one of {auto}"
    if value in _INTERPRETER_AUTO:
        return None
    if has_template_marker(value):
        return (
            "must be a plain absolute path, not a template: Ansible evaluates it on the controller "
            "before every task (/usr/bin/python3)"
        )
    if not value.startswith("/"):
        return f"must be an absolute path (/usr/bin/python3) or one of {auto}"
    if not _INTERPRETER.fullmatch(value):
        return (
            "must be a plain absolute path (letters, digits, . _ + - /), words may follow it "
            "(/usr/bin/env python3)"
        )
    return None


_INTERPRETER = re.compile(r"/[A-Za-z0-9._+/-]*(?: [A-Za-z0-9._+/=-]+)*")


# --- docker run arguments ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ContainerFlag:
    takes_value: bool
    pattern: re.Pattern[str] | None = None
    example: str = ""


_WORD = re.compile(r"[A-Za-z0-9._:=,/+-]+")
_SIZE = re.compile(r"\d+(\.\d+)?[bkmgBKMG]?")
ALLOWED_CONTAINER_ARGS: dict[str, ContainerFlag] = {
    "--group-add": ContainerFlag(True, re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*"), "--group-add 1000"),
    "--ulimit": ContainerFlag(True, re.compile(r"[a-z]+=-?\d+(:-?\d+)?"), "--ulimit memlock=-1"),
    "--cpus": ContainerFlag(True, re.compile(r"\d+(\.\d+)?"), "--cpus 32"),
    "--cpuset-cpus": ContainerFlag(True, re.compile(r"[0-9,-]+"), "--cpuset-cpus 0-47"),
    "--cpuset-mems": ContainerFlag(True, re.compile(r"[0-9,-]+"), "--cpuset-mems 0,1"),
    "--cpu-shares": ContainerFlag(True, re.compile(r"\d+"), "--cpu-shares 1024"),
    "--memory": ContainerFlag(True, _SIZE, "--memory 512g"),
    "-m": ContainerFlag(True, _SIZE, "-m 512g"),
    "--memory-swap": ContainerFlag(True, re.compile(r"-1|\d+(\.\d+)?[bkmgBKMG]?"), "--memory-swap -1"),
    "--memory-reservation": ContainerFlag(True, _SIZE, "--memory-reservation 256g"),
    "--oom-score-adj": ContainerFlag(True, re.compile(r"-?\d+"), "--oom-score-adj -500"),
    "--pids-limit": ContainerFlag(True, re.compile(r"-?\d+"), "--pids-limit 65536"),
    "--label": ContainerFlag(True, _WORD, "--label team=llm"),
    "-l": ContainerFlag(True, _WORD, "-l team=llm"),
    "--log-driver": ContainerFlag(True, re.compile(r"[a-z0-9-]+"), "--log-driver journald"),
    "--log-opt": ContainerFlag(True, _WORD, "--log-opt tag=vllm"),
    "--tmpfs": ContainerFlag(True, re.compile(r"/[A-Za-z0-9._/-]*(:[A-Za-z0-9=,]+)?"), "--tmpfs /tmp"),
    "--stop-signal": ContainerFlag(True, re.compile(r"[A-Z0-9]+"), "--stop-signal SIGINT"),
    "--stop-timeout": ContainerFlag(True, re.compile(r"\d+"), "--stop-timeout 60"),
    "--cap-drop": ContainerFlag(True, re.compile(r"[A-Za-z_]+"), "--cap-drop ALL"),
    "--security-opt": ContainerFlag(
        True, re.compile(r"no-new-privileges(:true)?"), "--security-opt no-new-privileges"
    ),
    "--init": ContainerFlag(False),
    "--read-only": ContainerFlag(False),
}
"""The ``docker run`` options ``vllm_serve_container_args`` may add, each with the values it may take. The
role sets the rest (name, devices, network, environment, volumes, health check); options that widen what the
container can reach on the node (``--privileged``, ``--cap-add``, ``-v``, ``--pid``, ``--ipc``,
``--userns``, other ``--security-opt``) are not on it."""
_SET_BY_ROLE = {
    "--privileged": "the pool's NPUs are given one by one (FACTS.md §4: never --privileged)",
    "--device": "the pool's devices come from the pool",
    "--env": "set vllm_serve_env",
    "-e": "set vllm_serve_env",
    "--env-file": "the environment comes from the profile and vllm_serve_env",
    "--volume": "set vllm_serve_container_volumes (mounted read-only)",
    "-v": "set vllm_serve_container_volumes (mounted read-only)",
    "--mount": "set vllm_serve_container_volumes (mounted read-only)",
    "--net": "the engine listens on the node's network (--net=host)",
    "--network": "the engine listens on the node's network (--net=host)",
    "--runtime": "set vllm_serve_container_devices instead",
    "--name": "the role names the container vllm-<pool>",
    "--rm": "set by the role",
    "--restart": "systemd restarts the unit (Restart=on-failure)",
    "--detach": "the unit runs the container in the foreground",
    "-d": "the unit runs the container in the foreground",
    "--health-start-period": "set from the profile's load_budget_s (raise that instead)",
    "--no-healthcheck": "the health start period follows the profile's load_budget_s",
    "--shm-size": "set vllm_serve_container_shm_size",
}


def container_args_problems(args: object, path: Path_ = ()) -> list[tuple[Path_, str]]:
    """Every word of ``vllm_serve_container_args`` outside :data:`ALLOWED_CONTAINER_ARGS`: (path, why)."""
    if isinstance(args, str) or not isinstance(args, Sequence):
        return [(path, "must be a list of docker run words ([--ulimit, memlock=-1])")]
    out: list[tuple[Path_, str]] = []
    words = list(args)
    allowed = ", ".join(sorted(ALLOWED_CONTAINER_ARGS))
    index = 0
    while index < len(words):
        word, where = words[index], (*path, index)
        index += 1
        if not isinstance(word, str):
            out.append((where, "must be a string"))
            continue
        problem = control_problem(word)
        if problem is not None:
            out.append((where, problem))
            continue
        flag, has_value, value = word.partition("=")
        spec = ALLOWED_CONTAINER_ARGS.get(flag)
        if spec is None:
            why = _SET_BY_ROLE.get(flag)
            if why is not None:
                out.append((where, f"{word}: {why}"))
            elif word.startswith("-"):
                out.append((where, f"{flag} is not among the allowed docker run options ({allowed})"))
            else:
                out.append((where, f"{word!r} is no option's value; allowed options: {allowed}"))
            continue
        if not spec.takes_value:
            if has_value:
                out.append((where, f"{flag} takes no value"))
            continue
        if not has_value:
            if index >= len(words) or not isinstance(words[index], str):
                out.append((where, f"{flag} needs a value, e.g. {spec.example}"))
                continue
            value, where = str(words[index]), (*path, index)
            index += 1
        if spec.pattern is not None and not spec.pattern.fullmatch(value):
            out.append((where, f"{flag} {value!r}: not a value it may take here, e.g. {spec.example}"))
    return out


# --- numbers ----------------------------------------------------------------------------------------------

WEEK_S = 7 * 24 * 3600


@dataclass(frozen=True)
class Limit:
    """The range a role's number may take (argument specs type numbers but bound none)."""

    low: float
    high: float
    low_open: bool = False  # True: the value must be above ``low``

    def problem(self, value: object) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None  # the type check says it
        if not math.isfinite(value):
            return "must be a finite number"
        if (value <= self.low) if self.low_open else (value < self.low):
            return f"must be {'above' if self.low_open else 'at least'} {_num(self.low)}"
        if value > self.high:
            return f"must be at most {_num(self.high)}"
        return None


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


PORT = Limit(1, 65535)
SECONDS = Limit(0, WEEK_S, low_open=True)
"""A wait or timeout: above 0, at most a week (systemd's TimeoutStartSec and docker's --health-start-period
take far more; a longer wait is a typo)."""
SECONDS_OR_ZERO = Limit(0, WEEK_S)
COUNT = Limit(1, 10_000)
MEBIBYTES = Limit(0, 64 * 1024 * 1024)

ROLE_LIMITS: dict[str, Limit] = {
    "ascend_driver_reboot_timeout": SECONDS,
    "ascend_driver_verify_delay": SECONDS_OR_ZERO,
    "ascend_driver_verify_retries": COUNT,
    "container_runtime_verify_timeout": SECONDS,
    "hccn_config_devices": Limit(1, 16),
    "hccn_config_first_host": Limit(1, 2**24 - 2),
    "hccn_config_node_index": Limit(0, 10_000),
    "hccn_gate_link_threshold": Limit(0, 1),
    "hccn_gate_ping_count": COUNT,
    "monitoring_node_exporter_port": PORT,
    "monitoring_npu_exporter_port": PORT,
    "monitoring_npu_exporter_update_time": SECONDS,
    "monitoring_ttft_slo_ms": Limit(0, WEEK_S * 1000, low_open=True),
    "vllm_serve_completion_timeout_s": SECONDS,
    "vllm_serve_drain_poll_s": SECONDS,
    "vllm_serve_drain_seen_s": SECONDS_OR_ZERO,
    "vllm_serve_drain_timeout_s": SECONDS_OR_ZERO,
    "vllm_serve_lb_check_fall": COUNT,
    "vllm_serve_lb_check_interval_s": SECONDS,
    "vllm_serve_lb_check_rise": COUNT,
    "vllm_serve_load_budget_s": SECONDS,
    "vllm_serve_log_lines": COUNT,
    "vllm_serve_min_free_mb": MEBIBYTES,
    "vllm_serve_model_reserve_mb": MEBIBYTES,
    "vllm_serve_poll_s": SECONDS,
    "vllm_serve_ready_port": PORT,
    "vllm_serve_restart_sec": SECONDS_OR_ZERO,
    "vllm_serve_smoke_timeout_s": SECONDS,
    "vllm_serve_stop_timeout_s": SECONDS,
    "vllm_serve_undrain_seen_s": SECONDS_OR_ZERO,
}
"""Every number a role's argument spec declares (``int`` or ``float``), and its range; a unit test keeps
this table and the argument specs in step."""
SUBOPTION_LIMITS: dict[str, dict[str, Limit]] = {
    "vllm_serve_bench_gate": {
        "num_prompts": COUNT,
        "max_concurrency": COUNT,
        "fixed_output_len": COUNT,
        "num_warmups": Limit(0, 10_000),
        "timeout_s": SECONDS,
    },
}


def limit_problems(name: str, value: Any) -> list[tuple[Path_, str]]:
    """The range problems of role variable ``name`` (and of its suboptions)."""
    out: list[tuple[Path_, str]] = []
    limit = ROLE_LIMITS.get(name)
    if limit is not None:
        problem = limit.problem(value)
        if problem is not None:
            out.append(((name,), problem))
    if isinstance(value, Mapping):
        for key, sub in SUBOPTION_LIMITS.get(name, {}).items():
            if key in value:
                problem = sub.problem(value[key])
                if problem is not None:
                    out.append(((name, key), problem))
    return out


# --- variable names in other scripts ----------------------------------------------------------------------

_CONFUSABLES = str.maketrans(
    {
        # Cyrillic and Greek letters drawn like Latin ones (Unicode's confusables.txt, the lower-case ones a
        # variable name can hold).
        "а": "a", "в": "b", "е": "e", "ё": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p", "с": "c",
        "т": "t", "у": "y", "х": "x", "і": "i", "ј": "j", "ѕ": "s", "ԁ": "d", "ԛ": "q", "ԝ": "w", "ɡ": "g",
        "α": "a", "ο": "o", "ν": "v", "ρ": "p", "τ": "t", "ι": "i", "κ": "k", "υ": "u", "χ": "x",
        "ı": "i",
    }
)  # fmt: skip


def ascii_skeleton(name: str) -> str:
    """``name`` as it reads: compatibility forms folded (NFKC: full-width letters, ligatures), look-alike
    letters of other scripts mapped to the Latin ones."""
    return unicodedata.normalize("NFKC", name).translate(_CONFUSABLES)


def lookalike_problem(name: str) -> str | None:
    """Why a variable name with characters outside ASCII is refused: it names no variable Ansible or
    provision reads, but reads like one (``vllm_sеrve_env`` with a Cyrillic е)."""
    if name.isascii():
        return None
    odd = [char for char in name if not char.isascii()]
    shown = ", ".join(f"{char!r} (U+{ord(char):04X} {unicodedata.name(char, '?')})" for char in odd[:3])
    return (
        f"variable name holds characters outside ASCII: {shown}; it reads as {ascii_skeleton(name)!r} but "
        "names another variable"
    )
