from __future__ import annotations

import dataclasses

from atom.model.runner import Sampled
from atom.model.scheduling.kv_cache import KVCacheManager, check_invariants
from atom.model.scheduling.scheduler import Scheduler
from atom.vocabulary.events import FinishReason, SamplingParams, Submit
from atom.vocabulary.speculative import SpeculativeConfig
from tests.model.tiny import plan_step

EOS = 0


def make(
    budget: int = 8,
    max_num_seqs: int = 4,
    num_blocks: int = 64,
    speculation: SpeculativeConfig | None = None,
    by_priority: bool = False,
) -> Scheduler:
    return Scheduler(
        kv=KVCacheManager(num_blocks=num_blocks, block_size=4),
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=budget,
        eos_token_ids=frozenset({EOS}),
        max_model_len=64,
        speculation=speculation,
        by_priority=by_priority,
    )


def submit(rid: str, prompt_len: int, *, n: int = 1, max_tokens: int = 4) -> Submit:
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    return Submit(
        request_id=rid,
        prompt_ids=tuple(range(1, prompt_len + 1)),
        params=params,
        choices_per_prompt=n,
    )


def test_long_prompt_is_prefilled_in_chunks_within_budget() -> None:
    s = make(budget=8)
    s.add(submit("a", 20))
    plans = []
    for _ in range(3):
        plan = s.schedule()
        plans.append(plan)
        s.update(plan, {c.seq_id: (Sampled(token_id=7),) for c in plan.chunks if c.needs_sample})
    assert [p.num_tokens for p in plans] == [8, 8, 4]
    assert [c.needs_sample for p in plans for c in p.chunks] == [False, False, True]
    assert [c.start_pos for p in plans for c in p.chunks] == [0, 8, 16]


def test_decodes_go_first_and_prefill_takes_the_rest() -> None:
    s = make(budget=8)
    s.add(submit("a", 3))
    plan = s.schedule()
    s.update(plan, {"a/0": (Sampled(token_id=5),)})
    s.add(submit("b", 20))
    plan = s.schedule()
    assert [(c.seq_id, len(c.token_ids)) for c in plan.chunks] == [("a/0", 1), ("b/0", 7)]


def test_finish_on_eos_and_on_max_tokens() -> None:
    s = make()
    s.add(submit("a", 2, max_tokens=2))
    s.add(submit("b", 2))
    plan = s.schedule()
    outs = s.update(plan, {"a/0": (Sampled(token_id=9),), "b/0": (Sampled(token_id=EOS),)})
    assert [(o.seq.seq_id, o.finish_reason) for o in outs] == [
        ("a/0", None),
        ("b/0", FinishReason.STOP),
    ]
    outs = s.update(s.schedule(), {"a/0": (Sampled(token_id=9),)})
    assert outs[0].finish_reason is FinishReason.LENGTH
    assert s.num_seqs == 0


def test_a_sequence_that_finishes_in_its_prompts_step_leaves_the_prompt_cached() -> None:
    """The full blocks a last step filled are registered before the sequence goes (a
    one-token answer used to take its prompt's blocks away unhashed: no later hit)."""
    s = make(budget=16)
    s.add(submit("a", 9, max_tokens=1))
    (out,) = s.update(s.schedule(), {"a/0": (Sampled(token_id=7),)})
    assert out.finish_reason is FinishReason.LENGTH and s.num_seqs == 0
    s.add(submit("b", 9))
    (chunk,) = s.schedule().chunks
    assert chunk.start_pos == 8  # two full blocks of four hit; the last token is computed
    check_invariants(s.kv)


def test_each_choice_is_its_own_sequence_with_its_own_seed() -> None:
    s = make()
    seqs = s.add(submit("a", 2, n=3))
    assert [q.seq_id for q in seqs] == ["a/0", "a/1", "a/2"]
    assert len({q.seed for q in seqs}) == 3
    assert not s.can_admit(2)


def test_under_priority_the_lowest_value_is_served_first_and_the_highest_preempted() -> None:
    def run(by_priority: bool) -> tuple[list[str], list[str]]:
        """Two decoding sequences of 4-token prompts in 3 blocks of 4: one must yield."""
        s = make(budget=64, num_blocks=3, by_priority=by_priority)
        params = SamplingParams(temperature=0.0, max_tokens=8)
        s.add(Submit(request_id="old", prompt_ids=(1, 2, 3), params=params, priority=5))
        s.add(Submit(request_id="new", prompt_ids=(4, 5, 6), params=params, priority=0))
        first = s.schedule()
        s.update(first, {c.seq_id: (Sampled(token_id=7),) for c in first.chunks})
        s.update(s.schedule(), {"old/0": (Sampled(token_id=7),), "new/0": (Sampled(token_id=7),)})
        crowded = s.schedule()  # both need a second block: only one is left
        return [c.seq_id for c in first.chunks], [c.seq_id for c in crowded.chunks]

    assert run(by_priority=False) == (["old/0", "new/0"], ["old/0"])  # the newest yields
    assert run(by_priority=True) == (["new/0", "old/0"], ["new/0"])  # priority 5 yields


