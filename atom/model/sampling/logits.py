"""Logits processors: penalties, logit_bias, allowed/banned tokens and min_tokens, as pure
tensor functions over a batch (each row with its own settings). Applied before temperature."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from atom.vocabulary.events import SamplingParams


@dataclass(frozen=True, slots=True, kw_only=True)
class RowContext:
    """What one row's processors need: its params and the tokens so far."""

    params: SamplingParams
    prompt_ids: tuple[int, ...] = ()  # only filled when params.needs_history
    output_ids: tuple[int, ...] = ()  # likewise
    num_output: int = 0
    eos_token_ids: frozenset[int] = frozenset()


def process(logits: torch.Tensor, rows: Sequence[RowContext]) -> torch.Tensor:
    """Return processed logits [batch, vocab]; `logits` is not modified."""
    out = logits.float().clone()
    if any(r.params.frequency_penalty or r.params.presence_penalty for r in rows):
        out = apply_frequency_presence(out, rows)
    if any(r.params.repetition_penalty != 1.0 for r in rows):
        out = apply_repetition(out, rows)
    if any(r.params.logit_bias for r in rows):
        apply_logit_bias(out, rows)
    banned = [(row, token) for row, r in enumerate(rows) for token in banned_ids(r)]
    if banned:
        out.index_put_(_indices(banned, out.device), torch.tensor(float("-inf"), device=out.device))
    if any(r.params.allowed_token_ids is not None for r in rows):
        out = keep_allowed(out, rows)
    for row, r in enumerate(rows):
        forced = reasoning_end_token(r)
        if forced is not None:  # the budget is spent: only the end marker's next token
            out[row] = float("-inf")
            out[row, forced] = 0.0
    return out


def reasoning_end_token(ctx: RowContext) -> int | None:
    """The token the reasoning budget forces now, if any: once the output has spent
    `max_tokens` inside the reasoning without its end marker, the marker's tokens one
    after the other (continuing a marker the model began itself)."""
    budget = ctx.params.reasoning_budget
    if budget is None or not budget.end_ids:
        return None
    start, end = budget.start_ids, budget.end_ids
    if ctx.output_ids[: len(start)] != start:
        return None  # the output did not open a reasoning block
    body = ctx.output_ids[len(start) :]
    if len(body) < budget.max_tokens or _contains(body, end):
        return None
    done = next(k for k in range(len(end) - 1, -1, -1) if k == 0 or body[-k:] == end[:k])
    return end[done]


def _contains(ids: tuple[int, ...], part: tuple[int, ...]) -> bool:
    return any(ids[i : i + len(part)] == part for i in range(len(ids) - len(part) + 1))


def counts_of(ids: Sequence[tuple[int, ...]], vocab: int, device: torch.device) -> torch.Tensor:
    """[batch, vocab] occurrence counts of each row's token ids."""
    longest = max((len(x) for x in ids), default=0)
    padded = torch.tensor([list(x) + [vocab] * (longest - len(x)) for x in ids], device=device)
    counts = torch.zeros(len(ids), vocab + 1, device=device)
    if longest:
        counts.scatter_add_(1, padded, torch.ones_like(padded, dtype=counts.dtype))
    return counts[:, :vocab]


def apply_frequency_presence(logits: torch.Tensor, rows: Sequence[RowContext]) -> torch.Tensor:
    """OpenAI semantics over the generated tokens: -= freq * count + presence * [count > 0]."""
    counts = counts_of([r.output_ids for r in rows], logits.shape[1], logits.device)
    freq = torch.tensor([r.params.frequency_penalty for r in rows], device=logits.device)
    pres = torch.tensor([r.params.presence_penalty for r in rows], device=logits.device)
    return logits - freq[:, None] * counts - pres[:, None] * (counts > 0).float()


def apply_repetition(logits: torch.Tensor, rows: Sequence[RowContext]) -> torch.Tensor:
    """transformers/vLLM semantics over prompt + output: positive logits / p, negative * p."""
    seen = counts_of([r.prompt_ids + r.output_ids for r in rows], logits.shape[1], logits.device)
    penalty = torch.tensor([r.params.repetition_penalty for r in rows], device=logits.device)
    penalty = penalty[:, None].expand_as(logits)
    scaled = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen > 0, scaled, logits)


def apply_logit_bias(logits: torch.Tensor, rows: Sequence[RowContext]) -> None:
    """Add each row's bias in place (one operation for the batch); OpenAI's ±100
    effectively bans or forces a token."""
    cells = [(row, token) for row, r in enumerate(rows) for token, _ in r.params.logit_bias]
    biases = [bias for r in rows for _, bias in r.params.logit_bias]
    values = torch.tensor(biases, dtype=logits.dtype, device=logits.device)
    logits.index_put_(_indices(cells, logits.device), values, accumulate=True)


def keep_allowed(logits: torch.Tensor, rows: Sequence[RowContext]) -> torch.Tensor:
    """Rows with `allowed_token_ids` keep those tokens only (-inf elsewhere)."""
    cells = [
        (row, token) for row, r in enumerate(rows) for token in (r.params.allowed_token_ids or ())
    ]
    limited = [r.params.allowed_token_ids is not None for r in rows]
    allowed = torch.zeros_like(logits, dtype=torch.bool)
    if cells:
        allowed.index_put_(_indices(cells, logits.device), torch.tensor(True, device=logits.device))
    outside = ~allowed & torch.tensor(limited, device=logits.device)[:, None]
    return logits.masked_fill(outside, float("-inf"))


def _indices(cells: Sequence[tuple[int, int]], device: torch.device) -> tuple[torch.Tensor, ...]:
    """(rows, columns) index tensors of (row, column) cells, for one scatter."""
    pairs = torch.tensor(cells, dtype=torch.long, device=device).reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]


def banned_ids(row: RowContext) -> set[int]:
    """Tokens this row may not sample now: EOS/stop ids before min_tokens, and the token
    that would complete a bad word."""
    params, banned = row.params, set()
    if row.num_output < params.min_tokens:
        banned |= set(row.eos_token_ids) | set(params.stop_token_ids)
    for word in params.bad_words:
        head = word[:-1]
        if not head or row.output_ids[len(row.output_ids) - len(head) :] == head:
            banned.add(word[-1])
    return banned
