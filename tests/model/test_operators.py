"""The one-call decode path (`DecodeStack`) computes exactly what the Python layers
compute with the same kernels, for float32, int8, int4 (Q4_1), Q5_1 and Q6_K projections."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, Qwen2Config

from atom.model.forward.blocks import Q5_1, Q6_K, BlockLinear
from atom.model.forward.llama_forward import LlamaForward
from atom.model.forward.quantization import quantize
from atom.model.runner import SeqChunk, StepPlan
from atom.vocabulary.events import SamplingParams
from tests.model.tiny import BLOCK, cpu_ops, torch_runner

PARAMS = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)


def chunk(i: int, token_ids: tuple[int, ...], start: int) -> SeqChunk:
    return SeqChunk(
        seq_id=f"s{i}",
        token_ids=token_ids,
        start_pos=start,
        params=PARAMS,
        seed=i,
        block_ids=tuple(range(8 * i, 8 * i + 8)),
        num_prompt_tokens=5 + i,
        prompt_ids=(),
    )


@pytest.mark.parametrize(
    ("method", "batch", "kv_dtype"),
    [
        (None, 1, None),
        (None, 4, None),
        ("int8", 1, None),
        ("int8", 2, None),
        ("int4", 1, None),
        ("int4", 4, None),
        ("int4", 4, torch.float16),  # --kv-cache-dtype auto's choice with quantized layers
        ("q5", 3, None),
        ("q6", 2, None),
        (None, 2, torch.bfloat16),
        ("int4", 3, torch.int8),  # --kv-cache-dtype int8
    ],
)
@pytest.mark.parametrize("config_cls", [LlamaConfig, Qwen2Config])
def test_decode_stack_equals_the_python_layers(
    config_cls: type, method: str | None, batch: int, kv_dtype: torch.dtype | None
) -> None:
    runner = torch_runner(config_cls, cpp=True, impl="atom", kv_dtype=kv_dtype)
    model = runner.model
    assert isinstance(model, LlamaForward)
    if method in ("q5", "q6"):  # a GGUF's 5- or 6-bit layers' form (no method makes it)
        fmt = Q5_1 if method == "q5" else Q6_K
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, torch.nn.Linear) and name != "lm_head":
                    setattr(parent, name, BlockLinear(child, fmt, cpu_ops()))
    elif method is not None:
        quantize(model, method, "cpu", kernels=cpu_ops())
    prompts = [tuple(range(3 + i, 8 + 2 * i)) for i in range(batch)]
    runner.step(StepPlan(chunks=tuple(chunk(i, p, 0) for i, p in enumerate(prompts))))
    decode = tuple(chunk(i, (40 + i,), len(p)) for i, p in enumerate(prompts))
    keep = {c.seq_id: [row] for row, c in enumerate(decode)}
    assert model._decode_stack(runner._meta(decode), batch) is not None  # the one-call path
    with torch.inference_mode():
        stacked = runner._forward(decode, keep)  # writes this step's K/V ...
        model.use_decode_stack = False
        layered = runner._forward(decode, keep)  # ... and the same values again
    assert torch.equal(stacked, layered)
    assert max(len(p) for p in prompts) < BLOCK * 8  # every sequence fits its blocks
