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
    fixed_requests,
    random_requests,
    sharegpt_requests,
)
from provision.bench.metrics import parse_slo
from provision.bench.run import RunResult, Workload, sweep
from provision.cli import _inputs
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
    values: list[float] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            value = math.inf if not integer and part.lower() == "inf" else float(part)
        except ValueError:
            value = math.nan
        if not (value > 0) or (integer and not value.is_integer()):
            kind = "whole numbers of requests above 0" if integer else "requests/s above 0 (or inf)"
            raise InputError(f"{option} {text}: {part!r} is not one of {kind}")
        values.append(value)
    if not values:
        raise InputError(f"{option} {text!r}: no value given (e.g. 1,4,16)")
    return values


def _url(text: str) -> str:
    """A base URL checked like ``provision serve status`` checks one; without a trailing slash."""
    from provision.cli._endpoints import endpoint

    return endpoint(text, None, None).base


def _tokenizer(path: str | None, target: Target) -> Tokenizer:
    return LocalTokenizer(path) if path else ServerTokenizer(target.url, target.model, target.api_key)


def _requests(
    dataset: str,
    count: int,
    tokenizer: Tokenizer,
    *,
    dataset_path: Path | None,
    input_len: int,
    output_len: int,
    range_ratio: float,
    sharegpt_output_len: int | None,
    fixed_prompt: str,
    fixed_output_len: int,
    seed: int,
) -> list[SampleRequest]:
    if dataset == "sharegpt":
        if dataset_path is None:
            raise InputError("--dataset-name sharegpt needs --dataset-path FILE (JSON or JSON Lines)")
        return sharegpt_requests(dataset_path, count, tokenizer, output_len=sharegpt_output_len, seed=seed)
    if dataset_path is not None:
        raise InputError(f"--dataset-path applies to --dataset-name sharegpt, not {dataset}")
    if dataset == "fixed":
        return fixed_requests(count, fixed_prompt, fixed_output_len, tokenizer)
    return random_requests(
        tokenizer, count, input_len=input_len, output_len=output_len, range_ratio=range_ratio, seed=seed
    )


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
            _fmt(s["median_ttft_ms"]),
            _fmt(s["p99_ttft_ms"]),
            _fmt(s["median_tpot_ms"]),
            _fmt(s["p99_tpot_ms"]),
            _fmt(s["median_itl_ms"]),
            _fmt(s["median_e2el_ms"]),
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
    target: str = typer.Argument(
        ...,
        metavar="URL | INVENTORY",
        help="A server's base URL (http://host:8000), or an inventory: every ready instance.",
    ),
    model: str | None = typer.Option(
        None, "--model", help="Served model name [default: the first /v1/models lists]."
    ),
    tokenizer: str | None = typer.Option(
        None,
        "--tokenizer",
        help="A tokenizer.json (or its folder) for the prompts [default: the server's /tokenize].",
    ),
    dataset_name: str = typer.Option("random", "--dataset-name", help=f"One of: {', '.join(DATASETS)}."),
    dataset_path: Path | None = typer.Option(
        None, "--dataset-path", help="ShareGPT-style JSON or JSON Lines file."
    ),
    random_input_len: int = typer.Option(1024, "--random-input-len", help="Prompt tokens (random dataset)."),
    random_output_len: int = typer.Option(128, "--random-output-len", help="Output tokens (random dataset)."),
    random_range_ratio: float = typer.Option(
        0.0, "--random-range-ratio", help="Lengths drawn from L*(1±r), r in [0, 1)."
    ),
    sharegpt_output_len: int | None = typer.Option(
        None, "--sharegpt-output-len", min=1, help="Output tokens (sharegpt)."
    ),
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
        False, "--ignore-eos", help="Generate every requested token (vLLM ignore_eos)."
    ),
    num_warmups: int = typer.Option(0, "--num-warmups", min=0, help="Warm-up requests first, not counted."),
    endpoint_type: str = typer.Option("completions", "--endpoint-type", help="completions or chat."),
    sweep_concurrency: str | None = typer.Option(
        None, "--sweep-concurrency", help="Runs at each, e.g. 1,4,16."
    ),
    sweep_rate: str | None = typer.Option(
        None, "--sweep-rate", help="Runs at each request rate, e.g. 1,2,inf."
    ),
    slo: str | None = typer.Option(
        None, "--slo", help="Goodput SLOs in ms, e.g. ttft=500,tpot=50 (also e2el)."
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
    save_result: Path | None = typer.Option(
        None, "--save-result", help="Write the summary and every request's timings."
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
    failed or, with --baseline, a regression beyond --max-regression."""
    if dataset_name not in DATASETS:
        raise InputError(f"--dataset-name {dataset_name}: one of {', '.join(DATASETS)}")
    if endpoint_type not in ENDPOINT_TYPES:
        raise InputError(f"--endpoint-type {endpoint_type}: one of {', '.join(ENDPOINT_TYPES)}")
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
    slos = parse_slo(slo) if slo is not None else None
    if save_result is not None and not save_result.parent.is_dir():
        raise InputError(f"--save-result {save_result}: no such folder {save_result.parent}")
    if max_regression is not None and baseline is None:
        raise InputError("--max-regression applies with --baseline FILE")
    bound = gate.parse_bound(max_regression if max_regression is not None else "10%")
    previous = gate.load(baseline) if baseline is not None else None
    if report_dir is not None:
        report.check(report_dir)

    inventory = Path(target) if "://" not in target and Path(target).exists() else None
    api_key = _inputs.api_key(api_key, api_key_file, url=inventory is None)
    if inventory is None:
        for option, value in (("--limit", limit), ("--pool", pool)):
            if value is not None:
                raise InputError(f"{option} applies to an inventory, not to a URL")
        if power_from is not None and not power_from.is_file():
            raise InputError(f"--power-from {power_from}: no such inventory file")
        url = _url(target)
        instances = [
            Instance(url, Target(url, served_model(url, model, api_key), api_key, endpoint_type), {})
        ]
        skipped: list[str] = []
        if power_from is not None:
            instances = [_with_power_from(instances[0], power_from, api_key)]
    else:
        if power_from is not None:
            raise InputError("--power-from applies to a URL; an inventory's own NPUs are sampled")
        instances, skipped = _instances_of(
            inventory, limit=limit, pool=pool, api_key=api_key, endpoint_type=endpoint_type, model=model
        )
    err = Console.for_stream(sys.stderr)
    for line in skipped:
        err.line(f"skipped {line}")
    if not instances:
        raise Unreachable(f"no ready instance to benchmark in {target}")

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
    )
    bar, advance = _progress_bar(is_interactive(sys.stderr) and not as_json)
    if previous is not None:  # every run must have its baseline before any request is sent
        for inst in instances:
            for point in _points(base, concurrencies, rates):
                previous.run_for((inst.target.url, point.max_concurrency, point.request_rate))
    rows: list[tuple[str, RunResult]] = []
    for inst in instances:
        requests = _requests(
            dataset_name,
            num_prompts,
            _tokenizer(tokenizer, inst.target),
            dataset_path=dataset_path,
            input_len=random_input_len,
            output_len=random_output_len,
            range_ratio=random_range_ratio,
            sharegpt_output_len=sharegpt_output_len,
            fixed_prompt=fixed_prompt,
            fixed_output_len=fixed_output_len,
            seed=seed,
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

    if save_result is not None:
        saved = [result.saved() for _, result in rows]
        save_result.write_text(json.dumps(saved[0] if len(saved) == 1 else saved, indent=2) + "\n")
    if report_dir is not None:
        report.write(report_dir, rows)
    if as_json:
        summaries = [result.summary for _, result in rows]
        typer.echo(json.dumps(summaries[0] if len(summaries) == 1 else summaries, indent=2))
    else:
        _table(rows)
    if report_dir is not None:
        Console.for_stream(sys.stderr if as_json else sys.stdout).line(f"report: {report_dir}")
    worse: list[gate.Row] = []
    if previous is not None:
        compared = [
            row
            for _, result in rows
            for row in gate.compare(previous.run_for(gate.point_of(result.summary)), result.summary, bound)
        ]
        _comparison(compared, previous.path, bound, sys.stderr if as_json else sys.stdout)
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
    app.command("bench")(bench)
