from __future__ import annotations

import torch

from atom.model.grammar import apply_bitmask


def test_bitmask_keeps_exactly_the_set_bits_and_nothing_past_the_vocabulary() -> None:
    bitmask = torch.zeros(2, 2, dtype=torch.int32)
    bitmask[0, 0] = (1 << 0) | (1 << 5)
    bitmask[0, 1] = 1 << 1  # token 33
    bitmask[1, 1] = -(1 << 31)  # bit 31 of word 1, token 63: past the 40-token vocabulary
    logits = torch.zeros(2, 48)
    apply_bitmask(logits, bitmask, vocab=40)
    assert torch.isfinite(logits[0]).nonzero().flatten().tolist() == [0, 5, 33]
    assert not torch.isfinite(logits[1]).any()
