"""Adapters in a step: device slots holding up to `--max-loras` adapters side by side,
and the grouped products that add each row's adapter delta.

Every adapted projection holds, per layer, one stacked `A` [slots, R, in] and one
stacked `B` [slots, R, out] (transposed, each slot's scaling folded in), where R is
the projection's rank room (`--max-lora-rank` times its fused parts; a smaller
adapter leaves zeros). A step whose rows use several adapters gathers its rows by
slot into [slots, n, in] (n: the most rows one adapter has; shorter groups padded),
then

    h = bmm(x_grouped, A.T)     # [slots, n, R]: each group through its own slot's A
    out[rows] += bmm(h, B)      # [slots, n, out], scattered back to the rows

— two batched products whatever the mix, as vLLM's punica kernels do, never a step
split per adapter. A step of one adapter uses its slot's slices (over the rows that
have it, or all rows); rows of the base model get no delta. With ATOM's CPU kernels
(float32 on CPU) one call does it all, row by row (`lora_add`, csrc/lora.cpp): a
row's delta is then the same bits whatever else the step holds. The base product runs
once over every row whatever its form (float, int8, int4 blocks); the delta is float
on top, so LoRA works on every base ATOM runs.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass

import torch

from atom.model.lora.adapter import FUSED, FusedLora, LoraAdapter


@dataclass(frozen=True, slots=True)
class SlotStack:
    """One projection of one layer, every slot's adapter side by side."""

    a: torch.Tensor  # [slots * room, in]
    b_t: torch.Tensor  # [slots * room, out]: B transposed, each slot's scaling folded in
    cols: torch.Tensor  # [slots * room, 2]: where each row of b_t can be non-zero
    room: int

    def put(self, slot: int, fused: FusedLora | None) -> None:
        """Slot `slot` holds `fused` (zeros where it has less rank, or is None)."""
        at = slice(slot * self.room, (slot + 1) * self.room)
        self.a[at].zero_()
        self.b_t[at].zero_()
        self.cols[at].zero_()
        if fused is not None:
            rank = fused.a.shape[0]
            self.a[at][:rank].copy_(fused.a)
            self.b_t[at][:rank].copy_((fused.b * fused.scale[:, None]).T)
            self.cols[at][:rank].copy_(_nonzero_columns(self.b_t[at][:rank]))


@dataclass(frozen=True, slots=True)
class OneAdapter:
    """Every adapted row of the step uses slot `slot`: `rows` of them (None: all)."""

    slot: int
    rows: torch.Tensor | None


@dataclass(frozen=True, slots=True)
class Grouped:
    """Rows of several adapters: `order` [slots * n] lists each slot's rows, padded
    (with row 0) to n a slot; `kept` are the positions of real rows in that order
    (None: no padding), and `rows` the rows at those positions, in the same order."""

    order: torch.Tensor
    n: int
    kept: torch.Tensor | None
    rows: torch.Tensor


@dataclass(frozen=True, slots=True)
class KernelRows:
    """Each row's slot (-1: the base model), for the CPU kernels' `lora_add`."""

    slots: torch.Tensor
    kernel: Callable[..., None]


@dataclass(frozen=True, slots=True)
class LoraStep:
    """A step's adapters: the slots and which rows use which."""

    layers: tuple[dict[str, SlotStack], ...]
    rows: OneAdapter | Grouped | KernelRows

    def add(self, out: torch.Tensor, x: torch.Tensor, layer: int, projection: str) -> None:
        """out [rows, out_features] += each row's adapter delta of x [rows, in_features]."""
        stack, how = self.layers[layer][projection], self.rows
        if isinstance(how, KernelRows):
            how.kernel(out, x, stack.a, stack.b_t, stack.cols, how.slots, stack.room)
            return
        if isinstance(how, OneAdapter):
            at = slice(how.slot * stack.room, (how.slot + 1) * stack.room)
            if how.rows is None:
                out.addmm_(x @ stack.a[at].T, stack.b_t[at])
            else:
                out.index_add_(0, how.rows, (x[how.rows] @ stack.a[at].T) @ stack.b_t[at])
            return
        slots, room = stack.a.shape[0] // stack.room, stack.room
        grouped = x.index_select(0, how.order).view(slots, how.n, -1)
        h = torch.bmm(grouped, stack.a.view(slots, room, -1).transpose(1, 2))
        delta = torch.bmm(h, stack.b_t.view(slots, room, -1)).view(slots * how.n, -1)
        if how.kept is not None:
            delta = delta.index_select(0, how.kept)
        out.index_add_(0, how.rows, delta)


