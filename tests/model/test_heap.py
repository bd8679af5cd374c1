"""The weights the kernels stream, moved onto one mapping advised for 2 MB pages; the
objects of a loaded model frozen out of the garbage collector's passes."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest
import torch

from atom.model.heap import (
    GC_FIRST_GENERATION,
    HUGE_PAGE,
    collect_less_often,
    freeze_heap,
    loading,
    onto_huge_pages,
    thaw_heap,
)

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def mapping_of(address: int) -> dict[str, str]:
    """The fields of /proc/self/smaps for the mapping that holds `address`."""
    fields: dict[str, str] = {}
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and ":" not in head:  # a mapping's first line: start-end perms ...
            start, end = (int(part, 16) for part in head.split("-"))
            inside = start <= address < end
        elif inside:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def test_tensors_move_in_place_and_keep_their_values() -> None:
    blocks = torch.randint(0, 256, (3_000_001,), dtype=torch.uint8)
    table = torch.randn(1000, 70)
    expected = blocks.clone(), table.clone()
    onto_huge_pages([blocks, table, table])  # one tensor twice (a tied head): moved once
    assert torch.equal(blocks, expected[0]) and torch.equal(table, expected[1])
    assert blocks.data_ptr() % HUGE_PAGE == 0  # the first on a 2 MB boundary
    assert table.data_ptr() % 64 == 0
    assert table.untyped_storage().data_ptr() == blocks.untyped_storage().data_ptr()
    table.add_(1)  # still an ordinary tensor, its memory its own
    assert torch.equal(table, expected[1] + 1) and torch.equal(blocks, expected[0])


@pytest.mark.skipif(
    not THP.exists() or "[never]" in THP.read_text(), reason="no transparent huge pages"
)
def test_the_mapping_is_advised_for_huge_pages() -> None:
    weights = torch.ones(HUGE_PAGE)  # 8 MB
    onto_huge_pages([weights])
    assert mapping_of(weights.data_ptr()).get("THPeligible") == "1"


def test_only_contiguous_cpu_tensors() -> None:
    with pytest.raises(ValueError, match="contiguous"):
        onto_huge_pages([torch.ones(4, 4).t()])


def test_views_are_refused() -> None:
    """A view moved would leave its base, and the old memory, alive."""
    with pytest.raises(ValueError, match="views"):
        onto_huge_pages([torch.ones(4, 4).view(16)])


class Node:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_a_frozen_cycle_outlives_collections_until_the_heap_is_thawed() -> None:
    node = Node()
    probe = weakref.ref(node)
    freeze_heap()
    assert gc.get_freeze_count() > 0
    del node
    gc.collect()
    assert probe() is not None  # frozen: the full pass no longer walks it
    thaw_heap()  # as after an unload
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert probe() is None


def test_a_load_pauses_the_collector_and_freezes_what_it_made() -> None:
    with loading():
        assert not gc.isenabled()
        made = Node()
    assert gc.isenabled() and gc.get_freeze_count() > 0
    probe = weakref.ref(made)
    del made
    gc.collect()
    assert probe() is not None  # frozen with the rest of the load
    with pytest.raises(ValueError), loading():  # a failed load: the collector back on
        raise ValueError("no weights here")
    assert gc.isenabled()


def test_serving_collects_the_young_generation_less_often() -> None:
    before = gc.get_threshold()
    try:
        collect_less_often()
        assert gc.get_threshold() == (GC_FIRST_GENERATION, *before[1:])
    finally:
        gc.set_threshold(*before)
