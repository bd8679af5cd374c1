"""Speculative decoding through the Scheduler and a Runner: the same tokens, logprobs and
seeded draws as without drafts, in fewer steps; and, sampled without seeds, the same
distribution (a chi-square test that fails when the acceptance rule is broken)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from transformers import LlamaConfig, Qwen2Config

from atom.model import torch_runner as torch_runner_module
from atom.model.fake_runner import FakeRunner
from atom.model.forward.quantization import quantize
from atom.model.runner import Runner, Sampled
from atom.model.scheduling.kv_cache import KVCacheManager, check_invariants
from atom.model.scheduling.scheduler import Scheduler
from atom.vocabulary.events import SamplingParams, Submit
from atom.vocabulary.speculative import SpeculativeConfig
from tests.model.tiny import BLOCK, PROMPTS, cpu_ops, plan_step, torch_runner

NGRAM = SpeculativeConfig(
    method="ngram",
    num_speculative_tokens=4,
    prompt_lookup_min=1,
    prompt_lookup_max=3,
    disable_by_batch_size=1024,  # speculate in every batch here
)
SUFFIX = SpeculativeConfig(method="suffix", num_speculative_tokens=4, disable_by_batch_size=1024)
LONG = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)


def quantized(form: str) -> Any:
    runner = torch_runner(LlamaConfig, cpp=True, impl="atom")
    quantize(runner.model, form, "cpu", kernels=cpu_ops())
    return runner


RUNNERS = {
    "fake": lambda **kw: FakeRunner(eos_token_id=0, block_size=BLOCK, script=looping, **kw),
    "llama": lambda **kw: torch_runner(LlamaConfig, **kw),
    "qwen2-atom-cpp": lambda **kw: torch_runner(Qwen2Config, cpp=True, impl="atom", **kw),
    "llama-int8": lambda: quantized("int8"),
    "llama-int4": lambda: quantized("int4"),
}


def looping(prompt: tuple[int, ...], params: SamplingParams, seed: int) -> list[int]:
    """A reply that repeats the prompt's last three tokens: n-gram drafts find it."""
    return list(prompt[-3:]) * 20


@dataclass
class Run:
    tokens: dict[str, list[Sampled]] = field(default_factory=dict)  # by request id
    num_steps: int = 0
    num_drafts: int = 0
    num_accepted: int = 0


def drive(
    runner: Runner,
    prompts: list[tuple[int, ...]],
    params: SamplingParams = LONG,
    *,
    speculation: SpeculativeConfig | None = None,
    draft: Runner | None = None,
    num_blocks: int | None = None,
    budget: int = 4096,
) -> Run:
    """Every prompt to its end through one Scheduler (`draft`: the draft model's runner
    for a draft_model `speculation`); the KV bookkeeping is checked after each step and
    must be empty at the end, and so must the draft's."""
    kv = KVCacheManager(num_blocks=num_blocks or runner.num_blocks, block_size=BLOCK)
    scheduler = Scheduler(
        kv=kv,
        max_num_seqs=64,
        max_num_batched_tokens=budget,
        eos_token_ids=runner.eos_token_ids,
        max_model_len=256,
        speculation=speculation,
        draft=draft,
    )
    run = Run()
    for i, prompt in enumerate(prompts):
        scheduler.add(Submit(request_id=str(i), prompt_ids=prompt, params=params))
        run.tokens[str(i)] = []
    while scheduler.num_seqs:
        plan = plan_step(scheduler)
        run.num_steps += 1
        for out in scheduler.update(plan, runner.step(plan)):
            run.tokens[out.seq.request_id].extend(out.tokens)
            if out.drafts is not None:
                run.num_drafts += out.drafts.num_draft_tokens
                run.num_accepted += out.drafts.num_accepted_tokens
            if out.finish_reason is not None:
                runner.release(out.seq.seq_id)
        check_invariants(kv)
    assert kv.num_free_blocks == kv.num_blocks and runner.num_sequences() == 0
    assert draft is None or draft.num_sequences() == 0
    return run


def ids(run: Run) -> list[list[int]]:
    return [[t.token_id for t in tokens] for tokens in run.tokens.values()]


@pytest.mark.parametrize("config", [NGRAM, SUFFIX], ids=["ngram", "suffix"])
@pytest.mark.parametrize("name", RUNNERS)
def test_greedy_tokens_are_the_same_in_fewer_steps(name: str, config: SpeculativeConfig) -> None:
    runner = RUNNERS[name]()
    plain = drive(runner, PROMPTS[:8])
    fast = drive(runner, PROMPTS[:8], speculation=config)
    assert ids(fast) == ids(plain)
    assert fast.num_accepted > 0 and fast.num_steps < plain.num_steps


