from __future__ import annotations

import torch

from atom.model.sampling.matchers import apply_bitmask


def test_bitmask_keeps_exactly_the_set_bits_and_nothing_past_the_vocabulary() -> None:
    bitmask = torch.zeros(2, 2, dtype=torch.int32)
    bitmask[0, 0] = (1 << 0) | (1 << 5)
    bitmask[0, 1] = 1 << 1  # token 33
    bitmask[1, 1] = -(1 << 31)  # bit 31 of word 1, token 63: past the 40-token vocabulary
    logits = torch.zeros(2, 48)
    apply_bitmask(logits, bitmask, vocab=40)
    assert torch.isfinite(logits[0]).nonzero().flatten().tolist() == [0, 5, 33]
    assert not torch.isfinite(logits[1]).any()


def test_constraint_starts_after_the_reasoning_section(tokenizer) -> None:  # type: ignore[no-untyped-def]
    from atom.model.runner import SeqChunk
    from atom.model.sampling.matchers import GrammarMatchers
    from atom.text import constraints
    from atom.vocabulary.events import SamplingParams

    end = tuple(tokenizer.encode("</think>", add_special_tokens=False))
    params = SamplingParams(grammar=constraints.choice(["yes", "no"]), grammar_after=end)
    matchers = GrammarMatchers(tokenizer)

    def chunk(seq_id: str, output: tuple[int, ...]) -> SeqChunk:
        return SeqChunk(
            seq_id=seq_id,
            token_ids=(output[-1],),
            start_pos=10,
            params=params,
            seed=0,
            output_ids=output,
        )

    thinking = torch.zeros(1, 49152)
    matchers.constrain([chunk("a", (5, 6))], thinking)
    assert torch.isfinite(thinking).all()  # still reasoning: unconstrained
    done = torch.zeros(2, 49152)
    matchers.constrain([chunk("a", (5, *end)), chunk("b", (7, *end))], done)
    allowed = {tokenizer.decode([int(i)]) for i in torch.isfinite(done[0]).nonzero().flatten()}
    assert allowed and all("yes".startswith(t) or "no".startswith(t) for t in allowed)
    assert torch.equal(torch.isfinite(done[0]), torch.isfinite(done[1]))
    assert len(matchers._compiled) == 1  # one compiled grammar, copied per sequence
