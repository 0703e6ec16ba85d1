#!/usr/bin/env python3
"""How many requests a second `provision bench`'s load generator sustains on its own, against a stub server.

Usage:  .venv/bin/python benchmarks/bench_client.py [--requests 20000] [--concurrency 64] [--tokens 4]

A stub OpenAI-compatible server in a process of its own (plain asyncio streams on 127.0.0.1, HTTP/1.1
keep-alive) answers every POST /v1/completions at once with a streamed body of --tokens SSE chunks, a usage
chunk and [DONE], as vLLM streams. The client is provision's own (provision.bench.run.run_one: aiohttp
ClientSession, one connection pool, no thread per request) with --requests requests at --max-concurrency
--concurrency. Prints requests/s, output tokens/s and the client's CPU seconds (and per request), for each
repetition, then the median and the rate the client's CPU time alone allows on one core. On this 2-core
machine the stub takes one core and the client the other, so the figure is a floor of what the client can
do. Bounded: the stub stops with the script; nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import resource
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from provision.bench.client import Target
from provision.bench.datasets import SampleRequest
from provision.bench.run import Workload, run_one


def sse_body(tokens: int) -> bytes:
    chunks = [
        {
            "id": "c",
            "object": "text_completion",
            "choices": [{"index": 0, "text": " x", "finish_reason": None}],
        }
        for _ in range(tokens)
    ]
    usage = {"id": "c", "choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": tokens}}
    lines = [f"data: {json.dumps(c)}\n\n" for c in [*chunks, usage]] + ["data: [DONE]\n\n"]
    return "".join(lines).encode()


def serve(sock: socket.socket, tokens: int) -> None:
    body = sse_body(tokens)
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        + f"content-length: {len(body)}\r\n\r\n".encode()
    )

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                headers = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in headers.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                if length:
                    await reader.readexactly(length)
                writer.write(head + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, sock=sock, backlog=1024)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=4, help="streamed chunks per answer")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    port = sock.getsockname()[1]
    stub = multiprocessing.Process(target=serve, args=(sock, args.tokens), daemon=True)
    stub.start()
    try:
        target = Target(url=f"http://127.0.0.1:{port}", model="stub")
        request = SampleRequest(prompt="hello", prompt_len=8, expected_output_len=args.tokens)
        workload = Workload(
            requests=[request] * args.requests,
            max_concurrency=args.concurrency,
            ignore_eos=True,
            timeout_s=600,
        )
        rates: list[float] = []
        cpu_rates: list[float] = []
        for rep in range(1, args.reps + 1):
            cpu0 = resource.getrusage(resource.RUSAGE_SELF)
            wall0 = time.perf_counter()
            result = run_one(target, workload)
            wall = time.perf_counter() - wall0
            cpu1 = resource.getrusage(resource.RUSAGE_SELF)
            cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
            s = result.summary
            if s["completed"] != args.requests:
                sys.exit(f"rep {rep}: {s['completed']} of {args.requests} completed: {result.failures[:3]}")
            rates.append(s["request_throughput"])
            cpu_rates.append(args.requests / cpu)
            print(
                f"rep {rep}: {s['request_throughput']:7.0f} req/s, {s['output_throughput']:8.0f} output "
                f"tok/s, {args.requests} requests in {s['duration']:.2f} s (wall {wall:.2f} s), client CPU "
                f"{cpu:.2f} s ({cpu / wall * 100:.0f} % of one core, "
                f"{cpu / args.requests * 1e6:.0f} us a request); "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        print(
            f"median {statistics.median(rates):.0f} req/s at concurrency {args.concurrency}, "
            f"{args.tokens} chunks per answer, on {os.cpu_count()} CPUs; the client's CPU time alone "
            f"allows {statistics.median(cpu_rates):.0f} req/s on one core (requests / client CPU seconds: "
            "what it does where the other processes leave it a core)"
        )
    finally:
        stub.terminate()
        stub.join(timeout=10)


if __name__ == "__main__":
    main()
