"""One layer's decode attention alone: `python -m bench.decode_attention [--batch 32]
[--context 1000] [--isa avx2 amx_int8] [--out FILE]`.

Times the CPU kernel `paged_decode` over a float16 and an int8 cache (random rows, the
default model's heads: 9 query heads, 3 kv heads of 64; blocks of 16 in a shuffled
order, as a cache that has served a while holds them), once for each instruction set
asked for (`set_kernel_isa`; default: the one the CPU gets). The median of `--repeats`
calls, the best of `--rounds` rounds taken in turn, in ms.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

from atom.model.forward.attention import INT8_GROUP, Int8Rows, kernel_caches, write_rows
from atom.model.forward.kernels import load_cpu_ops
from atom.vocabulary.config import Settings
from bench.run import machine, publish

HEADS, KV_HEADS, DIM, BLOCK = 9, 3, 64, 16


def caches(slots: int) -> dict[str, tuple[Any, Any]]:
    """The same random K and V rows as float16 and as int8 (with their scales)."""
    gen = torch.Generator().manual_seed(0)
    k, v = (torch.randn(slots, KV_HEADS, DIM, generator=gen) for _ in range(2))
    int8 = []
    for rows in (k, v):
        cache = Int8Rows(
            torch.empty(slots, KV_HEADS, DIM, dtype=torch.int8),
            torch.empty(slots, KV_HEADS, DIM // INT8_GROUP, dtype=torch.float16),
        )
        write_rows(cache, torch.arange(slots), rows)
        int8.append(cache)
    return {"float16": (k.half(), v.half()), "int8": (int8[0], int8[1])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--context", type=int, default=1000)
    p.add_argument("--isa", nargs="+", default=[], help="instruction sets (default: the chosen)")
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", help="write the JSON here too")
    args = p.parse_args()
    ops = load_cpu_ops(Settings().cache_dir)
    blocks_each = -(-args.context // BLOCK)
    order = torch.randperm(args.batch * blocks_each, generator=torch.Generator().manual_seed(1))
    tables = order.view(args.batch, blocks_each)
    lengths = torch.full((args.batch,), args.context, dtype=torch.int64)
    q = torch.randn(args.batch, HEADS, DIM, generator=torch.Generator().manual_seed(2))
    rows = caches(args.batch * blocks_each * BLOCK)
    isas = args.isa or [ops.kernel_isa()]
    best: dict[str, float] = {}
    for _ in range(args.rounds):
        for isa in isas:
            ops.set_kernel_isa(isa)
            for dtype, (k, v) in rows.items():
                k_rows, v_rows, scales = kernel_caches(k, v)
                times = []
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    ops.paged_decode(q, k_rows, v_rows, tables, lengths, BLOCK, DIM**-0.5, 0,
                                     0.0, **scales)  # fmt: skip
                    times.append(time.perf_counter() - start)
                key = f"{isa} {dtype}"
                best[key] = min(best.get(key, float("inf")), statistics.median(times) * 1e3)
    report = {"machine": machine(), "batch": args.batch, "context": args.context,
              "ms": {key: round(ms, 3) for key, ms in best.items()}}  # fmt: skip
    publish(report, args.out, indent=2)


if __name__ == "__main__":
    main()
