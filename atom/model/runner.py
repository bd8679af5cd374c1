"""The Runner protocol: what the Batcher asks of a model, and the step plan it hands over.

The Scheduler owns sequence bookkeeping (how many tokens each sequence has, when it
ends; the Batcher alone calls it); a Runner owns per-sequence device state (KV
cache, sampling generator) and turns one StepPlan into the sampled tokens of each
scheduled sequence: one, or with draft tokens the drafts it accepted and one more.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from atom.model.scheduling.kv_blocks import BlockMoves
from atom.vocabulary.events import SamplingParams, TokenLogprobs
from atom.vocabulary.images import PromptImage

if TYPE_CHECKING:
    from atom.model.kv_tier import DiskTier
    from atom.model.lora.adapter import LoraAdapter
    from atom.model.vision.prompter import MediaPrompter


@dataclass(frozen=True, slots=True, kw_only=True)
class Sampled:
    token_id: int
    logprobs: TokenLogprobs | None = None
    prompt_logprobs: tuple[TokenLogprobs, ...] | None = None  # prompt tokens 1.., if asked


@dataclass(frozen=True, slots=True, kw_only=True)
class SeqChunk:
    """Feed `token_ids` to sequence `seq_id`, whose cache already holds `start_pos` tokens.

    When `needs_sample`, the runner samples the sequence's next token from the last
    position (a prefill chunk that does not reach the prompt's end needs none, so a
    seeded generator advances the same way however the prompt was split). `seed`
    seeds the sequence's own generator when the runner first sees it. `block_ids`
    is the sequence's block table; it covers every position below
    `start_pos + len(token_ids)`, and positions below `start_pos` are already there.

    The last `num_draft_tokens` of `token_ids` are proposals (speculative decoding):
    the runner samples at the position before each draft and after the last, keeps
    each draft while it equals the token sampled there, and returns those tokens up
    to and including the first that differs (or the one after the last draft).
    """

    seq_id: str
    token_ids: tuple[int, ...]
    start_pos: int
    block_ids: tuple[int, ...] = ()
    params: SamplingParams
    seed: int
    needs_sample: bool = True
    num_draft_tokens: int = 0
    num_prompt_tokens: int = 0
    prompt_ids: tuple[int, ...] = ()  # filled only when params.needs_history
    output_ids: tuple[int, ...] = ()  # likewise
    lora: str | None = None  # the LoRA adapter the sequence runs with (None: the base model)
    # The prompt's images that begin before this chunk's end: those with placeholders in
    # it get their rows placed; grid-following rotary positions need all of them.
    images: tuple[PromptImage, ...] = ()

    @property
    def draft_ids(self) -> tuple[int, ...]:
        return self.token_ids[len(self.token_ids) - self.num_draft_tokens :]


@dataclass(frozen=True, slots=True, kw_only=True)
class StepPlan:
    """One step: the chunks, after the block `moves` (atom/model/scheduling/kv_blocks.py);
    a plan with no chunks only moves blocks (a sleeping or stopping cache saved)."""

    chunks: tuple[SeqChunk, ...]
    moves: BlockMoves = field(default_factory=BlockMoves)

    @property
    def num_tokens(self) -> int:
        return sum(len(c.token_ids) for c in self.chunks)


def slot_of(block_ids: tuple[int, ...], pos: int, block_size: int) -> int:
    """The flat KV slot of position `pos` in a sequence with this block table."""
    return block_ids[pos // block_size] * block_size + pos % block_size


def padded_tables(tables: Sequence[tuple[int, ...]]) -> list[list[int]]:
    """Block tables as rows of one width, the shorter ones padded with block 0 (a decode
    kernel reads no block past a row's length)."""
    width = max(len(table) for table in tables)
    return [[*table, *[0] * (width - len(table))] for table in tables]


class Runner(Protocol):
    """A model behind one ragged step. Called from one worker thread at a time.

    The runner owns the KV tensors (`num_blocks` blocks of `block_size` slots);
    the Scheduler's KVCacheManager decides which blocks each sequence uses."""

    eos_token_ids: frozenset[int]
    max_model_len: int
    num_blocks: int
    block_size: int

    def step(self, plan: StepPlan) -> Mapping[str, tuple[Sampled, ...]]:
        """Run every chunk in one forward; return the sampled tokens (and logprobs when
        asked) of each chunk that `needs_sample`, by seq_id: one token, or for a chunk
        with drafts the accepted drafts and the token after them."""
        ...

    def release(self, seq_id: str) -> None:
        """Forget a finished sequence (its generator); unknown ids are ignored."""
        ...

    def num_sequences(self) -> int:
        """How many sequences hold state (0 once everything is released)."""
        ...

    def add_lora(self, adapter: LoraAdapter) -> None:
        """Chunks naming `adapter.name` run with it from the next step on (a new adapter
        of a name replaces the old)."""
        ...

    def remove_lora(self, name: str) -> None:
        """Forget an adapter no sequence runs with; unknown names are ignored."""
        ...

    def replace_weights(self, weights: Any) -> None:
        """Serve from `weights` (what `Runtime.load_weights` made) from the next step on;
        the KV cache is kept, so running sequences continue."""
        ...

    def sleep(self, level: int) -> None:
        """Free the KV cache and, at level 2, drop the weights (level 1 on an accelerator
        moves them to host memory). Called with no sequence alive."""
        ...

    def wake_up(self, weights: Any | None) -> None:
        """Undo `sleep`: a fresh KV cache, the weights back (`weights` after level 2)."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Runtime:
    """What loading produces: the runner, its tokenizer, and the context limit."""

    runner: Runner
    tokenizer: Any
    max_model_len: int
    precompile: Callable[[str], object] | None = None  # warms the runner's grammar cache
    description: Mapping[str, str] = field(default_factory=dict)  # device, dtype, kernels…
    # New weights of the same architecture from a local path, for `Runner.replace_weights`
    # (ValueError when they do not fit the model). Called in a worker thread.
    load_weights: Callable[[str], Any] | None = None
    draft: Runner | None = None  # the draft model speculative decoding runs (its own cache)
    # A PEFT LoRA folder read for this model, as (name, path) → LoraAdapter (ValueError
    # when it does not fit); None when the model's forward cannot apply adapters.
    read_lora: Callable[[str, str], LoraAdapter] | None = None
    # A vision-language model's prompt builder (conversations with images); None: text only.
    images: MediaPrompter | None = None
    disk: DiskTier | None = None  # the prefix cache's disk tier (--prefix-cache-dir)
