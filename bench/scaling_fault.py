"""A replica killed under load: `python -m bench.scaling_fault [--out FILE]`.

`atom serve --data-parallel-size 2` (round robin, so both replicas hold streams) with
the real default model; 16 clients stream chats; a few seconds in, one replica gets
SIGKILL. Every request ends one of three ways: `ok` (the stream reached `[DONE]`),
`failed` (an error status or a cut stream, at once) or `hung` (no end within
--timeout). Reported: the counts, when the failures happened relative to the kill,
and whether every request started a few seconds after the kill succeeded.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import trio

from bench.load import fresh_connections, prompt_text
from bench.run import machine, publish
from bench.scaling import MODEL, serving

KILL_AT_S = 4.0  # into the load
SETTLED_S = 5.0  # after the kill: the router's health check has taken the replica out


@dataclass(frozen=True, slots=True)
class Outcome:
    started: float  # seconds from the load's start
    ended: float
    how: str  # ok, failed, hung


async def one(client: httpx.AsyncClient, url: str, i: int, t0: float, timeout: float) -> Outcome:
    body = {"model": MODEL, "stream": True, "max_tokens": 64, "ignore_eos": True,
            "messages": [{"role": "user", "content": prompt_text(40, i)}]}  # fmt: skip
    started = time.perf_counter() - t0
    how = "hung"
    with trio.move_on_after(timeout):
        try:
            async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
                how = "failed"
                if r.status_code == 200:
                    async for line in r.aiter_lines():
                        if line == "data: [DONE]":
                            how = "ok"
        except httpx.HTTPError:
            how = "failed"
    return Outcome(started=started, ended=time.perf_counter() - t0, how=how)


async def load(url: str, pid: int, num: int, concurrency: int, timeout: float) -> list[Outcome]:
    outcomes: list[Outcome] = []
    queue = list(range(num))
    t0 = time.perf_counter()
    async with fresh_connections(timeout) as client:

        async def worker() -> None:
            while queue:
                outcomes.append(await one(client, url, queue.pop(), t0, timeout))

        async def killer() -> None:
            await trio.sleep(KILL_AT_S)
            os.kill(pid, signal.SIGKILL)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(killer)
            for _ in range(concurrency):
                nursery.start_soon(worker)
    return outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=160)
    parser.add_argument("--timeout", type=float, default=120.0, help="a request's limit, s")
    parser.add_argument("--out")
    args = parser.parse_args()
    log = Path(tempfile.mkdtemp(prefix="bench-fault-")) / "launcher.log"
    with serving(2, "round_robin", log) as (url, _):
        started = [json.loads(line) for line in log.read_text().splitlines()
                   if line.startswith("{") and '"replica_started"' in line]  # fmt: skip
        outcomes = trio.run(load, url, started[0]["pid"], args.requests, 16, args.timeout)
        alive = httpx.get(f"{url}/health", timeout=5).status_code
    counts = {how: sum(o.how == how for o in outcomes) for how in ("ok", "failed", "hung")}
    failed = [o.ended - KILL_AT_S for o in outcomes if o.how == "failed"]
    later = [o for o in outcomes if o.started > KILL_AT_S + SETTLED_S]
    report: dict[str, Any] = {
        "machine": machine(),
        "kill_at_s": KILL_AT_S,
        "outcomes": counts,
        "failures_s_after_kill": [round(s, 2) for s in sorted(failed)],
        "started_after_settling": len(later),
        "all_ok_after_settling": all(o.how == "ok" for o in later),
        "front_health_after": alive,
    }
    publish(report, args.out, indent=2)


if __name__ == "__main__":
    main()
