"""The load generator's HTTP side: one streamed request timed as ``vllm bench serve`` times it, and the
few plain calls around a run (``/v1/models``, the server's tokenizer).

aiohttp, as vLLM's own benchmark: one ``aiohttp.ClientSession`` per run on one asyncio loop, its connector
keeping and reusing connections (a pool as large as the concurrency), no thread per request (httpx's
per-request overhead held its client to ~330 req/s on a core; benchmarks/bench_client.py). The timings
follow vLLM's ``async_request_openai_completions`` and ``async_request_openai_chat_completions``: the clock
starts just before the request is sent; every SSE message with a ``choices`` entry is a token event (the
first sets TTFT, each later one adds an ITL gap and moves the end); the final ``usage`` message
(``stream_options.include_usage``) gives the server's token counts; a stream that ended without a choice is
a failure.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from provision.bench.datasets import SampleRequest
from provision.bench.metrics import RequestOutput
from provision.errors import InputError, ProvisionError

ENDPOINT_TYPES = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


class Unreachable(ProvisionError):
    """The server cannot be used (refused, timed out, refused our key): exit 1 with the cause."""


@dataclass(frozen=True)
class Target:
    """One OpenAI-compatible server to load."""

    url: str
    """Base URL, without a trailing slash."""
    model: str
    api_key: str | None = None
    endpoint_type: str = "completions"
    path: str | None = None
    """The API path (vLLM's ``--endpoint``) [default: the endpoint type's]."""
    backend: str | None = None
    """vLLM's ``--backend`` name the run reports [default: ``openai`` or ``openai-chat``]."""
    extra_headers: tuple[tuple[str, str], ...] = ()
    """vLLM's ``--header KEY=VALUE``: sent with every request, after the key (so they win)."""

    @property
    def api_url(self) -> str:
        return self.url + (self.path or ENDPOINT_TYPES[self.endpoint_type])

    @property
    def backend_name(self) -> str:
        return self.backend or ("openai-chat" if self.endpoint_type == "chat" else "openai")

    def headers(self) -> dict[str, str]:
        found = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return found | dict(self.extra_headers)


def payload(
    target: Target, request: SampleRequest, ignore_eos: bool, extra_body: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The request body vLLM's benchmark sends (streaming, usage included); ``extra_body`` last, as vLLM
    merges its sampling parameters and ``--extra-body``."""
    body: dict[str, Any] = {"model": target.model, "stream": True, "stream_options": {"include_usage": True}}
    if target.endpoint_type == "chat":
        body["messages"] = [{"role": "user", "content": request.prompt}]
        body["max_completion_tokens"] = request.expected_output_len
    else:
        body["prompt"] = request.prompt
        body["max_tokens"] = request.expected_output_len
        body["repetition_penalty"] = 1.0
    if ignore_eos:
        body["ignore_eos"] = True
    return body | dict(extra_body or {})


def _choice_text(target: Target, choice: Any) -> str:
    if not isinstance(choice, dict):
        return ""
    if target.endpoint_type == "chat":
        delta = choice.get("delta")
        return str((delta or {}).get("content") or "") if isinstance(delta, dict) else ""
    return str(choice.get("text") or "")


def session(pool: int) -> aiohttp.ClientSession:
    """The run's one session: ``pool`` kept-alive connections at most (vLLM's connector settings), 10 s to
    connect. No timer per request: the run's own timeout cancels what is still out. Proxy variables and
    .netrc are not read (``trust_env`` would look both up in a thread for every request): the load goes
    straight to the server. Open it inside the run's event loop."""
    connector = aiohttp.TCPConnector(
        limit=pool, limit_per_host=pool, keepalive_timeout=60, force_close=False, ttl_dns_cache=300
    )
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10.0)
    return aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False)


def _failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class _Stream:
    """One response's body → the request's timings (vLLM's rules, in the module's docstring). The body is
    fed as it arrives and cut into lines here: one call per network chunk, not one per line (aiohttp's
    readline); an SSE message is one ``data:`` line."""

    def __init__(self, target: Target, out: RequestOutput, started: float) -> None:
        self.target = target
        self.out = out
        self.started = self.last = started
        self.got_choice = False
        self.text: list[str] = []
        self.pending = b""

    def feed(self, chunk: bytes) -> bool:
        """Take the next bytes of the body (``b"\\n"`` at its end); True at ``[DONE]``."""
        lines = (self.pending + chunk).split(b"\n")
        self.pending = lines.pop()
        out = self.out
        for raw in lines:
            if not raw.startswith(b"data:"):
                continue  # blank separators, SSE comments (": ping")
            data = raw[5:].strip()
            if data == b"[DONE]":
                return True
            message = json.loads(data.decode())
            if message.get("choices"):
                now = time.perf_counter()
                if self.got_choice:
                    out.itl.append(now - self.last)
                else:
                    self.got_choice = True
                    out.ttft = now - self.started
                self.last = now
                self.text.append(_choice_text(self.target, message["choices"][0]))
            elif usage := message.get("usage"):
                out.output_tokens = usage.get("completion_tokens")
                if usage.get("prompt_tokens") is not None:
                    out.prompt_len = int(usage["prompt_tokens"])
        return False


