"""Sampling: pure tensor functions over a batch of processed logits, one generator per row.

Filters (temperature, top-k, top-p, min-p) are vectorized over the batch; the final
draw uses each sequence's own generator, so a seeded request samples the same
tokens whatever else shares its batch. Log-probabilities are taken after the
logits processors and temperature, before top-k/top-p/min-p truncation (vLLM's
"processed logprobs"); greedy rows use temperature 1 for them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from atom.model.runner import Sampled
from atom.vocabulary.events import SamplingParams, TokenLogprobs


def apply_temperature(logits: torch.Tensor, temperatures: torch.Tensor) -> torch.Tensor:
    """Divide each row by its temperature; rows at 0 (greedy) are left as they are."""
    safe = torch.where(temperatures > 0, temperatures, torch.ones_like(temperatures))
    return logits / safe.unsqueeze(1)


def truncate_sorted(
    values: torch.Tensor,
    params: Sequence[SamplingParams],
    log_mass: torch.Tensor | None = None,
) -> torch.Tensor:
    """Apply top-k, top-p and min-p to candidates sorted in descending order (min-p alone
    needs no order); masked candidates become -inf. `log_mass`: each row's logsumexp over
    the whole vocabulary when the candidates are only its head (top-p's probabilities
    are of the whole row); without it they are normalized over the candidates (after
    top-k: vLLM's order, top-p over what top-k kept)."""
    device = values.device
    rank = torch.arange(values.shape[1], device=device)[None, :]
    top_ks = torch.tensor([p.top_k or values.shape[1] for p in params], device=device)
    values = values.masked_fill(rank >= top_ks[:, None], float("-inf"))
    probs = values.softmax(dim=1) if log_mass is None else (values - log_mass[:, None]).exp()
    if any(p.top_p < 1.0 for p in params):
        top_ps = torch.tensor([p.top_p for p in params], device=device)
        mass_before = probs.cumsum(dim=1) - probs
        values = values.masked_fill((mass_before >= top_ps[:, None]) & (rank > 0), float("-inf"))
    if any(p.min_p > 0.0 for p in params):
        min_ps = torch.tensor([p.min_p for p in params], device=device)
        top = probs.max(dim=1, keepdim=True).values  # works sorted or not
        values = values.masked_fill(probs < min_ps[:, None] * top, float("-inf"))
    return values


HEADS = (64, 1024)  # the sorted heads top-p tries before it bins whole rows
NUM_BINS = 4096  # top-p over a whole row: its values binned, only the cut's bin sorted
SPAN = 64.0  # the logit range below a row's largest that the bins cover


def candidates(
    scaled: torch.Tensor, params: Sequence[SamplingParams]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None:
    """(values, token ids, the rows' log-mass when the values are only their sorted head)
    for rows that share one candidate rule (see `_rule`): the k_max largest (partial
    sort) when all have top-k; for top-p the smallest sorted head that holds every row's
    top-p mass (what lies past it is cut anyway), None when no head does (`top_p_whole`
    cuts the whole rows; a vocabulary no larger than a head is sorted); else the
    vocabulary in its own order."""
    rule = _rule(params[0])
    if rule == "top_k":
        values, ids = scaled.topk(min(scaled.shape[1], max(p.top_k or 0 for p in params)), dim=1)
        return values, ids, None
    if rule == "sorted":
        log_mass = scaled.logsumexp(dim=1)
        top_ps = torch.tensor([p.top_p for p in params], device=scaled.device)
        for k in HEADS:
            if k >= scaled.shape[1]:
                break
            values, ids = scaled.topk(k, dim=1)
            held = (values - log_mass[:, None]).exp().sum(dim=1)
            if bool((held >= top_ps).all()):
                return values, ids, log_mass
            if bool((held < top_ps / 2).any()):
                break  # a flat row: a larger head would rarely hold it either
        if scaled.shape[1] <= HEADS[-1]:  # a small vocabulary: sorted whole at once
            values, ids = scaled.sort(dim=1, descending=True)
            return values, ids, log_mass
        return None
    vocab = torch.arange(scaled.shape[1], device=scaled.device).expand_as(scaled)
    return scaled, vocab, None


def top_p_whole(scaled: torch.Tensor, params: Sequence[SamplingParams]) -> torch.Tensor:
    """Top-p, then min-p, over whole rows in vocabulary order (cut tokens -inf), with no
    sort of a row: each row's values go into NUM_BINS equal bins from its largest down,
    the bins' masses say in which bin the top-p mass is reached, the bins above it are
    kept and those below cut, and only that bin's few tokens are sorted to place the cut
    in it. It keeps what a whole sort keeps (up to float rounding in the sums)."""
    device, inf = scaled.device, float("inf")
    log_mass = scaled.logsumexp(dim=1, keepdim=True)
    probs = (scaled - log_mass).exp()
    top = scaled.max(dim=1, keepdim=True).values
    # (the bins span the values above top - SPAN; lower ones, banned -inf ones among them,
    # share the last bin, where a cut is rare: such tokens hold no mass to speak of)
    low = scaled.clamp(min=top - SPAN).amin(dim=1, keepdim=True)
    width = ((top - low) / NUM_BINS).clamp(min=torch.finfo(scaled.dtype).tiny)
    bins = ((top - scaled) / width).clamp(max=NUM_BINS - 1).long()  # 0: the largest values
    mass = torch.zeros(scaled.shape[0], NUM_BINS, device=device).scatter_add_(1, bins, probs)
    reached = mass.cumsum(dim=1)
    top_ps = torch.tensor([p.top_p for p in params], device=device)[:, None]
    cut_bin = (reached < top_ps).sum(dim=1, keepdim=True).clamp(max=NUM_BINS - 1)
    above = reached.gather(1, cut_bin) - mass.gather(1, cut_bin)  # the bins before it
    in_cut = bins == cut_bin
    values, ids = scaled.masked_fill(~in_cut, -inf).topk(int(in_cut.sum(dim=1).max()), dim=1)
    bin_probs = (values - log_mass).exp()
    keep = ((above + bin_probs.cumsum(dim=1) - bin_probs) < top_ps) & torch.isfinite(values)
    keep[:, 0] |= cut_bin[:, 0] == 0  # a row's most likely token is always kept
    kept = (bins < cut_bin) | torch.zeros_like(in_cut).scatter_(1, ids, keep)
    if any(p.min_p > 0.0 for p in params):
        min_ps = torch.tensor([p.min_p for p in params], device=device)[:, None]
        kept &= probs >= min_ps * (top - log_mass).exp()
    return scaled.masked_fill(~kept, -inf)


def _rule(p: SamplingParams) -> str:
    """A row's candidate order depends on its own params only, so a seeded row draws the
    same token whatever shares its batch."""
    if p.top_k:
        return "top_k"
    return "sorted" if p.top_p < 1.0 else "vocab"


def sample(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    generators: Sequence[torch.Generator],
) -> list[Sampled]:
    """One token per row of processed `logits` [batch, vocab]; greedy rows take the argmax.

    Cost: an argmax for an all-greedy batch without logprobs; a partial sort when every
    sampling row has top-k, or (top-p) when a sorted head of 64 or 1024 holds the rows'
    top-p mass; when none does, the rows binned by value and one bin sorted. Everything
    stays on the logits' device until one copy to the host at the end (the ids, and the
    logprobs where asked)."""
    logits = logits.float()
    device = logits.device
    tokens = logits.argmax(dim=1)
    if all(p.is_greedy and p.logprobs is None for p in params):
        return [Sampled(token_id=t) for t in tokens.tolist()]
    scaled = apply_temperature(logits, torch.tensor([p.temperature for p in params], device=device))
    if not all(p.is_greedy for p in params):
        sampling = torch.tensor([not p.is_greedy for p in params], device=device)
        tokens = torch.where(sampling, _draw(scaled, params, generators), tokens)
    if all(p.logprobs is None for p in params):
        return [Sampled(token_id=t) for t in tokens.tolist()]
    return _with_logprobs(scaled.log_softmax(dim=1), params, tokens)


def _draw(
    scaled: torch.Tensor, params: Sequence[SamplingParams], generators: Sequence[torch.Generator]
) -> torch.Tensor:
    """A draw per sampling row from its truncated distribution, rows grouped by candidate
    rule (greedy rows: 0)."""
    drawn = torch.zeros(len(params), dtype=torch.long, device=scaled.device)
    groups: dict[str, list[int]] = {}
    for row, p in enumerate(params):
        if not p.is_greedy:
            groups.setdefault(_rule(p), []).append(row)
    for rule, rows in groups.items():
        group = [params[r] for r in rows]
        found = candidates(scaled[rows], group)
        if found is None:  # top-p past every sorted head
            kept = top_p_whole(scaled[rows], group)
        else:
            values, ids, log_mass = found
            kept = truncate_sorted(values, group, log_mass)
            if rule != "vocab":  # back to vocabulary order: the noise belongs to token ids
                kept = torch.full_like(scaled[rows], float("-inf")).scatter_(1, ids, kept)
        drawn[rows] = gumbel_max(kept, [generators[r] for r in rows])
    return drawn


BLOCK = 256  # tokens per block of the two-level draw


def gumbel_max(logits: torch.Tensor, generators: Sequence[torch.Generator]) -> torch.Tensor:
    """argmax(logit + Gumbel noise) per row: an exact draw from softmax(logits), whose
    noise is tied to token ids, so a logit moved by float rounding (another batch, a
    prefix-cache hit) changes the token only when two tokens' noisy scores tie within
    that rounding (~1e-5 here). An inverse-CDF draw over a sorted row flipped at any
    CDF boundary or sort-order swap near the uniform (several percent per token on
    flat distributions). Two levels keep the noise small: a block of BLOCK token ids by
    its log-mass, then a token within it; each row's generator gives
    blocks + BLOCK uniforms per step, whatever the batch."""
    rows, vocab = logits.shape
    num_blocks = -(-vocab // BLOCK)
    padded = torch.nn.functional.pad(logits, (0, num_blocks * BLOCK - vocab), value=float("-inf"))
    padded = padded.view(rows, num_blocks, BLOCK)
    uniforms = torch.stack(
        [torch.rand(num_blocks + BLOCK, generator=g, device=g.device) for g in generators]
    ).to(logits.device)
    gumbel = -torch.log(-torch.log(uniforms.clamp(min=torch.finfo(uniforms.dtype).tiny)))
    blocks = (padded.logsumexp(dim=2) + gumbel[:, :num_blocks]).argmax(dim=1)
    within = padded[torch.arange(rows, device=logits.device), blocks]
    picks = (within + gumbel[:, num_blocks:]).argmax(dim=1)
    return blocks * BLOCK + picks


def _with_logprobs(
    logprobs: torch.Tensor, params: Sequence[SamplingParams], tokens: torch.Tensor
) -> list[Sampled]:
    """The tokens with their logprobs and top alternatives, copied to the host at once:
    one float64 row a token (its id, logprob, then the top ids and logprobs; ids are
    exact in float64)."""
    num_top = max(max(p.logprobs or 0 for p in params), 1)
    top_values, top_ids = logprobs.topk(num_top, dim=1)
    chosen = logprobs.gather(1, tokens[:, None])
    parts = [tokens[:, None], chosen, top_ids, top_values]
    packed = torch.cat([part.double() for part in parts], dim=1)
    out = []
    for p, row in zip(params, packed.tolist(), strict=True):
        token = int(row[0])
        if p.logprobs is None:
            out.append(Sampled(token_id=token))
            continue
        n = p.logprobs
        ids, values = row[2 : 2 + n], row[2 + num_top : 2 + num_top + n]
        top = tuple((int(i), v) for i, v in zip(ids, values, strict=True))
        out.append(Sampled(token_id=token, logprobs=TokenLogprobs(logprob=row[1], top=top)))
    return out


def prompt_logprobs(
    raw_logits: torch.Tensor, next_ids: Sequence[int], num_top: int
) -> tuple[TokenLogprobs, ...]:
    """Each prompt token's logprob and rank under the raw (unprocessed) logits of the
    position before it, with the `num_top` most likely alternatives."""
    logprobs = raw_logits.float().log_softmax(dim=1)
    ids = torch.tensor(list(next_ids), device=logprobs.device)[:, None]
    chosen = logprobs.gather(1, ids)
    ranks = (logprobs > chosen).sum(dim=1) + 1
    top_values, top_ids = logprobs.topk(max(num_top, 1), dim=1)
    return tuple(
        TokenLogprobs(
            logprob=float(chosen[i, 0]),
            rank=int(ranks[i]),
            top=tuple(
                zip(top_ids[i, :num_top].tolist(), top_values[i, :num_top].tolist(), strict=True)
            ),
        )
        for i in range(len(next_ids))
    )
