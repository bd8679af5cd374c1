"""llama.cpp's own server, built once from the sources inside the llama-cpp-python sdist.

`python -m bench.llama_server` builds it (10-20 minutes on 2 cores, once) and prints
the binary's path; `bench.run --peer llama-server` calls `binary()` the same way.
`binary("llama-quantize")` is llama.cpp's quantizer from the same build (bench.big_model
makes its Q4_K_M file with it). The
build is not tuned by the compiler for this CPU (`GGML_NATIVE=OFF`): the instruction
sets are named one by one (AVX-512 and VNNI where /proc/cpuinfo lists them), and AMX
is off: on one of this project's Intel
VMs `amx_int8` is advertised but traps, and a llama.cpp build that used it died with
an invalid opcode. Each build lands in a folder named by the sdist and the flags.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
from pathlib import Path

from atom.vocabulary.config import Settings

VERSION = "0.3.36"  # the llama-cpp-python release whose vendored llama.cpp is built
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",
    "-DGGML_AVX=ON",
    "-DGGML_AVX2=ON",
    "-DGGML_FMA=ON",
    "-DGGML_F16C=ON",
    "-DGGML_AVX512=ON",  # AVX512_FLAGS: dropped where the CPU lacks them
    "-DGGML_AVX512_VNNI=ON",
    "-DGGML_AVX512_VBMI=OFF",
    "-DGGML_AVX512_BF16=OFF",
    "-DGGML_AMX_TILE=OFF",
    "-DGGML_AMX_INT8=OFF",
    "-DGGML_AMX_BF16=OFF",
    "-DGGML_OPENMP=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
)


AVX512_FLAGS = ("-DGGML_AVX512=ON", "-DGGML_AVX512_VNNI=ON")


def cmake_flags() -> tuple[str, ...]:
    """CMAKE_FLAGS, with AVX-512 (and VNNI) where this CPU lists them."""
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    if " avx512f " in flags and " avx512_vnni " in flags:
        return CMAKE_FLAGS
    return tuple(flag for flag in CMAKE_FLAGS if flag not in AVX512_FLAGS)


def folder() -> Path:
    key = hashlib.sha256(f"{VERSION} {' '.join(cmake_flags())}".encode()).hexdigest()[:10]
    return Path(Settings().cache_dir) / "bench" / f"llama-server-{VERSION}-{key}"


TARGETS = ("llama-server", "llama-quantize")


def binary(name: str = "llama-server") -> Path:
    """One of the built TARGETS, building them first when it is not there."""
    assert name in TARGETS, name
    built = folder() / "build" / "bin" / name
    if not built.exists():
        _build(folder())
    return built


def _build(where: Path) -> None:
    where.mkdir(parents=True, exist_ok=True)
    download = ["pip", "download", "--no-binary", ":all:", "--no-deps", "-d", str(where)]
    subprocess.run([sys.executable, "-m", *download, f"llama-cpp-python=={VERSION}"], check=True)
    with tarfile.open(where / f"llama_cpp_python-{VERSION}.tar.gz") as sdist:
        sdist.extractall(where, filter="data")
    source = where / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp"
    build = where / "build"
    subprocess.run(["cmake", "-S", str(source), "-B", str(build), *cmake_flags()], check=True)
    subprocess.run(["cmake", "--build", str(build), "--target", *TARGETS, "-j", "2"], check=True)


if __name__ == "__main__":
    print(binary())
