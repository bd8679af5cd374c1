"""Sampling: pure tensor functions over a batch of processed logits, one generator per row.

Filters (temperature, top-k, top-p, min-p) are vectorized over the batch; the final
draw uses each sequence's own generator, so a seeded request samples the same
tokens whatever else shares its batch. Log-probabilities are taken after the
logits processors and temperature, before top-k/top-p/min-p truncation (vLLM's
"processed logprobs"); greedy rows use temperature 1 for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from atom.events import SamplingParams, TokenLogprobs


@dataclass(frozen=True, slots=True, kw_only=True)
class Sampled:
    token_id: int
    logprobs: TokenLogprobs | None = None


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


def apply_min_p(logits: torch.Tensor, min_ps: torch.Tensor) -> torch.Tensor:
    """Drop tokens whose probability is below `min_p` times the row's top probability."""
    probs = logits.softmax(dim=1)
    threshold = min_ps.unsqueeze(1) * probs.max(dim=1, keepdim=True).values
    return logits.masked_fill(probs < threshold, float("-inf"))


def sample(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    generators: Sequence[torch.Generator],
) -> list[Sampled]:
    """One token per row of processed `logits` [batch, vocab]; greedy rows take the argmax.

    Cost: an argmax for an all-greedy batch without logprobs; a vocabulary sort only
    when some row asks for top-k or top-p."""
    logits = logits.float()
    device = logits.device
    greedy = logits.argmax(dim=1).tolist()
    scaled = apply_temperature(logits, torch.tensor([p.temperature for p in params], device=device))
    tokens = greedy
    if not all(p.is_greedy for p in params):
        probs = _filtered(scaled, params).softmax(dim=1)
        tokens = [
            greedy[row] if p.is_greedy else _draw(probs[row], generators[row])
            for row, p in enumerate(params)
        ]
    if all(p.logprobs is None for p in params):
        return [Sampled(token_id=t) for t in tokens]
    return _with_logprobs(scaled.log_softmax(dim=1), params, tokens)


def _filtered(scaled: torch.Tensor, params: Sequence[SamplingParams]) -> torch.Tensor:
    device = scaled.device
    if any(p.top_k for p in params):
        scaled = apply_top_k(scaled, torch.tensor([p.top_k or 0 for p in params], device=device))
    if any(p.top_p < 1.0 for p in params):
        scaled = apply_top_p(scaled, torch.tensor([p.top_p for p in params], device=device))
    if any(p.min_p > 0.0 for p in params):
        scaled = apply_min_p(scaled, torch.tensor([p.min_p for p in params], device=device))
    return scaled


def _with_logprobs(
    logprobs: torch.Tensor, params: Sequence[SamplingParams], tokens: list[int]
) -> list[Sampled]:
    num_top = max(p.logprobs or 0 for p in params)
    top_values, top_ids = logprobs.topk(max(num_top, 1), dim=1)
    chosen = logprobs.gather(1, torch.tensor(tokens, device=logprobs.device)[:, None])[:, 0]
    out = []
    for row, (p, token) in enumerate(zip(params, tokens, strict=True)):
        if p.logprobs is None:
            out.append(Sampled(token_id=token))
            continue
        n = p.logprobs
        top = tuple(zip(top_ids[row, :n].tolist(), top_values[row, :n].tolist(), strict=True))
        entry = TokenLogprobs(logprob=float(chosen[row]), top=top)
        out.append(Sampled(token_id=token, logprobs=entry))
    return out


def _draw(probs: torch.Tensor, generator: torch.Generator) -> int:
    return int(torch.multinomial(probs, 1, generator=generator).item())
