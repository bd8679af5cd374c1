"""Sampling: pure tensor functions over a batch of logits, one generator per sequence.

Filters (temperature, top-k, top-p) are vectorized over the batch; the final draw
uses each sequence's own generator, so a seeded request samples the same tokens
whatever else shares its batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from atom.events import SamplingParams


def apply_temperature(logits: torch.Tensor, temperatures: torch.Tensor) -> torch.Tensor:
    """Divide each row by its temperature; rows at 0 (greedy) are left as they are."""
    safe = torch.where(temperatures > 0, temperatures, torch.ones_like(temperatures))
    return logits / safe.unsqueeze(1)


def apply_top_k(logits: torch.Tensor, top_ks: torch.Tensor) -> torch.Tensor:
    """Keep each row's `k` largest logits (k <= 0 means no limit)."""
    vocab = logits.shape[1]
    ks = torch.where(top_ks > 0, top_ks.clamp(max=vocab), torch.full_like(top_ks, vocab))
    sorted_desc = logits.sort(dim=1, descending=True).values
    kth = sorted_desc.gather(1, (ks - 1).unsqueeze(1))
    return logits.masked_fill(logits < kth, float("-inf"))


def apply_top_p(logits: torch.Tensor, top_ps: torch.Tensor) -> torch.Tensor:
    """Keep each row's smallest set of tokens whose probability mass reaches `p`."""
    sorted_logits, order = logits.sort(dim=1, descending=True)
    probs = sorted_logits.softmax(dim=1)
    mass_before = probs.cumsum(dim=1) - probs
    drop_sorted = mass_before >= top_ps.unsqueeze(1)
    drop_sorted[:, 0] = False  # the most likely token always survives
    drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def sample(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    generators: Sequence[torch.Generator],
) -> list[int]:
    """One token per row of `logits` (shape [batch, vocab]); greedy rows take the argmax.

    Cost: an argmax for an all-greedy batch; a sort of the vocabulary per filtered
    batch only when some row asks for top-k or top-p."""
    logits = logits.float()
    greedy = logits.argmax(dim=1).tolist()
    if all(p.is_greedy for p in params):
        return greedy
    device = logits.device
    temperatures = torch.tensor([p.temperature for p in params], device=device)
    filtered = apply_temperature(logits, temperatures)
    if any(p.top_k for p in params):
        filtered = apply_top_k(
            filtered, torch.tensor([p.top_k or 0 for p in params], device=device)
        )
    if any(p.top_p < 1.0 for p in params):
        filtered = apply_top_p(filtered, torch.tensor([p.top_p for p in params], device=device))
    probs = filtered.softmax(dim=1)
    return [
        greedy[row] if p.is_greedy else _draw(probs[row], generators[row])
        for row, p in enumerate(params)
    ]


def _draw(probs: torch.Tensor, generator: torch.Generator) -> int:
    return int(torch.multinomial(probs, 1, generator=generator).item())
