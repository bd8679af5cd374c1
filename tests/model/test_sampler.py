"""Sampling and logits processors on hand-made logits."""

from __future__ import annotations

import math

import torch

from atom.model.sampling.logits import RowContext, banned_ids, process
from atom.model.sampling.sampler import (
    candidates,
    gumbel_max,
    sample,
    top_p_whole,
    truncate_sorted,
)
from atom.vocabulary.events import SamplingParams
from atom.vocabulary.plan import ReasoningBudget


def gens(n: int, seed: int = 0) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(seed + i) for i in range(n)]


def ids(logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator]):  # type: ignore[no-untyped-def]
    return [s.token_id for s in sample(logits, params, generators)]


LOGITS = torch.tensor([[1.0, 3.0, 2.0, 0.0], [0.5, 0.1, 0.2, 4.0]])
GREEDY = SamplingParams(temperature=0.0)


def test_greedy_rows_take_argmax() -> None:
    assert ids(LOGITS, [GREEDY] * 2, gens(2)) == [1, 3]


def kept(logits: torch.Tensor, **kw) -> list[list[bool]]:  # type: ignore[no-untyped-def]
    params = [SamplingParams(temperature=1.0, **kw)] * logits.shape[0]
    found = candidates(logits, params)
    assert found is not None
    values, _, log_mass = found
    return torch.isfinite(truncate_sorted(values, params, log_mass)).tolist()


def test_top_k_keeps_k_largest_per_row() -> None:
    assert kept(LOGITS, top_k=2) == [[True, True], [True, True]]
    found = candidates(LOGITS, [SamplingParams(top_k=2)] * 2)
    assert found is not None and found[1].tolist() == [[1, 2], [3, 0]]


def test_top_p_keeps_smallest_set_reaching_p() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert kept(logits, top_p=0.7) == [[True, True, False, False]]
    assert kept(logits, top_p=0.01) == [[True, False, False, False]]


def kept_ids(logits: torch.Tensor, params: list[SamplingParams], *, head: bool) -> list[set[int]]:
    """The token ids top-p (and min-p) keep per row, as the sampler finds them (a sorted
    head `candidates` picks, or whole rows binned) or (head=False) from the whole row
    sorted."""
    found = candidates(logits, params) if head else None
    if head and found is None:
        kept = torch.isfinite(top_p_whole(logits, params))
        return [set(torch.nonzero(row).flatten().tolist()) for row in kept]
    if found is not None:
        values, ids, log_mass = found
    else:
        values, ids = logits.sort(dim=1, descending=True)
        log_mass = logits.logsumexp(dim=1)
    kept = torch.isfinite(truncate_sorted(values, params, log_mass))
    return [set(ids[r][kept[r]].tolist()) for r in range(logits.shape[0])]


def test_top_p_from_a_sorted_head_keeps_what_a_whole_sort_keeps() -> None:
    torch.manual_seed(0)
    vocab = 49152  # the default model's
    cases = [(8.0, 0.9, 0.0), (3.0, 0.95, 0.0), (1.0, 0.9, 0.0), (6.0, 0.8, 0.05)]
    for scale, top_p, min_p in cases:
        logits = torch.randn(6, vocab) * scale  # peaked (a head of 64 holds it) to flat (a sort)
        params = [SamplingParams(temperature=1.0, top_p=top_p, min_p=min_p)] * 6
        head = kept_ids(logits, params, head=True)
        assert head == kept_ids(logits, params, head=False)
        found = candidates(logits, params)
        if scale == 8.0:  # peaked: the first head holds it, no sort
            assert found is not None and found[0].shape[1] == 64
        if scale == 1.0:  # flat: no head holds it, the rows are binned
            assert found is None
        assert all(0 < len(kept) < vocab for kept in head)


def test_top_p_over_binned_rows_keeps_what_a_whole_sort_keeps() -> None:
    """Rows no sorted head holds, banned tokens (-inf) among them, a row whose values
    all tie, and a row whose largest value holds the whole top-p mass."""
    torch.manual_seed(1)
    logits = torch.randn(6, 20000) * torch.tensor([[0.5], [1.0], [2.0], [1.0], [0.0], [1.0]])
    logits[1, :5000] = float("-inf")
    logits[3, 7] = 40.0  # alone past top_p
    for top_p, min_p in [(0.9, 0.0), (0.5, 0.0), (0.7, 0.0002)]:
        params = [SamplingParams(temperature=1.0, top_p=top_p, min_p=min_p)] * 6
        binned = [set(torch.nonzero(r).flatten().tolist()) for r in torch.isfinite(
            top_p_whole(logits, params))]  # fmt: skip
        assert binned[:4] + binned[5:] == (
            kept_ids(logits[[0, 1, 2, 3, 5]], params[:5], head=False)
        )
        assert len(binned[4]) == round(top_p * 20000)  # ties: any of them, as many as a sort
        assert binned[3] == {7}


