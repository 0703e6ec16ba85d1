"""The load generator's transport: one aiohttp session per run that keeps its connections (as many as the
concurrency, reused from request to request) and starts no thread, against a keep-alive stub on
127.0.0.1 that answers each completion with a streamed body of a known length."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator

import pytest

from provision.bench.client import Target
from provision.bench.datasets import SampleRequest
from provision.bench.run import Workload, run_one

pytestmark = pytest.mark.unit

TOKENS = 3


def _body() -> bytes:
    chunks = [{"choices": [{"index": 0, "text": "x"}]}] * TOKENS
    usage = {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": TOKENS}}
    return "".join(f"data: {json.dumps(c)}\n\n" for c in [*chunks, usage]).encode() + b"data: [DONE]\n\n"


class KeepAliveStub:
    """HTTP/1.1 with keep-alive, on a loop in a thread of its own; counts the connections it accepted."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        body = _body()
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        head += f"content-length: {len(body)}\r\n\r\n".encode()
        try:
            while True:
                headers = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(h.split(b":", 1)[1])
                        for h in headers.split(b"\r\n")
                        if h.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                await reader.readexactly(length)
                self.requests += 1
                writer.write(head + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _shutdown(self) -> None:
        self._server.close()
        handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    def __enter__(self) -> KeepAliveStub:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *_exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture
def stub() -> Iterator[KeepAliveStub]:
    with KeepAliveStub() as server:
        yield server


def test_a_run_reuses_as_many_connections_as_its_concurrency_and_starts_no_thread(
    stub: KeepAliveStub,
) -> None:
    threads_before = threading.active_count()
    seen: list[int] = []
    workload = Workload(requests=[SampleRequest("hi", 2, TOKENS)] * 60, max_concurrency=4, ignore_eos=True)
    result = run_one(
        Target(stub.url, "stub"), workload, progress=lambda *_: seen.append(threading.active_count())
    )
    s = result.summary
    assert (s["completed"], s["failed"], s["total_output_tokens"]) == (60, 0, 60 * TOKENS)
    assert stub.requests == 60
    assert 1 <= stub.connections <= 4  # kept alive and reused: not one connection per request
    assert max(seen) == threads_before  # no thread per request, nor a pool of them
