"""The health gate: is a vLLM endpoint loading, ready or failed? One implementation for the role's plugin,
the CLI (``provision serve status``) and the tests.

What the states mean (measured on real vLLM, FACTS.md §6):

``loading``
    The port refuses connections while the engine process lives: vLLM binds its port only once the weights
    are loaded (30–60 min for DeepSeek on NPUs). Also: ``/health`` 200 but ``/v1/models`` still empty.
``ready``
    ``/health`` answers 200, the served model is listed by ``/v1/models`` and a real completion on
    ``/v1/completions`` returns text within its timeout. ``/health`` alone is not enough: it stays 200 while
    the engine hangs.
``failed``
    ``/health`` 5xx (503 = engine dead; the server then exits within ~1 s), the process exited, a request hung
    past its timeout, the served model list lacks the model, an API key was refused, or the load budget ran
    out. The message carries the last lines of the engine's log when a log source is given.
``unreachable``
    Connection refused and no liveness source was given, so loading cannot be told from down (a one-shot
    ``provision serve status URL``). :func:`wait_ready` keeps waiting on it, as on ``loading``.

The decision is pure (:class:`Gate` turns :class:`Observation` s into :class:`Verdict` s, unit-tested on
tables); :func:`probe` does the HTTP (standard library only) and :func:`check` / :func:`wait_ready` tie the
two together. The library never logs and never prints.
"""

from __future__ import annotations

import enum
import http.client
import json
import os
import ssl
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

# Loads of DeepSeek-R1 W8A8 across two nodes take 30–60 min (FACTS.md §6: llm-d allows ~60 min).
DEFAULT_LOAD_BUDGET_S = 3600.0
# Between two probes while loading. A refused connect costs microseconds, so polling tightly is cheap, and
# the detection lag (ready engine → ready verdict) stays under 0.5 s: one interval plus one probe.
DEFAULT_POLL_S = 0.1
# How long /v1/models may stay empty once /health says 200 before the endpoint counts as failed.
DEFAULT_SETTLE_S = 30.0
DEFAULT_LOG_LINES = 20
COMPLETION_PROMPT = "Hello"
_MAX_BODY = 1 << 20


class State(enum.StrEnum):
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"
    UNREACHABLE = "unreachable"


class Outcome(enum.StrEnum):
    """How one HTTP request ended."""

    NO_LISTENER = "no_listener"  # refused, reset before a reply, connect timed out: nothing serves the port
    TIMEOUT = "timeout"  # connected and sent, but no complete reply within the timeout: hung
    ANSWERED = "answered"  # an HTTP reply, any status
    BROKEN = "broken"  # something that is not HTTP (TLS error, garbage)


@dataclass(frozen=True)
class Reply:
    """The result of one request, as plain data (what the pure logic sees)."""

    outcome: Outcome
    status: int = 0
    body: bytes = b""
    detail: str = ""
    seconds: float = 0.0

    def json(self) -> Any:
        """The body parsed as JSON, or None when it is not JSON."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def describe(self, what: str) -> str:
        if self.outcome is Outcome.ANSWERED:
            snippet = self.body[:200].decode("utf-8", "replace").strip()
            return f"{what} answered {self.status}" + (f": {snippet}" if snippet else "")
        return f"{what}: {self.detail or self.outcome.value}"


@dataclass(frozen=True)
class Timeouts:
    """Seconds allowed for each request. ``completion_s`` is the hung-engine detector."""

    connect_s: float = 2.0
    health_s: float = 5.0
    models_s: float = 5.0
    completion_s: float = 30.0


WORKER = "worker"
"""The role of a multi-node headless worker in its serving group (``single`` and ``head`` are the others),
and its state in the gate's results: it is not probed."""


def serves_api(role: str | None) -> bool:
    """Whether an instance in this role serves an API, and so is an endpoint and counts for readiness.

    A headless worker serves none: its head's gate answers for the whole serving group (ready only once
    every rank joined), so the worker is neither listed as an endpoint nor counted.
    """
    return role != WORKER


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible vLLM server. ``model`` None means "the first model it lists"."""

    url: str
    model: str | None = None
    api_key: str | None = None

    @property
    def base(self) -> str:
        return self.url.rstrip("/")


@dataclass(frozen=True)
class Observation:
    """What one probe saw. ``models``/``completion`` are None when the probe stopped before them."""

    at: float
    alive: bool | None
    health: Reply
    models: Reply | None = None
    completion: Reply | None = None
    model: str | None = None  # the model the completion was asked of


@dataclass(frozen=True)
class Verdict:
    state: State
    reason: str
    url: str = ""
    model: str | None = None
    log_tail: tuple[str, ...] = ()
    seconds: float = 0.0  # wait_ready: from the start of the wait; check: the probe's duration
    at: float = 0.0  # time.monotonic() when decided
    completion_s: float | None = None  # how long the probe's completion took, when one was asked

    @property
    def ready(self) -> bool:
        return self.state is State.READY

    @property
    def message(self) -> str:
        """The reason, followed by the engine log's last lines when there are any."""
        if not self.log_tail:
            return self.reason
        lines = "\n".join(f"  | {line}" for line in self.log_tail)
        return f"{self.reason}\nlast {len(self.log_tail)} lines of the engine log:\n{lines}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "state": self.state.value,
            "ready": self.ready,
            "model": self.model,
            "reason": self.reason,
            "log_tail": list(self.log_tail),
            "seconds": round(self.seconds, 3),
            "completion_s": None if self.completion_s is None else round(self.completion_s, 3),
        }


