"""Native CPU kernels, compiled on first use with torch's C++ extension loader.

`paged_decode` (csrc/paged_decode.cpp) attends one query token per sequence
straight from the paged KV cache. The torch fallback gathers each sequence's
K/V into a padded tensor first: at 16 sequences of 256 tokens that gather plus
SDPA costs ~2x the kernel per layer (docs/performance.md).

The build (~30 s, once per machine and source version) lands under
`<cache_dir>/kernels`; it is tuned for the host CPU (`-march=native`), so the
folder name carries a fingerprint of the CPU's flags.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger(__name__)

SOURCE = Path(__file__).parent / "csrc" / "paged_decode.cpp"
CFLAGS = ["-O3", "-march=native", "-fopenmp", "-ffast-math"]  # fast-math: vector expf
BACKENDS = ("auto", "torch", "cpp")

PagedDecode = Callable[..., Any]


def load_paged_decode(cache_dir: str) -> PagedDecode:
    """Build (or reuse) and import the kernel; raises when there is no compiler."""
    from torch.utils.cpp_extension import load

    _ensure_ninja()
    name = f"atom_paged_decode_{_cpu_fingerprint()}"
    build = Path(cache_dir) / "kernels" / name
    build.mkdir(parents=True, exist_ok=True)
    module = load(
        name=name,
        sources=[str(SOURCE)],
        extra_cflags=CFLAGS,
        extra_ldflags=["-fopenmp"],  # resolves to the libgomp torch already loaded
        build_directory=str(build),
        verbose=False,
    )
    return module.paged_decode  # type: ignore[no-any-return]


def decode_kernel(backend: str, *, device: str, dtype: Any, cache_dir: str) -> PagedDecode | None:
    """The kernel the runner should use for decode attention, or None for the torch path.

    `auto`: the kernel on CPU float32 when it builds, else torch (with a warning);
    `cpp`: the kernel or a start-up error; `torch`: never the kernel."""
    import torch

    if backend not in BACKENDS:
        raise ValueError(f"unknown --attention-backend {backend!r} (one of {', '.join(BACKENDS)})")
    usable = device.startswith("cpu") and dtype == torch.float32
    if backend == "torch" or (backend == "auto" and not usable):
        return None
    if not usable:
        raise ValueError("--attention-backend cpp needs --device cpu and float32")
    try:
        return load_paged_decode(cache_dir)
    except Exception as error:
        if backend == "cpp":
            raise
        log.warning("cpu_kernel_unavailable", error=str(error)[:500], fallback="torch")
        return None


def _ensure_ninja() -> None:
    """torch's loader runs `ninja`; the pip package puts it beside this interpreter."""
    if shutil.which("ninja") is None:
        import ninja  # type: ignore[import-not-found,import-untyped]

        os.environ["PATH"] = f"{ninja.BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}"


def _cpu_fingerprint() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    flags = next((line for line in text.splitlines() if line.startswith("flags")), "")
    source = SOURCE.read_bytes()
    return hashlib.sha256(flags.encode() + source + " ".join(CFLAGS).encode()).hexdigest()[:12]
