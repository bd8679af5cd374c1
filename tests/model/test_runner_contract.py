"""The Runner contract: FakeRunner and TorchRunner (tiny random models) both pass it, and
TorchRunner's paged ragged forward matches transformers' own greedy `generate` — alone,
batched, with chunked prefill, with prefix-cache hits and after preemption — with both
decode-attention paths (the torch gather and the C++ kernel)."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

from atom.config import Settings
from atom.events import SamplingParams, Submit
from atom.model.fake_runner import FakeRunner
from atom.model.kernels import PagedDecode, load_paged_decode
from atom.model.kv_cache import KVCacheManager
from atom.model.runner import Runner
from atom.model.scheduler import Scheduler
from atom.model.torch_runner import TorchRunner

GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
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


def tiny_model(config_cls: Any) -> Any:
    torch.manual_seed(0)
    config = config_cls(**TINY)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


@functools.cache
def kernel() -> PagedDecode:
    return load_paged_decode(Settings().cache_dir)


def torch_runner(config_cls: Any, num_blocks: int = 512, *, cpp: bool = False) -> TorchRunner:
    return TorchRunner(
        tiny_model(config_cls),
        eos_token_ids=frozenset({0}),
        max_model_len=256,
        num_blocks=num_blocks,
        block_size=BLOCK,
        decode_kernel=kernel() if cpp else None,
    )


def run_all(
    runner: Runner, prompts: list[tuple[int, ...]], *, budget: int = 4096, prefix: bool = True
) -> tuple[list[list[int]], int]:
    """Drive the runner through the Scheduler until every prompt has its output;
    returns the outputs and the number of preemptions."""
    kv = KVCacheManager(
        num_blocks=runner.num_blocks, block_size=BLOCK, enable_prefix_caching=prefix
    )
    scheduler = Scheduler(
        kv=kv,
        max_num_seqs=64,
        max_num_batched_tokens=budget,
        eos_token_ids=runner.eos_token_ids,
        max_model_len=256,
    )
    for i, prompt in enumerate(prompts):
        scheduler.add(Submit(request_id=str(i), prompt_ids=prompt, params=GREEDY))
    outputs: dict[str, list[int]] = {str(i): [] for i in range(len(prompts))}
    num_preemptions = 0
    while scheduler.num_seqs:
        plan = scheduler.schedule()
        num_preemptions += scheduler.stats.num_preemptions
        for out in scheduler.update(plan, runner.step(plan)):
            outputs[out.seq.request_id].append(out.token_id)
            if out.finish_reason is not None:
                runner.release(out.seq.seq_id)
        kv.check_invariants()
    assert kv.num_free_blocks == kv.num_blocks
    return [outputs[str(i)] for i in range(len(prompts))], num_preemptions


RUNNERS = {
    "fake": lambda **kw: FakeRunner(eos_token_id=0, block_size=BLOCK, **kw),
    "llama": lambda **kw: torch_runner(LlamaConfig, **kw),
    "qwen2": lambda **kw: torch_runner(Qwen2Config, **kw),
    "llama-cpp": lambda **kw: torch_runner(LlamaConfig, cpp=True, **kw),
}


@pytest.mark.parametrize("name", RUNNERS)
def test_contract_batched_equals_alone_and_everything_is_released(name: str) -> None:
    runner = RUNNERS[name]()
    together, _ = run_all(runner, PROMPTS[:8], prefix=False)
    alone = [run_all(runner, [p], prefix=False)[0][0] for p in PROMPTS[:8]]
    assert together == alone
    assert all(len(out) == GREEDY.max_tokens for out in together)
    assert runner.num_sequences() == 0


@pytest.mark.parametrize("name", RUNNERS)
def test_contract_chunked_prefill_gives_the_same_tokens(name: str) -> None:
    runner = RUNNERS[name]()
    assert run_all(runner, PROMPTS[:8], budget=5)[0] == run_all(runner, PROMPTS[:8])[0]


@pytest.mark.parametrize("name", RUNNERS)
def test_contract_prefix_hit_gives_the_same_tokens_as_a_miss(name: str) -> None:
    runner = RUNNERS[name]()
    shared = PROMPTS[13][:40]
    prompts = [(*shared, 7, 8, 9), (*shared, 7, 8, 9), (*shared, 11)]
    miss, _ = run_all(runner, prompts, prefix=False)
    kv = KVCacheManager(num_blocks=runner.num_blocks, block_size=BLOCK)
    hits = []
    for prompt in prompts:  # one after another: each later one finds the cached chain
        scheduler = Scheduler(kv=kv, max_num_seqs=4, max_num_batched_tokens=4096,
                              eos_token_ids=frozenset({0}), max_model_len=256)  # fmt: skip
        scheduler.add(Submit(request_id=str(len(hits)), prompt_ids=prompt, params=GREEDY))
        out: list[int] = []
        num_hit = 0
        while scheduler.num_seqs:
            plan = scheduler.schedule()
            num_hit += scheduler.stats.prefix_cache_hits
            out += [o.token_id for o in scheduler.update(plan, runner.step(plan))]
        runner.release(f"{len(hits)}/0")
        hits.append((out, num_hit))
    assert [out for out, _ in hits] == miss
    assert [num_hit for _, num_hit in hits] == [0, 40, 40]


@pytest.mark.parametrize("name", RUNNERS)
def test_contract_preemption_by_recompute_gives_the_same_tokens(name: str) -> None:
    prompts = PROMPTS[:10]
    expected, _ = run_all(RUNNERS[name](), prompts)
    # 40 blocks of 4 slots cannot hold ten sequences of up to 76 tokens at once
    runner = RUNNERS[name](num_blocks=40)
    got, num_preemptions = run_all(runner, prompts, budget=16)
    assert got == expected
    assert num_preemptions > 0


@pytest.mark.parametrize("cpp", [False, True], ids=["gather", "cpp"])
@pytest.mark.parametrize("config_cls", [LlamaConfig, Qwen2Config])
def test_paged_forward_matches_transformers_generate(config_cls: Any, cpp: bool) -> None:
    reference = tiny_model(config_cls)
    ours, _ = run_all(torch_runner(config_cls, cpp=cpp), PROMPTS, budget=16)
    for prompt, tokens in zip(PROMPTS, ours, strict=True):
        expected = reference.generate(
            torch.tensor([prompt]),
            max_new_tokens=GREEDY.max_tokens,
            min_new_tokens=GREEDY.max_tokens,
            do_sample=False,
            pad_token_id=0,
        )[0, len(prompt) :].tolist()
        assert tokens == expected
