"""TorchRunner: a transformers model behind the Runner protocol, one ragged forward per step."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from atom.model.attention import ATTN_IMPLEMENTATION, SeqKVCache, SeqSlice, StepMeta
from atom.model.runner import SeqChunk, StepPlan
from atom.model.sampler import sample


@dataclass(slots=True)
class _SeqState:
    cache: SeqKVCache
    generator: torch.Generator
    num_cached: int = 0


class TorchRunner:
    """Owns the model and each sequence's KV cache and generator. Not thread-safe: one caller."""

    def __init__(self, model: Any, *, eos_token_ids: frozenset[int], max_model_len: int) -> None:
        model.set_attn_implementation(ATTN_IMPLEMENTATION)
        self.model = model
        self.eos_token_ids = eos_token_ids
        self.max_model_len = max_model_len
        config = model.config.get_text_config()
        self._num_layers = int(config.num_hidden_layers)
        self._num_kv_heads = int(getattr(config, "num_key_value_heads", config.num_attention_heads))
        self._head_dim = int(
            getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        )
        self._param = next(model.parameters())
        self._seqs: dict[str, _SeqState] = {}

    def step(self, plan: StepPlan) -> Mapping[str, int]:
        with torch.inference_mode():
            states = [self._state_for(chunk) for chunk in plan.chunks]
            logits = self._forward(plan.chunks, states)
            picked = [(c, s) for c, s in zip(plan.chunks, states, strict=True) if c.needs_sample]
            if not picked:
                return {}
            rows = torch.tensor([i for i, c in enumerate(plan.chunks) if c.needs_sample])
            tokens = sample(
                logits[rows.to(logits.device)],
                [c.params for c, _ in picked],
                [s.generator for _, s in picked],
            )
        return {chunk.seq_id: token for (chunk, _), token in zip(picked, tokens, strict=True)}

    def _forward(self, chunks: tuple[SeqChunk, ...], states: list[_SeqState]) -> torch.Tensor:
        device = self._param.device
        slices: list[SeqSlice] = []
        ids: list[int] = []
        positions: list[int] = []
        q_start = 0
        for chunk, state in zip(chunks, states, strict=True):
            n = len(chunk.token_ids)
            state.cache.reserve(chunk.start_pos + n)
            slices.append(
                SeqSlice(q_start=q_start, q_len=n, start_pos=chunk.start_pos, cache=state.cache)
            )
            ids.extend(chunk.token_ids)
            positions.extend(range(chunk.start_pos, chunk.start_pos + n))
            state.num_cached = chunk.start_pos + n
            q_start += n
        last = torch.tensor([s.q_start + s.q_len - 1 for s in slices], device=device)
        out = self.model(
            input_ids=torch.tensor([ids], device=device),
            position_ids=torch.tensor([positions], device=device),
            use_cache=False,
            logits_to_keep=last,
            step_meta=StepMeta(slices=tuple(slices)),
        )
        return out.logits[0]

    def _state_for(self, chunk: SeqChunk) -> _SeqState:
        state = self._seqs.get(chunk.seq_id)
        if state is None:
            generator = torch.Generator(device=self._param.device)
            generator.manual_seed(chunk.seed)
            cache = SeqKVCache(
                num_layers=self._num_layers,
                num_kv_heads=self._num_kv_heads,
                head_dim=self._head_dim,
                like=self._param,
            )
            state = self._seqs[chunk.seq_id] = _SeqState(cache=cache, generator=generator)
        if chunk.start_pos != state.num_cached:
            raise ValueError(f"{chunk.seq_id}: start_pos {chunk.start_pos} != {state.num_cached}")
        return state

    def release(self, seq_id: str) -> None:
        self._seqs.pop(seq_id, None)

    def num_sequences(self) -> int:
        return len(self._seqs)
