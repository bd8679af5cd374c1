"""The process's memory: the C heap's free pages given back, and the weights the
kernels stream put on 2 MB pages."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

ALIGN = 64  # bytes: each tensor starts on its own cache line
HUGE_PAGE = 2 << 20


def trim() -> None:
    """Return the C heap's free pages to the OS (glibc's `malloc_trim`). Loading and
    quantizing a model frees gigabytes of temporaries in pieces glibc keeps mapped:
    a 1B model held ~0.75 GB more resident memory without this (docs/performance.md).
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
    on 4 KB pages each page costs a TLB walk and restarts the CPU's prefetchers, and a
    1B model's 4-bit layer products at one row took 43 ms against 25 ms on 2 MB pages
    (`python -m bench.kernels --shape 1b [--huge-pages]`, docs/performance.md). Where
    the OS gives no huge pages this costs one copy."""
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
