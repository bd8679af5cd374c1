"""The Runner contract: FakeRunner and TorchRunner (tiny random models) both pass it, and
TorchRunner's ragged forward matches transformers' own greedy `generate`."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

from atom.events import SamplingParams, Submit
from atom.model.fake_runner import FakeRunner
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
PROMPTS = [
    tuple((7 * i + 3 * j) % 290 + 5 for j in range(n))
    for i, n in enumerate([1, 2, 5, 9, 17, 33, 3, 64, 12, 40, 7, 25, 4, 50, 11, 2, 30, 8, 19, 45])
]


def tiny_model(config_cls: Any) -> Any:
    torch.manual_seed(0)
    config = config_cls(**TINY)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def run_all(
    runner: Runner, prompts: list[tuple[int, ...]], *, budget: int = 4096
) -> list[list[int]]:
    """Drive the runner through the Scheduler until every prompt has its output."""
    scheduler = Scheduler(
        max_num_seqs=64,
        max_num_batched_tokens=budget,
        eos_token_ids=runner.eos_token_ids,
        max_model_len=256,
    )
    for i, prompt in enumerate(prompts):
        scheduler.add(Submit(request_id=str(i), prompt_ids=prompt, params=GREEDY))
    outputs: dict[str, list[int]] = {str(i): [] for i in range(len(prompts))}
    while scheduler.num_seqs:
        plan = scheduler.schedule()
        for out in scheduler.update(plan, runner.step(plan)):
            outputs[out.seq.request_id].append(out.token_id)
            if out.finish_reason is not None:
                runner.release(out.seq.seq_id)
    return [outputs[str(i)] for i in range(len(prompts))]


RUNNERS = {
    "fake": lambda: FakeRunner(eos_token_id=0),
    "llama": lambda: TorchRunner(
        tiny_model(LlamaConfig), eos_token_ids=frozenset({0}), max_model_len=256
    ),
    "qwen2": lambda: TorchRunner(
        tiny_model(Qwen2Config), eos_token_ids=frozenset({0}), max_model_len=256
    ),
}


@pytest.mark.parametrize("name", RUNNERS)
def test_contract_batched_equals_alone_and_everything_is_released(name: str) -> None:
    runner = RUNNERS[name]()
    together = run_all(runner, PROMPTS[:8])
    alone = [run_all(runner, [p])[0] for p in PROMPTS[:8]]
    assert together == alone
    assert all(len(out) == GREEDY.max_tokens for out in together)
    assert runner.num_sequences() == 0


@pytest.mark.parametrize("name", RUNNERS)
def test_contract_chunked_prefill_gives_the_same_tokens(name: str) -> None:
    runner = RUNNERS[name]()
    assert run_all(runner, PROMPTS[:8], budget=5) == run_all(runner, PROMPTS[:8])


@pytest.mark.parametrize("config_cls", [LlamaConfig, Qwen2Config])
def test_ragged_forward_matches_transformers_generate(config_cls: Any) -> None:
    reference = tiny_model(config_cls)
    runner = TorchRunner(tiny_model(config_cls), eos_token_ids=frozenset({0}), max_model_len=256)
    ours = run_all(runner, PROMPTS, budget=16)
    for prompt, tokens in zip(PROMPTS, ours, strict=True):
        expected = reference.generate(
            torch.tensor([prompt]),
            max_new_tokens=GREEDY.max_tokens,
            do_sample=False,
            min_new_tokens=GREEDY.max_tokens,
            pad_token_id=0,
        )[0, len(prompt) :].tolist()
        assert tokens == expected
