"""Kernel micro-benchmark: `python -m bench.kernels [--rows 1 2 4 8 16 32 64]`.

Times ATOM's weight products on the default model's shapes, as a decode step runs
them (every layer's own weights, so nothing is served from cache a layer earlier
than a real step would be): the 120 layer products (`int4`, `int8`) and the output
projection (`q8`, `int8-head`); prints the bytes of weights streamed per second
against the machine's measured read bandwidth. The floor of a batch-1 decode
step is its weight bytes over that bandwidth.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import torch

from atom.config import Settings
from atom.model.forward.blocks import Q4_1, Q8_0
from atom.model.forward.int8 import quantize_rows
from atom.model.forward.kernels import load_cpu_ops
from bench.run import machine, publish

# SmolLM2-135M: hidden 576, MLP 1536, 30 layers, q/k/v fused (9 + 2 * 3 heads of 64),
# gate/up fused; (output features, input features) of each product of a layer.
Shape = tuple[int, int]
LAYER_SHAPES: tuple[Shape, ...] = ((960, 576), (576, 576), (3072, 576), (576, 1536))
LAYERS = 30
OUTPUT_SHAPE: Shape = (49152, 576)  # the output projection (tied to the token embedding)
# what each kernel is timed on: "int4" and "int8" the 120 layer products of a step,
# "q8" and "int8-head" the output projection (int4's and int8's forms of it)
WORKLOADS: dict[str, tuple[str, list[tuple[Shape, ...]]]] = {
    "int4": ("int4", [LAYER_SHAPES] * LAYERS),
    "int8": ("int8", [LAYER_SHAPES] * LAYERS),
    "q8": ("q8", [(OUTPUT_SHAPE,)]),
    "int8-head": ("int8", [(OUTPUT_SHAPE,)]),
}


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


def step_products(ops: Any, workload: str) -> tuple[list[tuple[Any, ...]], int]:
    """Each product of a workload as (kernel, input features, weight arguments), and the
    bytes of all their weights."""
    torch.manual_seed(0)
    products: list[tuple[Any, ...]] = []
    total = 0
    kind, layers = WORKLOADS[workload]
    for shapes in layers:
        for n, k in shapes:
            weight = torch.randn(n, k) * 0.05
            if kind in ("int4", "q8"):
                blocks = (Q4_1 if kind == "int4" else Q8_0).pack(weight)
                products.append((getattr(ops, f"{kind}_linear"), k, blocks, None))
                total += blocks.numel()
            else:
                values, scales = quantize_rows(weight)
                products.append((ops.int8_linear, k, values, scales, None))
                total += values.numel() + scales.numel() * 4
    return products, total


def measure(ops: Any, kind: str, rows: list[int], repeats: int) -> list[dict[str, Any]]:
    products, weight_bytes = step_products(ops, kind)
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
    p.add_argument("--kernels", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--isa", nargs="+", default=[], help="int4 loops to time (default: the chosen)")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--out", help="write the JSON here too")
    args = p.parse_args()
    ops = load_cpu_ops(Settings().cache_dir)
    bandwidth = read_bandwidth()
    chosen = ops.kernel_isa()
    results = []
    for kind in args.kernels:
        for isa in args.isa if kind in ("int4", "q8") and args.isa else [chosen]:
            ops.set_kernel_isa(isa)
            results += [{"isa": isa, **r} for r in measure(ops, kind, args.rows, args.repeats)]
    ops.set_kernel_isa(chosen)
    for r in results:
        r["of_bandwidth"] = round(r["gb_per_s"] * 1e9 / bandwidth, 2)
    report = {
        "machine": machine(),
        "threads": torch.get_num_threads(),
        "kernel_isa": chosen,
        "read_gb_per_s": round(bandwidth / 1e9, 1),
        "products": results,
    }
    publish(report, args.out)


if __name__ == "__main__":
    main()
