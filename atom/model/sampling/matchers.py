"""Structured output in the runner: one llguidance matcher per constrained sequence, its
token bitmask applied to that row's logits before sampling, advanced with each token.

Each distinct grammar is compiled once; request actors call `compile` in a worker
thread before submitting, so neither the event loop nor the Batcher's steps wait for a
compile, and the step only copies the compiled matcher."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import llguidance
import llguidance.hf
import structlog
import torch

from atom.model.runner import SeqChunk

log = structlog.get_logger(__name__)


class GrammarMatchers:
    """Owned by the TorchRunner; called from its one worker thread only."""

    def __init__(self, tokenizer: Any, *, max_compiled: int = 64) -> None:
        self._tokenizer = tokenizer
        self._llt: Any = None  # built on first use (it walks the whole vocabulary)
        self._compiled: OrderedDict[str, Any] = OrderedDict()  # grammar → fresh matcher, LRU
        self._max_compiled = max_compiled
        self._lock = threading.Lock()  # `compile` runs in request threads and in the step
        self._matchers: dict[str, Any] = {}

    def constrain(self, chunks: Sequence[SeqChunk], logits: torch.Tensor) -> None:
        """Mask, in place, the rows (one per chunk) of sequences with a grammar that is in
        force: from the first output token, or after the reasoning section ends."""
        rows = [i for i, c in enumerate(chunks) if self._is_active(c)]
        if not rows:
            return
        matchers = [self._matcher(chunks[i]) for i in rows]
        vocab = self._tokenizer_info().vocab_size
        # llguidance's bitmask, one bit per token; written here, not by llguidance.torch,
        # whose import compiles a kernel we do not use (seconds of every start-up)
        bitmask = torch.full((len(rows), (vocab + 31) // 32), -1, dtype=torch.int32)
        for slot, matcher in enumerate(matchers):
            row = bitmask[slot]
            matcher.unsafe_compute_mask_ptr(row.data_ptr(), row.numel() * row.element_size())
        index = torch.tensor(rows, device=logits.device)
        subset = logits[index]
        apply_bitmask(subset, bitmask, vocab)
        logits[index] = subset

    def _is_active(self, chunk: SeqChunk) -> bool:
        if chunk.params.grammar is None:
            return False
        if chunk.seq_id in self._matchers or not chunk.params.grammar_after:
            return True
        marker = chunk.params.grammar_after
        return any(
            tuple(chunk.output_ids[end - len(marker) : end]) == marker
            for end in range(len(marker), len(chunk.output_ids) + 1)
        )

    def accept(self, chunk: SeqChunk, token_id: int) -> None:
        matcher = self._matchers.get(chunk.seq_id)
        if matcher is not None and not matcher.consume_token(token_id):
            log.warning("grammar_rejected_token", seq_id=chunk.seq_id, error=matcher.get_error())

    def release(self, seq_id: str) -> None:
        self._matchers.pop(seq_id, None)

    def _matcher(self, chunk: SeqChunk) -> Any:
        matcher = self._matchers.get(chunk.seq_id)
        if matcher is None:
            compiled = self.compile(chunk.params.grammar or "")
            matcher = self._matchers[chunk.seq_id] = compiled.deep_copy()
        return matcher

    def compile(self, grammar: str) -> Any:
        """The compiled matcher of `grammar` (LRU cache; sequences get copies). Thread-safe."""
        with self._lock:
            compiled = self._compiled.get(grammar)
            if compiled is not None:
                self._compiled.move_to_end(grammar)
                return compiled
            llt = self._tokenizer_info()
        compiled = llguidance.LLMatcher(llt, grammar)  # the slow part, outside the lock
        with self._lock:
            self._compiled[grammar] = compiled
            if len(self._compiled) > self._max_compiled:
                self._compiled.popitem(last=False)
        return compiled

    def _tokenizer_info(self) -> Any:
        if self._llt is None:  # built once, under the lock
            self._llt = llguidance.hf.from_tokenizer(self._tokenizer)
        return self._llt


def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor, vocab: int) -> None:
    """Set to -inf, in place, every logit whose bit is clear (32 token ids per int32 word),
    and every column past the tokenizer's vocabulary. A plain torch kernel: llguidance's own
    uses torch.compile, which costs seconds on the first call and a compiler at run time."""
    shifts = torch.arange(32, dtype=torch.int32, device=logits.device)
    bits = (bitmask.to(logits.device)[:, :, None] >> shifts) & 1
    allowed = bits.reshape(bitmask.shape[0], -1)[:, :vocab].bool()
    logits[:, :vocab].masked_fill_(~allowed, float("-inf"))
    logits[:, vocab:] = float("-inf")
