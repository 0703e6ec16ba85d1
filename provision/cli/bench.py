"""``provision bench TARGET``: serving performance as ``vllm bench serve`` measures it, plus J/token.

TARGET is a server's base URL, or an inventory: then every ready instance (``provision serve status``'s
gate; ``--limit``, ``--pool``) is benchmarked in turn, and the NPUs of its pool are sampled for power on
the nodes that serve it. Options and ``--json`` / ``--save-result`` keys are ``vllm bench serve``'s where it
has the concept. ``--baseline`` compares each run with a previous output's (:mod:`provision.bench.baseline`),
``--report`` writes a folder with plots (:mod:`provision.bench.report`). Metric definitions: docs/bench.md.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

import typer

from provision.bench import baseline as gate
from provision.bench import power, report
from provision.bench.client import (
    ENDPOINT_TYPES,
    LocalTokenizer,
    ServerTokenizer,
    Target,
    Unreachable,
    served_model,
)
from provision.bench.datasets import (
    DATASETS,
    DEFAULT_FIXED_PROMPT,
    SampleRequest,
    Tokenizer,
    check_random,
    custom_prompts,
    custom_requests,
    fixed_requests,
    random_requests,
    range_ratios,
    sharegpt_pairs,
    sharegpt_requests,
)
from provision.bench.metrics import (
    DEFAULT_PERCENTILES,
    LATENCIES,
    metric_percentiles,
    parse_slo,
    percentile_metrics,
)
from provision.bench.run import RunResult, Workload, sweep
from provision.cli import _bench_vllm, _inputs
from provision.cli._bench_vllm import BACKENDS, DATASETS_REFUSED
from provision.cli.console import Console, is_interactive
from provision.errors import InputError

NO_POWER_FOR_URL = "a URL names no NPUs: give --power-from INVENTORY (the inventory that serves it)"


@dataclass(frozen=True)
class Instance:
    """One server to benchmark, and the NPUs (host -> ids) whose power is its energy."""

    name: str
    target: Target
    devices: dict[str, list[int]]
    power_label: str | None = None
    """The serving hosts' ``provision_power_label`` (e.g. ``simulated``), shown beside their J/token."""


# ------------------------------------------------------------------------------------------ options


def _positive_list(text: str | None, option: str, *, integer: bool) -> list[float] | None:
    if text is None:
        return None
    kind = "whole numbers of requests above 0" if integer else "requests/s above 0 (or inf)"
    if not text.strip():
        raise InputError(f"{option} {text!r}: no value given (e.g. 1,4,16)")
    values: list[float] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise InputError(f"{option} {text}: an empty item; give {kind}, e.g. 1,4,16")
        try:
            value = math.inf if not integer and part.lower() == "inf" else float(part)
        except ValueError:
            value = math.nan
        if not (value > 0) or (integer and not value.is_integer()):
            raise InputError(f"{option} {text}: {part!r} is not one of {kind}")
        values.append(value)
    return values


def _target(target: str | None, base_url: str | None, host: str | None, port: int | None) -> str:
    """The server or inventory to load: TARGET, else vLLM's ``--base-url``, else ``http://HOST:PORT``
    (vLLM's defaults 127.0.0.1 and 8000)."""
    if target is not None and (base_url is not None or host is not None or port is not None):
        given = "--base-url" if base_url is not None else "--host/--port"
        raise InputError(f"{target} and {given}: give the server once")
    if target is not None:
        return target
    if base_url is not None:  # vLLM: --base-url wins over --host/--port
        return base_url
    shown = host or "127.0.0.1"
    return f"http://{f'[{shown}]' if ':' in shown else shown}:{port or 8000}"


def _request_kind(backend: str | None, endpoint_type: str | None) -> str:
    """completions or chat, from vLLM's ``--backend`` or provision's ``--endpoint-type``."""
    if endpoint_type is not None and endpoint_type not in ENDPOINT_TYPES:
        raise InputError(f"--endpoint-type {endpoint_type}: one of {', '.join(ENDPOINT_TYPES)}")
    if backend is None:
        return endpoint_type or "completions"
    if backend not in BACKENDS:
        raise InputError(
            f"--backend {backend}: provision bench measures generation: vllm or openai (completions), "
            "openai-chat (chat completions)"
        )
    if endpoint_type is not None and endpoint_type != BACKENDS[backend]:
        raise InputError(f"--backend {backend} and --endpoint-type {endpoint_type}: give one of them")
    return BACKENDS[backend]


def _endpoint_path(endpoint: str | None, kind: str, backend: str | None) -> str | None:
    """vLLM's ``--endpoint``: a path whose end names the API the backend speaks (vLLM checks the same)."""
    if endpoint is None:
        return None
    suffix = "chat/completions" if kind == "chat" else "completions"
    if not endpoint.startswith("/"):
        raise InputError(f"--endpoint {endpoint}: a path on the server, e.g. {ENDPOINT_TYPES[kind]}")
    if not endpoint.rstrip("/").endswith(suffix):
        raise InputError(
            f"--endpoint {endpoint}: --backend {backend or ('openai-chat' if kind == 'chat' else 'openai')} "
            f"sends to a path ending in {suffix}"
        )
    return endpoint


