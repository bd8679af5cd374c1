"""The process's memory: the C heap's free pages given back, the weights the kernels
stream put on 2 MB pages, the objects of loaded models kept out of the garbage
collector's full passes, and its young passes made rarer while serving."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import mmap
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

ALIGN = 64  # bytes: each tensor starts on its own cache line
HUGE_PAGE = 2 << 20


@contextmanager
def loading() -> Iterator[None]:
    """Around a model's load: the cyclic garbage collector paused, then, when the load
    succeeded, freeze_heap. A load makes ~500,000 Python objects, and the collector's
    full passes over them were a fifth of the load (bench/results/history.md, 2026-12-05)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
    freeze_heap()


def freeze_heap() -> None:
    """Collect the garbage there is, then move every object alive now out of the cyclic
    garbage collector's sight (`gc.freeze`), as vLLM does after loading. A loaded model
    holds ~500,000 tracked Python objects (the tokenizer's vocabulary, the modules), and
    the collector's full pass walked them all: a pause of the whole process at moments
    it chose, mid-stream (bench/results/history.md, 2026-12-05). Frozen objects are
    still freed when their last reference goes."""
    gc.collect()
    gc.freeze()


GC_FIRST_GENERATION = 10_000  # allocations between young collections (Python's: 700)


def collect_less_often() -> None:
    """Run the cyclic collector's young passes every GC_FIRST_GENERATION net allocations,
    not 700. A streamed token makes a few dozen short-lived objects (events, records, a
    chunk), nearly all freed by their reference counts; at 700 the collector ran so often,
    and its passes over the older generations with it, that it took 5-15 % of a busy
    event loop: 16,774 tokens/s at c=256 became 20,619 (`python -m bench.host`'s server,
    docs/performance.md, "The garbage collector"). What reference cycles there are (Trio's
    tasks and cancellations) are still collected, later."""
    gc.set_threshold(GC_FIRST_GENERATION, *gc.get_threshold()[1:])


def thaw_heap() -> None:
    """Every frozen object back in the collector's sight, after a model is unloaded: its
    objects in reference cycles become garbage only once the last task holding them has
    let go, which may be later, and frozen they would never be freed. The next load
    freezes the heap again."""
    gc.unfreeze()


def trim() -> None:
    """Return the C heap's free pages to the OS (glibc's `malloc_trim`). Loading and
    quantizing a model frees gigabytes of temporaries in pieces glibc keeps mapped:
    a 1B model held most of a gigabyte more resident memory without this (bench/results/history.md).
    A no-op on a C library without it."""
    name = ctypes.util.find_library("c")
    library = ctypes.CDLL(name) if name else None
    release = getattr(library, "malloc_trim", None)
    if release is not None:
        release(0)


def onto_huge_pages(tensors: Iterable[torch.Tensor]) -> None:
    """Move the data of contiguous CPU `tensors`, in place (whoever holds one of these
    tensor objects sees the move), into one anonymous mapping the OS is asked to back
    with 2 MB pages (`madvise(MADV_HUGEPAGE)`, which Linux's default `madvise` setting of
    transparent huge pages honours). The kernels stream every weight once a decode step:
    on 4 KB pages each page costs a TLB walk and restarts the CPU's prefetchers
    (`python -m bench.kernels --shape 1b [--huge-pages]` measures both;
    bench/results/history.md). Where the OS gives no huge pages this costs one copy."""
    import torch

    unique = list({id(t): t for t in tensors}.values())
    starts, end = [], 0
    for tensor in unique:
        if tensor.device.type != "cpu" or not tensor.is_contiguous():
            raise ValueError("onto_huge_pages: contiguous CPU tensors")
        if tensor._base is not None:  # its base would keep the old memory
            raise ValueError("onto_huge_pages: tensors that own their memory, not views")
        starts.append(end)
        end += -(-tensor.nbytes // ALIGN) * ALIGN
    if end == 0:
        return
    # private (a shared anonymous mapping is shmem, which has its own huge-page switch),
    # one huge page longer, so the tensors can start on a 2 MB boundary
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    arena = mmap.mmap(-1, -(-end // HUGE_PAGE) * HUGE_PAGE + HUGE_PAGE, flags=flags)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        arena.madvise(mmap.MADV_HUGEPAGE)
    memory = torch.frombuffer(arena, dtype=torch.uint8)  # keeps the mapping alive
    memory = memory[-memory.data_ptr() % HUGE_PAGE :]
    with torch.no_grad():
        for tensor, start in zip(unique, starts, strict=True):
            place = memory[start : start + tensor.nbytes].view(tensor.dtype).view(tensor.shape)
            place.copy_(tensor)
            tensor.set_(place)  # type: ignore[call-overload]