# --- speculation ---------------------------------------------------------------------

SPEC = SpeculativeConfig(
    method="ngram", num_speculative_tokens=3, prompt_lookup_min=1, prompt_lookup_max=2
)


def speculating(budget: int = 64, num_blocks: int = 64, **overrides: object) -> Scheduler:
    spec = dataclasses.replace(SPEC, **overrides)  # type: ignore[arg-type]
    return make(budget=budget, num_blocks=num_blocks, speculation=spec)


def decoding(s: Scheduler, *prompts: tuple[int, ...], **params: object) -> None:
    """Admit one request a prompt ("a", "b", …) and run their prefill, which samples 7."""
    args = {"temperature": 0.0, "max_tokens": 20, **params}
    for rid, prompt in zip("abcd", prompts, strict=False):
        s.add(Submit(request_id=rid, prompt_ids=prompt, params=SamplingParams(**args)))  # type: ignore[arg-type]
    plan = plan_step(s)
    s.update(plan, {c.seq_id: (Sampled(token_id=7),) for c in plan.chunks})


def tokens(*token_ids: int) -> tuple[Sampled, ...]:
    return tuple(Sampled(token_id=t) for t in token_ids)


PROMPT = (5, 6, 7, 8, 5, 6)  # then 7: "6 7" occurred, 8 5 6 followed it


def test_a_decode_chunk_carries_the_drafts_its_ngrams_propose() -> None:
    s = speculating()
    decoding(s, PROMPT)  # "6 7" occurred: 8 5 6 follow
    (chunk,) = plan_step(s).chunks
    assert chunk.token_ids == (7, 8, 5, 6) and chunk.draft_ids == (8, 5, 6)
    assert chunk.start_pos == 6 and s.kv.table("a/0") == chunk.block_ids
    assert len(chunk.block_ids) == 3  # positions up to 9


def test_an_accepted_run_is_appended_and_rejected_drafts_give_their_blocks_back() -> None:
    s = speculating()
    decoding(s, PROMPT)
    plan = plan_step(s)
    (out,) = s.update(plan, {"a/0": tokens(8, 4)})  # 8 accepted, 5 rejected: 4 instead
    assert out.token_ids == (8, 4) and out.drafts is not None
    assert (out.drafts.num_draft_tokens, out.drafts.num_accepted_tokens) == (3, 1)
    seq = s.seq("a/0")
    assert seq is not None and seq.token_ids == [5, 6, 7, 8, 5, 6, 7, 8, 4]
    assert seq.num_computed == 8 and seq.is_decoding
    assert len(s.kv.table("a/0")) == 3  # 9 tokens: the block past them went back
    assert seq.num_draft_tokens == 2  # one more than were accepted next time
    check_invariants(s.kv)


def test_a_run_ends_at_its_first_stop_token_and_at_max_tokens() -> None:
    s = speculating()
    decoding(s, PROMPT, stop_token_ids=(5,))
    (out,) = s.update(plan_step(s), {"a/0": tokens(8, 5, 6, 7)})
    assert out.token_ids == (8, 5) and out.finish_reason is FinishReason.STOP
    assert s.num_seqs == 0 and s.kv.num_free_blocks == s.kv.num_blocks
    s = speculating()
    decoding(s, PROMPT, max_tokens=3)
    (chunk,) = plan_step(s).chunks
    assert chunk.draft_ids == (8,)  # two tokens left: one draft and the token after it


def test_no_drafts_above_the_batch_size_limit_or_past_the_budget() -> None:
    s = speculating(disable_by_batch_size=1)
    decoding(s, PROMPT, PROMPT)
    assert all(c.num_draft_tokens == 0 for c in plan_step(s).chunks)
    for arrivals, drafts in ((0, [3]), (1, [0, 0])):  # one decodes; another in its prompt
        s = speculating(disable_by_batch_size=1)
        decoding(s, PROMPT)
        waiting = SamplingParams(temperature=0.0, max_tokens=20)
        for rid in "z"[:arrivals]:
            s.add(Submit(request_id=rid, prompt_ids=PROMPT, params=waiting))
        assert [c.num_draft_tokens for c in plan_step(s).chunks] == drafts
    s = speculating()
    decoding(s, PROMPT, PROMPT)
    s.max_num_batched_tokens = 4  # two decodes take 2 of 4 tokens: 2 drafts in all
    assert [c.num_draft_tokens for c in plan_step(s).chunks] == [2, 0]


def test_drafts_never_preempt() -> None:
    long = (*PROMPT, 9, 9, 9)  # 10 tokens with the first sampled: 3 blocks, 4 with drafts
    alone = speculating(num_blocks=4)
    decoding(alone, long)
    assert [c.num_draft_tokens for c in plan_step(alone).chunks] == [3]
    s = speculating(num_blocks=4)
    decoding(s, long, (1,))  # b holds the fourth block
    assert [c.num_draft_tokens for c in plan_step(s).chunks] == [0, 0]
    assert s.stats.num_preemptions == 0