class LoraSlots:
    """The runner's adapters: every loaded one in host memory, up to `max_loras` of them
    in the device slots, the least recently used slot reused first."""

    def __init__(
        self,
        max_loras: int,
        max_rank: int,
        device: torch.device,
        kernel: Callable[..., None] | None = None,
    ) -> None:
        """`kernel`: the CPU kernels' `lora_add` (float32 on CPU), else torch's products."""
        self.max_loras, self.max_rank = max_loras, max_rank
        self._device = device
        self._kernel = kernel
        self._loaded: dict[str, LoraAdapter] = {}
        self._slots: OrderedDict[str, int] = OrderedDict()  # resident adapter → slot, LRU first
        self._layers: tuple[dict[str, SlotStack], ...] = ()  # allocated at the first adapter

    def add(self, adapter: LoraAdapter) -> None:
        """Load (or replace) an adapter; a replaced one's slot takes the new weights."""
        if not self._layers:
            self._layers = self._allocate(adapter)
        self._loaded[adapter.name] = adapter.to("cpu")
        if adapter.name in self._slots:
            self._fill(self._slots[adapter.name], self._loaded[adapter.name])

    def remove(self, name: str) -> None:
        self._loaded.pop(name, None)
        self._slots.pop(name, None)

    def step(self, rows_of: dict[str, list[int]], num_rows: int) -> LoraStep | None:
        """The step's LoraStep from each adapter's rows (None: no adapter in the step).
        KeyError for an adapter not loaded; ValueError for more than `max_loras`."""
        if not rows_of:
            return None
        if len(rows_of) > self.max_loras:
            raise ValueError(f"{len(rows_of)} adapters in one step, above --max-loras")
        slots = {name: self._slot(name, keep=rows_of.keys()) for name in rows_of}
        if self._kernel is not None:
            row_slots = torch.full((num_rows,), -1, dtype=torch.long)
            for name, rows in rows_of.items():
                row_slots[rows] = slots[name]
            return LoraStep(self._layers, KernelRows(row_slots, self._kernel))
        if len(rows_of) == 1:
            (name, rows), device = next(iter(rows_of.items())), self._device
            every = len(rows) == num_rows
            index = None if every else torch.tensor(rows, device=device)
            return LoraStep(self._layers, OneAdapter(slots[name], index))
        return LoraStep(self._layers, self._grouped(rows_of, slots))

    def _grouped(self, rows_of: dict[str, list[int]], slots: dict[str, int]) -> Grouped:
        """Each slot's rows in slot order, padded to the longest group."""
        n = max(len(rows) for rows in rows_of.values())
        order, is_real = [0] * (self.max_loras * n), [False] * (self.max_loras * n)
        for name, group in rows_of.items():
            start = slots[name] * n
            order[start : start + len(group)] = group
            is_real[start : start + len(group)] = [True] * len(group)
        kept = [position for position, real in enumerate(is_real) if real]
        device = self._device
        return Grouped(
            order=torch.tensor(order, device=device),
            n=n,
            kept=None if len(kept) == len(order) else torch.tensor(kept, device=device),
            rows=torch.tensor([order[p] for p in kept], device=device),
        )

    def _slot(self, name: str, keep: Collection[str]) -> int:
        """The device slot of adapter `name`, filled now if it is not resident (taking
        the least recently used slot no adapter of this step holds)."""
        slot = self._slots.get(name)
        if slot is None:
            adapter = self._loaded[name]
            free = sorted(set(range(self.max_loras)) - set(self._slots.values()))
            if free:
                slot = free[0]
            else:
                evicted = next(n for n in self._slots if n not in keep)
                slot = self._slots.pop(evicted)
            self._fill(slot, adapter)
            self._slots[name] = slot
        self._slots.move_to_end(name)
        return slot

    def _fill(self, slot: int, adapter: LoraAdapter) -> None:
        for layer, stacks in enumerate(self._layers):
            for projection, stack in stacks.items():
                fused = adapter.layers[layer].get(projection)
                stack.put(slot, None if fused is None else fused.to(self._device))

    def _allocate(self, adapter: LoraAdapter) -> tuple[dict[str, SlotStack], ...]:
        """Zeroed slots for every layer and projection of the model (the first adapter
        brings its shapes) with the rank room."""
        dtype, n = _dtype_of(adapter), self.max_loras
        layers = []
        for _ in adapter.layers:
            stacks = {}
            for projection, (out_features, in_features) in adapter.shapes.items():
                room = len(FUSED[projection]) * self.max_rank
                stacks[projection] = SlotStack(
                    a=torch.zeros(n * room, in_features, dtype=dtype, device=self._device),
                    b_t=torch.zeros(n * room, out_features, dtype=dtype, device=self._device),
                    cols=torch.zeros(n * room, 2, dtype=torch.long, device=self._device),
                    room=room,
                )
            layers.append(stacks)
        return tuple(layers)


def _nonzero_columns(rows: torch.Tensor) -> torch.Tensor:
    """[rows, 2]: the first and past-the-last non-zero column of each row ([0, 0] for a
    row of zeros): a fused B is block-diagonal, so the kernel skips the rest."""
    nonzero = rows != 0
    width = rows.shape[1]
    first = nonzero.int().argmax(dim=1)
    last = width - nonzero.flip(1).int().argmax(dim=1)
    spans = torch.stack([first, last], dim=1)
    return torch.where(nonzero.any(dim=1, keepdim=True), spans, torch.zeros_like(spans))


def _dtype_of(adapter: LoraAdapter) -> torch.dtype:
    return next(f.a.dtype for layer in adapter.layers for f in layer.values())
