"""Data parallel against one process: `python -m bench.scaling [--out FILE]`.

On this machine's cores, side by side in one run, with the real default model:
- `1x2`: one server on every core (`atom serve`);
- `2x1 cache_aware` and `2x1 round_robin`: `atom serve --data-parallel-size 2`, two
  replicas of one core each behind sglang-router with that policy.
Two workloads, each with tools-style system prompts (8 of them, long):
- `mixed`: c=32 streaming chats, user turns and reply lengths varying;
- `shared_prefix`: c=16, the 8 long system prompts shared by many users, short replies.
Each reports throughput, TTFT p50/p99 (bench/load.py) and the prefix-cache hit rate
(prompt tokens found in the cache over those looked up, summed over the replicas'
/metrics, counted over the workload alone).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import trio

from bench.load import Sample, Target, fresh_connections, prompt_text, stream_chat, summarize
from bench.run import free_port, machine, publish

MODEL = "SmolLM2-135M-Instruct"
NUM_SYSTEMS = 8
TOOL_NAMES = ["search_flights", "book_hotel", "get_weather", "convert_currency",
              "translate_text", "create_event", "send_email", "lookup_order"]  # fmt: skip


def tools_prompt(index: int, num_words: int) -> str:
    """A system prompt in the style of a tool-calling agent's: rules, then tool specs."""
    tools = [
        {"name": name, "description": prompt_text(24, index * 100 + i),
         "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}
        for i, name in enumerate(TOOL_NAMES)
    ]  # fmt: skip
    rules = prompt_text(num_words, 900 + index)
    return f"You are agent {index}. {rules}\n# Tools\n{json.dumps(tools)}"


@contextmanager
def serving(replicas: int, policy: str, log: Path) -> Iterator[tuple[str, list[str]]]:
    """`atom serve` on a free port; its URL and the URLs whose /metrics count."""
    port = free_port()
    command = [sys.executable, "-m", "atom.cli", "serve", "--port", str(port)]
    env = {**os.environ, "ATOM_DATA_PARALLEL_SIZE": str(replicas), "ATOM_ROUTER_POLICY": policy,
           "ATOM_LOG_LEVEL": "info"}  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=out)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            assert process.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "no server in 600 s"
            serving = [json.loads(line) for line in log.read_text().splitlines()
                       if line.startswith("{") and '"event": "serving"' in line]  # fmt: skip
            if serving:  # the launcher's line, once its router answers
                yield url, serving[0]["replicas"]
                return
            try:
                if replicas == 1 and httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    yield url, [url]
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)
    finally:
        process.terminate()
        process.wait(timeout=120)


def cache_counts(urls: list[str]) -> tuple[int, int]:
    """Prompt tokens (looked up, found) in the prefix cache, over `urls`."""
    queries = hits = 0
    for url in urls:
        text = httpx.get(f"{url}/metrics", timeout=10).text
        queries += _total(text, "prefix_cache_queries_total")
        hits += _total(text, "prefix_cache_hits_total")
    return queries, hits


def _total(text: str, family: str) -> int:
    return sum(int(float(v)) for v in re.findall(rf"^atom:{family}\{{.*\}} (\S+)$", text, re.M))


def requests_of(workload: str, num: int) -> list[tuple[list[dict[str, str]], int]]:
    """(messages, max_tokens) for each request; the same list for every server."""
    pick = random.Random(7)
    words = 300 if workload == "mixed" else 600
    systems = [tools_prompt(i, words) for i in range(NUM_SYSTEMS)]
    out = []
    for i in range(num):
        system = systems[pick.randrange(NUM_SYSTEMS)]
        if workload == "mixed":
            user, max_tokens = prompt_text(pick.randint(10, 80), i), pick.choice((16, 48, 96))
        else:
            user, max_tokens = f"User {i}: which tool finds a flight?", 8
        out.append(([{"role": "system", "content": system},
                     {"role": "user", "content": user}], max_tokens))  # fmt: skip
    return out


async def drive(url: str, work: list[tuple[list[dict[str, str]], int]], concurrency: int) -> Any:
    target = Target(name="atom", url=url, model=MODEL, extra={"ignore_eos": True})
    samples: list[Sample] = []
    queue = list(reversed(work))
    async with fresh_connections(900) as client:

        async def worker() -> None:
            while queue:
                messages, max_tokens = queue.pop()
                samples.append(await stream_chat(client, target, messages, max_tokens))

        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(concurrency):
                nursery.start_soon(worker)
        wall = time.perf_counter() - started
    return summarize(samples, wall) | {"concurrency": concurrency, "wall_s": round(wall, 1)}


WORKLOADS = {"mixed": 32, "shared_prefix": 16}  # concurrency of each
SETUPS = (("1x2", 1, "cache_aware"), ("2x1 cache_aware", 2, "cache_aware"),
          ("2x1 round_robin", 2, "round_robin"))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=96, help="per workload")
    parser.add_argument("--out", help="write the JSON report here too")
    args = parser.parse_args()
    report: dict[str, Any] = {"machine": machine(), "model": MODEL, "results": {}}
    logs = Path(tempfile.mkdtemp(prefix="bench-scaling-"))
    for name, replicas, policy in SETUPS:
        with serving(replicas, policy, logs / f"{name.replace(' ', '_')}.log") as (url, urls):
            trio.run(drive, url, requests_of("mixed", 2), 2)  # warm-up: first calls, kernels
            for workload, concurrency in WORKLOADS.items():
                before = cache_counts(urls)
                result = trio.run(drive, url, requests_of(workload, args.requests), concurrency)
                queries, hits = (a - b for a, b in zip(cache_counts(urls), before, strict=True))
                result["prefix_hit_rate"] = round(hits / queries, 3) if queries else None
                report["results"][f"{workload} {name}"] = result
                print(workload, name, json.dumps(result), flush=True)
    publish(report, args.out, indent=2)


if __name__ == "__main__":
    main()
