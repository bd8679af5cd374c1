"""`--quantization`: which weight form each Linear layer of a model takes (CPU).

- `auto` (the default): a GGUF's quantized tensors run on the integer kernels: Q4_1
  and Q8_0 as they ship; Q4_0 and Q4_K as Q4_1 blocks, Q5_0, Q5_1 and Q5_K as Q5_1
  blocks, Q6_K as Q6_K blocks of 32, made from the file's own (`gguf_blocks.py`:
  exactly, the 4- and 5-bit K types' sub-block scales rounded to float16); the other
  types (Q2_K, Q3_K, ...) as Q8_0 blocks of their dequantized weights (within half a
  Q8_0 step); float tensors stay float. A fused projection (q/k/v, gate/up) takes the
  narrowest form that holds all its parts (Q8_0 where Q6_K meets another type). Weights
  from safetensors stay float32, and everything stays as loaded without the CPU
  kernels or on CUDA.
- `off`: float32.
- `int8`: every Linear int8, one scale a row (`int8.py`).
- `int4`: every Linear with a width of a multiple of 32 in Q4_1 blocks, the output
  projection in Q8_0 blocks; others int8.

`quantize` swaps the layers in place and returns what it chose, by layer kind
(`qkv_proj`, `lm_head`, ...), for the start-up log and the model's description.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from atom.model.forward.blocks import Q4_1, Q5_1, Q6_K, Q8_0, BlockFormat, BlockLinear
from atom.model.forward.gguf_blocks import HOLDS, GgufFile
from atom.model.forward.int8 import Int8Linear

FLOAT_TYPES = frozenset({"F32", "F16", "BF16", "F64"})
# transformers' Linear names (and ATOM's fused ones) -> the GGUF tensors they come from
GGUF_PARTS = {
    "q_proj": ("attn_q",),
    "k_proj": ("attn_k",),
    "v_proj": ("attn_v",),
    "qkv_proj": ("attn_q", "attn_k", "attn_v"),
    "o_proj": ("attn_output",),
    "gate_proj": ("ffn_gate",),
    "up_proj": ("ffn_up",),
    "gate_up_proj": ("ffn_gate", "ffn_up"),
    "down_proj": ("ffn_down",),
}
LAYER = re.compile(r"layers\.(\d+)\.")


def quantize(
    model: Any,
    method: str,
    device: str,
    kernels: Any = None,
    gguf_types: Mapping[str, str] | None = None,
    gguf_file: GgufFile | None = None,
) -> dict[str, str]:
    """Swap `model`'s Linear layers as `method` says (`kernels`: ATOM's CPU kernels
    module; `gguf_types`: the source GGUF's tensor types by tensor name; `gguf_file`: the
    GGUF the weights were loaded from, open, for its 4-bit blocks). Returns the form each
    layer kind took, e.g. {"qkv_proj": "Q4_1", "lm_head": "Q8_0 (from Q6_K)"}."""
    if method == "off" or (method == "auto" and (gguf_types is None or kernels is None)):
        return {}
    if not device.startswith("cpu"):
        if method == "auto":
            return {}
        raise ValueError(f"--quantization {method} runs on CPU only; on CUDA use bfloat16")
    if method == "int4" and kernels is None:
        raise ValueError("--quantization int4 needs ATOM's CPU kernels (--cpu-kernels)")
    if "x86" in torch.backends.quantized.supported_engines:
        torch.backends.quantized.engine = "x86"
    chosen: Counter[tuple[str, str]] = Counter()
    for name, parent, child in _linears(model):
        kind = name.rsplit(".", 1)[-1]
        if method == "auto":
            assert gguf_types is not None
            layer, form = _from_gguf(name, kind, child, gguf_types, kernels, gguf_file)
        else:
            layer, form = _by_method(method, kind, child, kernels)
        if layer is not child:
            setattr(parent, kind, layer)
        chosen[(kind, form)] += 1
    kinds = sorted({kind for kind, _ in chosen})
    return {kind: _forms_of(kind, chosen) for kind in kinds}


def _forms_of(kind: str, chosen: Counter[tuple[str, str]]) -> str:
    """ "Q4_1", or with counts where layers of one kind differ: "29 Q4_1, 1 Q8_0"."""
    forms = sorted((form, n) for (k, form), n in chosen.items() if k == kind)
    return forms[0][0] if len(forms) == 1 else ", ".join(f"{n} {form}" for form, n in forms)


def _linears(model: nn.Module) -> list[tuple[str, nn.Module, nn.Linear]]:
    return [
        (f"{prefix}.{name}".lstrip("."), parent, child)
        for prefix, parent in model.named_modules()
        for name, child in parent.named_children()
        if isinstance(child, nn.Linear)
    ]


def _by_method(method: str, kind: str, linear: nn.Linear, kernels: Any) -> tuple[nn.Module, str]:
    fmt = Q8_0 if kind == "lm_head" else Q4_1
    if method == "int4" and fmt.supports(linear):
        return BlockLinear(linear, fmt, kernels), fmt.name
    gemv = None if kernels is None else kernels.int8_linear
    return Int8Linear(linear, gemv), "int8"


def _from_gguf(
    name: str,
    kind: str,
    linear: nn.Linear,
    types: Mapping[str, str],
    kernels: Any,
    file: GgufFile | None,
) -> tuple[nn.Module, str]:
    """The layer in the form its GGUF tensors ship in (the module docstring's rules). A
    Q4_1, Q5_1 or Q6_K layer's rows come from `file` where they stand for the loaded weights, else
    (other weights loaded in their place) from those weights, in the same form."""
    names = _gguf_names(name, kind, types)
    shipped = sorted({types.get(t, "F32") for t in names})
    if not shipped or any(t in FLOAT_TYPES for t in shipped):
        return linear, "float"
    fmt = _block_format(set(shipped))
    if not fmt.supports(linear):
        return linear, "float"
    rows = None
    if file is not None and fmt is not Q8_0:
        rows = file.block_rows(names, linear.weight, fmt.name)
    native = shipped == [fmt.name]
    form = fmt.name if native else f"{fmt.name} (from {'+'.join(shipped)})"
    return BlockLinear(linear, fmt, kernels, rows), form


def _block_format(shipped: set[str]) -> BlockFormat:
    """The least wide block format that holds every one of the `shipped` types."""
    return next((fmt for fmt in (Q4_1, Q5_1, Q6_K) if shipped <= HOLDS[fmt.name]), Q8_0)


def _gguf_names(name: str, kind: str, types: Mapping[str, str]) -> list[str]:
    """The GGUF tensors a Linear's weights came from (llama.cpp's names)."""
    if kind == "lm_head":  # a tied output projection is the token embedding
        return ["output.weight" if "output.weight" in types else "token_embd.weight"]
    layer = LAYER.search(name)
    if layer is None or kind not in GGUF_PARTS:
        return []
    return [f"blk.{layer.group(1)}.{part}.weight" for part in GGUF_PARTS[kind]]


def tied_quantized_table(types: Mapping[str, str] | None) -> bool:
    """Whether a GGUF's output projection is its token table (it has no
    `output.weight`) stored in a quantized type: serving the table from the output's
    blocks then at most re-rounds an already quantized tensor (a Q3_K one in Q8_0
    blocks; a Q6_K one, as a Q4_K_M file's, is its own blocks exactly)."""
    if types is None or "output.weight" in types:
        return False
    return types.get("token_embd.weight", "F32") not in FLOAT_TYPES