async def send(
    client: aiohttp.ClientSession,
    target: Target,
    request: SampleRequest,
    *,
    ignore_eos: bool,
    extra_body: Mapping[str, Any] | None = None,
) -> RequestOutput:
    """One streamed request; never raises for what the server or the network did (that is a failure)."""
    out = RequestOutput(prompt_len=request.prompt_len)
    body = payload(target, request, ignore_eos, extra_body)
    started = time.perf_counter()
    out.start_time = started
    stream = _Stream(target, out, started)
    try:
        async with client.post(target.api_url, json=body, headers=target.headers()) as response:
            if response.status != 200:
                detail = (await response.read()).decode("utf-8", "replace").strip()
                out.error = f"HTTP {response.status}: {detail[:300]}"
                return out
            async for chunk in response.content.iter_any():
                if stream.feed(chunk):
                    break
            else:
                stream.feed(b"\n")  # a last line without its newline
    # aiohttp's errors; no connection within 10 s (TimeoutError); a malformed message (ValueError, which
    # JSONDecodeError and UnicodeDecodeError are)
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
        out.error = _failure(exc)
        return out
    out.generated_text = "".join(stream.text)
    out.latency = stream.last - started
    out.success = stream.got_choice
    if not stream.got_choice:
        out.error = "the stream ended without a token"
    return out


# ------------------------------------------------------------------------------------------ plain calls


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def _call(
    url: str, path: str, api_key: str | None, timeout: float, body: dict[str, Any] | None = None
) -> Reply:
    """One plain GET (or POST of ``body``), from outside the run's loop; Unreachable with the cause."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    async def call() -> Reply:
        limit = aiohttp.ClientTimeout(total=timeout)
        async with (
            aiohttp.ClientSession(timeout=limit, trust_env=False) as client,
            client.request(
                "POST" if body is not None else "GET", url + path, json=body, headers=headers
            ) as r,
        ):
            return Reply(r.status, await r.read())

    try:
        return asyncio.run(call())
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise Unreachable(f"{url}: unreachable: {_cause(exc)}") from None


def _cause(exc: BaseException) -> str:
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect ({exc.os_error.strerror or exc})"
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    return str(exc) or type(exc).__name__


def served_model(url: str, wanted: str | None, api_key: str | None, timeout: float = 10.0) -> str:
    """The model to ask for: ``wanted`` when ``/v1/models`` lists it, else the first listed (as vLLM's
    benchmark does without ``--model``). Unreachable (exit 1) when the server does not answer or refuses."""
    reply = _call(url, "/v1/models", api_key, timeout)
    if reply.status in (401, 403):
        raise Unreachable(
            f"{url}: the API key was refused (/v1/models answered {reply.status}); give --api-key"
        )
    if reply.status != 200:
        raise Unreachable(f"{url}: /v1/models answered HTTP {reply.status}")
    try:
        listed = [str(item["id"]) for item in reply.json()["data"]]
    except (ValueError, KeyError, TypeError):
        raise Unreachable(f"{url}: /v1/models did not answer an OpenAI model list") from None
    if not listed:
        raise Unreachable(f"{url}: /v1/models lists no model (still loading?)")
    if wanted is None:
        return listed[0]
    if wanted not in listed:
        raise InputError(f"--model {wanted}: {url} serves {', '.join(listed)}")
    return wanted


@dataclass
class ServerTokenizer:
    """The served model's tokenizer, through vLLM's ``/tokenize`` and ``/detokenize``."""

    url: str
    model: str
    api_key: str | None = None
    timeout: float = 30.0

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        reply = _call(self.url, path, self.api_key, self.timeout, body)
        if reply.status == 404:
            raise InputError(
                f"{self.url} has no {path} (not a vLLM server?): give --tokenizer, or --dataset-name fixed"
            )
        if reply.status != 200:
            raise Unreachable(f"{self.url}{path} answered HTTP {reply.status}: {reply.text[:200]}")
        return reply.json()

    def encode(self, text: str) -> list[int]:
        data = self._post("/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": False})
        return [int(t) for t in data["tokens"]]

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._post("/detokenize", {"model": self.model, "tokens": list(ids)})["prompt"])


@dataclass
class LocalTokenizer:
    """A ``tokenizer.json`` (Hugging Face ``tokenizers``), for ``--tokenizer PATH``."""

    path: str
    _tok: Any = None

    def __post_init__(self) -> None:
        from pathlib import Path

        try:
            from tokenizers import Tokenizer as HfTokenizer  # type: ignore[import-not-found, unused-ignore]
        except ImportError:
            raise InputError(
                f"--tokenizer {self.path}: needs the 'tokenizers' package "
                "(pip install 'provision[tokenizer]')"
            ) from None
        file = Path(self.path)
        file = file / "tokenizer.json" if file.is_dir() else file
        if not file.is_file():
            raise InputError(f"--tokenizer {self.path}: no tokenizer.json there")
        try:
            self._tok = HfTokenizer.from_file(str(file))
        except Exception as exc:  # the library raises its own untyped errors
            raise InputError(f"--tokenizer {self.path}: {file} is not a tokenizer: {exc}") from None

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tok.decode(list(ids)))