def _dataset_source(
    dataset: str, path: Path | None, custom_output_len: int, as_written: bool
) -> list[tuple[str, str]] | list[str] | None:
    """The dataset file read and checked now, before any request: sharegpt's pairs, custom's prompts."""
    if dataset in ("sharegpt", "custom"):
        if path is None:
            raise InputError(f"--dataset-name {dataset} needs --dataset-path FILE")
        if dataset == "sharegpt":
            return sharegpt_pairs(path)
        if custom_output_len < 1:
            raise InputError(f"--custom-output-len {custom_output_len}: must be at least 1")
        if not as_written:
            raise InputError(
                "--dataset-name custom: provision applies no chat template to the prompts: give "
                "--skip-chat-template (sent as written), or --backend openai-chat (the server applies it)"
            )
        return custom_prompts(path)
    if path is not None:
        raise InputError(f"--dataset-path applies to --dataset-name sharegpt or custom, not {dataset}")
    return None


def _url(text: str) -> str:
    """A base URL checked like ``provision serve status`` checks one; without a trailing slash."""
    from provision.cli._endpoints import endpoint

    return endpoint(text, None, None).base


def _wait_ready(url: str, model: str | None, api_key: str | None, budget_s: int) -> None:
    """vLLM's ``--ready-check-timeout-sec``: the server's health gate, for at most ``budget_s``."""
    from provision.serving.health import Endpoint, wait_ready

    verdict = wait_ready(Endpoint(url, model, api_key), budget_s=float(budget_s))
    if not verdict.ready:
        raise Unreachable(f"{url}: not ready within --ready-check-timeout-sec {budget_s}: {verdict.message}")


def _tokenizer(path: str | None, target: Target) -> Tokenizer:
    return LocalTokenizer(path) if path else ServerTokenizer(target.url, target.model, target.api_key)


def _requests(
    dataset: str,
    source: list[tuple[str, str]] | list[str] | None,
    count: int,
    tokenizer: Tokenizer,
    *,
    input_len: int,
    output_len: int,
    range_ratio: float,
    output_range_ratio: float,
    prefix_len: int,
    sharegpt_output_len: int | None,
    custom_output_len: int,
    fixed_prompt: str,
    fixed_output_len: int,
    seed: int,
    shuffle: bool,
    oversample: bool,
) -> list[SampleRequest]:
    if dataset == "sharegpt":
        pairs = [pair for pair in source or [] if isinstance(pair, tuple)]
        return sharegpt_requests(
            pairs, count, tokenizer, output_len=sharegpt_output_len, seed=seed, shuffle=shuffle,
            oversample=oversample,
        )  # fmt: skip
    if dataset == "custom":
        prompts = [p for p in source or [] if isinstance(p, str)]
        return custom_requests(
            prompts, count, tokenizer, output_len=custom_output_len, seed=seed, shuffle=shuffle,
            oversample=oversample,
        )  # fmt: skip
    if dataset == "fixed":
        return fixed_requests(count, fixed_prompt, fixed_output_len, tokenizer)
    return random_requests(
        tokenizer, count, input_len=input_len, output_len=output_len, range_ratio=range_ratio, seed=seed,
        output_range_ratio=output_range_ratio, prefix_len=prefix_len,
    )  # fmt: skip


def _result_file(result_dir: Path | None, result_filename: str | None) -> Path:
    """Where ``--save-result`` writes: ``--result-dir`` (made now, as vLLM makes it) joined with
    ``--result-filename``, or with the name vLLM gives (filled in after the run: the model is not known
    yet). Checked before any request."""
    folder = result_dir or Path()
    if result_dir is not None:
        if result_dir.exists() and not result_dir.is_dir():
            raise InputError(f"--result-dir {result_dir}: not a folder")
        try:
            result_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"--result-dir {result_dir}: cannot make it: {exc.strerror or exc}") from None
    if result_filename is None:
        return folder / _VLLM_NAME
    if not result_filename.strip() or result_filename.endswith("/"):
        raise InputError(f"--result-filename {result_filename!r}: not a file name")
    file = folder / result_filename
    if not file.parent.is_dir():
        raise InputError(f"--result-filename {result_filename}: no such folder {file.parent}")
    if file.is_dir():
        raise InputError(f"--result-filename {result_filename}: {file} is a folder")
    return file


_VLLM_NAME = "{vllm}"
"""Stands for the file name vLLM gives a result (:func:`_vllm_name`) until the model is known."""


