"""The Runner contract: FakeRunner and TorchRunner (tiny random models) both pass it, and
TorchRunner's paged ragged forward matches transformers' own greedy `generate` — alone,
batched, with chunked prefill, with prefix-cache hits and after preemption — with both
decode-attention paths (the torch gather and the C++ kernel) and both model
implementations (transformers' classes and ATOM's own Llama-family forward)."""

from __future__ import annotations

from typing import Any

import pytest
from transformers import LlamaConfig, Qwen2Config

from atom.model.fake_runner import FakeRunner
from atom.model.scheduling.kv_cache import KVCacheManager
from atom.model.scheduling.scheduler import Scheduler
from atom.vocabulary.events import Submit
from tests.model.tiny import BLOCK, GREEDY, PROMPTS, generate, run_all, tiny_model, torch_runner

RUNNERS = {
    "fake": lambda **kw: FakeRunner(eos_token_id=0, block_size=BLOCK, **kw),
    "llama": lambda **kw: torch_runner(LlamaConfig, **kw),
    "qwen2": lambda **kw: torch_runner(Qwen2Config, **kw),
    "llama-cpp": lambda **kw: torch_runner(LlamaConfig, cpp=True, **kw),
    "qwen2-atom": lambda **kw: torch_runner(Qwen2Config, cpp=True, impl="atom", **kw),
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
            out += [t for o in scheduler.update(plan, runner.step(plan)) for t in o.token_ids]
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


@pytest.mark.parametrize("impl", ["transformers", "atom"])
@pytest.mark.parametrize("cpp", [False, True], ids=["gather", "cpp"])
@pytest.mark.parametrize("config_cls", [LlamaConfig, Qwen2Config])
def test_paged_forward_matches_transformers_generate(config_cls: Any, cpp: bool, impl: str) -> None:
    reference = tiny_model(config_cls)
    ours, _ = run_all(torch_runner(config_cls, cpp=cpp, impl=impl), PROMPTS, budget=16)
    for prompt, tokens in zip(PROMPTS, ours, strict=True):
        assert tokens == generate(reference, prompt)


TORCH_RUNNERS = [name for name in RUNNERS if name != "fake"]


def with_other_weights(name: str) -> Any:
    """A runner like RUNNERS[name] whose model has other random weights."""
    import torch

    runner = RUNNERS[name]()
    torch.manual_seed(1)
    with torch.no_grad():
        for param in runner.model.parameters():
            param.normal_(0, 0.2)
    return runner


@pytest.mark.parametrize("name", TORCH_RUNNERS)
def test_sleep_frees_the_cache_and_wake_up_gives_the_same_tokens(name: str) -> None:
    runner = RUNNERS[name]()
    before, _ = run_all(runner, PROMPTS[:4])
    runner.sleep(1)
    assert runner.kv_cache is None and runner.model is not None
    runner.wake_up(None)
    assert run_all(runner, PROMPTS[:4])[0] == before


@pytest.mark.parametrize("name", TORCH_RUNNERS)
def test_replaced_weights_answer_as_a_runner_built_on_them(name: str) -> None:
    runner = RUNNERS[name]()
    before, _ = run_all(runner, PROMPTS[:4])
    other = with_other_weights(name)
    expected, _ = run_all(other, PROMPTS[:4])  # a runner built on those weights
    runner.replace_weights(other.model)
    assert run_all(runner, PROMPTS[:4])[0] == expected != before
    runner.sleep(2)  # the weights are dropped; the wake-up brings others
    assert runner.model is None
    runner.wake_up(RUNNERS[name]().model)
    assert run_all(runner, PROMPTS[:4])[0] == before
