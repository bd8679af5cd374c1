"""How many KV blocks the paged cache gets: `--kv-cache-memory-bytes`, or on CUDA the
`--gpu-memory-utilization` share of the device left after the weights and the largest
step's own memory (measured by running that step once, vLLM's profiling run), or 2 GiB
on CPU."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from atom.model.runner import SeqChunk, StepPlan
from atom.vocabulary.config import Settings
from atom.vocabulary.events import SamplingParams


def num_kv_blocks(
    settings: Settings, device: str, per_block: int, max_model_len: int, reserve: int = 0
) -> int:
    """KV blocks in the cache budget, `reserve` bytes kept out of it (`profile_reserve`);
    ValueError when one full-length sequence won't fit."""
    num_blocks = kv_cache_bytes(settings, device, reserve) // per_block
    if num_blocks * settings.block_size < max_model_len:
        raise ValueError(
            f"the KV cache holds {num_blocks * settings.block_size} tokens, fewer than "
            f"max_model_len {max_model_len}: raise --kv-cache-memory-bytes"
        )
    return int(num_blocks)


CPU_KV_CACHE_BYTES = 2 << 30


def kv_cache_bytes(settings: Settings, device: str, reserve: int = 0) -> int:
    """--kv-cache-memory-bytes if set; on CUDA what the --gpu-memory-utilization share
    of the device leaves (`share_left`); on CPU 2 GiB."""
    import torch

    if sized_by_share(settings, device):
        free, total = torch.cuda.mem_get_info(torch.device(device))
        return share_left(total, free, settings.gpu_memory_utilization, reserve)
    return settings.kv_cache_memory_bytes or CPU_KV_CACHE_BYTES


def sized_by_share(settings: Settings, device: str) -> bool:
    """Whether the cache is what --gpu-memory-utilization leaves (CUDA, no explicit
    --kv-cache-memory-bytes)."""
    return not settings.kv_cache_memory_bytes and device.startswith("cuda")


def share_left(total: int, free: int, utilization: float, reserve: int) -> int:
    """What the `utilization` share of a device of `total` bytes leaves for the KV cache
    once what is in use now (`total - free`: the weights, other processes) and `reserve`
    (a step's own peak) are taken out."""
    return max(0, int(total * utilization) - (total - free) - reserve)


def profile_reserve(
    settings: Settings, device: str, model: Any, max_model_len: int, **runner: Any
) -> int:
    """CUDA, the cache sized by --gpu-memory-utilization: the memory the largest step (a
    prompt chunk of --max-num-batched-tokens tokens) takes at its peak beyond the weights
    and the cache, measured by running it once on a throwaway cache of its own blocks;
    0 elsewhere, and for a model split across ranks (a step on one rank alone would wait
    for the others). `runner`: the TorchRunner's decode kernel and KV dtype."""
    if settings.tensor_parallel_size > 1 or not sized_by_share(settings, device):
        return 0
    import torch

    step = throwaway_step(settings, model, max_model_len, **runner)
    try:
        return step_peak_bytes(step, torch.device(device))
    finally:
        del step
        torch.cuda.empty_cache()


def throwaway_step(
    settings: Settings, model: Any, max_model_len: int, **runner: Any
) -> Callable[[], object]:
    """The largest step a prompt can make, on a TorchRunner of its own small cache."""
    from atom.model.torch_runner import TorchRunner

    num_tokens = min(settings.max_num_batched_tokens, max_model_len)
    num_blocks = -(-num_tokens // settings.block_size)
    scratch = TorchRunner(model, eos_token_ids=frozenset(), max_model_len=max_model_len,
                          num_blocks=num_blocks, block_size=settings.block_size,
                          **runner)  # fmt: skip
    chunk = SeqChunk(
        seq_id="profile",
        token_ids=(0,) * num_tokens,
        start_pos=0,
        block_ids=tuple(range(num_blocks)),
        params=SamplingParams(temperature=0.0, max_tokens=1),
        seed=0,
    )
    return lambda: scratch.step(StepPlan(chunks=(chunk,)))


def step_peak_bytes(step: Callable[[], object], device: Any) -> int:
    """CUDA: the most memory `step` holds at once beyond what was allocated before it."""
    import torch

    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    step()
    torch.cuda.synchronize(device)
    return int(torch.cuda.max_memory_allocated(device) - before)
