"""FakePoolingRunner: a deterministic, torch-free PoolingRunner for tests.

An embedding is the normalized count of each token id modulo the dimensions (inputs
with the same tokens are identical, inputs sharing tokens are close); a score or
class logit is the share of the first segment's tokens found in the second.
"""

from __future__ import annotations

import math
import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from atom.model.catalog import ModelKind
from atom.vocabulary.events import PoolingInput


@dataclass(slots=True)
class FakePoolingRunner:
    kind: ModelKind = ModelKind.EMBED
    num_dimensions: int = 8
    step_delay_s: float = 0.0
    num_calls: int = 0  # how many batches it ran: batching across requests shows here

    def pool(self, inputs: Sequence[PoolingInput]) -> list[array[float]]:
        self.num_calls += 1
        if self.step_delay_s:
            time.sleep(self.step_delay_s)
        if self.kind is ModelKind.EMBED:
            return [self._embedding(i.token_ids) for i in inputs]
        return [self._logits(i) for i in inputs]

    def _embedding(self, token_ids: tuple[int, ...]) -> array[float]:
        counts = [0.0] * self.num_dimensions
        for token_id in token_ids:
            counts[token_id % self.num_dimensions] += 1.0
        norm = math.sqrt(sum(c * c for c in counts)) or 1.0
        return array("f", (c / norm for c in counts))

    def _logits(self, item: PoolingInput) -> array[float]:
        types = item.token_type_ids or (0,) * len(item.token_ids)
        first = {t for t, s in zip(item.token_ids, types, strict=True) if s == 0}
        second = {t for t, s in zip(item.token_ids, types, strict=True) if s == 1}
        overlap = len(first & second) / max(1, len(first))
        return array("f", [overlap * (k + 1) for k in range(self.num_dimensions)])
