"""Does how a prompt is cut into chunks change the answer? `python -m bench.chunking`.

Loads the default model as the server would (ATOM_* variables apply:
`ATOM_QUANTIZATION=off`, `ATOM_KV_CACHE_DTYPE=float32`) and runs one greedy prompt of
120 tokens three ways through the Scheduler and the runner: prefilled whole, in
chunks of `--budget` tokens, and after a request sharing its first 64 tokens (a
prefix-cache hit). Prints, for each, the first answer token's top log-probabilities
and whether all `--tokens` answer tokens equal the whole prefill's. Under load,
arrival timing decides the chunks, so this is what makes answers differ between runs.
"""

from __future__ import annotations

import argparse
from typing import Any

from atom.model.loader import load_runtime
from atom.model.runner import Runner
from atom.vocabulary.config import Settings
from atom.vocabulary.events import SamplingParams, Submit
from bench.run import machine, publish
from bench.step import bench_scheduler

PROMPT = tuple((j * 7) % 4000 + 100 for j in range(120))
SHARING = PROMPT[:64] + tuple(range(500, 540))  # the first 64 tokens: four whole blocks


def answer(
    runner: Runner, settings: Settings, budget: int, before: tuple[int, ...] | None, tokens: int
) -> list[Any]:
    """PROMPT's greedy answer (`Sampled` records, log-probabilities on), with a token
    budget of `budget` a step, after `before` ran to its end when given."""
    scheduler = bench_scheduler(runner, settings, 4, budget, 1024)
    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True, logprobs=3)
    out: list[Any] = []
    for request_id, prompt in (("before", before), ("prompt", PROMPT)):
        if prompt is None:
            continue
        seq_id = f"{request_id}/0"
        scheduler.add(Submit(request_id=request_id, prompt_ids=prompt, params=params))
        while scheduler.seq(seq_id):
            plan = scheduler.schedule()
            sampled = runner.step(plan)
            if request_id == "prompt" and seq_id in sampled:
                out.extend(sampled[seq_id])
            scheduler.update(plan, sampled)
        runner.release(seq_id)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=int, default=50, help="tokens a step when chunked")
    p.add_argument("--tokens", type=int, default=30, help="answer tokens compared")
    p.add_argument("--out", help="write the JSON here too")
    args = p.parse_args()
    settings = Settings.from_env()
    runtime = load_runtime(settings)
    ways = {"whole": (2048, None), "chunked": (args.budget, None), "prefix_cached": (2048, SHARING)}
    answers = {
        name: answer(runtime.runner, settings, budget, before, args.tokens)
        for name, (budget, before) in ways.items()
    }
    whole = [s.token_id for s in answers["whole"]]
    report = {
        "machine": machine(),
        "model": dict(runtime.description),
        "ways": {
            name: {
                "first_token_top_logprobs": [[t, round(lp, 6)] for t, lp in got[0].logprobs.top],
                "same_tokens_as_whole": [s.token_id for s in got] == whole,
            }
            for name, got in answers.items()
        },
    }
    publish(report, args.out)


if __name__ == "__main__":
    main()
