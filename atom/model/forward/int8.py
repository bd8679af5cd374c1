"""`--quantization int8`: int8 weights for CPU decode.

Each Linear becomes an `Int8Linear`: weights quantized once, symmetric, one scale
per output row. A decode step then reads a quarter of float32's weight bytes,
which is what small-batch decode is bound by. With ATOM's CPU kernels a product of
fewer than `WIDEN_ROWS` rows is the `int8_linear` kernel (float activations, the
int8 rows streamed once for every 32 rows of activations); longer ones (prefill),
and every product without the kernels, multiply by the int8 values widened to
float and scale the result.

Activations are never quantized. torch's fbgemm dynamic-quantization kernel,
which this layer used for more than two rows before, quantizes a whole batch of
activations to one 7-bit range: on SmolLM2 its logits' top token agreed with
float32's at 64 % of 141 positions of a plain English text (`python -m
bench.quant_agreement`, Intel Xeon), where per-row float activations agree as
float32 does with itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from atom.model.forward.kernels import ProjectionKind

# From this many rows (prefill) widening the weights and one float GEMM beat the kernel
# (measured on the default model's products: bench/results/history.md).
WIDEN_ROWS = 128

Gemv = Callable[..., torch.Tensor]  # int8_linear(x, weight, scale, bias) -> y


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 [N, K], float32 scales [N]): symmetric, one scale per output row."""
    weight = weight.detach().float()
    scales = weight.abs().amax(dim=1).clamp(min=1e-8) / 127
    values = (weight / scales.unsqueeze(1)).round().clamp(-127, 127).to(torch.int8)
    return values.contiguous(), scales.contiguous()


class Int8Linear(nn.Module):
    def __init__(self, linear: nn.Linear, gemv: Gemv | None = None) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self._weight, self._scale = quantize_rows(linear.weight)
        self._bias = None if linear.bias is None else linear.bias.detach().float()
        self._gemv = gemv

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._gemv is not None and x.numel() < WIDEN_ROWS * self.in_features:
            return self._gemv(x, self._weight, self._scale, self._bias)
        y = F.linear(x, self._weight.to(x.dtype)) * self._scale
        return y if self._bias is None else y + self._bias

    def projection(self, kernels: Any) -> Any | None:
        """This layer as the kernels' `Projection` (None: it runs without them)."""
        if self._gemv is None:
            return None
        return kernels.Projection(ProjectionKind.INT8, self._weight, self._scale, self._bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"
