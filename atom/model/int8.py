"""`--quantization int8`: int8 weights for CPU decode.

Each Linear becomes an `Int8Linear`: weights quantized once, symmetric, one scale
per output row; activations quantized per call (fbgemm/x86 dynamic kernels, with
the 7-bit activation range those kernels need on AVX2). A decode step then reads
a quarter of float32's weight bytes, which is what batch-1 decode is bound by.
The op is called directly (not through torch.ao's module and op packet, whose
Python checks cost ~6 µs a call, 120 calls a step).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

METHODS = ("int8",)


class Int8Linear(nn.Module):
    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        weight = linear.weight.detach().float()
        scales = weight.abs().amax(dim=1).clamp(min=1e-8) / 127
        zeros = torch.zeros(weight.shape[0], dtype=torch.long)
        with warnings.catch_warnings():  # quantized tensors are deprecated, still shipped
            warnings.simplefilter("ignore")
            qweight = torch.quantize_per_channel(weight, scales.double(), zeros, 0, torch.qint8)
        bias = None if linear.bias is None else linear.bias.detach().float()
        self._packed = torch.ops.quantized.linear_prepack(qweight, bias)
        self._op = torch.ops.quantized.linear_dynamic.default

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._op(x, self._packed, True)  # type: ignore[no-any-return]

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


def quantize(model: Any, method: str, device: str) -> None:
    """Replace every nn.Linear of `model` in place."""
    if method not in METHODS:
        raise ValueError(f"unknown --quantization {method!r} (supported: int8)")
    if not device.startswith("cpu"):
        raise ValueError("--quantization int8 runs on CPU only; on CUDA use bfloat16")
    if "x86" in torch.backends.quantized.supported_engines:
        torch.backends.quantized.engine = "x86"
    _replace(model)


def _replace(module: nn.Module) -> None:
    for name, child in module.named_children():
        if isinstance(child, nn.Linear):
            setattr(module, name, Int8Linear(child))
        else:
            _replace(child)
