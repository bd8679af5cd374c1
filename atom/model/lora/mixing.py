"""Adapters in a step: which rows each adapter's delta goes to, and the grouped products.

A step mixes rows of several adapters and of the base model. Every adapted projection
adds, for each adapter `a` present, its delta `(B[a] @ (A[a] @ x)) * scale[a]` to
that adapter's rows only: one pair of products per adapter over its gathered rows
(all rows without a gather when the step has one adapter), never a step split per
adapter. The base product runs once
over every row, whatever its form (float, int8, int4 blocks); the delta is float on
top of it, so LoRA works on every base ATOM runs.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

from atom.model.lora.adapter import LoraAdapter


@dataclass(frozen=True, slots=True)
class LoraRows:
    adapter: LoraAdapter
    rows: torch.Tensor | None  # indices into the step's flat rows; None: every row


@dataclass(frozen=True, slots=True)
class LoraStep:
    """The adapters of one step and their rows (none for rows of the base model)."""

    groups: tuple[LoraRows, ...]

    def add(self, out: torch.Tensor, x: torch.Tensor, layer: int, projection: str) -> None:
        """out [rows, out_features] += each adapter's delta of x [rows, in_features]."""
        for group in self.groups:
            fused = group.adapter.layers[layer].get(projection)
            if fused is None:
                continue
            if group.rows is None:
                out.add_(fused.delta(x))
            else:
                out.index_add_(0, group.rows, fused.delta(x[group.rows]))


class LoraSlots:
    """The runner's adapters: every loaded one in host memory, at most `max_loras` of
    them on the device, least recently used out first. On CPU both are the same tensors."""

    def __init__(self, max_loras: int, device: torch.device) -> None:
        self.max_loras = max_loras
        self._device = device
        self._loaded: dict[str, LoraAdapter] = {}
        self._resident: OrderedDict[str, LoraAdapter] = OrderedDict()

    def add(self, adapter: LoraAdapter) -> None:
        self._loaded[adapter.name] = adapter.to("cpu")
        self._resident.pop(adapter.name, None)

    def remove(self, name: str) -> None:
        self._loaded.pop(name, None)
        self._resident.pop(name, None)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._loaded)

    def step(self, rows_of: dict[str, list[int]], num_rows: int) -> LoraStep | None:
        """The step's LoraStep from each adapter's rows (None: no adapter in the step).
        KeyError for an adapter not loaded; ValueError for more than `max_loras`."""
        if not rows_of:
            return None
        if len(rows_of) > self.max_loras:
            raise ValueError(f"{len(rows_of)} adapters in one step, above --max-loras")
        groups = []
        for name, rows in rows_of.items():
            every = len(rows) == num_rows
            index = None if every else torch.tensor(rows, device=self._device)
            groups.append(LoraRows(self._on_device(name, keep=rows_of.keys()), index))
        return LoraStep(tuple(groups))

    def _on_device(self, name: str, keep: object) -> LoraAdapter:
        adapter = self._resident.get(name)
        if adapter is None:
            adapter = self._loaded[name].to(self._device)
            while len(self._resident) >= self.max_loras:
                evict = next(n for n in self._resident if n not in keep)  # type: ignore[operator]
                del self._resident[evict]
            self._resident[name] = adapter
        self._resident.move_to_end(name)
        return adapter