def test_top_p_looks_past_a_head_that_does_not_hold_the_mass() -> None:
    logits = torch.zeros(2, 5000)  # flat: top-p 0.5 keeps 2,500 tokens, past both heads
    params = [SamplingParams(temperature=1.0, top_p=0.5)] * 2
    assert candidates(logits, params) is None
    kept = kept_ids(logits, params, head=True)
    assert all(len(row) == 2500 for row in kept)


def test_min_p_drops_tokens_below_a_share_of_the_top_one() -> None:
    logits = torch.log(torch.tensor([[0.05, 0.3, 0.15, 0.5]]))  # unsorted: min-p needs no order
    assert kept(logits, min_p=0.5) == [[False, True, False, True]]


def test_top_k_one_is_greedy_even_when_sampling() -> None:
    params = [SamplingParams(temperature=1.5, top_k=1)] * 2
    for seed in range(5):
        assert ids(LOGITS, params, gens(2, seed)) == [1, 3]


def test_seeded_row_does_not_depend_on_its_batch() -> None:
    params = SamplingParams(temperature=1.0)
    flat = torch.zeros(1, 50)
    alone = ids(flat, [params], [torch.Generator().manual_seed(7)])[0]
    batch = torch.cat([torch.randn(3, 50), flat])
    others = [SamplingParams(temperature=1.0, top_p=0.5)] * 3
    together = ids(batch, [*others, params], [*gens(3, 100), torch.Generator().manual_seed(7)])
    assert together[3] == alone


def test_sampling_spreads_over_the_distribution() -> None:
    g = torch.Generator().manual_seed(1)
    seen = {ids(torch.zeros(1, 4), [SamplingParams(temperature=1.0)], [g])[0] for _ in range(200)}
    assert seen == {0, 1, 2, 3}


def test_logprobs_are_sorted_and_match_the_distribution() -> None:
    logits = torch.log(torch.tensor([[0.1, 0.6, 0.3]]))
    [s] = sample(logits, [SamplingParams(temperature=0.0, logprobs=2)], gens(1))
    assert s.token_id == 1 and s.logprobs is not None
    assert math.isclose(s.logprobs.logprob, math.log(0.6), rel_tol=1e-5)
    assert [t for t, _ in s.logprobs.top] == [1, 2]
    assert s.logprobs.top[0][1] >= s.logprobs.top[1][1]


def row(**kw) -> RowContext:  # type: ignore[no-untyped-def]
    fields = {k: kw.pop(k) for k in ("prompt_ids", "output_ids", "num_output") if k in kw}
    return RowContext(params=SamplingParams(**kw), eos_token_ids=frozenset({0}), **fields)


def test_frequency_and_presence_penalties_follow_openai() -> None:
    logits = torch.zeros(1, 4)
    out = process(logits, [row(frequency_penalty=0.5, presence_penalty=1.0, output_ids=(2, 2, 3))])
    assert out.tolist() == [[0.0, 0.0, -2.0, -1.5]]


def test_repetition_penalty_covers_prompt_and_output() -> None:
    logits = torch.tensor([[2.0, -2.0, 2.0, 2.0]])
    out = process(logits, [row(repetition_penalty=2.0, prompt_ids=(0, 1), output_ids=(2,))])
    assert out.tolist() == [[1.0, -4.0, 1.0, 2.0]]


def test_logit_bias_allowed_ids_and_min_tokens() -> None:
    logits = torch.zeros(3, 4)
    rows = [
        row(logit_bias=((3, 100.0), (1, -100.0))),
        row(allowed_token_ids=(1, 2)),
        row(min_tokens=2, stop_token_ids=(3,), num_output=1),
    ]
    out = process(logits, rows)
    assert out[0].tolist() == [0.0, -100.0, 0.0, 100.0]
    assert torch.isfinite(out[1]).tolist() == [False, True, True, False]
    assert torch.isfinite(out[2]).tolist() == [False, True, True, False]  # EOS 0 and stop id 3


