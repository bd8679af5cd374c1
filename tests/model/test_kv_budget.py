"""The KV cache's size: what --gpu-memory-utilization leaves once the weights and the
largest step's own memory are taken out (atom/model/kv_budget.py)."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig

from atom.model.kv_budget import (
    CPU_KV_CACHE_BYTES,
    kv_cache_bytes,
    num_kv_blocks,
    profile_reserve,
    share_left,
    throwaway_step,
)
from atom.vocabulary.config import Settings
from tests.model.tiny import own_forward, tiny_model

GiB = 1 << 30


def test_the_share_left_takes_out_what_is_in_use_and_the_step_peak() -> None:
    # an 80 GiB card, 2 GiB of weights loaded, 0.9 of it allowed, a 1 GiB step peak
    assert share_left(80 * GiB, 78 * GiB, 0.9, GiB) == int(80 * GiB * 0.9) - 3 * GiB
    assert share_left(80 * GiB, 78 * GiB, 0.9, 0) - share_left(80 * GiB, 78 * GiB, 0.9, GiB) == GiB
    assert share_left(80 * GiB, 4 * GiB, 0.9, GiB) == 0  # never below nothing


def test_explicit_bytes_and_a_cpu_need_no_profiling_run() -> None:
    model = object()  # never touched: nothing is run
    explicit = Settings(kv_cache_memory_bytes=GiB)
    assert profile_reserve(explicit, "cuda:0", model, 4096) == 0
    assert profile_reserve(Settings(), "cpu", model, 4096) == 0
    assert profile_reserve(Settings(tensor_parallel_size=2), "cuda:0", model, 4096) == 0
    assert kv_cache_bytes(explicit, "cuda:0", reserve=GiB) == GiB  # asked for: kept
    assert kv_cache_bytes(Settings(), "cpu") == CPU_KV_CACHE_BYTES


def test_a_cache_too_small_for_one_sequence_is_refused() -> None:
    with pytest.raises(ValueError, match="fewer than max_model_len"):
        num_kv_blocks(Settings(kv_cache_memory_bytes=1 << 20), "cpu", 1 << 16, 4096)


def test_the_profiling_step_is_a_full_prompt_chunk_that_leaves_the_model_as_it_was() -> None:
    """What the device measures: one chunk of --max-num-batched-tokens tokens (capped by
    the context) through the model on a cache of its own; run here on the CPU."""
    model = own_forward(tiny_model(LlamaConfig), "atom")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    settings = Settings(max_num_batched_tokens=48, block_size=16)
    calls: list[int] = []
    hook = model.register_forward_pre_hook(
        lambda _, args, kwargs: calls.append(_num_tokens(args, kwargs)), with_kwargs=True
    )
    sampled = throwaway_step(settings, model, 40)()  # the context caps the chunk at 40
    hook.remove()
    assert list(sampled) == ["profile"] and calls == [40]  # type: ignore[call-overload]
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def _num_tokens(args: tuple[object, ...], kwargs: dict[str, object]) -> int:
    ids = kwargs.get("input_ids", args[0] if args else None)
    assert isinstance(ids, torch.Tensor)
    return int(ids.numel())