def _vllm_name(summary: dict[str, Any], label: str | None) -> str:
    """vLLM's ``LABEL-RATEqps[-concurrencyN]-MODEL-DATE.json`` (its ``compute_result_filename``)."""
    rate = summary["request_rate"]
    concurrency = summary["max_concurrency"]
    model_id = str(summary["model_id"]).split("/")[-1]
    return (
        f"{label or summary['backend']}-{float(rate)}qps"
        f"{f'-concurrency{concurrency}' if concurrency is not None else ''}-{model_id}-{summary['date']}.json"
    )


def _save(
    rows: Sequence[tuple[str, RunResult]], file: Path, *, detailed: bool, append: bool, label: str | None
) -> Path:
    """The result as vLLM writes it: one run's object (several runs: a list of them; with ``append``, one
    object a line after what the file holds). Returns the file written."""
    saved = [result.saved(detailed) for _, result in rows]
    if file.name == _VLLM_NAME:
        file = file.with_name(_vllm_name(rows[0][1].summary, label))
    if append:
        with file.open("a+", encoding="utf-8") as out:
            for run in saved:
                if out.tell() != 0:
                    out.write("\n")
                out.write(json.dumps(run))
        return file
    file.write_text(json.dumps(saved[0] if len(saved) == 1 else saved, indent=2) + "\n", encoding="utf-8")
    return file


# ------------------------------------------------------------------------------------------ inventory


def _instances_of(
    inventory: Path,
    *,
    limit: str | None,
    pool: str | None,
    api_key: str | None,
    endpoint_type: str,
    model: str | None,
) -> tuple[list[Instance], list[str]]:
    """The ready instances of an inventory (the health gate's verdicts) and a line for each skipped one."""
    from provision.cli._endpoints import probe_inventory
    from provision.inventory.load import host_var
    from provision.inventory.validate import check as check_inventory
    from provision.serving.health import State, serves_api
    from provision.serving.plan import pool_plans

    loaded = check_inventory(inventory)  # bad input: exit 2, no host contacted
    limit = _inputs.limit(limit, loaded)
    rows = [r for r in probe_inventory(inventory, api_key=api_key, limit=limit) if serves_api(r.get("role"))]
    if pool is not None:
        pools = sorted({str(r["pool"]) for r in rows if r.get("pool")})
        rows = [r for r in rows if r.get("pool") == pool]
        if not rows:
            raise InputError(
                f"--pool {pool}: no instance of {inventory} serves it (pools: {', '.join(pools) or 'none'})"
            )
    found: list[Instance] = []
    skipped: list[str] = []
    for row in rows:
        name = f"{row['host']}/{row.get('pool') or '-'}"
        if row["state"] != State.READY.value:
            skipped.append(f"{name}: {row['state']}: {row.get('reason', '')}")
            continue
        if model is not None and row.get("model") != model:
            skipped.append(f"{name}: serves {row.get('model')}, not --model {model}")
            continue
        key = api_key or host_var(loaded.hosts, str(row["host"]), "vllm_serve_api_key")
        devices: dict[str, list[int]] = {}
        for host in row.get("hosts") or [row["host"]]:
            for inst in pool_plans(
                host_var(loaded.hosts, host, "npu_pools_list", []),
                host_var(loaded.hosts, host, "vllm_serve_profiles", {}),
            ):
                if inst.pool == row.get("pool"):
                    devices[str(host)] = list(inst.devices)
        target = Target(str(row["url"]).rstrip("/"), str(row["model"]), key or None, endpoint_type)
        labels = sorted({str(host_var(loaded.hosts, h, "provision_power_label") or "") for h in devices})
        found.append(Instance(name, target, devices, "; ".join(filter(None, labels)) or None))
    return found, skipped


# ------------------------------------------------------------------------------------------ output


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _labelled(figure: str, summary: dict[str, Any]) -> str:
    """An energy figure with the label its inventory gave those NPUs (``provision_power_label``)."""
    label = summary.get("power_label")
    return f"{figure} ({label})" if label and figure != "n/a" else figure


