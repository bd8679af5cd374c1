"""`--quantization`: swaps a model's Linear layers for int8 or int4 ones, in place (CPU)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from atom.model.forward import int4
from atom.model.forward.int8 import Int8Linear

METHODS = ("int8", "int4")


def quantize(model: Any, method: str, device: str, kernels: Any = None) -> None:
    """Replace every nn.Linear of `model` (`kernels`: ATOM's CPU kernels module, which
    int4 needs and int8 uses for one or two rows). With int4 the output projection
    (`lm_head`) and layers whose width is not a multiple of 32 stay int8."""
    if method not in METHODS:
        raise ValueError(f"unknown --quantization {method!r} (one of {', '.join(METHODS)})")
    if not device.startswith("cpu"):
        raise ValueError(f"--quantization {method} runs on CPU only; on CUDA use bfloat16")
    if method == "int4" and kernels is None:
        raise ValueError("--quantization int4 needs ATOM's CPU kernels (--cpu-kernels)")
    if "x86" in torch.backends.quantized.supported_engines:
        torch.backends.quantized.engine = "x86"
    head = getattr(model, "lm_head", None)
    gemv8 = None if kernels is None else kernels.int8_linear
    gemv4 = None if method == "int8" else kernels.int4_linear

    def replace(module: nn.Module) -> None:
        for name, child in module.named_children():
            if not isinstance(child, nn.Linear):
                replace(child)
            elif gemv4 is not None and child is not head and int4.supports(child):
                setattr(module, name, int4.Int4Linear(child, gemv4))
            else:
                setattr(module, name, Int8Linear(child, gemv8))

    replace(model)
