"""Linear layers whose weights are GGUF blocks, multiplied by ATOM's block kernels.

A `BlockFormat` names one of them: Q4_1 (`int4.py`, the 4-bit layers of
`--quantization int4` and of GGUF Q4_1 tensors) and Q8_0 (`q8.py`, int4's output
projection and GGUF Q8_0 tensors). A `BlockLinear` holds one layer's blocks and runs
every product through the format's kernel (csrc/blocks.cpp), one row or many.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from atom.model.forward import int4, q8
from atom.model.forward.kernels import ProjectionKind

Quantizer = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True, slots=True)
class BlockFormat:
    name: str  # GGUF's name of the type
    quantize: Quantizer  # float weights [N, K] -> (blocks, the weights they stand for)
    kernel: str  # the kernels module's product for it
    kind: ProjectionKind  # its form in the kernels' DecodeStack
    block: int = 32  # weights a block, along the input

    def supports(self, linear: nn.Linear) -> bool:
        return linear.in_features % self.block == 0


Q4_1 = BlockFormat("Q4_1", int4.quantize_blocks, "int4_linear", ProjectionKind.INT4)
Q8_0 = BlockFormat("Q8_0", q8.quantize_blocks, "q8_linear", ProjectionKind.Q8)


class BlockLinear(nn.Module):
    def __init__(self, linear: nn.Linear, fmt: BlockFormat, kernels: Any) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.format = fmt
        # buffers, so the model's state_dict (and the weight-update shape check) sees them
        self.register_buffer("blocks", fmt.quantize(linear.weight)[0])
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float())
        self._gemv = getattr(kernels, fmt.kernel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._gemv(x, self.blocks, self.bias)  # type: ignore[no-any-return]

    def projection(self, kernels: Any) -> Any:
        """This layer as the kernels' `Projection`."""
        return kernels.Projection(self.format.kind, self.blocks, None, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"format={self.format.name}"
        )