def test_bad_words_ban_the_completing_token_only_after_its_prefix() -> None:
    bad = ((5,), (7, 8))
    assert banned_ids(row(bad_words=bad, output_ids=(1, 2))) == {5}
    assert banned_ids(row(bad_words=bad, output_ids=(1, 7))) == {5, 8}


def _generators(n: int) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(seed) for seed in range(n)]


def test_the_two_level_draw_is_the_softmax_distribution() -> None:
    """600 token ids span three blocks; every token's frequency is within 4.5 standard
    errors of its probability."""
    logits = torch.randn(1, 600, generator=torch.Generator().manual_seed(7)) * 2
    rows = 20000
    picks = gumbel_max(logits.expand(rows, -1).contiguous(), _generators(rows))
    freq = torch.bincount(picks, minlength=600).double() / rows
    p = logits[0].double().softmax(dim=0)
    assert bool(((freq - p).abs() <= 4.5 * (p * (1 - p) / rows).sqrt() + 1 / rows).all())


def test_a_rounding_sized_change_of_the_logits_almost_never_changes_the_draw() -> None:
    """Logits that differ by float rounding (a busy batch, a prefix-cache hit) must give a
    seeded row the same token. A few likely tokens and a long tail, as a chat model's
    rows look: an inverse-CDF draw with the same seeds changed 7 of these 1000 rows."""
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(1000, 16384, generator=gen) * 2
    logits[:, :3] += 8
    nudged = logits + torch.randn(1000, 16384, generator=gen) * 1e-5
    before, after = gumbel_max(logits, _generators(1000)), gumbel_max(nudged, _generators(1000))
    assert int((before != after).sum()) <= 1


def test_a_spent_reasoning_budget_forces_the_end_marker_then_lets_go() -> None:
    budget = ReasoningBudget(max_tokens=3, start_ids=(50,), end_ids=(60, 61))
    params = SamplingParams(temperature=1.0, reasoning_budget=budget)

    def forced(output: tuple[int, ...]) -> list[int]:
        """The tokens the processed row still allows after `output`."""
        row = process(torch.zeros(1, 100), [RowContext(params=params, output_ids=output)])
        return torch.isfinite(row[0]).nonzero().flatten().tolist()

    everything = list(range(100))
    assert forced((50, 1, 2)) == everything  # two reasoning tokens: within the budget
    assert forced((50, 1, 2, 3)) == [60]  # three spent: the marker begins
    assert forced((50, 1, 2, 3, 60)) == [61]  # and is finished
    assert forced((50, 1, 2, 3, 60, 61)) == everything  # the answer follows freely
    assert forced((50, 1, 2, 60)) == [61]  # a marker the model began is completed
    assert forced((50, 60, 61, 4, 5, 6)) == everything  # it ended its reasoning itself
    assert forced((7, 1, 2, 3, 4)) == everything  # no reasoning block was opened
    opened = SamplingParams(
        reasoning_budget=ReasoningBudget(max_tokens=2, start_ids=(), end_ids=(60,))
    )
    row = process(torch.zeros(1, 100), [RowContext(params=opened, output_ids=(1, 2))])
    assert torch.isfinite(row[0]).nonzero().flatten().tolist() == [60]  # the prompt opened it


def test_a_mixed_batch_reports_each_rows_logprobs_from_one_copy() -> None:
    logits = torch.log(torch.tensor([[0.1, 0.6, 0.3], [0.5, 0.2, 0.3], [0.2, 0.2, 0.6]]))
    params = [
        SamplingParams(temperature=0.0),
        SamplingParams(temperature=1.0, top_k=1, logprobs=2),  # top-k 1: the argmax
        SamplingParams(temperature=0.0, logprobs=1),
    ]
    out = sample(logits, params, gens(3))
    assert [s.token_id for s in out] == [1, 0, 2] and out[0].logprobs is None
    second, third = out[1].logprobs, out[2].logprobs
    assert second is not None and third is not None
    assert [token for token, _ in second.top] == [0, 2] and len(third.top) == 1
    assert math.isclose(second.logprob, math.log(0.5), rel_tol=1e-5)
    assert math.isclose(second.top[1][1], math.log(0.3), rel_tol=1e-5)
    assert third.top[0][0] == 2 and math.isclose(third.logprob, math.log(0.6), rel_tol=1e-5)
    assert all(isinstance(token, int) for token, _ in second.top)
