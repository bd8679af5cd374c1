"""`--quantization int8`: int8 weights for CPU decode.

Each Linear becomes an `Int8Linear`: weights quantized once, symmetric, one scale
per output row. A decode step then reads a quarter of float32's weight bytes,
which is what small-batch decode is bound by. Two kernels run them, each from
its own copy (with the C++ kernels the int8 weights are held twice):

- up to `GEMV_ROWS` activation rows (decode at batch 1-2), ATOM's `int8_linear`
  CPU kernel when it is built: float activations, the int8 rows streamed once;
- more rows, torch's fbgemm/x86 dynamic-quantization kernel: activations
  quantized per call (7-bit range, as those kernels need on AVX2), integer
  matrix products. It is called as the bare op: torch.ao's module and op packet
  cost ~6 µs of Python checks a call, 120 calls a step.

So outputs differ slightly with the batch size, as int8 outputs already did
with the batch's activation range.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

GEMV_ROWS = 2  # measured: the kernel wins at 1-2 rows (23 vs 16 GB/s), fbgemm from 4

Gemv = Callable[..., torch.Tensor]  # int8_linear(x, weight, scale, bias) -> y
FLOAT, INT8, INT4 = 0, 1, 2  # the kernels' Projection kinds (csrc/ops.h)


class Int8Linear(nn.Module):
    def __init__(self, linear: nn.Linear, gemv: Gemv | None = None) -> None:
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
        self._gemv = gemv
        if gemv is not None:  # the same int8 values, row-major, for the kernel
            self._weight = qweight.int_repr().contiguous()
            self._scale = scales.float().contiguous()
            self._bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._gemv is not None and x.numel() <= GEMV_ROWS * self.in_features:
            return self._gemv(x, self._weight, self._scale, self._bias)
        return self._op(x, self._packed, True)  # type: ignore[no-any-return]

    def projection(self, kernels: Any) -> tuple[Any, int] | None:
        """This layer as the kernels' `Projection` and the rows it takes that way
        (None: it has no kernel copy)."""
        if self._gemv is None:
            return None
        return kernels.Projection(INT8, self._weight, self._scale, self._bias), GEMV_ROWS

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"
