"""Beam search through the Scheduler and a TorchRunner equals transformers'
`generate(num_beams=...)` on the same weights: every returned beam, in order."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import torch
from transformers import LlamaConfig

from atom.model.runner import Runner
from atom.model.scheduling.kv_cache import KVCacheManager, check_invariants
from atom.model.scheduling.scheduler import Scheduler
from atom.model.torch_runner import TorchRunner
from atom.vocabulary.events import FinishReason, SamplingParams, Submit
from atom.vocabulary.plan import BeamSearch
from tests.model.tiny import BLOCK, PROMPTS, plan_step, tiny_model

Beams = list[tuple[list[int], FinishReason | None]]  # each choice's tokens, best first


def reference(
    model: Any, prompt: tuple[int, ...], width: int, params: SamplingParams, eos: int
) -> list[list[int]]:
    """transformers' beams for `prompt`, each cut after its end token (its own attention
    meanwhile, if a TorchRunner set ATOM's paged one)."""
    assert params.beam_search is not None
    paged = model.config._attn_implementation
    model.set_attn_implementation("sdpa")
    try:
        out = model.generate(
            torch.tensor([prompt]),
            num_beams=width,
            num_return_sequences=width,
            do_sample=False,
            max_new_tokens=params.max_tokens,
            length_penalty=params.beam_search.length_penalty,
            early_stopping=params.beam_search.early_stopping,
            eos_token_id=eos,
            pad_token_id=eos,
        )
    finally:
        model.set_attn_implementation(paged)
    beams = []
    for row in out[:, len(prompt) :].tolist():
        beams.append(row[: row.index(eos) + 1] if eos in row else row)
    return beams


def run_beams(
    runner: Runner,
    submits: list[Submit],
    *,
    prefix: bool = True,
) -> dict[tuple[str, int], tuple[list[int], FinishReason | None]]:
    """Every choice of every submit, driven to the end; the cache's books are checked at
    every step and must be empty at the end."""
    kv = KVCacheManager(
        num_blocks=runner.num_blocks,
        block_size=runner.block_size,
        enable_prefix_caching=prefix,
    )
    scheduler = Scheduler(
        kv=kv,
        max_num_seqs=64,
        max_num_batched_tokens=4096,
        eos_token_ids=runner.eos_token_ids,
        max_model_len=256,
    )
    for submit in submits:
        scheduler.add(submit)
    answers: dict[tuple[str, int], tuple[list[int], FinishReason | None]] = {}
    while scheduler.num_seqs:
        plan = plan_step(scheduler)
        assert plan.chunks, "live sequences and nothing to run: a deadlock"
        for out in scheduler.update(plan, runner.step(plan)):
            tokens, _ = answers.get((out.seq.request_id, out.seq.choice_idx), ([], None))
            answers[out.seq.request_id, out.seq.choice_idx] = (
                tokens + list(out.token_ids),
                out.finish_reason,
            )
        for seq_id in scheduler.take_released():
            runner.release(seq_id)
        check_invariants(kv)
    assert kv.num_free_blocks == kv.num_blocks
    assert runner.num_sequences() == 0
    return answers


@pytest.fixture(scope="module")
def model() -> Any:
    return tiny_model(LlamaConfig)


@pytest.fixture(scope="module")
def eos(model: Any) -> int:
    """A token the tiny model likes after PROMPTS[3]: so beams end on it now and then."""
    greedy = model.generate(
        torch.tensor([PROMPTS[3]]), max_new_tokens=4, do_sample=False, pad_token_id=0
    )
    return int(greedy[0, len(PROMPTS[3]) + 2])


def runner_of(
    model: Any, eos: int, num_blocks: int = 512, kv_dtype: torch.dtype | None = None
) -> TorchRunner:
    return TorchRunner(
        model,
        eos_token_ids=frozenset({eos}),
        max_model_len=256,
        num_blocks=num_blocks,
        block_size=BLOCK,
        kv_dtype=kv_dtype,
    )


def beam_params(
    max_tokens: int, length_penalty: float, early_stopping: bool | str
) -> SamplingParams:
    return SamplingParams(
        temperature=0.0,
        max_tokens=max_tokens,
        beam_search=BeamSearch(length_penalty=length_penalty, early_stopping=early_stopping),
    )


CASES = [  # width, length penalty, early_stopping, max_tokens
    (1, 1.0, False, 10),
    (2, 1.0, False, 14),
    (3, 0.0, "never", 12),
    (4, 2.0, True, 12),
    (3, -1.0, False, 16),
    (4, 1.0, "never", 12),
]


