"""Top-p's cost in the sampler: `python -m bench.top_p [--rows 16]`.

Times `sample()` on rows of random logits over the default model's vocabulary (49,152)
at temperature 0.7 and top_p 0.9, from peaked rows (a sorted head of 64 tokens holds
the mass) to flat ones (no head holds it: the rows binned by value, one bin sorted),
against a whole sort of the same rows, the way top-p was drawn before it looked at
sorted heads first."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from functools import partial

import torch

from atom.model.sampling.sampler import candidates, sample
from atom.vocabulary.events import SamplingParams

VOCAB = 49152
SCALES = {"peaked": 8.0, "medium": 4.0, "flat": 1.0}  # the logits' standard deviation


def timed(run: Callable[[], object], repeats: int) -> float:
    run()
    began = time.perf_counter()
    for _ in range(repeats):
        run()
    return (time.perf_counter() - began) / repeats * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    torch.manual_seed(0)
    params = [SamplingParams(temperature=0.7, top_p=0.9)] * args.rows
    generators = [torch.Generator().manual_seed(i) for i in range(args.rows)]
    report = {}
    for name, scale in SCALES.items():
        logits = torch.randn(args.rows, VOCAB) * scale
        found = candidates(logits / 0.7, params)
        head = "binned" if found is None else found[0].shape[1]
        drawn = partial(sample, logits, params, generators)
        whole_sort = partial(torch.sort, logits, dim=1, descending=True)
        report[name] = {
            "head": head,
            "sample_ms": round(timed(drawn, args.repeats), 2),
            "whole_sort_ms": round(timed(whole_sort, args.repeats), 2),
        }
    print(json.dumps({"rows": args.rows, "vocab": VOCAB, "top_p": 0.9, "levels": report}))


if __name__ == "__main__":
    main()