def _table(rows: Sequence[tuple[str, RunResult]]) -> None:
    from rich.table import Table

    out = Console.for_stream(sys.stdout)
    table = Table(title="provision bench", show_lines=False)
    headers = (
        "target", "conc", "rate", "ok/fail", "req/s", "out tok/s", "TTFT med", "TTFT p99",
        "TPOT med", "TPOT p99", "ITL med", "E2E med", "J/token",
    )  # fmt: skip
    for header in headers:
        table.add_column(header, justify="left" if header == "target" else "right")
    for name, result in rows:
        s = result.summary
        table.add_row(
            name,
            _fmt(s["max_concurrency"] or "-"),
            _fmt(s["request_rate"]),
            f"{s['completed']}/{s['failed']}",
            _fmt(s["request_throughput"], 2),
            _fmt(s["output_throughput"], 1),
            _fmt(s.get("median_ttft_ms")),
            _fmt(s.get("p99_ttft_ms")),
            _fmt(s.get("median_tpot_ms")),
            _fmt(s.get("p99_tpot_ms")),
            _fmt(s.get("median_itl_ms")),
            _fmt(s.get("median_e2el_ms")),
            _labelled(_fmt(s["j_per_output_token"], 3), s),
        )
    out.rich.print(table)
    out.line(
        "times in ms; tokens counted by the server (usage); J/token = NPU energy over the run / output tokens"
    )
    for name, result in rows:
        s = result.summary
        energy = _labelled(f"{_fmt(s['energy_j'], 1)} J", s) if s["energy_j"] is not None else "n/a"
        out.line(
            f"{name} (conc {s['max_concurrency'] or '-'}, rate {s['request_rate']}): "
            f"energy {energy}: {s['energy_note']}"
        )
        if s.get("request_goodput") is not None:
            out.line(f"{name}: goodput {s['request_goodput']:.2f} req/s within the SLO")
        for error in sorted(set(result.failures))[:3]:
            out.line(f"{name}: failed: {error.strip().splitlines()[0] if error.strip() else 'no detail'}")


def _progress_bar(enabled: bool) -> tuple[Any, Any]:
    """A rich progress bar on stderr (a terminal only), and the callback that advances it."""
    if not enabled:
        return None, None
    from rich.progress import Progress

    bar = Progress(console=Console.for_stream(sys.stderr).rich, transient=True)
    task = bar.add_task("requests", total=None)

    def advance(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total)

    return bar, advance


# ------------------------------------------------------------------------------------------ command