class GateError(Exception):
    """Raised by :func:`require_ready` with the failed verdict."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.message)
        self.verdict = verdict


# --------------------------------------------------------------------------------------------- pure logic


def served_models(reply: Reply | None) -> list[str] | None:
    """Model ids from a ``/v1/models`` reply (``{"data": [{"id": ...}]}``), None when it is not one."""
    if reply is None or reply.outcome is not Outcome.ANSWERED or reply.status != 200:
        return None
    data = reply.json()
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        return None
    return [str(item["id"]) for item in data["data"] if isinstance(item, dict) and "id" in item]


def choose_model(wanted: str | None, listed: Sequence[str]) -> str | None:
    """The model to ask for a completion: ``wanted`` when listed, the first listed one when none is wanted."""
    if wanted is None:
        return listed[0] if listed else None
    return wanted if wanted in listed else None


def completion_text(reply: Reply | None) -> str | None:
    """The generated text of a ``/v1/completions`` reply, None when there is none."""
    if reply is None or reply.outcome is not Outcome.ANSWERED or reply.status != 200:
        return None
    data = reply.json()
    if not isinstance(data, dict):
        return None
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    text = choices[0].get("text")
    return text if isinstance(text, str) else None


class Gate:
    """The state machine: feed it observations in time order, it answers a verdict for each.

    It remembers one thing across observations: since when ``/health`` has answered 200 with an empty model
    list (``settle_s`` later that counts as failed). Everything else is decided from the observation alone,
    so a one-shot check and a long wait agree.
    """

    def __init__(self, model: str | None = None, *, settle_s: float = DEFAULT_SETTLE_S) -> None:
        self.model = model
        self.settle_s = settle_s
        self._empty_since: float | None = None

    def step(self, obs: Observation) -> Verdict:
        state, reason, model = self._decide(obs)
        took = obs.completion.seconds if obs.completion is not None else None
        return Verdict(state=state, reason=reason, model=model or self.model, at=obs.at, completion_s=took)

    def _decide(self, obs: Observation) -> tuple[State, str, str | None]:
        health = obs.health
        if obs.alive is False:
            return State.FAILED, "the engine process is not running (exited or killed)", None
        if health.outcome is Outcome.NO_LISTENER:
            self._empty_since = None
            if obs.alive is None:
                return (
                    State.UNREACHABLE,
                    f"{health.detail or 'connection refused'} (no liveness source: loading or down)",
                    None,
                )
            return State.LOADING, f"{health.detail or 'connection refused'} while the process lives", None
        if health.outcome is Outcome.TIMEOUT:
            return State.FAILED, f"/health hung: {health.detail}", None
        if health.outcome is Outcome.BROKEN:
            return State.FAILED, health.describe("/health"), None
        if health.status >= 500:
            return State.FAILED, f"engine dead: {health.describe('/health')}", None
        if health.status != 200:
            return State.FAILED, f"unexpected {health.describe('/health')}", None

        models = obs.models
        if models is None:
            return State.LOADING, "/health 200, /v1/models not asked yet", None
        if models.outcome is not Outcome.ANSWERED:
            return State.FAILED, models.describe("/v1/models"), None
        if models.status in (401, 403):
            return State.FAILED, f"API key refused: {models.describe('/v1/models')}", None
        listed = served_models(models)
        if listed is None:
            return State.FAILED, f"unexpected {models.describe('/v1/models')}", None
        if not listed:
            self._empty_since = obs.at if self._empty_since is None else self._empty_since
            waited = obs.at - self._empty_since
            if waited >= self.settle_s:
                return State.FAILED, f"/health 200 but /v1/models still empty after {waited:.0f} s", None
            return State.LOADING, "/health 200 but /v1/models lists no model yet", None
        self._empty_since = None
        model = choose_model(self.model, listed)
        if model is None:
            return (
                State.FAILED,
                f"model {self.model!r} is not served (/v1/models lists {', '.join(listed)})",
                None,
            )

        completion = obs.completion
        if completion is None:
            return State.LOADING, f"{model} listed, completion not asked yet", model
        if completion.outcome is Outcome.TIMEOUT:
            return State.FAILED, f"completion hung: {completion.detail}", model
        if completion.outcome is not Outcome.ANSWERED:
            return State.FAILED, completion.describe("/v1/completions"), model
        if completion.status in (401, 403):
            return State.FAILED, f"API key refused: {completion.describe('/v1/completions')}", model
        text = completion_text(completion)
        if text is None:
            return State.FAILED, f"no completion: {completion.describe('/v1/completions')}", model
        return State.READY, f"completion answered in {completion.seconds:.2f} s: {text[:40]!r}", model


# --------------------------------------------------------------------------------------------- I/O

Liveness = Callable[[], bool]
LogSource = Path | str | Callable[[], Sequence[str]]
AliveArg = Liveness | int | subprocess.Popen[Any] | None


def pid_alive(pid: int) -> bool:
    """True while process ``pid`` runs (a zombie, exited but not reaped, counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: fall back on signal 0
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    state = stat.rpartition(")")[2].split()[0]
    return state not in ("Z", "X", "x")


def as_liveness(alive: AliveArg) -> Liveness | None:
    """A liveness callable from a PID, a Popen, a callable, or None (unknown)."""
    if alive is None:
        return None
    if isinstance(alive, bool):
        raise TypeError("pass a PID, a Popen or a callable, not a bool")
    if isinstance(alive, int):
        pid = alive
        return lambda: pid_alive(pid)
    if isinstance(alive, subprocess.Popen):
        popen = alive
        return lambda: popen.poll() is None
    return alive


def tail_lines(path: Path | str, lines: int = DEFAULT_LOG_LINES) -> list[str]:
    """The last ``lines`` lines of a text file (empty when it cannot be read)."""
    try:
        with Path(path).open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            data = handle.read()
    except OSError:
        return []
    text = data.decode("utf-8", "replace")
    return [line.rstrip("\r") for line in text.splitlines() if line.strip()][-lines:]


def read_log(log: LogSource | None, lines: int = DEFAULT_LOG_LINES) -> tuple[str, ...]:
    if log is None:
        return ()
    if isinstance(log, Path | str):
        return tuple(tail_lines(log, lines))
    try:
        return tuple(str(line) for line in log())[-lines:]
    except Exception as exc:  # a broken log source must not hide the verdict
        return (f"(could not read the engine log: {exc})",)


def request(
    base_url: str,
    method: str,
    path: str,
    *,
    payload: Any = None,
    api_key: str | None = None,
    connect_timeout: float = 2.0,
    timeout: float = 5.0,
) -> Reply:
    """One HTTP request, classified. Never raises for network trouble."""
    parts = urllib.parse.urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {base_url!r}")
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=connect_timeout)
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=connect_timeout)
    headers = {"Accept": "application/json"}
    body = None
    if payload is not None:
        body = json.dumps(payload).encode()
        headers["Content-Type"] = "application/json"
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    started = time.monotonic()

    def reply(outcome: Outcome, detail: str = "", status: int = 0, data: bytes = b"") -> Reply:
        return Reply(outcome, status, data, detail, time.monotonic() - started)

    try:
        try:
            conn.connect()
        except ssl.SSLError as exc:
            return reply(Outcome.BROKEN, f"TLS error: {exc}")
        except ConnectionRefusedError:
            return reply(Outcome.NO_LISTENER, "connection refused")
        except TimeoutError:
            return reply(Outcome.NO_LISTENER, f"connect timed out after {connect_timeout:g} s")
        except OSError as exc:
            return reply(Outcome.NO_LISTENER, f"cannot connect: {exc.strerror or exc}")
        assert conn.sock is not None
        conn.sock.settimeout(timeout)
        try:
            conn.request(method, parts.path.rstrip("/") + path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read(_MAX_BODY)
        except TimeoutError:
            return reply(Outcome.TIMEOUT, f"no answer within {timeout:g} s")
        except (ConnectionResetError, BrokenPipeError):
            # A port forwarder (docker-proxy) accepts, then drops the connection while nothing serves.
            return reply(Outcome.NO_LISTENER, "connection reset before any reply")
        except (http.client.HTTPException, OSError) as exc:
            return reply(Outcome.BROKEN, f"not an HTTP reply: {exc!r}")
        return reply(Outcome.ANSWERED, status=response.status, data=data)
    finally:
        conn.close()


def probe(
    endpoint: Endpoint,
    *,
    alive: Liveness | None = None,
    timeouts: Timeouts = Timeouts(),
    clock: Callable[[], float] = time.monotonic,
) -> Observation:
    """Look at the endpoint once: /health, then /v1/models when healthy, then a completion when listed.

    Liveness is asked after /health, so a refusal followed by an exit reads as failed, not loading.
    """
    health = request(
        endpoint.base,
        "GET",
        "/health",
        api_key=endpoint.api_key,
        connect_timeout=timeouts.connect_s,
        timeout=timeouts.health_s,
    )
    is_alive = alive() if alive is not None else None
    obs = Observation(at=clock(), alive=is_alive, health=health)
    if is_alive is False or health.outcome is not Outcome.ANSWERED or health.status != 200:
        return obs
    models = request(
        endpoint.base,
        "GET",
        "/v1/models",
        api_key=endpoint.api_key,
        connect_timeout=timeouts.connect_s,
        timeout=timeouts.models_s,
    )
    listed = served_models(models)
    model = choose_model(endpoint.model, listed or [])
    if model is None:
        return replace(obs, models=models, at=clock())
    completion = request(
        endpoint.base,
        "POST",
        "/v1/completions",
        payload={"model": model, "prompt": COMPLETION_PROMPT, "max_tokens": 1, "temperature": 0},
        api_key=endpoint.api_key,
        connect_timeout=timeouts.connect_s,
        timeout=timeouts.completion_s,
    )
    return replace(obs, models=models, completion=completion, model=model, at=clock())


def _finish(
    verdict: Verdict, endpoint: Endpoint, log: LogSource | None, log_lines: int, seconds: float
) -> Verdict:
    tail = read_log(log, log_lines) if verdict.state is State.FAILED else ()
    return replace(verdict, url=endpoint.base, log_tail=tail, seconds=seconds)


def check(
    endpoint: Endpoint,
    *,
    alive: AliveArg = None,
    log: LogSource | None = None,
    timeouts: Timeouts = Timeouts(),
    log_lines: int = DEFAULT_LOG_LINES,
) -> Verdict:
    """Probe once and decide. Without ``alive``, a refused connection reads ``unreachable``."""
    started = time.monotonic()
    obs = probe(endpoint, alive=as_liveness(alive), timeouts=timeouts)
    verdict = Gate(endpoint.model).step(obs)
    return _finish(verdict, endpoint, log, log_lines, time.monotonic() - started)


def wait_ready(
    endpoint: Endpoint,
    *,
    alive: AliveArg = None,
    log: LogSource | None = None,
    budget_s: float = DEFAULT_LOAD_BUDGET_S,
    poll_s: float = DEFAULT_POLL_S,
    settle_s: float = DEFAULT_SETTLE_S,
    timeouts: Timeouts = Timeouts(),
    log_lines: int = DEFAULT_LOG_LINES,
    on_verdict: Callable[[Verdict], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Verdict:
    """Poll until the endpoint is ready or failed, or ``budget_s`` runs out (then failed).

    Probes start every ``poll_s`` seconds (a probe that took longer is followed at once), so a ready engine
    is seen at most ``poll_s`` + one probe after it opens its port. ``on_verdict`` is called whenever the
    state or reason changes (progress display). Never answers ready before a real completion came back.
    """
    liveness = as_liveness(alive)
    gate = Gate(endpoint.model, settle_s=settle_s)
    started = clock()
    last: Verdict | None = None
    while True:
        probe_started = clock()
        verdict = gate.step(probe(endpoint, alive=liveness, timeouts=timeouts, clock=clock))
        elapsed = clock() - started
        if verdict.state in (State.READY, State.FAILED):
            final = _finish(verdict, endpoint, log, log_lines, elapsed)
            if on_verdict is not None:
                on_verdict(final)
            return final
        if on_verdict is not None and (
            last is None or (last.state, last.reason) != (verdict.state, verdict.reason)
        ):
            on_verdict(replace(verdict, url=endpoint.base, seconds=elapsed))
        last = verdict
        if elapsed >= budget_s:
            timed_out = Verdict(
                State.FAILED,
                f"not ready after the load budget of {budget_s:g} s "
                f"(last: {verdict.state.value}, {verdict.reason})",
                model=verdict.model,
                at=clock(),
            )
            final = _finish(timed_out, endpoint, log, log_lines, elapsed)
            if on_verdict is not None:
                on_verdict(final)
            return final
        pause = poll_s - (clock() - probe_started)
        if pause > 0:
            sleep(pause)


def require_ready(verdict: Verdict) -> Verdict:
    """Return a ready verdict; raise :class:`GateError` (carrying the message and log tail) otherwise."""
    if not verdict.ready:
        raise GateError(verdict)
    return verdict
