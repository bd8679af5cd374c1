"""Tensor parallel on this machine's CPUs: `python -m bench.tensor_parallel [--out FILE]`.

One step of ATOM's forward, TP=1 (one process, every core's threads) against TP=2 (two
ranks, gloo, the cores shared out as threads), each loaded through the real loader from
a random-weight Llama saved to a temporary folder (`--shape`, default 1B-like: hidden
2048, 16 layers, MLP 5632, 32 heads, 4 KV heads, the default model's vocabulary).
Times, the median of --repeats: a 512-token prefill, and a decode step of 1 and of 16
sequences (each 256 tokens in), in float32 (`--quantization off`) and int8.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from transformers import LlamaConfig, LlamaForCausalLM

from atom.model.loader import load_runtime, load_tokenizer
from atom.model.parallel import TensorParallelRunner
from atom.model.runner import SeqChunk, StepPlan
from atom.vocabulary.choices import Quantization
from atom.vocabulary.config import Settings
from atom.vocabulary.events import SamplingParams
from bench.run import machine, publish

SHAPE: dict[str, Any] = {"hidden_size": 2048, "num_hidden_layers": 16, "intermediate_size": 5632,
         "num_attention_heads": 32, "num_key_value_heads": 4}  # fmt: skip
GREEDY = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
BLOCK = 16


def save_model(folder: Path, layers: int) -> None:
    tokenizer = load_tokenizer(None, cache_dir=Settings().cache_dir)
    config = LlamaConfig(**{**SHAPE, "num_hidden_layers": layers}, vocab_size=len(tokenizer),
                         max_position_embeddings=2048, tie_word_embeddings=True)  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def chunk(seq: int, start: int, length: int) -> SeqChunk:
    blocks = tuple(range(seq * 64, seq * 64 + (start + length) // BLOCK + 1))
    ids = tuple((seq * 31 + i * 7) % 1000 + 10 for i in range(length))
    return SeqChunk(seq_id=str(seq), token_ids=ids, start_pos=start, block_ids=blocks,
                    params=GREEDY, seed=seq)  # fmt: skip


def timed(runner: Any, plan: StepPlan, repeats: int) -> float:
    runner.step(plan)  # warm-up
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        runner.step(plan)
        times.append(time.perf_counter() - started)
    return round(1000 * statistics.median(times), 2)


def measure(settings: Settings, repeats: int) -> dict[str, float]:
    runner = load_runtime(settings).runner
    try:
        filled = StepPlan(chunks=tuple(chunk(s, 0, 256) for s in range(16)))
        runner.step(filled)  # every sequence's first 256 positions in the cache
        return {
            "prefill_512_ms": timed(runner, StepPlan(chunks=(chunk(20, 0, 512),)), repeats),
            "decode_1_ms": timed(runner, StepPlan(chunks=(chunk(0, 256, 1),)), repeats),
            "decode_16_ms": timed(
                runner, StepPlan(chunks=tuple(chunk(s, 256, 1) for s in range(16))), repeats
            ),
        }
    finally:
        if isinstance(runner, TensorParallelRunner):
            runner.close()
            dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=SHAPE["num_hidden_layers"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-tp-"))
    save_model(folder, args.layers)
    report: dict[str, Any] = {
        "machine": machine(),
        "shape": {**SHAPE, "num_hidden_layers": args.layers},
    }
    for quantization in (Quantization.OFF, Quantization.INT8):
        base = Settings(model=(str(folder),), quantization=quantization, block_size=BLOCK,
                        kv_cache_memory_bytes=1 << 30)  # fmt: skip
        for size in (1, 2):
            settings = dataclasses.replace(base, tensor_parallel_size=size)
            result = measure(settings, args.repeats)
            report[f"{quantization} tp={size}"] = result
            print(quantization, f"tp={size}", json.dumps(result), flush=True)
    publish(report, args.out, indent=2)


if __name__ == "__main__":
    main()
