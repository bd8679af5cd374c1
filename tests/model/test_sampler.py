from __future__ import annotations

import torch

from atom.events import SamplingParams
from atom.model.sampler import apply_top_k, apply_top_p, sample


def gens(n: int, seed: int = 0) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(seed + i) for i in range(n)]


LOGITS = torch.tensor([[1.0, 3.0, 2.0, 0.0], [0.5, 0.1, 0.2, 4.0]])


def test_greedy_rows_take_argmax() -> None:
    params = [SamplingParams(temperature=0.0)] * 2
    assert sample(LOGITS, params, gens(2)) == [1, 3]


def test_top_k_keeps_k_largest_per_row() -> None:
    out = apply_top_k(LOGITS, torch.tensor([1, 2]))
    assert torch.isfinite(out).tolist() == [[False, True, False, False], [True, False, False, True]]


def test_top_p_keeps_smallest_set_reaching_p() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = torch.isfinite(apply_top_p(logits, torch.tensor([0.7]))).tolist()
    assert kept == [[True, True, False, False]]
    kept = torch.isfinite(apply_top_p(logits, torch.tensor([0.01]))).tolist()
    assert kept == [[True, False, False, False]]


def test_top_k_one_is_greedy_even_when_sampling() -> None:
    params = [SamplingParams(temperature=1.5, top_k=1)] * 2
    for seed in range(5):
        assert sample(LOGITS, params, gens(2, seed)) == [1, 3]


def test_seeded_row_does_not_depend_on_its_batch() -> None:
    params = SamplingParams(temperature=1.0)
    flat = torch.zeros(1, 50)
    alone = [sample(flat, [params], [torch.Generator().manual_seed(7)])[0] for _ in range(1)]
    g = torch.Generator().manual_seed(7)
    batch = torch.cat([torch.randn(3, 50), flat])
    others = [SamplingParams(temperature=1.0)] * 3
    together = sample(batch, [*others, params], [*gens(3, 100), g])
    assert together[3] == alone[0]


def test_sampling_spreads_over_the_distribution() -> None:
    params = [SamplingParams(temperature=1.0)]
    g = torch.Generator().manual_seed(1)
    seen = {sample(torch.zeros(1, 4), params, [g])[0] for _ in range(200)}
    assert seen == {0, 1, 2, 3}
