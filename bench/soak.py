"""Release after disconnects, as a figure: `python -m bench.soak [--rounds N] [--streams N]`.

Each round opens `--streams` streams on the real default model, drops them once
they are decoding, and measures how long the Batcher still holds them (seconds
from the last drop until nothing runs) and how many steps ran between each
request's disconnect and its release (0 or 1 is prompt: the abort waits for the
step in flight). tests/e2e/test_disconnect.py checks the step count, never the
time: the time depends on how busy the machine is.
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

import httpx
import trio

from atom.config import Settings
from atom.events import Envelope
from atom.http.app import create_app
from bench.run import machine
from tests.conftest import serving, steps_before_release, wait_ready

QUESTION = [{"role": "user", "content": "Tell me a very long story about the sea."}]


async def one_round(client: httpx.AsyncClient, app: Any, streams: int) -> float:
    decoding = trio.Event()
    num_decoding = 0

    async def stream_then_drop() -> None:
        nonlocal num_decoding
        body = {"messages": QUESTION, "max_tokens": 1000, "ignore_eos": True, "stream": True}
        async with client.stream("POST", "/v1/chat/completions", json=body) as r:
            async for line in r.aiter_lines():
                if line.count('"content":"'):
                    break
            num_decoding += 1
            if num_decoding == streams:
                decoding.set()
            await decoding.wait()

    async with trio.open_nursery() as nursery:
        for _ in range(streams):
            nursery.start_soon(stream_then_drop)
    dropped = trio.current_time()
    batcher = app.engine.generation(None, "bench").batcher
    while batcher.statistics().num_running_requests:
        await trio.sleep(0.001)
    return trio.current_time() - dropped


async def main(args: argparse.Namespace) -> None:
    app = create_app(Settings(), on_fatal=lambda: None)
    envelopes: list[Envelope] = []
    app.engine.bus.subscribe(envelopes.append)
    times = []
    async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=120) as client:
        await wait_ready(app, timeout_s=600)
        for _ in range(args.rounds):
            times.append(await one_round(client, app, args.streams))
    steps = list(steps_before_release(envelopes).values())
    report = {
        "machine": machine(),
        "streams_per_round": args.streams,
        "rounds": args.rounds,
        "release_s": {"p50": statistics.median(times), "max": max(times)},
        "steps_between_disconnect_and_release": {n: steps.count(n) for n in sorted(set(steps))},
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--streams", type=int, default=20)
    trio.run(main, parser.parse_args())
