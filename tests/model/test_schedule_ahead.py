"""`Scheduler.schedule_ahead` and `follow`: a step of decodes planned before the tokens of
the step ahead of it are known (atom/model/scheduling/ahead.py)."""

from __future__ import annotations

from atom.model.runner import Sampled, StepPlan
from atom.model.scheduling.ahead import PLACEHOLDER, follow
from atom.model.scheduling.kv_cache import check_invariants
from atom.model.scheduling.scheduler import Scheduler
from atom.vocabulary.events import SamplingParams, Submit
from tests.model.test_scheduler import EOS, make, submit


def sampled(plan: StepPlan, token_id: int) -> dict[str, tuple[Sampled, ...]]:
    return {c.seq_id: (Sampled(token_id=token_id),) for c in plan.chunks if c.needs_sample}


def ahead_of_first(s: Scheduler, *submits: Submit) -> tuple[StepPlan, StepPlan | None]:
    """Add `submits`, plan the first step, then the step ahead of it."""
    for one in submits:
        s.add(one)
    first = s.schedule()
    return first, s.schedule_ahead(first)


def test_the_step_ahead_feeds_a_placeholder_past_each_sequence() -> None:
    s = make(budget=16)
    first, ahead = ahead_of_first(s, submit("a", 3, max_tokens=8), submit("b", 5, max_tokens=8))
    assert ahead is not None
    assert [(c.seq_id, c.token_ids, c.start_pos) for c in ahead.chunks] == [
        ("a/0", (PLACEHOLDER,), 3),
        ("b/0", (PLACEHOLDER,), 5),
    ]
    assert all(c.needs_sample for c in ahead.chunks)
    s.update(first, sampled(first, 7))
    s.update(ahead, sampled(ahead, 8))  # recorded after the step before it, as planned
    assert [seq.token_ids[-2:] for seq in s.sequences()] == [[7, 8], [7, 8]]
    assert all(seq.num_computed == len(seq.token_ids) - 1 for seq in s.sequences())
    check_invariants(s.kv)


def test_nothing_is_planned_ahead_after_a_chunk_that_stops_mid_prompt() -> None:
    s = make(budget=8)
    s.add(submit("long", 20))
    mid_prompt = s.schedule()
    assert s.schedule_ahead(mid_prompt) is None  # its next chunk starts where this ends


def test_a_prompt_admitted_meanwhile_gets_its_chunk_in_the_step_ahead() -> None:
    s = make(budget=8)
    s.add(submit("a", 3, max_tokens=8))
    plan = s.schedule()
    s.add(submit("new", 10, max_tokens=8))  # admitted while `plan` runs
    ahead = s.schedule_ahead(plan)
    assert ahead is not None
    assert [(c.seq_id, c.token_ids, c.start_pos) for c in ahead.chunks] == [
        ("a/0", (PLACEHOLDER,), 3),
        ("new/0", tuple(range(1, 8)), 0),  # the budget of 8 less a's placeholder
    ]
    s.update(plan, sampled(plan, 9))
    s.update(ahead, sampled(ahead, 9))
    assert [(q.seq_id, q.num_computed) for q in s.sequences()] == [("a/0", 4), ("new/0", 7)]
    check_invariants(s.kv)


def test_a_prompt_planned_ahead_preempts_nothing() -> None:
    """In lockstep a prompt short of blocks takes them from the last-served sequence;
    ahead it waits (a sequence may still be in the step under way)."""
    s = make(budget=8, num_blocks=5, by_priority=True)
    params = SamplingParams(temperature=0.0, max_tokens=4)

    def prompt(rid: str, first: int, length: int, priority: int) -> Submit:  # no shared prefix
        ids = tuple(range(first, first + length))
        return Submit(request_id=rid, prompt_ids=ids, params=params, priority=priority)

    s.add(prompt("c", 100, 12, priority=5))
    s.update(first := s.schedule(), sampled(first, 9))  # c: 8 of its 12 tokens
    s.add(prompt("a", 200, 8, priority=0))
    plan = s.schedule()  # a's whole prompt takes the budget: c waits, holding 2 blocks
    assert [c.seq_id for c in plan.chunks] == ["a/0"]
    s.add(prompt("b", 300, 4, priority=1))  # no block left for it
    ahead = s.schedule_ahead(plan)
    assert ahead is not None and [c.seq_id for c in ahead.chunks] == ["a/0"]
    assert s.stats.num_preemptions == 0 and s.seq("c/0").has_blocks  # type: ignore[union-attr]
    check_invariants(s.kv)


def test_a_sequence_whose_token_ahead_is_its_last_is_left_out() -> None:
    short, long = submit("short", 3, max_tokens=1), submit("long", 3, max_tokens=8)
    _, ahead = ahead_of_first(make(budget=8), short, long)
    assert ahead is not None and [c.seq_id for c in ahead.chunks] == ["long/0"]


def test_without_a_free_block_for_the_token_ahead_nothing_is_planned_ahead() -> None:
    s = make(budget=8, num_blocks=2)  # blocks of 4: room for 8 tokens
    a, b = submit("a", 4, max_tokens=8), submit("b", 4, max_tokens=8)
    assert ahead_of_first(s, a, b)[1] is None  # each needs a second block for position 4
    check_invariants(s.kv)


def test_follow_puts_in_the_tokens_and_the_history_a_penalty_reads() -> None:
    s = make(budget=8)
    params = SamplingParams(temperature=0.0, max_tokens=8, frequency_penalty=0.5)
    s.add(Submit(request_id="p", prompt_ids=(1, 2, 3), params=params))
    first = s.schedule()
    s.update(first, sampled(first, 9))
    second = s.schedule()
    ahead = s.schedule_ahead(second)
    assert ahead is not None and ahead.chunks[0].output_ids == (9,)
    filled = follow(ahead, sampled(second, 4), frozenset({EOS}))
    assert filled.chunks[0].token_ids == (4,)
    assert filled.chunks[0].output_ids == (9, 4)
    assert filled.chunks[0].prompt_ids == (1, 2, 3)


def test_follow_leaves_out_the_sequences_a_stop_token_ended() -> None:
    """They are removed when the step before is recorded: no row runs for them (and a
    grammar they completed is not asked for another token)."""
    s = make(budget=16)
    ignoring = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    stopping = SamplingParams(temperature=0.0, max_tokens=8, stop_token_ids=(5,))
    first, ahead = ahead_of_first(
        s,
        submit("plain", 3, max_tokens=8),
        Submit(request_id="ignoring", prompt_ids=(1, 2, 3), params=ignoring),
        Submit(request_id="stopping", prompt_ids=(1, 2, 3), params=stopping),
    )
    assert ahead is not None and len(ahead.chunks) == 3
    eos_everywhere = follow(ahead, sampled(first, EOS), frozenset({EOS}))
    assert [c.seq_id for c in eos_everywhere.chunks] == ["ignoring/0"]
    fives = follow(ahead, sampled(first, 5), frozenset({EOS}))
    assert [c.seq_id for c in fives.chunks] == ["plain/0", "ignoring/0"]
    ended = {o.seq.seq_id for o in s.update(first, sampled(first, 5)) if o.finish_reason}
    assert ended == {"stopping/0"}  # the same decision, made by the Scheduler
