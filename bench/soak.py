"""Soak: disconnects under load and a long mixed load, then what is left over.

`python -m bench.soak [--fake] [--disconnects 1000] [--mixed 10000] [--streams 16]`

- **Disconnects**: `--streams` streams run all the time (a finished one is replaced)
  while clients drop `--disconnects` requests at random points — queued, in prefill,
  before their first token, mid-stream (the point each hit is read from its events).
  Reported: where they dropped, the time from each disconnect to its release (p50,
  p99) and the Batcher steps in between.
- **Mixed**: `--mixed` requests (chat and completions, streamed or not, n > 1, tools,
  JSON output, and bad requests) at `--streams` at once. Reported: answers by status
  (no 5xx allowed), resident memory after the first tenth and at the end, and whether
  `atom replay` of the request log gives every client's bytes exactly.
- **Leftovers** after each: running, queued and runner sequences, open requests, KV
  blocks in use, live tasks — all must be back where they started.

`--fake` serves a FakeRunner (seconds); without it the real default model.
tests/http/test_soak.py runs a short version in CI.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import tempfile
from pathlib import Path
from typing import Any

import httpx
import trio

from atom.http.app import create_app
from atom.log.codec import read_log
from atom.log.replay import project
from atom.vocabulary.config import Settings
from atom.vocabulary.events import (
    ClientDisconnected,
    EngineStepped,
    Envelope,
    RequestReleased,
    RequestScheduled,
    TokensSampled,
)
from bench.run import machine
from bench.soak_mix import mixed_body
from tests.conftest import fake_loader, serving, wait_ready

STORY = [{"role": "user", "content": "Tell me a very long story about the sea."}]
MODEL = "SmolLM2-135M-Instruct"
MAX_RESTREAMS = 100_000


class DropRecorder:
    """A bus subscriber keeping what the disconnect report reads, while `is_on`: the
    bench itself must not grow the process whose memory it reports."""

    def __init__(self) -> None:
        self.envelopes: list[Envelope] = []
        self.is_on = True

    def keep(self, envelope: Envelope) -> None:
        event = envelope.event
        if self.is_on and (
            isinstance(event, EngineStepped) or "drop-" in getattr(event, "request_id", "")
        ):
            self.envelopes.append(envelope)


def num_tasks() -> int:
    """Live trio tasks in this run."""
    root = trio.lowlevel.current_root_task()
    assert root is not None
    todo, count = [root], 0
    while todo:
        task = todo.pop()
        count += 1
        todo += [child for nursery in task.child_nurseries for child in nursery.child_tasks]
    return count


def leftovers(app: Any, model: str) -> dict[str, Any]:
    stats = app.engine.models.registry.cores[model].batcher.statistics()
    return {
        "running_requests": stats.num_running_requests,
        "queued_requests": stats.num_queued_requests,
        "running_seqs": stats.num_running_seqs,
        "runner_seqs": stats.num_runner_seqs,
        "open_requests": len(app.engine._open),
        "kv_cache_usage": app.engine.metrics.model(model).kv_cache_usage,
        "tasks": num_tasks(),
    }


async def settle(app: Any, model: str, tasks_before: int | None = None) -> dict[str, Any]:
    """Wait (at most 30 s) for the server to hold no request (and, given `tasks_before`,
    no more tasks than that); what it still holds."""
    busy = ("running_requests", "queued_requests", "open_requests")
    with trio.move_on_after(30):
        while any(leftovers(app, model)[k] for k in busy) or (
            tasks_before is not None and num_tasks() > tasks_before
        ):
            await trio.sleep(0.05)
    return leftovers(app, model)


async def disconnects(
    client: httpx.AsyncClient, app: Any, envelopes: list[Envelope], args: argparse.Namespace
) -> dict[str, Any]:
    rng = random.Random(1)
    start = len(envelopes)
    done = trio.Event()

    async def steady() -> None:
        body = {"messages": STORY, "max_tokens": 200, "ignore_eos": True, "stream": True}
        while not done.is_set():
            async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                async for _ in r.aiter_raw():
                    if done.is_set():
                        break

    async def drop(idx: int) -> None:
        body = {"messages": STORY, "max_tokens": 400, "stream": True}
        headers = {"x-request-id": f"drop-{idx}"}
        with trio.move_on_after(rng.uniform(0, args.drop_within_s)):
            async with client.stream(
                "POST", "/v1/chat/completions", json=body, headers=headers
            ) as r:
                async for _ in r.aiter_raw():
                    pass

    async with trio.open_nursery() as nursery:
        for _ in range(args.streams):
            nursery.start_soon(steady)
        limiter = trio.CapacityLimiter(args.streams)
        async with trio.open_nursery() as droppers:
            for idx in range(args.disconnects):
                await limiter.acquire_on_behalf_of(idx)
                droppers.start_soon(_released_after, limiter, idx, drop)
        done.set()
    await settle(app, MODEL)  # a queued drop is released when it reaches the queue's head
    return dropped_report(envelopes[start:])


async def _released_after(limiter: trio.CapacityLimiter, idx: int, run: Any) -> None:
    try:
        await run(idx)
    finally:
        limiter.release_on_behalf_of(idx)


def dropped_report(envelopes: list[Envelope]) -> dict[str, Any]:
    """Where each dropped request was, and how long its release took after the drop."""
    seen: dict[str, str] = {}  # how far each request got: prefill, first_token, mid_stream
    dropped_at: dict[str, tuple[float, int]] = {}
    points: list[str] = []  # where each was when its client left
    release_s, steps, num_steps = [], [], 0
    for envelope in envelopes:
        event = envelope.event
        rid = getattr(event, "request_id", "")
        if isinstance(event, EngineStepped):
            num_steps += 1
        elif "drop-" not in rid:
            continue
        elif isinstance(event, RequestScheduled):
            seen[rid] = "prefill"
        elif isinstance(event, TokensSampled):
            seen[rid] = "first_token" if seen.get(rid) == "prefill" else "mid_stream"
        elif isinstance(event, ClientDisconnected):
            dropped_at[rid] = (envelope.at, num_steps)
            points.append(seen.get(rid, "queued"))
        elif isinstance(event, RequestReleased) and rid not in dropped_at:
            seen[rid] = "released"  # its last token came first: it ends as a completed one
        elif isinstance(event, RequestReleased) and rid in dropped_at:
            at, steps_then = dropped_at.pop(rid)
            release_s.append(envelope.at - at)
            steps.append(num_steps - steps_then)
    return {
        "dropped_at": {p: points.count(p) for p in sorted(set(points))},
        "num_released": len(release_s),
        "never_released": len(dropped_at),
        "release_s": _quantiles(release_s),
        "steps_between_disconnect_and_release": {n: steps.count(n) for n in sorted(set(steps))},
    }


def _quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {"p50": statistics.median(ordered), "p99": p99, "max": ordered[-1]}


async def mixed(
    client: httpx.AsyncClient, app: Any, log_path: Path | None, args: argparse.Namespace
) -> dict[str, Any]:
    rng = random.Random(2)
    statuses: dict[int, int] = {}
    received: dict[str, bytes] = {}  # digests: the bench keeps 32 bytes a request
    rss: list[int] = []
    limiter = trio.CapacityLimiter(args.streams)

    async def one(idx: int) -> None:
        path, body = mixed_body(rng, idx)
        headers = {"x-request-id": f"mix-{idx}"}
        async with client.stream("POST", path, json=body, headers=headers) as r:
            raw = b"".join([chunk async for chunk in r.aiter_raw()])
        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
        received[f"mix-{idx}"] = hashlib.sha256(raw).digest()

    async with trio.open_nursery() as nursery:
        for idx in range(args.mixed):
            if idx == args.mixed // 10:
                rss.append(resident_bytes())  # after the warm-up
            await limiter.acquire_on_behalf_of(idx)
            nursery.start_soon(_released_after, limiter, idx, one)
    rss.append(resident_bytes())
    report: dict[str, Any] = {
        "statuses": dict(sorted(statuses.items())),
        "resident_mib": {"after_a_tenth": rss[0] >> 20, "at_the_end": rss[-1] >> 20},
        "resident_growth": rss[-1] / rss[0] - 1,
    }
    if log_path is not None:
        report["replay_identical"] = replay_matches(log_path, received)
    return report


def replay_matches(log_path: Path, received: dict[str, bytes]) -> dict[str, int]:
    """How many logged requests replay to the very bytes their client received (by
    SHA-256)."""
    replayed = {
        r.request_id.split("-", 1)[1]: hashlib.sha256(r.body).digest()
        for r in project(read_log(log_path))
    }
    logged = [key for key in received if key in replayed]  # bad requests are never logged
    return {
        "logged": len(logged),
        "identical": sum(replayed[key] == received[key] for key in logged),
    }


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "soak.jsonl"
        settings = Settings(request_log=str(log_path), max_num_seqs=args.streams + 4)  # some queue
        reply = "word " * 500  # longer than any request asks: a drop always comes first
        load = fake_loader(args.tokenizer, reply=reply, step_delay_s=0.01) if args.fake else None
        app = create_app(settings, **({"load": load} if load else {}))
        recorder = DropRecorder()
        app.engine.bus.subscribe(recorder.keep)
        model = MODEL
        async with serving(app) as url, httpx.AsyncClient(base_url=url, timeout=600) as client:
            await wait_ready(app, timeout_s=600)
            tasks_before = num_tasks()
            report: dict[str, Any] = {"machine": machine(), "model": "fake" if args.fake else model}
            report["disconnects"] = await disconnects(client, app, recorder.envelopes, args)
            recorder.is_on = False
            report["after_disconnects"] = await settle(app, model, tasks_before)
            report["mixed"] = await mixed(client, app, log_path, args)
            report["after_mixed"] = await settle(app, model, tasks_before)
            report["tasks_before"] = tasks_before
        return report


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fake", action="store_true", help="a FakeRunner instead of the real model")
    p.add_argument("--disconnects", type=int, default=1000)
    p.add_argument("--mixed", type=int, default=10_000)
    p.add_argument("--streams", type=int, default=16)
    p.add_argument("--drop-within-s", type=float, default=0.5, help="drops fall in [0, this]")
    return p


if __name__ == "__main__":
    from atom.model.loader import load_tokenizer

    arguments = parser().parse_args()
    arguments.tokenizer = load_tokenizer(None, cache_dir=Settings().cache_dir)
    print(json.dumps(trio.run(main, arguments), indent=1))
