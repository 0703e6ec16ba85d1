"""``vllm bench serve``'s command lines, as ``provision bench`` reads them.

A copied vLLM command line must run unchanged (``provision bench`` in place of ``vllm bench serve``), so
before click parses the arguments they are brought into click's shape, the way vLLM's argparse (its
``FlexibleArgumentParser``) reads them:

* ``--dataset_path`` is ``--dataset-path`` (vLLM accepts underscores in long option names);
* ``--goodput ttft:500 tpot:50``, ``--header K=V K=V``, ``--metadata K=V ...`` take several values
  (argparse's ``nargs``): each value becomes its own ``--goodput VALUE``. The values are the words after
  the option up to the next option; a URL or an existing file there is left to be the target;
* an option of vLLM's that provision has no equivalent for is refused (exit 2) with what to use instead,
  before anything is parsed or sent;
* ``--save-result FILE`` (provision's meaning before it took vLLM's flag) is refused naming
  ``--result-filename``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from typer.core import TyperCommand

from provision.errors import InputError

MULTI_VALUE = ("--goodput", "--header", "--metadata")
"""vLLM's options with ``nargs``: each takes the words after it up to the next option."""

BACKENDS = {"vllm": "completions", "openai": "completions", "openai-chat": "chat"}
"""vLLM's ``--backend`` values provision sends (the request format): completions or chat."""

DATASETS_REFUSED = (
    "burstgpt", "sonnet", "random-mm", "random-rerank", "hf", "custom_audio", "custom_image", "custom_mm",
    "prefix_repetition", "spec_bench", "speed_bench", "timed_trace",
)  # fmt: skip
"""vLLM's datasets provision does not build (it has random, sharegpt, custom and its own fixed)."""

_REPORT = "provision's plots: --report DIR (latency CDFs, sweep plots)"
_DATASET = "a dataset provision does not build: --dataset-name random, sharegpt, custom or fixed"

REFUSED: dict[str, str] = {
    "--profile": "no equivalent: provision bench measures from the client and starts no server profiler",
    "--plot-timeline": _REPORT,
    "--plot-dataset-stats": _REPORT,
    "--timeline-itl-thresholds": _REPORT,
    "--ramp-up-strategy": "one run per rate instead: --sweep-rate 1,2,4,inf",
    "--ramp-up-start-rps": "one run per rate instead: --sweep-rate 1,2,4,inf",
    "--ramp-up-end-rps": "one run per rate instead: --sweep-rate 1,2,4,inf",
    "--probe-request-rate": "no equivalent: provision sends no probe requests beside the workload",
    "--lora-modules": "one served name per run: --model ADAPTER (as /v1/models lists it)",
    "--lora-assignment": "one served name per run: --model ADAPTER (as /v1/models lists it)",
    "--use-beam-search": "no equivalent: provision bench measures sampled generation",
    "--request-id-prefix": "no equivalent: the server assigns the request ids",
    "--insecure": "no equivalent: provision checks the server's TLS certificate",
    "--skip-tokenizer-init": "no equivalent: without --tokenizer, provision already uses the server's "
    "/tokenize and loads no tokenizer",
    "--self-timed": "timed_trace only, " + _DATASET,
    "--no-self-timed": "timed_trace only, " + _DATASET,
    "--chat-template-kwargs": "the server applies the chat template: --backend openai-chat with "
    "--extra-body '{\"chat_template_kwargs\": {...}}'",
    "--random-batch-size": "batched prompts are for embedding backends; provision measures generation",
    "--no-reranker": "random-rerank only, " + _DATASET,
    "--enable-multimodal-chat": "no equivalent: provision sends text prompts only",
    "--custom-ensure-client-side-data": "no equivalent: provision sends text prompts only",
}
"""vLLM ``bench serve`` options provision refuses, and what to use instead."""

REFUSED_PREFIXES: dict[str, str] = {
    prefix: f"{prefix[2:].rstrip('-')} only, {_DATASET}"
    for prefix in (
        "--random-mm-", "--hf-", "--prefix-repetition-", "--spec-bench-", "--speed-bench-",
        "--timed-trace-", "--blazedit-", "--asr-", "--bfcl-",
    )
}  # fmt: skip

_SLO_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*:[^/]*$")
_KV_WORD = re.compile(r"^[^=\s-][^=\s]*=")


def _option_name(arg: str) -> str:
    """``--dataset_path=x`` → ``--dataset-path`` (vLLM's argparse takes either spelling)."""
    name = arg.split("=", 1)[0]
    return "--" + name[2:].replace("_", "-")


def _is_value(word: str, option: str) -> bool:
    """Whether ``word`` after a multi-value ``option`` is one of its values (vLLM's ``nargs``), not the
    target: an option, a URL or an existing file ends the values."""
    if word.startswith("-") or "://" in word or Path(word).exists():
        return False
    return bool(_SLO_WORD.match(word) if option == "--goodput" else _KV_WORD.match(word))


def normalise(args: Sequence[str]) -> list[str]:
    """``args`` as click can parse them (the module's docstring); InputError for a refused option."""
    out: list[str] = []
    words = list(args)
    i = 0
    while i < len(words):
        arg = words[i]
        i += 1
        if arg == "--":
            out += words[i - 1 :]
            break
        if not arg.startswith("--") or arg == "--":
            out.append(arg)
            continue
        name = _option_name(arg)
        _refuse(name)
        value = arg.split("=", 1)[1] if "=" in arg else None
        if name == "--save-result" and (
            value is not None or (i < len(words) and words[i].lower().endswith(".json"))
        ):
            given = value if value is not None else words[i]
            raise InputError(
                f"--save-result {given}: --save-result is vLLM's flag now (the file is named as vLLM "
                f"names it); give --save-result --result-filename {given} (and --save-detailed for every "
                "request's timings)"
            )
        if name in MULTI_VALUE:
            values = [value] if value is not None else []
            while i < len(words) and (not values or _is_value(words[i], name)):
                if words[i].startswith("-") and not values:
                    break
                values.append(words[i])
                i += 1
            if not values:
                out.append(name)  # click names the missing value
            for item in values:
                out += [name, item]
            continue
        out.append(name if value is None else f"{name}={value}")
    return out


def _refuse(name: str) -> None:
    why = REFUSED.get(name) or next(
        (text for prefix, text in REFUSED_PREFIXES.items() if name.startswith(prefix)), None
    )
    if why is not None:
        raise InputError(f"{name} (vllm bench serve): {why}")


class VllmCommandLine(TyperCommand):
    """``provision bench``: vLLM's command lines normalised (:func:`normalise`) before click parses them."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # typer's vendored click.Context
        if "--help" in args:
            return super().parse_args(ctx, args)
        return super().parse_args(ctx, normalise(args))


def goodput(values: Sequence[str]) -> str | None:
    """``--goodput ttft:500 tpot:50`` (vLLM's ``KEY:VALUE`` words) as one ``--slo`` text."""
    return ",".join(values) if values else None


def pairs(values: Sequence[str], option: str) -> dict[str, str]:
    """``KEY=VALUE`` words (``--header``, ``--metadata``) → a mapping; InputError naming the word."""
    found: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"{option} {item}: not KEY=VALUE")
        found[key.strip()] = value.strip()
    return found


def json_object(text: str | None, option: str) -> dict[str, Any]:
    """A JSON object given on the command line (``--extra-body``); InputError naming the option."""
    import json

    if text is None:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{option} {text}: not JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise InputError(f"{option} {text}: not a JSON object")
    return data
