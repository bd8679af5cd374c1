"""TorchRunner: a transformers model behind the Runner protocol, one ragged forward per step."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import structlog
import torch
from torch.profiler import record_function

from atom.model.forward.attention import (
    ATTN_IMPLEMENTATION,
    DecodeGroup,
    DecodeKernel,
    GatherDecode,
    KernelDecode,
    PrefillSlice,
    StepMeta,
)
from atom.model.forward.graphs import DecodeGraphs, GraphPlan
from atom.model.kv_tier import DiskTier
from atom.model.lora.adapter import LoraAdapter
from atom.model.lora.mixing import LoraSlots
from atom.model.paged_cache import PagedCache
from atom.model.runner import Sampled, SeqChunk, StepPlan, padded_tables, slot_of
from atom.model.sampling.logits import RowContext, process
from atom.model.sampling.matchers import GrammarMatchers
from atom.model.sampling.sampler import prompt_logprobs, sample
from atom.model.scheduling.kv_blocks import BlockMoves
from atom.model.vision.encoder import MediaEncoder
from atom.model.vision.placement import ImageRows

log = structlog.get_logger(__name__)


def _trace_range(name: str) -> AbstractContextManager[object]:
    """A named range in the trace while POST /start_profile runs (a no-op otherwise)."""
    return record_function(name) if torch.autograd._profiler_enabled() else nullcontext()


class TorchRunner:
    """Owns the model, the paged KV tensor and each sequence's generator. One caller at a time."""

    def __init__(
        self,
        model: Any,
        *,
        eos_token_ids: frozenset[int],
        max_model_len: int,
        num_blocks: int,
        block_size: int,
        tokenizer: Any = None,
        decode_kernel: DecodeKernel | None = None,
        kv_dtype: torch.dtype | None = None,
        max_loras: int = 1,
        max_lora_rank: int = 16,
        lora_kernel: Callable[..., None] | None = None,
        vision: MediaEncoder | None = None,
        disk: DiskTier | None = None,
        graph_plan: GraphPlan | None = None,
    ) -> None:
        """`vision`: a vision-language model's encoder (chunks with images need one);
        `disk`: the prefix cache's disk tier, which saved blocks are written to;
        `graph_plan`: decode steps as CUDA graphs (atom/model/forward/graphs.py)."""
        model.set_attn_implementation(ATTN_IMPLEMENTATION)
        self.model: Any = model  # None while asleep at level 2
        self.eos_token_ids = eos_token_ids
        self.max_model_len = max_model_len
        self.num_blocks = num_blocks
        self.block_size = block_size
        param = next(model.parameters())
        self._device = param.device
        self._kv_dtype = kv_dtype or param.dtype
        self.kv_cache: PagedCache | None = None  # None while asleep
        self._decode_kernel = decode_kernel  # None: decode attention gathers, then SDPA
        self._images = None if vision is None else ImageRows(vision)
        self._graph_plan = graph_plan if vision is None else None
        self.graphs: DecodeGraphs | None = None  # None: every step eager
        self._allocate_kv_cache()
        self._generators: dict[str, torch.Generator] = {}
        self.grammars = GrammarMatchers(tokenizer)
        self.loras = LoraSlots(max_loras, max_lora_rank, self._device, lora_kernel)
        self.disk = disk

    def _allocate_kv_cache(self) -> None:
        scratch = 1 if self._graph_plan is not None else 0  # the graphs' padding rows'
        self.kv_cache = PagedCache(
            self.model.config,
            self.num_blocks + scratch,
            self.block_size,
            self._kv_dtype,
            self._device,
        )
        self._capture_graphs()

    def _capture_graphs(self) -> None:
        """(Again) capture the decode graphs over today's weights and cache; a capture
        that fails leaves every step eager, said in the log."""
        plan, kernel, self.graphs = self._graph_plan, self._decode_kernel, None
        if plan is None or kernel is None or self.kv_cache is None or self.model is None:
            return
        graphs = DecodeGraphs(
            self.model,
            self.kv_cache.layers,
            kernel,
            block_size=self.block_size,
            max_blocks=-(-self.max_model_len // self.block_size),
            scratch_block=self.num_blocks,
            device=self._device,
        )
        try:
            graphs.capture(plan.sizes, plan.capture)
        except RuntimeError as error:
            log.warning("decode_graphs_failed", error=str(error))
            return
        self.graphs = graphs

    def add_lora(self, adapter: LoraAdapter) -> None:
        self.loras.add(adapter)

    def remove_lora(self, name: str) -> None:
        self.loras.remove(name)

    def replace_weights(self, weights: Any) -> None:
        weights.set_attn_implementation(ATTN_IMPLEMENTATION)
        self.model = weights
        self._capture_graphs()  # the graphs read the old weights' addresses

    def sleep(self, level: int) -> None:
        self.kv_cache = self.graphs = None
        if level >= 2:
            self.model = None
        elif self._device.type != "cpu":
            self.model.to("cpu")  # host memory holds the weights meanwhile
        if self._device.type == "cuda":
            torch.cuda.empty_cache()

    def wake_up(self, weights: Any | None) -> None:
        if weights is not None:
            self.replace_weights(weights)
        elif self._device.type != "cpu":
            self.model.to(self._device)
        self._allocate_kv_cache()

    def step(self, plan: StepPlan) -> Mapping[str, tuple[Sampled, ...]]:
        with torch.inference_mode():
            self._move_blocks(plan.moves)
            if not plan.chunks:
                return {}
            picked = [c for c in plan.chunks if c.needs_sample]
            keep = self._keep(plan.chunks)
            with _trace_range("atom.forward"):  # also when nothing samples: it fills the cache
                logits = self._forward(plan.chunks, keep)
            if not picked:
                return {}
            with _trace_range("atom.sampling"):
                return self._sample(picked, logits, keep)

    def _move_blocks(self, moves: BlockMoves) -> None:
        """Before the forward: blocks saved to the disk tier, copied, loaded from it."""
        cache = self.kv_cache
        if cache is None:
            return
        if self.disk is not None:
            for block_id, block_hash in moves.saves:
                self.disk.write(block_hash, cache.block_bytes(block_id))
        if moves.copies:
            cache.copy(moves.copies)
        for block_id, payload in moves.loads:
            cache.fill(block_id, payload)

    def _sample(
        self, picked: list[SeqChunk], logits: torch.Tensor, keep: dict[str, list[int]]
    ) -> Mapping[str, tuple[Sampled, ...]]:
        """The tokens of every sampling chunk, position by position: every chunk samples
        its next token; a chunk with drafts samples again after each draft that equals
        the token sampled before it. Each position samples exactly as a one-token step
        there would (processors over the history so far, the grammar's state, the
        sequence's generator): drafts change how many forwards run, not how a token is
        chosen from its logits."""
        runs: dict[str, list[Sampled]] = {c.seq_id: [] for c in picked}
        alive = picked
        while alive:
            tokens = self._sample_next(alive, runs, logits, keep)
            for chunk, token in zip(alive, tokens, strict=True):
                self.grammars.accept(chunk, token.token_id)
                if not runs[chunk.seq_id]:
                    token = self._with_prompt_logprobs(chunk, token, logits, keep)
                runs[chunk.seq_id].append(token)
            alive = [c for c in alive if _draft_matches(c, runs[c.seq_id])]
        return {seq_id: tuple(run) for seq_id, run in runs.items()}

    def _sample_next(
        self,
        chunks: list[SeqChunk],
        runs: dict[str, list[Sampled]],
        logits: torch.Tensor,
        keep: dict[str, list[int]],
    ) -> list[Sampled]:
        """The token after each chunk's run so far, from the logits of that position."""
        rows = [keep[c.seq_id][len(runs[c.seq_id]) - 1 - c.num_draft_tokens] for c in chunks]
        contexts = [self._row(c, tuple(t.token_id for t in runs[c.seq_id])) for c in chunks]
        processed = process(logits[torch.tensor(rows, device=logits.device)], contexts)
        self.grammars.constrain(chunks, processed)
        generators = [self._generator(c) for c in chunks]
        return sample(processed, [c.params for c in chunks], generators)

    @staticmethod
    def _keep(chunks: tuple[SeqChunk, ...]) -> dict[str, list[int]]:
        """Rows of the flat batch whose logits are needed, per sampling chunk: the last
        one, or every one of a whole prompt whose prompt logprobs are asked for."""
        keep: dict[str, list[int]] = {}
        row = 0
        for chunk in chunks:
            if chunk.needs_sample:
                wants_prompt = _wants_prompt_logprobs(chunk)
                count = len(chunk.token_ids) if wants_prompt else 1 + chunk.num_draft_tokens
                keep[chunk.seq_id] = list(range(row, row + count))
                row += count
        return keep

    def _with_prompt_logprobs(
        self, chunk: SeqChunk, sampled: Sampled, logits: torch.Tensor, keep: dict[str, list[int]]
    ) -> Sampled:
        if not _wants_prompt_logprobs(chunk):
            return sampled
        rows = keep[chunk.seq_id]
        n_prompt = chunk.num_prompt_tokens
        raw = logits[rows[: n_prompt - 1]]  # position i predicts prompt token i + 1
        entries = prompt_logprobs(
            raw, chunk.token_ids[1:n_prompt], chunk.params.prompt_logprobs or 0
        )
        return Sampled(
            token_id=sampled.token_id, logprobs=sampled.logprobs, prompt_logprobs=entries
        )

    def _row(self, chunk: SeqChunk, accepted: tuple[int, ...]) -> RowContext:
        """The processors' view of `chunk`'s sequence with `accepted` tokens after it."""
        end = chunk.start_pos + len(chunk.token_ids) - chunk.num_draft_tokens + len(accepted)
        history = chunk.params.needs_history
        return RowContext(
            params=chunk.params,
            prompt_ids=chunk.prompt_ids,
            output_ids=chunk.output_ids + accepted if history else (),
            num_output=end - chunk.num_prompt_tokens,
            eos_token_ids=self.eos_token_ids,
        )

    def _forward(self, chunks: tuple[SeqChunk, ...], keep: dict[str, list[int]]) -> torch.Tensor:
        """Logits of the kept positions, in `keep` order (one row per kept position)."""
        graphed = None if self.graphs is None else self.graphs.run(chunks)
        if graphed is not None:  # a decode step: its rows are the kept ones, in order
            return graphed
        ids: list[int] = []
        positions: list[int] = []
        wanted: list[int] = []
        for chunk in chunks:
            n = len(chunk.token_ids)
            if chunk.seq_id in keep:
                wanted.extend(range(len(ids) + n - len(keep[chunk.seq_id]), len(ids) + n))
            ids.extend(chunk.token_ids)
            positions.extend(range(chunk.start_pos, chunk.start_pos + n))
        grid_positions = None if self._images is None else self._images.positions(chunks)
        out = self.model(
            input_ids=torch.tensor([ids], device=self._device),
            position_ids=(
                torch.tensor([positions], device=self._device)
                if grid_positions is None
                else grid_positions
            ),
            use_cache=False,
            logits_to_keep=torch.tensor(wanted, dtype=torch.long, device=self._device),
            step_meta=self._meta(chunks),
            **self._image_embeds(chunks),
        )
        return out.logits[0]

    def _image_embeds(self, chunks: tuple[SeqChunk, ...]) -> dict[str, Any]:
        """The forward's `image_embeds` argument when the step holds image placeholders."""
        if self._images is None:
            if any(chunk.images for chunk in chunks):
                raise ValueError("this model reads no images")
            return {}
        embeds = self._images.embeds(chunks)
        return {} if embeds is None else {"image_embeds": embeds}

    def _meta(self, chunks: tuple[SeqChunk, ...]) -> StepMeta:
        dev, bs = self._device, self.block_size
        write: list[int] = []
        prefills: list[PrefillSlice] = []
        decodes: list[tuple[int, SeqChunk, int]] = []  # query row, chunk, tokens it sees
        lora_rows: dict[str, list[int]] = {}
        for chunk in chunks:
            end = chunk.start_pos + len(chunk.token_ids)
            write.extend(slot_of(chunk.block_ids, p, bs) for p in range(chunk.start_pos, end))
            q_start = len(write) - len(chunk.token_ids)
            if chunk.lora is not None:
                lora_rows.setdefault(chunk.lora, []).extend(range(q_start, len(write)))
            if len(chunk.token_ids) == 1 + chunk.num_draft_tokens:
                # One new token, and each draft after it, attends as a one-token step
                # would (the same kernel and arithmetic), over the positions before it.
                decodes.extend(
                    (q_start + j, chunk, chunk.start_pos + 1 + j)
                    for j in range(len(chunk.token_ids))
                )
            else:
                read = [slot_of(chunk.block_ids, p, bs) for p in range(end)]
                slots = torch.tensor(read, device=dev)
                prefills.append(
                    PrefillSlice(
                        q_start=q_start,
                        q_len=len(chunk.token_ids),
                        start_pos=chunk.start_pos,
                        read_slots=slots,
                    )
                )
        return StepMeta(
            layer_caches=() if self.kv_cache is None else self.kv_cache.layers,
            write_slots=torch.tensor(write, device=dev),
            prefills=tuple(prefills),
            decode=self._decode_group(decodes) if decodes else None,
            lora=self.loras.step(lora_rows, len(write)),
        )

    def _decode_group(self, decodes: list[tuple[int, SeqChunk, int]]) -> DecodeGroup:
        dev, bs = self._device, self.block_size
        q_idx = torch.tensor([q for q, _, _ in decodes], device=dev)
        lengths = [n for _, _, n in decodes]
        if self._decode_kernel is not None:
            tables = padded_tables([c.block_ids for _, c, _ in decodes])
            return KernelDecode(
                q_idx=q_idx,
                block_tables=torch.tensor(tables, dtype=torch.long, device=dev),
                seq_lens=torch.tensor(lengths, dtype=torch.long, device=dev),
                block_size=bs,
                kernel=self._decode_kernel,
            )
        max_len = max(lengths)
        padded = [
            [slot_of(c.block_ids, p, bs) for p in range(n)] + [0] * (max_len - n)
            for _, c, n in decodes
        ]
        ends = torch.tensor(lengths, device=dev)
        real = torch.arange(max_len, device=dev)[None, :] < ends[:, None]
        return GatherDecode(
            q_idx=q_idx,
            read_slots=torch.tensor(padded, device=dev),
            seq_lens=ends,
            mask=real[:, None, None, :],
        )

    def _generator(self, chunk: SeqChunk) -> torch.Generator:
        generator = self._generators.get(chunk.seq_id)
        if generator is None:
            generator = torch.Generator(device=self._device)
            generator.manual_seed(chunk.seed)
            self._generators[chunk.seq_id] = generator
        return generator

    def release(self, seq_id: str) -> None:
        self._generators.pop(seq_id, None)
        self.grammars.release(seq_id)
        if self._images is not None:
            self._images.release(seq_id)

    def num_sequences(self) -> int:
        return len(self._generators)


def _draft_matches(chunk: SeqChunk, run: list[Sampled]) -> bool:
    """Whether the token just sampled equals the draft at its position, so the position
    after that draft is sampled too."""
    depth = len(run) - 1
    return depth < chunk.num_draft_tokens and run[-1].token_id == chunk.draft_ids[depth]


def _wants_prompt_logprobs(chunk: SeqChunk) -> bool:
    """A whole prompt in one chunk whose prompt logprobs are asked for: every row's
    logits are kept."""
    return chunk.params.prompt_logprobs is not None and chunk.start_pos == 0
