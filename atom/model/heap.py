"""Giving the C heap's free memory back to the operating system."""

from __future__ import annotations

import ctypes
import ctypes.util


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
