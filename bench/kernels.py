"""Kernel micro-benchmark: `python -m bench.kernels [--rows 1 2 4 8 16 32 64]
[--shape default|1b] [--huge-pages]`.

Times ATOM's weight products on a model's shapes, as a decode step runs them (every
layer's own weights, so nothing is served from cache a layer earlier than a real
step would be): the layer products (`int4`, `q5`, `q6`, `int8`) and the output projection (`q8`,
`int8-head`); prints the bytes of weights streamed per second against the machine's
measured read bandwidth. The floor of a batch-1 decode step is its weight bytes over
that bandwidth. `--shape 1b`: bench.big_model's 1B model, whose 4-bit layers (620 MB)
no cache holds; `--huge-pages`: the weights moved onto 2 MB pages, as the loader puts
them (atom/model/heap.py).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import torch

from atom.model.forward.blocks import Q4_1, Q5_1, Q6_K, Q8_0
from atom.model.forward.int8 import quantize_rows
from atom.model.forward.kernels import load_cpu_ops
from atom.model.heap import onto_huge_pages
from atom.vocabulary.config import Settings
from bench.big_model import DEFAULT_SHAPE
from bench.big_model import SHAPE as ONE_B
from bench.run import machine, publish

# SmolLM2-135M; the 1B model of bench.big_model. Both with SmolLM2's vocabulary.
MODEL_SHAPES = {
    "default": DEFAULT_SHAPE,
    "1b": ONE_B,
}
VOCABULARY = 49152
Shape = tuple[int, int]  # (output features, input features) of a product


def layer_shapes(model: dict[str, int]) -> tuple[Shape, ...]:
    """A layer's products: q/k/v fused, the attention output, gate/up fused, down."""
    hidden, ffn = model["hidden"], model["ffn"]
    qkv = hidden + 2 * model["kv_heads"] * (hidden // model["heads"])
    return ((qkv, hidden), (hidden, hidden), (2 * ffn, hidden), (hidden, ffn))


def workloads(shape: str) -> dict[str, tuple[str, list[tuple[Shape, ...]]]]:
    """What each kernel is timed on: "int4", "q5", "q6" and "int8" the layer products
    of a step (Q4_1, Q5_1, Q6_K, int8), "q8" and "int8-head" the output projection
    (int4's and int8's forms of it)."""
    model = MODEL_SHAPES[shape]
    layers = [layer_shapes(model)] * model["layers"]
    output: list[tuple[Shape, ...]] = [((VOCABULARY, model["hidden"]),)]
    return {
        "int4": ("int4", layers),
        "q5": ("q5", layers),
        "q6": ("q6", layers),
        "int8": ("int8", layers),
        "q8": ("q8", output),
        "int8-head": ("int8", output),
    }


KERNELS = tuple(workloads("default"))
BLOCK_FORMATS = {"int4": Q4_1, "q5": Q5_1, "q6": Q6_K, "q8": Q8_0}


def read_bandwidth(megabytes: int = 512, repeats: int = 5) -> float:
    """Bytes per second a sum over a buffer far larger than the caches reads (best of)."""
    buffer = torch.ones(megabytes << 18, dtype=torch.float32)  # megabytes MiB
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        buffer.sum()
        best = min(best, time.perf_counter() - began)
    return buffer.numel() * 4 / best


def best_time(call: Callable[[], Any], repeats: int) -> float:
    call()
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - began)
    return best


def step_products(
    ops: Any, workload: str, shape: str, huge_pages: bool
) -> tuple[list[tuple[Any, ...]], int]:
    """Each product of a workload as (kernel, input features, weight arguments), and the
    bytes of all their weights."""
    torch.manual_seed(0)
    products: list[tuple[Any, ...]] = []
    total = 0
    kind, layers = workloads(shape)[workload]
    for shapes in layers:
        for n, k in shapes:
            weight = torch.randn(n, k) * 0.05
            if kind in BLOCK_FORMATS:
                fmt = BLOCK_FORMATS[kind]
                products.append((getattr(ops, fmt.kernel), k, blocks := fmt.pack(weight), None))
                total += blocks.numel()
            else:
                values, scales = quantize_rows(weight)
                products.append((ops.int8_linear, k, values, scales, None))
                total += values.numel() + scales.numel() * 4
    if huge_pages:
        onto_huge_pages(w for _, _, *weights in products for w in weights if w is not None)
    return products, total


def measure(
    ops: Any, kind: str, rows: list[int], repeats: int, shape: str, huge_pages: bool
) -> list[dict[str, Any]]:
    products, weight_bytes = step_products(ops, kind, shape, huge_pages)
    inputs = {k: {m: torch.randn(m, k) for m in rows} for _, k, *_ in products}
    results = []
    for m in rows:

        def step(m: int = m) -> None:
            for kernel, k, *weights in products:
                kernel(inputs[k][m], *weights)

        seconds = best_time(step, repeats)
        results.append(
            {
                "kernel": kind,
                "rows": m,
                "step_ms": round(seconds * 1e3, 3),
                "weight_mb": round(weight_bytes / 1e6, 1),
                "gb_per_s": round(weight_bytes / seconds / 1e9, 1),
            }
        )
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    p.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=KERNELS)
    p.add_argument("--shape", default="default", choices=list(MODEL_SHAPES))
    p.add_argument("--huge-pages", action="store_true", help="weights on 2 MB pages")
    p.add_argument("--isa", nargs="+", default=[], help="int4 loops to time (default: the chosen)")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--out", help="write the JSON here too")
    args = p.parse_args()
    ops = load_cpu_ops(Settings().cache_dir)
    bandwidth = read_bandwidth()
    chosen = ops.kernel_isa()
    results = []
    for kind in args.kernels:
        for isa in args.isa if kind in BLOCK_FORMATS and args.isa else [chosen]:
            ops.set_kernel_isa(isa)
            results += [
                {"isa": isa, **r}
                for r in measure(ops, kind, args.rows, args.repeats, args.shape, args.huge_pages)
            ]
    ops.set_kernel_isa(chosen)
    for r in results:
        r["of_bandwidth"] = round(r["gb_per_s"] * 1e9 / bandwidth, 2)
    report = {
        "machine": machine(),
        "threads": torch.get_num_threads(),
        "kernel_isa": chosen,
        "shape": args.shape,
        "huge_pages": args.huge_pages,
        "read_gb_per_s": round(bandwidth / 1e9, 1),
        "products": results,
    }
    publish(report, args.out)


if __name__ == "__main__":
    main()
