"""Shared pieces of the runner tests: tiny random models, prompts, and a driver that
runs prompts through the Scheduler and a Runner to the end."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM

from atom.model.forward.kernels import load_cpu_ops
from atom.model.forward.llama_forward import own_forward
from atom.model.runner import Runner, StepPlan
from atom.model.scheduling.kv_cache import KVCacheManager, check_invariants
from atom.model.scheduling.scheduler import Scheduler
from atom.model.torch_runner import TorchRunner
from atom.vocabulary.config import Settings
from atom.vocabulary.events import SamplingParams, Submit
from atom.vocabulary.images import PromptImage
from atom.vocabulary.speculative import SpeculativeConfig

GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)


def greedy_after(model: Any, ids: torch.Tensor, **inputs: Any) -> list[int]:
    """transformers' own greedy continuation of the prompt `ids` [1, n] (GREEDY's length,
    the end of text ignored), with the model's other inputs (a part's tensors)."""
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        **inputs,
        max_new_tokens=GREEDY.max_tokens,
        min_new_tokens=GREEDY.max_tokens,
        do_sample=False,
        pad_token_id=0,
    )
    return [int(t) for t in out[0, ids.shape[1] :]]


TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 300,
    "max_position_embeddings": 256,
}
LENGTHS = [1, 2, 5, 9, 17, 33, 3, 64, 12, 40, 7, 25, 4, 50, 11, 2, 30, 8, 19, 45]
PROMPTS = [tuple((7 * i + 3 * j) % 290 + 5 for j in range(n)) for i, n in enumerate(LENGTHS)]
BLOCK = 4


def tiny_model(config_cls: Any, **overrides: Any) -> Any:
    torch.manual_seed(0)
    config = config_cls(**{**TINY, **overrides})
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


@functools.cache
def cpu_ops() -> Any:
    """ATOM's CPU kernels, built once per machine into the default cache dir."""
    return load_cpu_ops(Settings().cache_dir)


KERNEL_ISAS = ("avx2", "avx512_vnni", "amx_int8")


def block_product(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    *,
    minimums: bool | torch.Tensor,
) -> torch.Tensor:
    """What the block kernels compute for x [rows, K] and the weights their blocks stand
    for, in float64: activations quantized per block of 32 to int8 for the d * q part of
    each weight, in float for its block minimum (Q4_1's m, when `minimums`: each block's
    smallest weight, or each weight's block minimum [N, K] given)."""
    rows, width = x.shape
    xd, wd = x.double(), weight.double()
    xb = xd.view(rows, width // 32, 32)
    scale = xb.abs().amax(-1, keepdim=True) / 127
    xq = (torch.round(xb / torch.where(scale > 0, scale, 1.0)) * scale).reshape(rows, width)
    w = wd.view(-1, width // 32, 32)
    if isinstance(minimums, torch.Tensor):
        minimum = minimums.double()
    else:
        low = w.amin(-1, keepdim=True) if minimums else torch.zeros_like(w[..., :1])
        minimum = low.expand_as(w).reshape(-1, width)
    out = xq @ (wd - minimum).T + xd @ minimum.T
    return (out if bias is None else out + bias.double()).float()


@contextlib.contextmanager
def kernel_isa(name: str) -> Iterator[None]:
    """The kernels' int4 loops on instruction set `name` (skips when the CPU lacks it)."""
    ops = cpu_ops()
    try:
        before = ops.set_kernel_isa(name)
    except RuntimeError as error:
        pytest.skip(str(error))
    try:
        yield
    finally:
        ops.set_kernel_isa(before)


def torch_runner(
    config_cls: Any,
    num_blocks: int = 512,
    *,
    cpp: bool = False,
    impl: str = "transformers",
    kv_dtype: torch.dtype | None = None,
    **overrides: Any,
) -> TorchRunner:
    """A TorchRunner over a tiny model: transformers' classes or ATOM's own forward
    (`impl`); torch's operators, or the C++ kernels (`cpp`: decode attention, and the
    fused small operators of ATOM's forward); a KV cache of `kv_dtype` (the model's)."""
    kernels = cpu_ops() if cpp else None
    return TorchRunner(
        own_forward(tiny_model(config_cls, **overrides), impl, kernels=kernels),
        eos_token_ids=frozenset({0}),
        max_model_len=256,
        num_blocks=num_blocks,
        block_size=BLOCK,
        decode_kernel=None if kernels is None else kernels.paged_decode,
        kv_dtype=kv_dtype,
    )


def plan_step(scheduler: Scheduler) -> StepPlan:
    """The Batcher's order, on this thread: the proposer's drafts first, then the plan."""
    proposer = scheduler.proposer
    return scheduler.schedule(proposer.propose(scheduler.draft_requests()) if proposer else None)


def run_all(
    runner: Runner,
    prompts: list[tuple[int, ...]],
    *,
    budget: int = 4096,
    prefix: bool = True,
    params: SamplingParams = GREEDY,
    speculation: SpeculativeConfig | None = None,
    loras: list[str | None] | None = None,
    max_loras: int = 4,
    images: list[tuple[PromptImage, ...]] | None = None,
) -> tuple[list[list[int]], int]:
    """Drive the runner through the Scheduler until every prompt has its output (prompt
    i with adapter `loras[i]` and images `images[i]`, when given); returns the outputs
    and the number of preemptions."""
    kv = KVCacheManager(
        num_blocks=runner.num_blocks, block_size=BLOCK, enable_prefix_caching=prefix
    )
    scheduler = Scheduler(
        kv=kv,
        max_num_seqs=64,
        max_num_batched_tokens=budget,
        eos_token_ids=runner.eos_token_ids,
        max_model_len=256,
        speculation=speculation,
        max_loras=max_loras,
    )
    for i, prompt in enumerate(prompts):
        lora = loras[i] if loras else None
        pictures = images[i] if images else ()
        submit = Submit(
            request_id=str(i), prompt_ids=prompt, params=params, lora=lora, images=pictures
        )
        scheduler.add(submit)
    outputs: dict[str, list[int]] = {str(i): [] for i in range(len(prompts))}
    num_preemptions = 0
    while scheduler.num_seqs:
        plan = plan_step(scheduler)
        num_preemptions += scheduler.stats.num_preemptions
        for out in scheduler.update(plan, runner.step(plan)):
            outputs[out.seq.request_id].extend(out.token_ids)
            if out.finish_reason is not None:
                runner.release(out.seq.seq_id)
        check_invariants(kv)
    assert kv.num_free_blocks == kv.num_blocks
    return [outputs[str(i)] for i in range(len(prompts))], num_preemptions


def generate(model: Any, prompt: tuple[int, ...]) -> list[int]:
    """transformers' own greedy continuation of `prompt`, GREEDY.max_tokens long."""
    return model.generate(  # type: ignore[no-any-return]
        torch.tensor([prompt]),
        max_new_tokens=GREEDY.max_tokens,
        min_new_tokens=GREEDY.max_tokens,
        do_sample=False,
        pad_token_id=0,
    )[0, len(prompt) :].tolist()
