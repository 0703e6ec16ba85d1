"""The load generator's HTTP side: one streamed request timed as ``vllm bench serve`` times it, and the
few plain calls around a run (``/v1/models``, the server's tokenizer).

One ``httpx.AsyncClient`` per run: connections are kept and reused (a pool as large as the concurrency),
no thread per request. The timings follow vLLM's ``async_request_openai_completions`` and
``async_request_openai_chat_completions``: the clock starts just before the request is sent; every SSE
message with a ``choices`` entry is a token event (the first sets TTFT, each later one adds an ITL gap and
moves the end); the final ``usage`` message (``stream_options.include_usage``) gives the server's token
counts; a stream that ended without a choice is a failure.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

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

    @property
    def api_url(self) -> str:
        return self.url + ENDPOINT_TYPES[self.endpoint_type]

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def payload(target: Target, request: SampleRequest, ignore_eos: bool) -> dict[str, Any]:
    """The request body vLLM's benchmark sends (streaming, usage included)."""
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
    return body


def _choice_text(target: Target, choice: Any) -> str:
    if not isinstance(choice, dict):
        return ""
    if target.endpoint_type == "chat":
        delta = choice.get("delta")
        return str((delta or {}).get("content") or "") if isinstance(delta, dict) else ""
    return str(choice.get("text") or "")


async def send(
    client: httpx.AsyncClient, target: Target, request: SampleRequest, *, ignore_eos: bool
) -> RequestOutput:
    """One streamed request; never raises for what the server or the network did (that is a failure)."""
    out = RequestOutput(prompt_len=request.prompt_len)
    body = payload(target, request, ignore_eos)
    started = time.perf_counter()
    out.start_time = started
    last = started
    got_choice = False
    text: list[str] = []
    try:
        async with client.stream("POST", target.api_url, json=body, headers=target.headers()) as response:
            if response.status_code != 200:
                detail = (await response.aread()).decode("utf-8", "replace").strip()
                out.error = f"HTTP {response.status_code}: {detail[:300]}"
                return out
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue  # blank separators, SSE comments (": ping")
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                message = json.loads(data)
                if message.get("choices"):
                    now = time.perf_counter()
                    if got_choice:
                        out.itl.append(now - last)
                    else:
                        got_choice = True
                        out.ttft = now - started
                    last = now
                    text.append(_choice_text(target, message["choices"][0]))
                elif usage := message.get("usage"):
                    out.output_tokens = usage.get("completion_tokens")
                    if usage.get("prompt_tokens") is not None:
                        out.prompt_len = int(usage["prompt_tokens"])
    except (
        httpx.HTTPError,
        httpx.StreamError,
        OSError,
        ValueError,
    ) as exc:  # JSONDecodeError is a ValueError
        out.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return out
    out.generated_text = "".join(text)
    out.latency = last - started
    out.success = got_choice
    if not got_choice:
        out.error = "the stream ended without a token"
    return out


# ------------------------------------------------------------------------------------------ plain calls


def _get(url: str, path: str, api_key: str | None, timeout: float) -> httpx.Response:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        return httpx.get(url + path, headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        raise Unreachable(f"{url}: unreachable: {_cause(exc)}") from None


def _cause(exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect ({exc})" if str(exc) else "cannot connect"
    if isinstance(exc, httpx.TimeoutException):
        return "no answer in time"
    return str(exc) or type(exc).__name__


def served_model(url: str, wanted: str | None, api_key: str | None, timeout: float = 10.0) -> str:
    """The model to ask for: ``wanted`` when ``/v1/models`` lists it, else the first listed (as vLLM's
    benchmark does without ``--model``). Unreachable (exit 1) when the server does not answer or refuses."""
    reply = _get(url, "/v1/models", api_key, timeout)
    if reply.status_code in (401, 403):
        raise Unreachable(
            f"{url}: the API key was refused (/v1/models answered {reply.status_code}); give --api-key"
        )
    if reply.status_code != 200:
        raise Unreachable(f"{url}: /v1/models answered HTTP {reply.status_code}")
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
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            reply = httpx.post(self.url + path, json=body, headers=headers, timeout=self.timeout)
        except httpx.HTTPError as exc:
            raise Unreachable(f"{self.url}: unreachable: {_cause(exc)}") from None
        if reply.status_code == 404:
            raise InputError(
                f"{self.url} has no {path} (not a vLLM server?): give --tokenizer, or --dataset-name fixed"
            )
        if reply.status_code != 200:
            raise Unreachable(f"{self.url}{path} answered HTTP {reply.status_code}: {reply.text[:200]}")
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
                f"--tokenizer {self.path}: needs the 'tokenizers' package (pip install tokenizers)"
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
