"""Sampler share of a decode step: `python -m bench.sampler [--batch 32] [--int8]`.

Times full decode steps of the default model at the given batch with every
penalty, logit_bias, min_p/top-k/top-p and top_logprobs=5 enabled, then the
logits processors + sampler alone on logits of the same shape, and reports the
sampler's share of the step.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from atom.model.loader import load_runtime
from atom.model.runner import SeqChunk, StepPlan
from atom.model.sampling.logits import RowContext, process
from atom.model.sampling.sampler import sample
from atom.vocabulary.choices import Quantization
from atom.vocabulary.config import Settings
from atom.vocabulary.events import SamplingParams

HEAVY = SamplingParams(
    temperature=0.8,
    top_p=0.9,
    top_k=50,
    min_p=0.05,
    max_tokens=10_000,
    ignore_eos=True,
    frequency_penalty=0.5,
    presence_penalty=0.5,
    repetition_penalty=1.1,
    logprobs=5,
    logit_bias=((100, 5.0), (200, -5.0)),
    min_tokens=5,
    bad_words=((300, 301),),
)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--int8", action="store_true")
    args = p.parse_args()
    runtime = load_runtime(
        Settings(quantization=Quantization.INT8 if args.int8 else Quantization.OFF)
    )
    runner = runtime.runner
    blocks_per_seq = (args.context + args.steps + 16) // runner.block_size + 1
    prompt = tuple(range(1000, 1000 + args.context))
    chunks = [
        SeqChunk(
            seq_id=f"s{i}",
            token_ids=prompt,
            start_pos=0,
            params=HEAVY,
            seed=i,
            block_ids=tuple(range(i * blocks_per_seq, (i + 1) * blocks_per_seq)),
            num_prompt_tokens=len(prompt),
            prompt_ids=prompt,
        )
        for i in range(args.batch)
    ]
    out = runner.step(StepPlan(chunks=tuple(chunks)))
    history = {c.seq_id: [out[c.seq_id][0].token_id] for c in chunks}
    started = time.perf_counter()
    for step in range(args.steps):
        plan = StepPlan(chunks=tuple(decode(c, history[c.seq_id], step) for c in chunks))
        for seq_id, sampled in runner.step(plan).items():
            history[seq_id].extend(t.token_id for t in sampled)
    step_s = (time.perf_counter() - started) / args.steps
    rows = [
        RowContext(
            params=HEAVY,
            prompt_ids=prompt,
            output_ids=tuple(history[c.seq_id]),
            num_output=len(history[c.seq_id]),
        )
        for c in chunks
    ]
    generators = [torch.Generator().manual_seed(i) for i in range(args.batch)]
    logits = torch.randn(args.batch, runner.model.config.vocab_size)  # type: ignore[attr-defined]
    started = time.perf_counter()
    for _ in range(args.steps):
        sample(process(logits, rows), [HEAVY] * args.batch, generators)
    sampler_s = (time.perf_counter() - started) / args.steps
    print(
        json.dumps(
            {
                "batch": args.batch,
                "int8": args.int8,
                "step_ms": round(step_s * 1e3, 1),
                "sampler_ms": round(sampler_s * 1e3, 1),
                "sampler_share": round(sampler_s / step_s, 3),
            }
        )
    )


def decode(chunk: SeqChunk, history: list[int], step: int) -> SeqChunk:
    start = chunk.num_prompt_tokens + step
    return SeqChunk(
        seq_id=chunk.seq_id,
        token_ids=(history[-1],),
        start_pos=start,
        block_ids=chunk.block_ids,
        params=HEAVY,
        seed=chunk.seed,
        num_prompt_tokens=chunk.num_prompt_tokens,
        prompt_ids=chunk.prompt_ids,
        output_ids=tuple(history),
    )


if __name__ == "__main__":
    main()
