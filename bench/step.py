"""In-process decode step of the default model: `python -m bench.step [--batch 1 16]`.

Loads the model as the server would (ATOM_* variables apply: `ATOM_QUANTIZATION=int4`),
prefills `batch` sequences of `--context` tokens through the Scheduler, then times
`--steps` decode steps of all of them; prints the median step in ms per batch size.
No HTTP and no event loop: the forward, sampling and the runner's bookkeeping only.
`--profile` then prints torch.profiler's table (CPU, and CUDA where there is one) over
the steps of the first batch size: where a step's time goes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from atom.model.heap import loading
from atom.model.loader import load_runtime
from atom.model.runner import Runner
from atom.model.scheduling.kv_cache import KVCacheManager
from atom.model.scheduling.scheduler import Scheduler
from atom.vocabulary.config import Settings
from atom.vocabulary.events import SamplingParams, Submit
from bench.run import machine

PARAMS = SamplingParams(temperature=0.0, max_tokens=100_000, ignore_eos=True)


def bench_scheduler(
    runner: Runner, settings: Settings, seqs: int, budget: int, max_model_len: int
) -> Scheduler:
    """A Scheduler over a fresh KV cache of `runner`'s size: at most `seqs` sequences and
    `budget` tokens a step, no stop tokens."""
    kv = KVCacheManager(num_blocks=runner.num_blocks, block_size=settings.block_size)
    return Scheduler(
        kv=kv,
        max_num_seqs=seqs,
        max_num_batched_tokens=budget,
        eos_token_ids=frozenset(),
        max_model_len=max_model_len,
    )


def decode_steps(runner: Runner, settings: Settings, batch: int, context: int, steps: int) -> float:
    """The median decode step (ms) of `batch` sequences that hold `context` tokens."""
    scheduler = bench_scheduler(runner, settings, batch, max(2048, context), context + steps + 8)
    for i in range(batch):
        prompt = tuple((i * 31 + j * 7) % 4000 + 100 for j in range(context))
        scheduler.add(Submit(request_id=str(i), prompt_ids=prompt, params=PARAMS))
    times: list[float] = []
    while len(times) < steps + 2:
        plan = scheduler.schedule()
        began = time.perf_counter()
        sampled = runner.step(plan)
        if all(len(c.token_ids) == 1 for c in plan.chunks):  # decode only
            times.append(time.perf_counter() - began)
        scheduler.update(plan, sampled)
    for i in range(batch):
        scheduler.drop(str(i))
    for seq_id in scheduler.take_released():
        runner.release(seq_id)
    return statistics.median(times[2:]) * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--batch", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--profile", action="store_true", help="then profile the first batch size")
    args = p.parse_args()
    settings = Settings.from_env()
    with loading():  # as the server loads: the heap frozen after (atom/model/heap.py)
        runtime = load_runtime(settings)
    report = {
        "machine": machine(),
        "model": dict(runtime.description),
        "context": args.context,
        "step_ms": {
            str(b): round(decode_steps(runtime.runner, settings, b, args.context, args.steps), 2)
            for b in args.batch
        },
    }
    print(json.dumps(report, indent=1))
    if args.profile:
        profile(runtime.runner, settings, args.batch[0], args.context, args.steps)


def profile(runner: Runner, settings: Settings, batch: int, context: int, steps: int) -> None:
    """torch.profiler's table over `decode_steps` (its prefill included), by own CPU time."""
    import torch
    from torch.profiler import ProfilerActivity

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        decode_steps(runner, settings, batch, context, steps)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))


if __name__ == "__main__":
    main()
