"""ATOM's native CPU kernels, compiled on first use with torch's C++ extension loader.

`csrc/` holds them (`ops.h` lists them all), float32 tensors in and out:

- `paged_decode` (`attention.cpp`; an int8 cache's loops in `attention_int8.cpp`)
  attends one query token per sequence straight from the paged KV cache. The torch
  fallback gathers each sequence's K/V into a padded tensor first, which costs more
  than the kernel (bench/results/history.md).
- `int8_linear` (`linear.cpp`), `int4_linear`, `q5_linear`, `q6_linear` and
  `q8_linear` (`blocks.cpp`, their loops in `loops.inc` and `loops_amx.cpp`) multiply
  activation rows by int8 rows (one scale each) or GGUF Q4_1 / Q5_1 / Q6_K / Q8_0
  blocks (tiles of 16 weight rows, every
  product, prompts too), streaming the weights once per 32 (int8) or 128 (blocks)
  rows: batch-1 decode is bound by reading them (`python -m bench.kernels` measures
  the rates; docs/performance.md has today's).
- `add_rms_norm`, `rope_write` and `silu_mul` (`layer.cpp`) are the small
  operators of ATOM's own forward, one call each where torch runs several.

The build (a minute or more, once per source version) lands in a folder named by a fingerprint
of the sources, the flags and the torch build, inside the installation
(`<sys.prefix>/share/atom/kernels`: `make setup` builds there, so a fresh HOME finds
it) or, where that is not writable, under `<cache_dir>/kernels`; a finished build is
imported straight from either. On
x86 one build serves every CPU with AVX2 (`-march=x86-64-v3`): the block loops are
compiled for AVX2, for AVX-512 with VNNI and for AMX (int8 tiles), and `kernel_isa()`
picks one at run time from what the CPU and the OS support: AMX only after Linux has
granted the process the tile state (`arch_prctl`), as without it the first tile
instruction traps. A build is announced
(`cpu_kernels_building`, then `cpu_kernels_built`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import platform
import re
import shutil
import sys
import time
from enum import IntEnum
from pathlib import Path
from typing import Any

import structlog

from atom.progress import progress

log = structlog.get_logger(__name__)

CSRC = Path(__file__).parent / "csrc"


class ProjectionKind(IntEnum):
    """The weight form of a kernels.Projection (mirrors Projection::Kind in csrc/ops.h)."""

    FLOAT = 0
    INT8 = 1
    INT4 = 2
    Q8 = 3
    Q5 = 4
    Q6 = 5


SOURCES = tuple(
    CSRC / name
    for name in (
        "attention.cpp",
        "attention_int8.cpp",
        "linear.cpp",
        "blocks.cpp",
        "loops_avx2.cpp",
        "loops_avx512.cpp",
        "loops_amx.cpp",
        "layer.cpp",
        "lora.cpp",
        "stack.cpp",
        "module.cpp",
    )
)
X86 = platform.machine() in ("x86_64", "AMD64")
# x86: one build for every CPU with AVX2 (x86-64-v3); the AVX-512 loops are compiled
# beside the AVX2 ones and chosen at run time (csrc/blocks.cpp). Elsewhere: this CPU's.
CFLAGS = ["-O3", "-march=x86-64-v3" if X86 else "-march=native", "-fopenmp", "-ffast-math"]
X86_NEEDS = ("avx2", "fma", "f16c", "bmi1", "bmi2", "movbe", "abm")  # x86-64-v3's flags


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def build_inputs() -> tuple[Path, ...]:
    """Every file the build reads: the sources and, transitively, what their
    `#include "..."` lines name (the wheel must carry them all)."""
    found: dict[Path, None] = {}
    todo = list(SOURCES)
    while todo:
        path = todo.pop()
        if path not in found:
            found[path] = None
            todo += [path.parent / name for name in INCLUDE.findall(path.read_text())]
    return tuple(sorted(found))


def kernel_dirs(cache_dir: str) -> tuple[Path, Path]:
    """Where builds live: inside the installation first, then the per-user cache."""
    return Path(sys.prefix) / "share" / "atom" / "kernels", Path(cache_dir) / "kernels"


def load_cpu_ops(cache_dir: str) -> Any:
    """Import the built kernels module, building it first where none is; raises when
    there is no compiler."""
    missing = [flag for flag in X86_NEEDS if flag not in _cpu_flags()] if X86 else []
    if missing:
        raise RuntimeError(f"this CPU lacks {', '.join(missing)}, which the kernels need")
    name = f"atom_cpu_ops_{_fingerprint()}"
    bases = kernel_dirs(cache_dir)
    for base in bases:
        if (base / name / f"{name}.so").is_file():
            return _import_built(name, base / name / f"{name}.so")
    writable = [base for base in bases if _writable(base)]
    if not writable:
        raise RuntimeError(f"no writable folder for the kernel build: {bases}")
    return _build(name, writable[0] / name)


def _import_built(name: str, library: Path) -> Any:
    """A finished build, imported without the loader (no ninja run, no lock file: the
    folder may be read-only)."""
    import torch  # noqa: F401  (the module links against torch's libraries)

    spec = importlib.util.spec_from_file_location(name, library)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _writable(base: Path) -> bool:
    """Whether builds can be made under `base` (its nearest existing folder is writable)."""
    existing = next(p for p in (base, *base.parents) if p.exists())
    return os.access(existing, os.W_OK)


def _build(name: str, build: Path) -> Any:
    from torch.utils.cpp_extension import load

    _ensure_ninja()
    build.mkdir(parents=True, exist_ok=True)
    _drop_stale_lock(build / "lock")
    log.warning("cpu_kernels_building", folder=str(build), expected_s="50-250")
    with progress("cpu_kernels_build", expected_s=120):  # a minute or more of silence otherwise
        return load(
            name=name,
            sources=[str(path) for path in SOURCES],
            extra_cflags=CFLAGS,
            extra_ldflags=["-fopenmp"],  # resolves to the libgomp torch already loaded
            build_directory=str(build),
            verbose=False,
        )


def cpu_ops(mode: str, *, device: str, dtype: Any, cache_dir: str) -> Any | None:
    """The kernels module the runner should use, or None for torch's own operators.

    `auto`: the kernels on CPU float32 when they build, else torch (with a warning);
    `on`: the kernels or a start-up error; `off`: never."""
    import torch

    usable = device.startswith("cpu") and dtype == torch.float32
    if mode == "off" or (mode == "auto" and not usable):
        return None
    if not usable:
        raise ValueError("--cpu-kernels on needs --device cpu and float32")
    try:
        return load_cpu_ops(cache_dir)
    except Exception as error:
        if mode == "on":
            raise
        log.warning("cpu_kernels_unavailable", error=str(error)[:500], fallback="torch")
        return None


def _drop_stale_lock(lock: Path, max_age_s: float = 600.0) -> None:
    """torch's loader waits forever on the lock file of a build that was killed;
    a build takes ~50 s, so a lock older than `max_age_s` is a leftover."""
    try:
        if time.time() - lock.stat().st_mtime > max_age_s:
            lock.unlink(missing_ok=True)
            log.warning("cpu_kernels_stale_lock_removed", lock=str(lock))
    except FileNotFoundError:
        pass


def _ensure_ninja() -> None:
    """torch's loader runs `ninja`; the pip package puts it beside this interpreter."""
    if shutil.which("ninja") is None:
        import ninja  # type: ignore[import-not-found,import-untyped]

        os.environ["PATH"] = f"{ninja.BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}"


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def _fingerprint() -> str:
    """Sources, compiler flags (off x86, the CPU's flags too: -march=native), and the
    torch and Python the module links against: another torch must not load this build."""
    import torch

    flags = "" if X86 else " ".join(sorted(_cpu_flags()))
    source = b"".join(path.read_bytes() for path in build_inputs())
    build = f"{' '.join(CFLAGS)} torch {torch.__version__} python {sys.version_info[:2]}"
    return hashlib.sha256(flags.encode() + source + build.encode()).hexdigest()[:12]


if __name__ == "__main__":  # `make setup` builds the kernels into the installation
    from atom.vocabulary.config import Settings

    began = time.monotonic()
    try:
        load_cpu_ops(Settings().cache_dir)
        print(f"CPU kernels ready in {time.monotonic() - began:.0f} s")
    except Exception as error:  # no compiler: the server falls back to torch's operators
        print(f"CPU kernels not built ({str(error)[:300]}); the server will use torch's")
