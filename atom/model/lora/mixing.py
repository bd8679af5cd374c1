"""Adapters in a step: device slots holding up to `--max-loras` adapters side by side,
and the products that add each row's adapter delta in one pass over the step.

Every adapted projection holds, per layer, one stacked `A` [slots * R, in] and one
stacked `B` [out, slots * R] (each slot's columns scaled by its adapter's scaling),
where R is the projection's rank room (`--max-lora-rank` times its fused parts). A
step whose rows use several adapters (and the base model) computes

    h = (x @ A.T) * mask        # every slot's A for every row, then each row keeps
                                # only its own slot's R columns (none for the base)
    out += h @ B.T              # one fused multiply-add

— two products over all rows whatever the mix, as vLLM's punica kernels do, never a
step split per adapter; the waste is the other slots' columns of the thin `h`. A step
of one adapter alone uses that slot's slices without a mask. The base product runs
once over every row whatever its form (float, int8, int4 blocks); the delta is float
on top, so LoRA works on every base ATOM runs.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass

import torch

from atom.model.lora.adapter import FUSED, FusedLora, LoraAdapter


@dataclass(frozen=True, slots=True)
class SlotStack:
    """One projection of one layer, every slot's adapter side by side."""

    a: torch.Tensor  # [slots * room, in]
    b: torch.Tensor  # [out, slots * room], each slot's scaling folded in
    room: int

    def put(self, slot: int, fused: FusedLora | None) -> None:
        """Slot `slot` holds `fused` (zeros where it has less rank, or is None)."""
        at = slice(slot * self.room, (slot + 1) * self.room)
        self.a[at].zero_()
        self.b[:, at].zero_()
        if fused is not None:
            rank = fused.a.shape[0]
            self.a[at][:rank].copy_(fused.a)
            self.b[:, at][:, :rank].copy_(fused.b * fused.scale[:, None])


@dataclass(frozen=True, slots=True)
class LoraStep:
    """The step's rows and their slots: `single` when every row uses that one slot;
    else, per room size, the mask keeping each row's own slot's columns."""

    layers: tuple[dict[str, SlotStack], ...]
    single: int | None
    masks: dict[int, torch.Tensor]  # room → [rows, slots * room], 0 or 1

    def add(self, out: torch.Tensor, x: torch.Tensor, layer: int, projection: str) -> None:
        """out [rows, out_features] += each row's adapter delta of x [rows, in_features]."""
        stack = self.layers[layer][projection]
        if self.single is not None:
            at = slice(self.single * stack.room, (self.single + 1) * stack.room)
            out.addmm_(x @ stack.a[at].T, stack.b[:, at].T)
        else:
            out.addmm_((x @ stack.a.T) * self.masks[stack.room], stack.b.T)


class LoraSlots:
    """The runner's adapters: every loaded one in host memory, up to `max_loras` of them
    in the device slots, the least recently used slot reused first."""

    def __init__(self, max_loras: int, max_rank: int, device: torch.device) -> None:
        self.max_loras, self.max_rank = max_loras, max_rank
        self._device = device
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
        if len(rows_of) == 1 and len(next(iter(rows_of.values()))) == num_rows:
            return LoraStep(self._layers, next(iter(slots.values())), {})
        row_slots = torch.full((num_rows,), -1, dtype=torch.long)
        for name, rows in rows_of.items():
            row_slots[rows] = slots[name]
        masks = {}
        for room in {s.room for s in self._layers[0].values()}:
            column_slots = torch.arange(self.max_loras).repeat_interleave(room)
            mask = row_slots[:, None] == column_slots[None, :]
            masks[room] = mask.to(device=self._device, dtype=self._dtype)
        return LoraStep(self._layers, None, masks)

    @property
    def _dtype(self) -> torch.dtype:
        return next(iter(self._layers[0].values())).a.dtype

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
                    b=torch.zeros(out_features, n * room, dtype=dtype, device=self._device),
                    room=room,
                )
            layers.append(stacks)
        return tuple(layers)


def _dtype_of(adapter: LoraAdapter) -> torch.dtype:
    return next(f.a.dtype for layer in adapter.layers for f in layer.values())