def bench(
    target: str | None = typer.Argument(
        None,
        metavar="[URL | INVENTORY]",
        show_default=False,
        help="A server's base URL (http://host:8000), or an inventory: every ready instance "
        "[default: --base-url, else http://--host:--port, as vllm bench serve].",
    ),
    base_url: str | None = typer.Option(
        None, "--base-url", help="vLLM's: the server's base URL (instead of URL)."
    ),
    host: str | None = typer.Option(None, "--host", help="vLLM's: the server's host [default: 127.0.0.1]."),
    port: int | None = typer.Option(
        None, "--port", min=1, max=65535, help="vLLM's: the server's port [default: 8000]."
    ),
    backend: str | None = typer.Option(
        None,
        "--backend",
        metavar="vllm|openai|openai-chat",
        help="vLLM's: the request format: vllm and openai send completions, openai-chat chat completions.",
    ),
    endpoint: str | None = typer.Option(
        None, "--endpoint", help="vLLM's: the API path [default: /v1/completions or /v1/chat/completions]."
    ),
    model: str | None = typer.Option(
        None, "--model", help="Served model name [default: the first /v1/models lists]."
    ),
    served_model_name: str | None = typer.Option(
        None,
        "--served-model-name",
        help="vLLM's: the name sent in the requests, when --model is the model's id for the result.",
    ),
    tokenizer: str | None = typer.Option(
        None,
        "--tokenizer",
        help="A tokenizer.json (or its folder) for the prompts [default: the server's /tokenize].",
    ),
    tokenizer_mode: str = typer.Option(
        "auto", "--tokenizer-mode", help="vLLM's: auto or hf (both: the model's own tokenizer)."
    ),
    trust_remote_code: bool = typer.Option(
        False, "--trust-remote-code", help="vLLM's; no effect: no tokenizer code is loaded."
    ),
    dataset_name: str = typer.Option("random", "--dataset-name", help=f"One of: {', '.join(DATASETS)}."),
    dataset_path: Path | None = typer.Option(
        None, "--dataset-path", help='sharegpt: JSON or JSON Lines; custom: JSON Lines of {"prompt": ...}.'
    ),
    no_stream: bool = typer.Option(
        False, "--no-stream", help="vLLM's (Hugging Face datasets); no effect: files are read whole."
    ),
    disable_shuffle: bool = typer.Option(
        False, "--disable-shuffle", help="sharegpt, custom: the file's order, not shuffled."
    ),
    no_oversample: bool = typer.Option(
        False, "--no-oversample", help="sharegpt, custom: fewer requests when the file is short."
    ),
    skip_chat_template: bool = typer.Option(
        False, "--skip-chat-template", help="custom: the prompts as written (provision applies no template)."
    ),
    input_len: int | None = typer.Option(None, "--input-len", help="vLLM's: sets --random-input-len."),
    output_len: int | None = typer.Option(
        None, "--output-len", help="vLLM's: sets the output length of every dataset."
    ),
    random_input_len: int = typer.Option(1024, "--random-input-len", help="Prompt tokens (random dataset)."),
    random_output_len: int = typer.Option(128, "--random-output-len", help="Output tokens (random dataset)."),
    random_range_ratio: str = typer.Option(
        "0.0",
        "--random-range-ratio",
        help='Lengths drawn from L*(1±r), r in [0, 1); or {"input": r, "output": r}.',
    ),
    random_prefix_len: int = typer.Option(
        0, "--random-prefix-len", help="Random tokens every random prompt starts with (the same for all)."
    ),
    sharegpt_output_len: int | None = typer.Option(
        None, "--sharegpt-output-len", help="Output tokens (sharegpt)."
    ),
    custom_output_len: int = typer.Option(256, "--custom-output-len", help="Output tokens (custom)."),
    fixed_prompt: str = typer.Option(
        DEFAULT_FIXED_PROMPT, "--fixed-prompt", help="The prompt (fixed dataset)."
    ),
    fixed_output_len: int = typer.Option(128, "--fixed-output-len", help="Output tokens (fixed dataset)."),
    num_prompts: int = typer.Option(1000, "--num-prompts", min=1, help="Requests in the run."),
    request_rate: float = typer.Option(
        math.inf, "--request-rate", help="Requests/s (Poisson; inf: all at once)."
    ),
    burstiness: float = typer.Option(
        1.0, "--burstiness", help="Gamma shape of the arrivals: 1 Poisson, <1 burstier."
    ),
    max_concurrency: int | None = typer.Option(
        None, "--max-concurrency", min=1, help="Requests in flight at most."
    ),
    ignore_eos: bool = typer.Option(
        False,
        "--ignore-eos",
        help="Generate every requested token (vLLM ignore_eos); always on with --dataset-name random, "
        "as vLLM.",
    ),
    num_warmups: int = typer.Option(0, "--num-warmups", min=0, help="Warm-up requests first, not counted."),
    endpoint_type: str | None = typer.Option(
        None,
        "--endpoint-type",
        help="completions or chat (--backend openai / openai-chat) [default: completions].",
    ),
    temperature: float | None = typer.Option(None, "--temperature", help="vLLM's sampling parameter."),
    top_p: float | None = typer.Option(None, "--top-p", help="vLLM's sampling parameter."),
    top_k: int | None = typer.Option(None, "--top-k", help="vLLM's sampling parameter."),
    min_p: float | None = typer.Option(None, "--min-p", help="vLLM's sampling parameter."),
    frequency_penalty: float | None = typer.Option(
        None, "--frequency-penalty", help="vLLM's sampling parameter."
    ),
    presence_penalty: float | None = typer.Option(
        None, "--presence-penalty", help="vLLM's sampling parameter."
    ),
    repetition_penalty: float | None = typer.Option(
        None, "--repetition-penalty", help="vLLM's sampling parameter."
    ),
    logprobs: int | None = typer.Option(None, "--logprobs", min=0, help="vLLM's: logprobs per token."),
    extra_body: str | None = typer.Option(
        None, "--extra-body", help="vLLM's: a JSON object merged into every request's body."
    ),
    header: list[str] = typer.Option(
        [], "--header", metavar="KEY=VALUE ...", help="vLLM's: headers sent with every request."
    ),
    sweep_concurrency: str | None = typer.Option(
        None, "--sweep-concurrency", help="Runs at each, e.g. 1,4,16."
    ),
    sweep_rate: str | None = typer.Option(
        None, "--sweep-rate", help="Runs at each request rate, e.g. 1,2,inf."
    ),
    slo: str | None = typer.Option(
        None, "--slo", help="Goodput SLOs in ms, e.g. ttft=500,tpot=50 (also e2el)."
    ),
    goodput_slos: list[str] = typer.Option(
        [], "--goodput", metavar="KEY:MS ...", help="vLLM's goodput SLOs: ttft:500 tpot:50 (as --slo)."
    ),
    percentile_metrics_text: str | None = typer.Option(
        None,
        "--percentile-metrics",
        help="vLLM's: the latencies reported, of ttft,tpot,itl,e2el [default: all four].",
    ),
    metric_percentiles_text: str | None = typer.Option(
        None, "--metric-percentiles", help="vLLM's: the percentiles reported, e.g. 50,99 [default: 90,99]."
    ),
    ready_check_timeout_sec: int = typer.Option(
        0, "--ready-check-timeout-sec", min=0, help="vLLM's: wait this long for a URL's server to be ready."
    ),
    timeout: float = typer.Option(
        1800.0, "--timeout", callback=_inputs.seconds, help="Seconds a run may take at most."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the prompts and arrivals."),
    api_key: str | None = typer.Option(
        None,
        "--api-key",
        envvar="PROVISION_API_KEY",
        callback=_inputs.api_key_option,
        show_default=False,
        help="Bearer key [default: vllm_serve_api_key; a URL: $OPENAI_API_KEY]; on the command line every "
        "local user can read it: prefer --api-key-file.",
    ),
    api_key_file: Path | None = typer.Option(
        None,
        "--api-key-file",
        envvar="PROVISION_API_KEY_FILE",
        callback=_inputs.api_key_file_option,
        show_default=False,
        help="File whose first line is the bearer key.",
    ),
    limit: str | None = typer.Option(None, "--limit", "-l", help="INVENTORY: these hosts/groups only."),
    pool: str | None = typer.Option(None, "--pool", help="INVENTORY: this pool's instances only."),
    power_from: Path | None = typer.Option(
        None, "--power-from", help="URL: the inventory whose NPUs serve it (J/token)."
    ),
    power_interval: float = typer.Option(
        power.DEFAULT_INTERVAL_S,
        "--power-interval",
        callback=_inputs.seconds,
        help="Seconds between power samples.",
    ),
    as_json: bool = typer.Option(False, "--json", help="The summary as JSON (vLLM's keys) on stdout."),
    disable_tqdm: bool = typer.Option(False, "--disable-tqdm", help="vLLM's: no progress bar."),
    save_result: bool = typer.Option(
        False, "--save-result", help="vLLM's: write the result to --result-dir/--result-filename."
    ),
    save_detailed: bool = typer.Option(
        False, "--save-detailed", help="vLLM's: with every request's timings and text."
    ),
    append_result: bool = typer.Option(
        False, "--append-result", help="vLLM's: append the result to the file (a JSON object a line)."
    ),
    result_dir: Path | None = typer.Option(
        None, "--result-dir", help="vLLM's: the folder of the result file (made) [default: here]."
    ),
    result_filename: str | None = typer.Option(
        None,
        "--result-filename",
        help="vLLM's [default: LABEL-RATEqps[-concurrencyN]-MODEL-DATE.json].",
    ),
    label: str | None = typer.Option(
        None, "--label", help="vLLM's: the result's label, the file name's prefix [default: --backend]."
    ),
    metadata: list[str] = typer.Option(
        [], "--metadata", metavar="KEY=VALUE ...", help="vLLM's: keys added to the result."
    ),
    baseline: Path | None = typer.Option(
        None, "--baseline", help="A previous --json/--save-result: exit 1 on a regression beyond the bound."
    ),
    max_regression: str | None = typer.Option(
        None, "--max-regression", help="With --baseline: the bound, e.g. 10% [default: 10%]."
    ),
    report_dir: Path | None = typer.Option(
        None, "--report", help="Write a report folder: result.json, every request's timings, plots."
    ),
) -> None:
    """Benchmark serving endpoints (TTFT, TPOT, ITL, throughput, goodput, J/token); exit 1 when a request
    failed or, with --baseline, a regression beyond --max-regression. Takes vllm bench serve's command
    lines: docs/bench.md lists its options and what each means here."""
    # ---- every option checked before any request (exit 2, the option named)
    kind = _request_kind(backend, endpoint_type)
    path = _endpoint_path(endpoint, kind, backend)
    if tokenizer_mode not in ("auto", "hf"):
        raise InputError(
            f"--tokenizer-mode {tokenizer_mode}: provision uses the model's own tokenizer (auto or hf)"
        )
    if dataset_name in DATASETS_REFUSED:
        raise InputError(
            f"--dataset-name {dataset_name}: a vllm bench serve dataset provision does not build; "
            f"one of {', '.join(DATASETS)}"
        )
    if dataset_name not in DATASETS:
        raise InputError(f"--dataset-name {dataset_name}: one of {', '.join(DATASETS)}")
    for option, length in (("--input-len", input_len), ("--output-len", output_len)):
        if length is not None and length < 1:
            raise InputError(f"{option} {length}: must be at least 1")
    if input_len is not None:  # vLLM's general lengths win over the dataset's own
        random_input_len = input_len
    if output_len is not None:
        random_output_len = custom_output_len = output_len
        sharegpt_output_len = output_len
    if sharegpt_output_len is not None and sharegpt_output_len < 1:
        raise InputError(f"--sharegpt-output-len {sharegpt_output_len}: must be at least 1")
    in_ratio, out_ratio = range_ratios(random_range_ratio)
    if dataset_name == "random":
        check_random(random_input_len, random_output_len, in_ratio, out_ratio, random_prefix_len)
        ignore_eos = True  # vLLM: a random prompt's answer runs to its drawn length
    source = _dataset_source(
        dataset_name, dataset_path, custom_output_len, skip_chat_template or kind == "chat"
    )
    if dataset_name == "fixed":
        fixed_requests(1, fixed_prompt, fixed_output_len, None)
    local_tokenizer = LocalTokenizer(tokenizer) if tokenizer else None
    if not (burstiness > 0):
        raise InputError(f"--burstiness {burstiness:g}: must be above 0")
    if not (request_rate > 0):
        raise InputError(f"--request-rate {request_rate:g}: must be above 0 (inf: all at once)")
    if sweep_concurrency and sweep_rate:
        raise InputError("--sweep-concurrency and --sweep-rate: give one of them")
    if sweep_concurrency and max_concurrency is not None:
        raise InputError("--sweep-concurrency replaces --max-concurrency: give one of them")
    if sweep_rate and math.isfinite(request_rate):
        raise InputError("--sweep-rate replaces --request-rate: give one of them")
    concurrencies = _positive_list(sweep_concurrency, "--sweep-concurrency", integer=True)
    rates = _positive_list(sweep_rate, "--sweep-rate", integer=False)
    if slo is not None and goodput_slos:
        raise InputError("--slo and --goodput: give one of them (the same SLOs)")
    slos = (
        parse_slo(slo)
        if slo is not None
        else parse_slo(" ".join(goodput_slos).replace(" ", ","), "--goodput")
        if goodput_slos
        else None
    )
    selected = percentile_metrics(percentile_metrics_text) if percentile_metrics_text else LATENCIES
    percentiles = (
        metric_percentiles(metric_percentiles_text) if metric_percentiles_text else DEFAULT_PERCENTILES
    )
    for option, path_given in (("--baseline", baseline), ("--report", report_dir)):
        if path_given is not None and ("ttft" not in selected or 99.0 not in percentiles):
            raise InputError(
                f"{option} needs p99 TTFT: --percentile-metrics must include ttft, --metric-percentiles 99"
            )
    headers = _bench_vllm.pairs(header, "--header")
    meta: dict[str, Any] = {"label": label, **_bench_vllm.pairs(metadata, "--metadata")}
    if tokenizer:
        meta["tokenizer_id"] = tokenizer
    body = {
        key: value
        for key, value in {
            "temperature": temperature,
            "top_p": top_p,
            "top_k": top_k,
            "min_p": min_p,
            "frequency_penalty": frequency_penalty,
            "presence_penalty": presence_penalty,
            "repetition_penalty": repetition_penalty,
            "logprobs": logprobs,
        }.items()
        if value is not None
    } | _bench_vllm.json_object(extra_body, "--extra-body")
    saving = save_result or append_result
    result_file = _result_file(result_dir, result_filename) if saving else None
    if not saving and (result_dir is not None or result_filename is not None or save_detailed):
        Console.for_stream(sys.stderr).line(
            "warning: --result-dir, --result-filename and --save-detailed write nothing without "
            "--save-result (as vllm bench serve)"
        )
    if max_regression is not None and baseline is None:
        raise InputError("--max-regression applies with --baseline FILE")
    bound = gate.parse_bound(max_regression if max_regression is not None else "10%")
    previous = gate.load(baseline) if baseline is not None else None
    if report_dir is not None:
        report.check(report_dir)

    given = _target(target, base_url, host, port)
    inventory = Path(given) if "://" not in given and Path(given).exists() else None
    api_key = _inputs.api_key(api_key, api_key_file, url=inventory is None)
    wanted_model = served_model_name or model
    if served_model_name is not None and model is not None:
        meta["model_id"] = model
    if inventory is None:
        for option, value in (("--limit", limit), ("--pool", pool)):
            if value is not None:
                raise InputError(f"{option} applies to an inventory, not to a URL")
        if power_from is not None and not power_from.is_file():
            raise InputError(f"--power-from {power_from}: no such inventory file")
        url = _url(given)
        if ready_check_timeout_sec:
            _wait_ready(url, wanted_model, api_key, ready_check_timeout_sec)
        served = served_model(url, wanted_model, api_key)
        instances = [
            Instance(url, Target(url, served, api_key, kind, path, backend, tuple(headers.items())), {})
        ]
        skipped: list[str] = []
        if power_from is not None:
            instances = [_with_power_from(instances[0], power_from, api_key)]
    else:
        if power_from is not None:
            raise InputError("--power-from applies to a URL; an inventory's own NPUs are sampled")
        if ready_check_timeout_sec:
            raise InputError(
                "--ready-check-timeout-sec applies to a URL; an inventory's instances are those its "
                "health gate finds ready"
            )
        instances, skipped = _instances_of(
            inventory, limit=limit, pool=pool, api_key=api_key, endpoint_type=kind, model=wanted_model
        )
        instances = [
            replace(
                i, target=replace(i.target, path=path, backend=backend, extra_headers=tuple(headers.items()))
            )
            for i in instances
        ]
    err = Console.for_stream(sys.stderr)
    for line in skipped:
        err.line(f"skipped {line}")
    if not instances:
        raise Unreachable(f"no ready instance to benchmark in {given}")

    base = Workload(
        requests=[],
        request_rate=request_rate,
        burstiness=burstiness,
        max_concurrency=max_concurrency,
        ignore_eos=ignore_eos,
        num_warmups=num_warmups,
        timeout_s=float(timeout),
        seed=seed,
        slo=slos,
        percentiles=percentiles,
        selected=selected,
        extra_body=body,
        meta=meta,
    )
    bar, advance = _progress_bar(is_interactive(sys.stderr) and not as_json and not disable_tqdm)
    if previous is not None:  # every run must have its baseline before any request is sent
        for inst in instances:
            for point in _points(base, concurrencies, rates):
                previous.run_for((inst.target.url, point.max_concurrency, point.request_rate))
    rows: list[tuple[str, RunResult]] = []
    for inst in instances:
        requests = _requests(
            dataset_name,
            source,
            num_prompts,
            local_tokenizer or _tokenizer(None, inst.target),
            input_len=random_input_len,
            output_len=random_output_len,
            range_ratio=in_ratio,
            output_range_ratio=out_ratio,
            prefix_len=random_prefix_len,
            sharegpt_output_len=sharegpt_output_len,
            custom_output_len=custom_output_len,
            fixed_prompt=fixed_prompt,
            fixed_output_len=fixed_output_len,
            seed=seed,
            shuffle=not disable_shuffle,
            oversample=not no_oversample,
        )
        workload = replace(base, requests=requests)
        points = _points(workload, concurrencies, rates)
        sampler = _sampler(inst, inventory or power_from, power_interval, timeout, len(points))
        why = (
            NO_POWER_FOR_URL
            if inventory is None and power_from is None
            else "the instance's NPUs are not known"
        )
        if bar is not None:
            bar.start()
        try:
            results = sweep(
                inst.target, workload, points, sampler=sampler, why_no_power=why, progress=advance
            )
        finally:
            if bar is not None:
                bar.stop()
        rows += [(inst.name, result) for result in results]

    shown = sys.stderr if as_json else sys.stdout
    if result_file is not None:
        written = _save(rows, result_file, detailed=save_detailed, append=append_result, label=label)
        Console.for_stream(shown).line(f"result: {written}")
    if report_dir is not None:
        report.write(report_dir, rows)
    if as_json:
        summaries = [result.summary for _, result in rows]
        typer.echo(json.dumps(summaries[0] if len(summaries) == 1 else summaries, indent=2))
    else:
        _table(rows)
    if report_dir is not None:
        Console.for_stream(shown).line(f"report: {report_dir}")
    worse: list[gate.Row] = []
    if previous is not None:
        compared = [
            row
            for _, result in rows
            for row in gate.compare(previous.run_for(gate.point_of(result.summary)), result.summary, bound)
        ]
        _comparison(compared, previous.path, bound, shown)
        worse = gate.regressed(compared)
    if worse or any(result.failures for _, result in rows):
        raise typer.Exit(1)


def _points(
    workload: Workload, concurrencies: list[float] | None, rates: list[float] | None
) -> list[Workload]:
    """The sweep's workloads; the one workload without a sweep."""
    points = [replace(workload, max_concurrency=int(c)) for c in concurrencies or []]
    points += [replace(workload, request_rate=r) for r in rates or []]
    return points or [workload]


def _comparison(rows: Sequence[gate.Row], path: Path, bound: float, stream: TextIO) -> None:
    from rich.table import Table

    out = Console.for_stream(stream)
    table = Table(title=f"against the baseline {path}")
    for header in ("target", "conc", "rate", "metric", "baseline", "now", "change", "verdict"):
        table.add_column(header, justify="left" if header in ("target", "metric", "verdict") else "right")
    for row in rows:
        url, concurrency, rate = row.point
        table.add_row(
            url,
            str(concurrency or "-"),
            f"{rate:g}",
            row.label,
            f"{row.baseline:.2f}",
            f"{row.now:.2f}",
            "n/a" if row.change is None else f"{row.change * 100:+.1f}%",
            row.verdict,
        )
    out.rich.print(table)
    out.line(gate.verdict(rows, path, bound))


def _sampler(
    inst: Instance, inventory: Path | None, interval: float, timeout: float, points: int
) -> power.PowerSampler | None:
    if inventory is None or not inst.devices:
        return None
    return power.NpuSmiSampler(
        inventory, inst.devices, interval_s=interval, max_s=timeout * points + 600, label=inst.power_label
    )


def _with_power_from(inst: Instance, inventory: Path, api_key: str | None) -> Instance:
    """The URL's instance in ``inventory``: its NPUs are the ones sampled."""
    found, _ = _instances_of(
        inventory, limit=None, pool=None, api_key=api_key, endpoint_type=inst.target.endpoint_type, model=None
    )
    for other in found:
        if other.target.url == inst.target.url:
            return replace(inst, devices=other.devices, power_label=other.power_label)
    known = ", ".join(o.target.url for o in found) or "none ready"
    raise InputError(
        f"--power-from {inventory}: no ready instance there serves {inst.target.url} (its: {known})"
    )


def register(app: typer.Typer) -> None:
    app.command("bench", cls=_bench_vllm.VllmCommandLine)(bench)