@pytest.mark.parametrize("name", ["llama", "llama-int4"])
def test_logprobs_penalties_and_seeded_draws_are_the_same(name: str) -> None:
    """Exact on the integer kernels (a row's arithmetic does not depend on the rows
    beside it); in float32, torch's GEMM sums in another order from 16 rows on, and a
    verify step has more rows: logprobs agree to ~1e-6 there."""
    runner = RUNNERS[name]()
    params = SamplingParams(
        temperature=0.7, top_p=0.9, seed=11, max_tokens=40, ignore_eos=True, logprobs=3,
        repetition_penalty=1.1, frequency_penalty=0.2, presence_penalty=0.1,
    )  # fmt: skip
    plain = drive(runner, PROMPTS[:6], params)
    fast = drive(runner, PROMPTS[:6], params, speculation=NGRAM)
    assert ids(fast) == ids(plain) and fast.num_drafts > 0
    if name == "llama-int4":
        assert fast.tokens == plain.tokens  # token ids and every logprob entry
    for request_id, tokens in plain.tokens.items():
        for ours, theirs in zip(fast.tokens[request_id], tokens, strict=True):
            assert ours.logprobs is not None and theirs.logprobs is not None
            assert ours.logprobs.logprob == pytest.approx(theirs.logprobs.logprob, abs=1e-5)


def test_stop_tokens_inside_an_accepted_run_end_it_there() -> None:
    runner = RUNNERS["fake"]()
    prompt = (5, 6, 7, 8, 9)  # replies 7 8 9 7 8 9 …
    params = SamplingParams(temperature=0.0, max_tokens=40, stop_token_ids=(9,))
    plain = drive(runner, [prompt], params)
    fast = drive(runner, [prompt], params, speculation=NGRAM)
    assert ids(fast) == ids(plain) == [[7, 8, 9]]
    assert fast.num_accepted >= 2  # 8 and 9 came in one step, with more after them


def test_max_tokens_and_preemption_under_speculation() -> None:
    runner = RUNNERS["llama"]()
    plain = drive(runner, PROMPTS[:10], LONG)
    # 40 blocks of 4 slots cannot hold ten sequences of up to 90 tokens at once
    squeezed = drive(runner, PROMPTS[:10], LONG, speculation=NGRAM, num_blocks=40, budget=16)
    assert ids(squeezed) == ids(plain)
    assert all(len(tokens) == LONG.max_tokens for tokens in ids(squeezed))


# --- a draft model ----------------------------------------------------------------

DRAFT = SpeculativeConfig(
    method="draft_model", num_speculative_tokens=3, model="tiny", disable_by_batch_size=1024
)
DRAFTS = {  # the served model's twin (its drafts are right), or its first layer only
    "twin": lambda name: RUNNERS[name](),
    "one-layer": lambda name: torch_runner(LlamaConfig, num_hidden_layers=1),
}


@pytest.mark.parametrize("draft", DRAFTS)
@pytest.mark.parametrize("name", ["llama", "llama-int4"])
def test_a_draft_model_gives_the_same_tokens(name: str, draft: str) -> None:
    runner = RUNNERS[name]()
    plain = drive(runner, PROMPTS[:8])
    fast = drive(runner, PROMPTS[:8], speculation=DRAFT, draft=DRAFTS[draft](name))
    assert ids(fast) == ids(plain) and fast.num_drafts > 0
    if draft == "twin":  # (nearly) every draft right: about four tokens a step
        assert fast.num_accepted > 0.9 * fast.num_drafts and fast.num_steps < plain.num_steps / 2


def test_seeded_draws_with_a_draft_model_are_the_same() -> None:
    """Drafts are the draft's argmax (point masses): the served model's own draws decide,
    one a token, so a seeded request's tokens and logprobs do not change. (A low
    temperature: the random model's argmax is rarely drawn otherwise.)"""
    runner = RUNNERS["llama-int4"]()
    params = SamplingParams(temperature=0.05, seed=5, max_tokens=30, ignore_eos=True, logprobs=2)
    plain = drive(runner, PROMPTS[:6], params)
    fast = drive(runner, PROMPTS[:6], params, speculation=DRAFT, draft=RUNNERS["llama-int4"]())
    assert fast.tokens == plain.tokens and fast.num_accepted > 0


def test_a_full_draft_cache_gives_blocks_back_and_prefills_again() -> None:
    """Eight blocks of four slots hold one sequence of up to 32 positions: each step the
    sequences asked take what the others hold, and the others prefill again later."""
    runner = RUNNERS["llama"]()
    plain = drive(runner, PROMPTS[:3])
    fast = drive(
        runner, PROMPTS[:3], speculation=DRAFT, draft=torch_runner(LlamaConfig, num_blocks=8)
    )
    assert ids(fast) == ids(plain) and fast.num_accepted > 0


