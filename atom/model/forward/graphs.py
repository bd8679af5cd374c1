"""Decode steps replayed as CUDA graphs: one launch a step where eager runs each operator.

A decode step of a small model is about 1,100 kernel launches, and at batch 1 the
launches, not the GPU, set its time (docs/performance.md, "CUDA"). So at start-up each
padded batch size (`capture_sizes`: 1, 2, 4, 8, then every 8 up to --max-num-seqs) is
captured once, over static input buffers: token ids, positions, write slots, lengths
(`_Inputs.fields`, one [4, size] tensor) and block tables. A step whose every row is a
decode copies its rows into the smallest size that holds them and replays; prefill and
mixed steps, adapters and images run eagerly, as does everything under
`--enforce-eager` (vLLM's flag).

Padding rows write and read a scratch block of their own, one past the blocks the
block manager hands out (the runner allocates it), so they touch no sequence's K/V.
A graph keeps the addresses it was captured with: the runner captures again when its
weights or its cache are replaced (wake-up), and drops the graphs while asleep.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from atom.model.forward.attention import DecodeKernel, KernelDecode, Rows, StepMeta
from atom.model.runner import SeqChunk, padded_tables, slot_of

Forward = Callable[[], torch.Tensor]
Capture = Callable[[Forward], Forward]  # a graph of `forward`: its replay, same output tensor
ID, POSITION, SLOT, LENGTH = range(4)  # the rows of `_Inputs.fields`, in this order


def capture_sizes(max_rows: int) -> tuple[int, ...]:
    """1, 2, 4, 8, then steps of 8, up to the first size that holds `max_rows` rows."""
    sizes, size = [], 1
    while True:
        sizes.append(size)
        if size >= max_rows:
            return tuple(sizes)
        size = size * 2 if size < 8 else size + 8


def cuda_capture(pool: Any) -> Capture:
    """Capture on the current CUDA device into the shared memory `pool`, after warm-up
    runs on a side stream (Triton compiles its kernels, cuBLAS picks its algorithms)."""

    def capture(forward: Forward) -> Forward:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                forward()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            out = forward()

        def replay() -> torch.Tensor:
            graph.replay()
            return out

        return replay

    return capture


@dataclass(frozen=True, slots=True)
class GraphPlan:
    """What a runner captures: the padded sizes, and how."""

    sizes: tuple[int, ...]
    capture: Capture


def graph_plan(
    *, enforce_eager: bool, max_num_seqs: int, device: str, model: Any, kernel: Any, split: bool
) -> GraphPlan | None:
    """Graphs on CUDA for ATOM's own forward with a decode kernel that reads the paged
    cache in place, alone on its device; None: every step eager (`--enforce-eager`,
    another device, transformers' classes, the gathering path, or tensor parallel)."""
    from atom.model.forward.llama_forward import LlamaForward

    eager = enforce_eager or split or kernel is None or not isinstance(model, LlamaForward)
    if eager or not device.startswith("cuda"):
        return None
    return GraphPlan(capture_sizes(max_num_seqs), cuda_capture(torch.cuda.graph_pool_handle()))


def graphs_name(graphs: DecodeGraphs | None) -> str:
    """The start-up log's `decode_graphs`."""
    if graphs is None:
        return "off"
    sizes = graphs.sizes
    return f"{len(sizes)} sizes up to {sizes[-1]}, captured in {graphs.capture_s:.1f} s"


def is_graphable(chunks: Sequence[SeqChunk]) -> bool:
    """Every chunk a decode (one new token, its drafts after it) that samples, with no
    adapter and no image: its logits rows are then its rows, in order."""
    return all(
        c.needs_sample
        and c.lora is None
        and not c.images
        and len(c.token_ids) == 1 + c.num_draft_tokens
        for c in chunks
    )


@dataclass(frozen=True, slots=True)
class _Inputs:
    """One size's static buffers, written in place before each replay."""

    fields: torch.Tensor  # [4, size] int64: ids, positions, write slots, lengths
    tables: torch.Tensor  # [size, max_blocks] int64
    rows: torch.Tensor  # arange(size): the query rows, every one kept

    @classmethod
    def allocate(cls, size: int, max_blocks: int, device: torch.device) -> _Inputs:
        return cls(
            fields=torch.zeros((4, size), dtype=torch.long, device=device),
            tables=torch.zeros((size, max_blocks), dtype=torch.long, device=device),
            rows=torch.arange(size, device=device),
        )


@dataclass(frozen=True, slots=True)
class _Graph:
    inputs: _Inputs
    replay: Forward  # logits [size, vocab], the same tensor every replay


class DecodeGraphs:
    """The captured decode steps of one model over one paged cache."""

    def __init__(
        self,
        model: Any,
        layer_caches: tuple[tuple[Rows, Rows], ...],
        kernel: DecodeKernel,
        *,
        block_size: int,
        max_blocks: int,
        scratch_block: int,
        device: torch.device,
    ) -> None:
        self._model, self._caches, self._kernel = model, layer_caches, kernel
        self._block_size, self._max_blocks = block_size, max_blocks
        self._scratch = scratch_block
        self._device = device
        self._graphs: dict[int, _Graph] = {}
        self.sizes: tuple[int, ...] = ()  # those captured, smallest first
        self.capture_s = 0.0

    def capture(self, sizes: Sequence[int], capture: Capture) -> None:
        """A graph for each size, the largest first (the smaller ones reuse its memory)."""
        began = time.perf_counter()
        for size in sorted(sizes, reverse=True):
            inputs = _Inputs.allocate(size, self._max_blocks, self._device)  # not inference
            self._fill(inputs, [])  # tensors: written in place by any step
            with torch.inference_mode():
                self._graphs[size] = _Graph(inputs, capture(self._forward_of(inputs)))
        self.sizes = tuple(sorted(self._graphs))
        self.capture_s = time.perf_counter() - began

    def run(self, chunks: Sequence[SeqChunk]) -> torch.Tensor | None:
        """The logits of a decode step's rows [rows, vocab] from the smallest graph that
        holds them; None: not a step a graph runs (it runs eagerly)."""
        num_rows = sum(len(c.token_ids) for c in chunks)
        size = next((s for s in self.sizes if s >= num_rows), None)
        if size is None or not is_graphable(chunks):
            return None
        if any(len(c.block_ids) > self._max_blocks for c in chunks):
            return None
        graph = self._graphs[size]
        self._fill(graph.inputs, chunks)
        return graph.replay()[:num_rows]

    def _fill(self, inputs: _Inputs, chunks: Sequence[SeqChunk]) -> None:
        """Write the step's rows, then padding rows (token 0 at position 0 of the scratch
        block), into the buffers: two copies. A table's columns past the widest of the
        step stay as they were: a row reads no block past its length."""
        bs, size = self._block_size, inputs.rows.shape[0]
        fields: list[tuple[int, int, int, int]] = []  # a row's id, position, slot, length
        tables: list[tuple[int, ...]] = []
        for chunk in chunks:
            for j, token in enumerate(chunk.token_ids):
                pos = chunk.start_pos + j
                fields.append((token, pos, slot_of(chunk.block_ids, pos, bs), pos + 1))
                tables.append(chunk.block_ids)
        num_pad = size - len(tables)
        fields.extend([(0, 0, self._scratch * bs, 1)] * num_pad)
        tables.extend([(self._scratch,)] * num_pad)
        padded = torch.tensor(padded_tables(tables), dtype=torch.long)
        inputs.fields.copy_(torch.tensor(fields, dtype=torch.long).T, non_blocking=True)
        inputs.tables[:, : padded.shape[1]].copy_(padded, non_blocking=True)

    def _forward_of(self, inputs: _Inputs) -> Forward:
        fields = inputs.fields
        meta = StepMeta(
            layer_caches=self._caches,
            write_slots=fields[SLOT],
            prefills=(),
            decode=KernelDecode(
                q_idx=inputs.rows,
                block_tables=inputs.tables,
                seq_lens=fields[LENGTH],
                block_size=self._block_size,
                kernel=self._kernel,
            ),
        )

        def forward() -> torch.Tensor:
            out = self._model(
                input_ids=fields[ID][None],
                position_ids=fields[POSITION][None],
                use_cache=False,
                logits_to_keep=inputs.rows,
                step_meta=meta,
            )
            logits: torch.Tensor = out.logits[0]
            return logits

        return forward
