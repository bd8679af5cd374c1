"""`--tensor-parallel-size 2`: two ranks (this process and one it starts, gloo, float32)
answer exactly as one process does, through the real loader, and a model whose heads
two ranks cannot split is a clear error."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist
from transformers import LlamaConfig

from atom.model.forward.llama_forward import LlamaForward
from atom.model.forward.tensor_parallel import shard
from atom.model.loader import load_runtime
from atom.model.parallel import TensorParallelRunner
from atom.vocabulary.config import Settings
from tests.model.tiny import BLOCK, PROMPTS, run_all, tiny_model


def test_two_ranks_give_the_greedy_tokens_of_one(tmp_path: Path, tokenizer: Any) -> None:
    tiny_model(LlamaConfig).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    settings = Settings(
        model=(str(tmp_path),),
        quantization="off",
        block_size=BLOCK,
        kv_cache_memory_bytes=1 << 22,
    )
    one = load_runtime(settings).runner
    two = load_runtime(dataclasses.replace(settings, tensor_parallel_size=2)).runner
    try:
        alone, _ = run_all(one, PROMPTS[:5])
        split, _ = run_all(two, PROMPTS[:5])
    finally:
        two.close()
        dist.destroy_process_group()
    assert isinstance(two, TensorParallelRunner) and not isinstance(one, TensorParallelRunner)
    assert split == alone
    assert all(len(tokens) == 12 for tokens in split)


def test_heads_that_the_ranks_cannot_split_are_an_error_naming_the_setting() -> None:
    model = LlamaForward(tiny_model(LlamaConfig, num_attention_heads=4, num_key_value_heads=1))
    with pytest.raises(ValueError, match="--tensor-parallel-size 2 does not divide"):
        shard(model, 0, 2, lambda tensor: None)


def test_what_tensor_parallelism_does_not_serve_yet_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="--tensor-parallel-size"):
        Settings(tensor_parallel_size=2, enable_lora=True)
    with pytest.raises(ValueError, match="--tensor-parallel-size"):
        Settings(
            tensor_parallel_size=2,
            speculative_config='{"method": "ngram", "num_speculative_tokens": 2}',
        )