@pytest.mark.parametrize(("width", "penalty", "early", "max_tokens"), CASES)
def test_each_prompt_gets_transformers_beams(
    model: Any, eos: int, width: int, penalty: float, early: bool | str, max_tokens: int
) -> None:
    params = beam_params(max_tokens, penalty, early)
    prompts = [PROMPTS[3], PROMPTS[5], PROMPTS[9]]
    submits = [
        Submit(request_id=str(i), prompt_ids=p, params=params, choices_per_prompt=width)
        for i, p in enumerate(prompts)
    ]
    got = run_beams(runner_of(model, eos), submits)
    for i, prompt in enumerate(prompts):
        expected = reference(model, prompt, width, params, eos)
        beams = [got[str(i), c][0] for c in range(width)]
        assert beams == expected, (i, beams, expected)
        for tokens, reason in (got[str(i), c] for c in range(width)):
            assert reason == (FinishReason.STOP if tokens[-1] == eos else FinishReason.LENGTH)


def test_some_beams_end_on_the_end_token(model: Any, eos: int) -> None:
    """Else the cases above would test the length limit alone."""
    params = beam_params(16, 1.0, False)
    submits = [
        Submit(request_id=str(i), prompt_ids=PROMPTS[i], params=params, choices_per_prompt=4)
        for i in (3, 5, 9, 12)
    ]
    got = run_beams(runner_of(model, eos), submits)
    assert any(reason is FinishReason.STOP for _, reason in got.values())


def test_a_batched_completion_beside_plain_requests_under_preemption(model: Any, eos: int) -> None:
    """Two prompts of one request, a sampled and a greedy request beside them, and a
    cache too small for all: beams preempted and recomputed end the same."""
    params = beam_params(12, 1.0, False)
    beam = Submit(
        request_id="beam",
        prompt_ids=PROMPTS[7],
        more_prompt_ids=(PROMPTS[13],),
        params=params,
        choices_per_prompt=3,
    )
    plain = Submit(
        request_id="plain", prompt_ids=PROMPTS[11], params=replace(params, beam_search=None)
    )
    sampled = Submit(
        request_id="sampled",
        prompt_ids=PROMPTS[2],
        params=SamplingParams(temperature=1.0, seed=3, max_tokens=20),
        choices_per_prompt=2,
    )
    for num_blocks, prefix in ((512, True), (48, True), (48, False)):
        got = run_beams(runner_of(model, eos, num_blocks), [beam, plain, sampled], prefix=prefix)
        for p_idx, prompt in enumerate((PROMPTS[7], PROMPTS[13])):
            expected = reference(model, prompt, 3, params, eos)
            assert [got["beam", p_idx * 3 + c][0] for c in range(3)] == expected, num_blocks
        assert len(got["plain", 0][0]) >= 1 and len(got["sampled", 1][0]) >= 1


def test_in_an_int8_cache_forked_beams_equal_recomputed_ones(model: Any, eos: int) -> None:
    """A fork copies a block's int8 values and their scales: the beams equal those of a
    cache too small to keep them (preempted and recomputed, no prefix cache)."""
    params = beam_params(12, 1.0, False)
    submit = Submit(request_id="r", prompt_ids=PROMPTS[7], params=params, choices_per_prompt=3)
    forked = run_beams(runner_of(model, eos, 512, torch.int8), [submit])
    recomputed = run_beams(runner_of(model, eos, 48, torch.int8), [submit], prefix=False)
    assert forked == recomputed


def test_the_default_model_in_float32_equals_transformers() -> None:
    """The default model (dequantized, float32, transformers' layers over ATOM's paged
    cache) answers a chat prompt with transformers' beams, widths 2 and 4."""
    from atom.model.loader import load_model
    from atom.vocabulary.config import Settings

    loaded = load_model(
        None, cache_dir=Settings().cache_dir, device="cpu", dtype=torch.float32, max_model_len=None
    )
    tokenizer = loaded.tokenizer
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Name the capital of France."}],
        add_generation_prompt=True,
        tokenize=False,
    )
    prompt = tuple(tokenizer.encode(text, add_special_tokens=False))
    eos = int(tokenizer.eos_token_id)
    runner = TorchRunner(
        loaded.model,
        eos_token_ids=frozenset({eos}),
        max_model_len=2048,
        num_blocks=256,
        block_size=16,
    )
    for width, early in ((2, False), (4, True)):
        params = beam_params(24, 1.0, early)
        submit = Submit(request_id="r", prompt_ids=prompt, params=params, choices_per_prompt=width)
        got = run_beams(runner, [submit])
        expected = reference(loaded.model, prompt, width, params, eos)
        assert [got["r", c][0] for c in range(width)] == expected