# --- the distribution of sampled tokens ----------------------------------------------

SAMPLES = 10_000
SAMPLED = SamplingParams(temperature=0.8, top_k=3, max_tokens=3, ignore_eos=True)


def sampled_pairs(
    runner: Runner,
    prompt: tuple[int, ...],
    seed_base: int,
    speculation: SpeculativeConfig | None,
    draft: Runner | None = None,
) -> tuple[Counter[Any], int]:
    """How often each (second, third) token pair follows `prompt` over SAMPLES sequences,
    each with its own seed; and how many drafts were accepted."""
    counts: Counter[Any] = Counter()
    num_accepted = 0
    batch = 500
    for start in range(0, SAMPLES, batch):
        kv = KVCacheManager(num_blocks=runner.num_blocks, block_size=BLOCK)
        scheduler = Scheduler(
            kv=kv,
            max_num_seqs=batch,
            max_num_batched_tokens=8192,
            eos_token_ids=frozenset(),
            max_model_len=256,
            speculation=speculation,
            draft=draft,
        )
        for i in range(start, start + batch):
            params = dataclasses.replace(SAMPLED, seed=seed_base + i)
            scheduler.add(Submit(request_id=str(i), prompt_ids=prompt, params=params))
        outputs: dict[str, list[int]] = {}
        while scheduler.num_seqs:
            plan = plan_step(scheduler)
            for out in scheduler.update(plan, runner.step(plan)):
                outputs.setdefault(out.seq.seq_id, []).extend(out.token_ids)
                num_accepted += out.drafts.num_accepted_tokens if out.drafts else 0
                if out.finish_reason is not None:
                    runner.release(out.seq.seq_id)
        counts.update(tuple(tokens[1:]) for tokens in outputs.values())
    return counts, num_accepted


def chi_square_p(a: Counter[Any], b: Counter[Any]) -> float:
    """The two-sample chi-square test's p-value that `a` and `b` come from one
    distribution (cells expected fewer than 5 times pooled into one)."""
    total_a, total_b = sum(a.values()), sum(b.values())
    share = min(total_a, total_b) / (total_a + total_b)
    cells = [(a[k], b[k]) for k in sorted(set(a) | set(b))]
    kept = [c for c in cells if (c[0] + c[1]) * share >= 5]
    rare = [c for c in cells if (c[0] + c[1]) * share < 5]
    if rare:
        kept.append((sum(c[0] for c in rare), sum(c[1] for c in rare)))
    stat = 0.0
    for x, y in kept:
        for observed, total in ((x, total_a), (y, total_b)):
            expected = (x + y) * total / (total_a + total_b)
            stat += (observed - expected) ** 2 / expected
    df = torch.tensor((len(kept) - 1) / 2, dtype=torch.float64)
    return float(torch.special.gammaincc(df, torch.tensor(stat / 2, dtype=torch.float64)))


SIGNIFICANCE = 0.001


@pytest.fixture(scope="module")
def sampling_case() -> tuple[Any, tuple[int, ...], Counter[Any]]:
    """A tiny model, a prompt ending inside a loop of its own greedy continuation (so
    n-gram drafts are often right), and the (second, third) token counts without drafts."""
    runner = torch_runner(LlamaConfig, num_blocks=4096)
    greedy = drive(runner, [PROMPTS[0]], dataclasses.replace(LONG, max_tokens=24))
    prompt = PROMPTS[0] + tuple(ids(greedy)[0])  # it ends 229 283 282 229 283 282 …
    plain, _ = sampled_pairs(runner, prompt, seed_base=1_000_000, speculation=None)
    return runner, prompt, plain


@pytest.mark.parametrize("method", ["ngram", "draft_model"])
def test_sampling_keeps_the_distribution(sampling_case: Any, method: str) -> None:
    runner, prompt, plain = sampling_case
    config, draft = (NGRAM, None) if method == "ngram" else (DRAFT, torch_runner(LlamaConfig))
    speculating, num_accepted = sampled_pairs(runner, prompt, 0, config, draft)
    assert num_accepted > SAMPLES // 20  # drafts decided many of the pairs (~12 % n-gram)
    assert chi_square_p(speculating, plain) > SIGNIFICANCE


def test_the_test_fails_when_a_rejected_draft_is_kept(sampling_case: Any) -> None:
    runner, prompt, plain = sampling_case
    with pytest.MonkeyPatch.context() as patch:  # sample on after a draft that lost
        patch.setattr(
            torch_runner_module,
            "_draft_matches",
            lambda chunk, run: len(run) - 1 < chunk.num_draft_tokens,
        )
        broken, _ = sampled_pairs(runner, prompt, seed_base=0, speculation=NGRAM)
    assert chi_square_p(broken, plain) < SIGNIFICANCE
