"""``provision serve``: the serving endpoints and their health gate.

``provision serve status URL...`` probes each endpoint once with the gate (/health, /v1/models, a real
completion) and prints one line per endpoint; exit 1 unless all are ready. Taking an inventory instead of
URLs comes with the serving role.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor

import typer

from provision.cli.console import Console
from provision.errors import InputError
from provision.serving.health import Endpoint, State, Timeouts, Verdict, check

serve_app = typer.Typer(
    help="Serving endpoints: check vLLM instances with the health gate.",
    no_args_is_help=True,
)


def _endpoint(url: str, model: str | None, api_key: str | None) -> Endpoint:
    if "://" not in url:
        url = f"http://{url}"
    if not url.startswith(("http://", "https://")):
        raise InputError(f"{url}: not an http(s) URL")
    return Endpoint(url=url, model=model, api_key=api_key)


@serve_app.command("status")
def status(
    urls: list[str] = typer.Argument(
        ...,
        metavar="URL",
        help="Base URLs of OpenAI-compatible vLLM servers, e.g. http://10.0.0.5:8000 (host:port works too).",
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        envvar="PROVISION_SERVE_MODEL",
        help="Served model name that must be listed (default: the first one each endpoint lists).",
    ),
    api_key: str | None = typer.Option(
        None,
        "--api-key",
        envvar="PROVISION_API_KEY",
        help="Sent as 'Authorization: Bearer KEY' (vLLM --api-key).",
        show_default=False,
    ),
    completion_timeout: float = typer.Option(
        30.0, "--completion-timeout", help="Seconds a completion may take before the engine counts as hung."
    ),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Check endpoints once with the health gate: ready, loading, failed or unreachable; exit 1 unless all
    are ready."""
    endpoints = [_endpoint(url, model, api_key) for url in urls]
    timeouts = Timeouts(completion_s=completion_timeout)
    with ThreadPoolExecutor(max_workers=min(16, len(endpoints))) as pool:
        verdicts = list(pool.map(lambda endpoint: check(endpoint, timeouts=timeouts), endpoints))
    all_ready = all(verdict.ready for verdict in verdicts)
    if as_json:
        typer.echo(json.dumps({"ready": all_ready, "endpoints": [v.as_dict() for v in verdicts]}, indent=2))
    else:
        _table(verdicts)
    if not all_ready:
        raise typer.Exit(1)


def _table(verdicts: list[Verdict]) -> None:
    out = Console.for_stream(sys.stdout)
    url_width = max(len("ENDPOINT"), *(len(v.url) for v in verdicts))
    model_width = max(len("MODEL"), *(len(v.model or "-") for v in verdicts))
    out.line(f"{'ENDPOINT':<{url_width}}  {'STATE':<11}  {'MODEL':<{model_width}}  DETAIL")
    for verdict in verdicts:
        out.line(
            f"{verdict.url:<{url_width}}  {verdict.state.value:<11}  "
            f"{verdict.model or '-':<{model_width}}  {verdict.reason}"
        )
    ready = sum(v.state is State.READY for v in verdicts)
    out.line(f"{ready}/{len(verdicts)} ready")


def register(app: typer.Typer) -> None:
    app.add_typer(serve_app, name="serve")
