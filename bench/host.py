"""The host path's ceiling: `python -m bench.host [--parsers] [--out FILE]`.

Serves `bench.host_app:app` (ATOM's whole server over a FakeRunner that costs nothing)
on one core and streams chat completions to it from this process on the other: what
it measures is everything ATOM does around a model step. Each level of concurrency
runs `c` clients, each sending its requests one after the other over a raw socket
(HTTP/1.1, one connection a request), and reports streamed tokens/s (the usage the
answers report), tokens a chunk (SSE events), time to first token (p50, p99) and the
server's host time a step (wall time over the steps the runner took). The server
listens with a backlog of 2048, as `atom serve` sizes it: hypercorn's default of 100
drops a c=256 burst's connections, which come back after TCP's retries. `--parsers`
serves a reply with a reasoning block and a tool call through `--reasoning-parser deepseek_r1` and
`--tool-call-parser hermes`, each request offering a tool. `--bare` serves hypercorn
alone, a chunk a token and nothing else (`bench/host_bare_app.py`): the ceiling of any
server on it that writes a chunk a token. It also reports the server's CPU time a token
(all its threads). docs/performance.md has today's figures."""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import trio

LEVELS = {1: 20, 16: 4, 64: 2, 256: 1}  # concurrency → requests per client
APP = "bench.host_app:app"
BARE_APP = "bench.host_bare_app:app"  # hypercorn alone: its ceiling
FIRST_TOKEN = re.compile(rb'"(?:reasoning_)?content":"[^"]')
USAGE = re.compile(rb'"completion_tokens":(\d+)')
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@dataclass(frozen=True, slots=True)
class Level:
    concurrency: int
    requests: int
    tokens: int
    seconds: float
    tokens_per_s: float
    tokens_per_chunk: float  # streamed tokens over SSE events (role, usage and [DONE] too)
    ttft_p50_ms: float
    ttft_p99_ms: float
    steps: int
    host_ms_per_step: float  # wall time over the runner's steps: all host at zero model cost
    server_cpu_us_per_token: float  # the server process's CPU time (all threads) a token


def body(parsers: bool) -> bytes:
    payload: dict[str, Any] = {
        "model": "SmolLM2-135M-Instruct",
        "messages": [{"role": "user", "content": "Tell me a story about a fox."}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 1000,
        "temperature": 0,
    }
    if parsers:
        payload["tools"] = [TOOL]
    return json.dumps(payload).encode()


async def one_request(port: int, request: bytes) -> tuple[float, int, int]:
    """(seconds to the first token, completion tokens, SSE events) of one streamed chat."""
    began = time.perf_counter()
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(request)
        ttft, seen = None, b""
        received = bytearray()
        while chunk := await stream.receive_some(1 << 16):
            received += chunk
            if ttft is None:
                seen += chunk
                if FIRST_TOKEN.search(seen):
                    ttft = time.perf_counter() - began
    match = USAGE.findall(bytes(received[-4096:]))
    assert ttft is not None and match, bytes(received[:300])
    return ttft, int(match[-1]), received.count(b"\ndata: ") + received.startswith(b"data: ")


async def run_level(
    port: int, concurrency: int, rounds: int, payload: bytes
) -> tuple[float, list[float], int, int]:
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    request = head + payload
    ttfts: list[float] = []
    tokens = chunks = 0

    async def client() -> None:
        nonlocal tokens, chunks
        for _ in range(rounds):
            ttft, num, num_chunks = await one_request(port, request)
            ttfts.append(ttft)
            tokens += num
            chunks += num_chunks

    began = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(client)
    return time.perf_counter() - began, ttfts, tokens, chunks


def steps(url: str) -> dict[str, float]:
    return httpx.get(f"{url}/bench/steps", timeout=30).json()  # type: ignore[no-any-return]


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process `pid` so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(port: int, pid: int, concurrency: int, rounds: int, parsers: bool) -> Level:
    url = f"http://127.0.0.1:{port}"
    before, cpu_before = steps(url), cpu_seconds(pid)
    seconds, ttfts, tokens, chunks = trio.run(run_level, port, concurrency, rounds, body(parsers))
    after, cpu = steps(url), cpu_seconds(pid) - cpu_before
    num_steps = int(after["steps"] - before["steps"])
    ttft_ms = sorted(t * 1000 for t in ttfts)
    return Level(
        concurrency=concurrency,
        requests=len(ttfts),
        tokens=tokens,
        seconds=round(seconds, 3),
        tokens_per_s=round(tokens / seconds, 1),
        tokens_per_chunk=round(tokens / max(chunks, 1), 2),
        ttft_p50_ms=round(statistics.median(ttft_ms), 2),
        ttft_p99_ms=round(ttft_ms[min(len(ttft_ms) - 1, int(len(ttft_ms) * 0.99))], 2),
        steps=num_steps,
        host_ms_per_step=round(seconds * 1000 / max(num_steps, 1), 3),
        server_cpu_us_per_token=round(cpu * 1e6 / max(tokens, 1), 1),
    )


def start_server(
    port: int, parsers: bool, server_cpu: int, extra: dict[str, str], app: str = APP
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "ATOM_MODEL": "SmolLM2-135M-Instruct",
        "ATOM_LOG_LEVEL": "warning",
        "ATOM_MAX_NUM_SEQS": "256",
        "ATOM_MAX_QUEUED_REQUESTS": "1024",
        "ATOM_NO_WEBUI": "true",
        "HOST_PARSERS": "1" if parsers else "0",
        **extra,
    }
    if parsers:
        env |= {"ATOM_TOOL_CALL_PARSER": "hermes", "ATOM_REASONING_PARSER": "deepseek_r1"}
    command = [sys.executable, "-m", "hypercorn", "-k", "trio", "-w", "0", "--backlog", "2048"]
    command += ["-b", f"127.0.0.1:{port}", app]
    proc = subprocess.Popen(
        command, env=env, preexec_fn=lambda: os.sched_setaffinity(0, {server_cpu})
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        assert proc.poll() is None, "the server exited during start-up"
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the server did not become healthy")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--parsers", action="store_true")
    parser.add_argument("--concurrency", type=int, nargs="+", default=list(LEVELS))
    parser.add_argument("--port", type=int, default=8133)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--atom-env", nargs="*", default=[], help="ATOM_X=value settings")
    parser.add_argument("--bare", action="store_true", help="hypercorn alone, no ATOM")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    server_cpu, client_cpus = cpus[0], set(cpus[1:]) or {cpus[0]}
    os.sched_setaffinity(0, client_cpus)
    extra = dict(item.split("=", 1) for item in args.atom_env)
    app = BARE_APP if args.bare else APP
    proc = start_server(args.port, args.parsers, server_cpu, extra, app)
    try:
        measure(args.port, proc.pid, 4, 1, args.parsers)  # warm-up: imports, first compiles
        levels = []
        for concurrency in args.concurrency:
            rounds = LEVELS.get(concurrency, 1)
            level = measure(args.port, proc.pid, concurrency, rounds, args.parsers)
            print(json.dumps(asdict(level)), flush=True)
            levels.append(level)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    if args.out:
        report = {
            "machine": {"cpu": _cpu_model(), "python": platform.python_version()},
            "server_cpu": server_cpu,
            "client_cpus": sorted(client_cpus),
            "app": app,
            "parsers": args.parsers,
            "atom_env": extra,
            "levels": [asdict(level) for level in levels],
        }
        args.out.write_text(json.dumps(report, indent=1) + "\n")


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


if __name__ == "__main__":
    main()
