"""Resident memory of a loaded model, in process: `python -m bench.resident [--model M]`.

Loads the model as the server would (ATOM_* variables apply, e.g.
`ATOM_KV_CACHE_MEMORY_BYTES`) and prints the process's resident memory (VmRSS) after
torch's and transformers' imports and after the load, beside the bytes of the model's
tensors and of its KV cache: what is left is Python, torch, the tokenizer and the C
heap.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

from bench.run import machine, publish, resident_mb


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="a GGUF or folder (default: the default model)")
    p.add_argument("--out", help="write the JSON here too")
    args = p.parse_args()
    started = resident_mb(os.getpid())
    import torch  # noqa: F401  (what a server imports before loading)
    import transformers  # noqa: F401

    from atom.model.loader import load_runtime
    from atom.vocabulary.config import Settings

    settings = Settings.from_env()
    if args.model:
        settings = dataclasses.replace(settings, model=(args.model,))
    imported = resident_mb(os.getpid())
    began = time.perf_counter()
    runtime = load_runtime(settings)
    seconds = time.perf_counter() - began
    model = runtime.runner.model  # type: ignore[attr-defined]
    tensors = [*model.parameters(), *model.buffers()]
    report = {
        "machine": machine(),
        "model": runtime.description["source"],
        "quantization": runtime.description["quantization"],
        "load_s": round(seconds, 1),
        "resident_mb": {"start": started, "imported": imported, "loaded": resident_mb(os.getpid())},
        "model_tensors_mb": round(sum(t.numel() * t.element_size() for t in tensors) / 2**20, 1),
        "kv_cache_mb": round(int(runtime.description["kv_cache_bytes"]) / 2**20, 1),
    }
    publish(report, args.out)


if __name__ == "__main__":
    main()
