#!/usr/bin/env python3
"""HEALTHCHECK of the vllm-ascend image: is the engine loading, ready, or dead?

Docker knows two answers (exit 0 healthy, 1 unhealthy); the first word printed says which state it was, and
Docker keeps that line in ``docker inspect`` (``.State.Health.Log``) for the serving role and for people.

``ready``    ``/health`` answers 200 and ``/v1/models`` lists the served model (exit 0). With
             ``PROVISION_HEALTH_COMPLETION=1`` a one-token completion must also come back: ``/health`` stays
             200 while a hung engine answers nothing else.
``loading``  the port refuses connections while the engine process lives: vLLM binds its port only once the
             weights are loaded (30 min and more for DeepSeek on NPUs). Exit 1, which Docker does not count
             during the image's start period (60 min): the container stays "starting", not "unhealthy".
``dead``     ``/health`` answers 5xx (503; 500 in older vLLM), or the port refuses and the engine is gone.
``hung``     a request did not answer within the probe's timeout.
``not-ready`` ``/health`` 200 but the model is not (yet) listed, or the API refused our key.

Where to look comes from the engine's own command line (``/proc/<pid>/cmdline``, the PID written by the
entrypoint to ``$PROVISION_RUN_DIR/engine.pid``, else PID 1): ``--host``, ``--port``,
``--served-model-name`` / ``--model`` and ``--api-key`` (or ``$VLLM_API_KEY``). ``PROVISION_HEALTH_URL`` and
``PROVISION_HEALTH_MODEL`` override them. Standard library only: it runs with the image's python3.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import time
import urllib.parse
from collections.abc import Sequence
from typing import NamedTuple

DEFAULT_PORT = 8000
# The whole probe (up to three requests) must end before Docker's --timeout (20 s) kills it.
DEFAULT_TIMEOUT_S = 15.0
WILDCARD_HOSTS = {"", "0.0.0.0", "::", "[::]"}


class Target(NamedTuple):
    url: str
    models: tuple[str, ...]
    api_key: str | None


class Verdict(NamedTuple):
    state: str
    detail: str

    @property
    def healthy(self) -> bool:
        return self.state == "ready"


# ----------------------------------------------------------------------------------------- the engine


def engine_pid(run_dir: str | None = None) -> int:
    """The engine's PID as the entrypoint recorded it, else 1 (the container's main process)."""
    run_dir = run_dir or os.environ.get("PROVISION_RUN_DIR") or "/tmp/provision"
    try:
        with open(os.path.join(run_dir, "engine.pid"), encoding="ascii") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return 1


def process_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            stat = fh.read()
    except OSError:
        return False
    # "pid (comm) S ...": the state follows the last ')', as comm may hold spaces and parentheses.
    state = stat.rsplit(")", 1)[-1].split()[:1]
    return bool(state) and state[0] not in ("Z", "X", "x")


def process_argv(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def _option(argv: Sequence[str], name: str) -> list[str]:
    """Values of ``--name VALUE [VALUE...]`` / ``--name=VALUE`` (the last occurrence wins)."""
    values: list[str] = []
    for i, arg in enumerate(argv):
        if arg.startswith(name + "="):
            values = [arg.split("=", 1)[1]]
        elif arg == name:
            values = []
            for nxt in argv[i + 1 :]:
                if nxt.startswith("-"):
                    break
                values.append(nxt)
    return values


def target_from_argv(argv: Sequence[str], env: dict[str, str]) -> Target:
    """Where the engine listens and what it serves, from its command line (vLLM's defaults otherwise)."""
    hosts = _option(argv, "--host")
    host = hosts[0] if hosts else ""
    if host in WILDCARD_HOSTS:
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    ports = _option(argv, "--port")
    port = int(ports[0]) if ports and ports[0].isdigit() else DEFAULT_PORT
    models = _option(argv, "--served-model-name") or _option(argv, "--model")[:1]
    if not models:  # `vllm serve MODEL ...`
        for i, arg in enumerate(argv[:-1]):
            if arg == "serve" and not argv[i + 1].startswith("-"):
                models = [argv[i + 1]]
                break
    keys = _option(argv, "--api-key")
    api_key = keys[0] if keys else env.get("VLLM_API_KEY") or None
    url = env.get("PROVISION_HEALTH_URL") or f"http://{host}:{port}"
    if env.get("PROVISION_HEALTH_MODEL"):
        models = [env["PROVISION_HEALTH_MODEL"]]
    return Target(url=url.rstrip("/"), models=tuple(models), api_key=api_key)


# ----------------------------------------------------------------------------------------- HTTP


class Answer(NamedTuple):
    status: int
    body: bytes


def request(
    target: Target, method: str, path: str, deadline: float, payload: dict[str, object] | None = None
) -> Answer:
    """One HTTP request that must end by ``deadline`` (``time.monotonic()``); raises on refusal/timeout."""
    timeout = deadline - time.monotonic()
    if timeout <= 0:
        raise TimeoutError("no time left in the probe")
    parts = urllib.parse.urlsplit(target.url + path)
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
    headers = {"Accept": "application/json"}
    if target.api_key:
        headers["Authorization"] = f"Bearer {target.api_key}"
    body = None
    if payload is not None:
        body = json.dumps(payload).encode()
        headers["Content-Type"] = "application/json"
    try:
        conn.request(method, parts.path or "/", body=body, headers=headers)
        resp = conn.getresponse()
        return Answer(resp.status, resp.read(1 << 20))
    finally:
        conn.close()


def check(target: Target, pid: int, timeout: float, completion: bool) -> Verdict:
    """Probe once; ``timeout`` bounds the whole probe."""
    deadline = time.monotonic() + timeout
    try:
        health = request(target, "GET", "/health", deadline)
    except ConnectionRefusedError:
        if process_alive(pid):
            return Verdict("loading", f"{target.url} refuses connections while the engine (pid {pid}) lives")
        return Verdict("dead", f"{target.url} refuses connections and the engine (pid {pid}) is gone")
    except TimeoutError:
        return Verdict("hung", f"{target.url}/health did not answer within the probe's {timeout:g} s")
    except OSError as exc:
        return Verdict("dead", f"{target.url}/health: {exc}")
    if health.status >= 500:
        return Verdict("dead", f"{target.url}/health answered {health.status}")
    if health.status != 200:
        return Verdict("not-ready", f"{target.url}/health answered {health.status}")
    try:
        models = request(target, "GET", "/v1/models", deadline)
    except TimeoutError:
        return Verdict("hung", f"{target.url}/v1/models did not answer within the probe's {timeout:g} s")
    except OSError as exc:
        return Verdict("dead", f"{target.url}/v1/models: {exc}")
    if models.status in (401, 403):
        return Verdict("not-ready", f"{target.url}/v1/models refused the API key ({models.status})")
    if models.status != 200:
        return Verdict("not-ready", f"{target.url}/v1/models answered {models.status}")
    try:
        listed = [str(m.get("id")) for m in json.loads(models.body).get("data", [])]
    except (ValueError, AttributeError):
        return Verdict("not-ready", f"{target.url}/v1/models answered no model list")
    wanted = [m for m in target.models if m in listed] if target.models else listed[:1]
    if not wanted:
        expected = ", ".join(target.models) or "any model"
        return Verdict("not-ready", f"{target.url}/v1/models lists {listed}, not {expected}")
    if completion:
        payload = {"model": wanted[0], "prompt": "Hello", "max_tokens": 1, "temperature": 0}
        try:
            answer = request(target, "POST", "/v1/completions", deadline, payload)
        except TimeoutError:
            return Verdict("hung", f"a completion on {target.url} took longer than the probe's {timeout:g} s")
        except OSError as exc:
            return Verdict("dead", f"{target.url}/v1/completions: {exc}")
        if answer.status != 200:
            return Verdict("dead", f"{target.url}/v1/completions answered {answer.status}")
    return Verdict("ready", f"{target.url} serves {wanted[0]}")


def main(argv: Sequence[str] | None = None) -> int:
    env = dict(os.environ)
    pid = engine_pid()
    target = target_from_argv(process_argv(pid), env)
    timeout = float(env.get("PROVISION_HEALTH_TIMEOUT") or DEFAULT_TIMEOUT_S)
    completion = env.get("PROVISION_HEALTH_COMPLETION", "") not in ("", "0", "false", "no")
    verdict = check(target, pid, timeout, completion)
    print(f"{verdict.state}: {verdict.detail}")
    return 0 if verdict.healthy else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
