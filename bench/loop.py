"""The Batcher loop's own cost, no model time: `python -m bench.loop`.

A FakeRunner (no forward) serves 16 requests of 400 tokens each through a real
Batcher, Scheduler and KV bookkeeping; prints the best steps/s of `--runs` runs. Run it
from a worktree with `PYTHONPATH=.` to compare two commits (the editable install
otherwise imports the main checkout)."""

from __future__ import annotations

import argparse
import time

import trio

from atom.actors.batcher import Batcher
from atom.actors.bus import EventBus
from atom.actors.device import DeviceThread
from atom.actors.outbox import Outbox
from atom.model.fake_runner import FakeRunner
from atom.model.scheduling.kv_cache import KVCacheManager
from atom.model.scheduling.scheduler import Scheduler
from atom.vocabulary.events import SamplingParams, Submit

NUM_REQUESTS, NUM_TOKENS = 16, 400


def script(prompt_ids: tuple[int, ...], params: object, seed: int) -> list[int]:
    return [5] * NUM_TOKENS


async def steps_per_s() -> float:
    runner = FakeRunner(eos_token_id=0, script=script)
    scheduler = Scheduler(
        kv=KVCacheManager(num_blocks=4096, block_size=16),
        max_num_seqs=32,
        max_num_batched_tokens=2048,
        eos_token_ids=runner.eos_token_ids,
        max_model_len=1024,
    )
    bus = EventBus(clock=trio.current_time)
    batcher = Batcher(
        runner,  # type: ignore[arg-type]  # eos_token_ids is a property on the FakeRunner
        scheduler,
        publish=bus.publish,
        max_queued_requests=64,
        device=DeviceThread(),
    )
    params = SamplingParams(temperature=0.0, max_tokens=NUM_TOKENS)

    async def drain(outbox: Outbox) -> None:
        while await outbox.receive_batch():
            pass

    async with trio.open_nursery() as nursery:
        await nursery.start(batcher.run)
        began = time.perf_counter()
        async with trio.open_nursery() as clients:
            for i in range(NUM_REQUESTS):
                outbox = Outbox()
                batcher.submit_nowait(
                    Submit(request_id=str(i), prompt_ids=(1, 2, 3), params=params), outbox
                )
                clients.start_soon(drain, outbox)
        elapsed = time.perf_counter() - began
        nursery.cancel_scope.cancel()
    return runner.num_steps / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    best = max(trio.run(steps_per_s) for _ in range(args.runs))
    print(f"{best:.0f} steps/s (best of {args.runs})")


if __name__ == "__main__":
    main()
