"""A 1B-parameter Llama-shaped model with random weights, as a Q4_1 GGUF:
`python -m bench.big_model [--out /tmp/atom-bench-1b.Q4_1.gguf] [--requantize Q4_K_M]`.

TinyLlama-1.1B's shape (hidden 2048, 22 layers, MLP 5632, 32 heads, 4 KV heads) with
the default model's tokenizer (vocabulary 49,152, so ~1.07B parameters with the
embedding tied to the output, as SmolLM2's is), written as a GGUF file users
download holds it: the layers' weights in Q4_1 blocks, the embedding in Q8_0, the
norms in F32, with the `gguf` package. The blocks come from ATOM's own quantizers
(`int4.quantize_blocks`, `q8.quantize_blocks`: GGUF's blocks, stored apart) moved into
GGUF's block order. Random weights answer nonsense: serve them with `ignore_eos`.
"""

from __future__ import annotations

import argparse
import functools
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import gguf  # type: ignore[import-untyped]
import numpy as np
import torch

from atom.model.forward.blocks import Q4_1, Q8_0, BlockFormat
from atom.model.loader import default_model_path

SHAPE = {"hidden": 2048, "layers": 22, "ffn": 5632, "heads": 32, "kv_heads": 4}
# the default model's (SmolLM2-135M) shape, for the benches that build it at random
DEFAULT_SHAPE = {"hidden": 576, "layers": 30, "ffn": 1536, "heads": 9, "kv_heads": 3}
DEFAULT_OUT = "/tmp/atom-bench-1b.Q4_1.gguf"


def gguf_blocks(blocks: torch.Tensor, fmt: BlockFormat) -> np.ndarray:
    """ATOM's rows of blocks (each per-block number of a row apart, then the packed
    weights) in GGUF's order: block by block, its numbers, then its weights."""
    return torch.cat(fmt.parts(blocks), dim=2).reshape(blocks.shape).numpy()


def q4_1(weight: torch.Tensor) -> np.ndarray:
    return gguf_blocks(Q4_1.quantize(weight)[0], Q4_1)


def q8_0(weight: torch.Tensor) -> np.ndarray:
    blocks = Q8_0.quantize(weight)[0]
    *_, values = Q8_0.parts(blocks)
    values ^= 0x80  # ATOM stores values + 128; GGUF as int8
    return gguf_blocks(blocks, Q8_0)


@functools.cache
def tokenizer_keys(source: Path) -> tuple[tuple[str, Any, Any], ...]:
    """A GGUF's tokenizer keys: (key, contents, value type); read once per file (the
    reader spends seconds on a 49k-token vocabulary)."""
    reader = gguf.GGUFReader(str(source))
    return tuple(
        (key, field.contents(), field.types[0])
        for key, field in reader.fields.items()
        if key.startswith("tokenizer.")
    )


def copy_tokenizer(writer: Any, source: Path) -> None:
    """The default model's tokenizer keys, as they are."""
    for key, contents, kind in tokenizer_keys(source):
        if kind == gguf.GGUFValueType.ARRAY:
            writer.add_array(key, contents)
        else:
            writer.add_key_value(key, contents, kind)


Q = gguf.GGMLQuantizationType
# a layer's weights [rows, cols] from the generator: (GGUF blocks, their type)
LayerBlocks = Callable[[int, int, torch.Generator], tuple[np.ndarray, Any]]


def q4_1_layer(rows: int, cols: int, gen: torch.Generator) -> tuple[np.ndarray, Any]:
    return q4_1(torch.randn(rows, cols, generator=gen) * 0.02), Q.Q4_1


def write(
    out: Path, seed: int = 0, shape: Mapping[str, int] = SHAPE, layer: LayerBlocks = q4_1_layer
) -> None:
    """The model of `shape` with random weights as a GGUF at `out`: its layers' blocks
    from `layer`, the tied embedding Q8_0."""
    h, n, f = shape["hidden"], shape["layers"], shape["ffn"]
    heads, kv_heads = shape["heads"], shape["kv_heads"]
    head_dim = h // heads
    gen = torch.Generator().manual_seed(seed)
    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_name("atom-bench-1b")
    writer.add_block_count(n)
    writer.add_context_length(8192)
    writer.add_embedding_length(h)
    writer.add_feed_forward_length(f)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(head_dim)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_1)
    copy_tokenizer(writer, default_model_path())
    vocab = len(
        dict((k, c) for k, c, _ in tokenizer_keys(default_model_path()))["tokenizer.ggml.tokens"]
    )
    embedding = q8_0(torch.randn(vocab, h, generator=gen) * 0.02)
    writer.add_tensor("token_embd.weight", embedding, raw_dtype=Q.Q8_0)
    writer.add_tensor("output_norm.weight", np.ones(h, dtype=np.float32))
    for i in range(n):
        for name, rows, cols in (
            ("attn_q", h, h),
            ("attn_k", kv_heads * head_dim, h),
            ("attn_v", kv_heads * head_dim, h),
            ("attn_output", h, h),
            ("ffn_gate", f, h),
            ("ffn_up", f, h),
            ("ffn_down", h, f),
        ):
            blocks, kind = layer(rows, cols, gen)
            writer.add_tensor(f"blk.{i}.{name}.weight", blocks, raw_dtype=kind)
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(h, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(h, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def requantized(source: Path, kind: str) -> Path:
    """`source` re-quantized to `kind` (e.g. Q4_K_M) by llama.cpp's own `llama-quantize`
    (built with llama-server, bench/llama_server.py), beside it: a file as users
    download them, its tensor types chosen by llama.cpp's rules."""
    from bench import llama_server

    out = source.with_name(source.name.replace("Q4_1", kind))
    tool = llama_server.binary("llama-quantize")
    subprocess.run([str(tool), "--allow-requantize", str(source), str(out), kind], check=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument(
        "--requantize",
        metavar="TYPE",
        help="also write the model re-quantized to TYPE (e.g. Q4_K_M) by llama-quantize",
    )
    args = p.parse_args()
    out = Path(args.out)
    write(out)
    print(out)
    if args.requantize:
        print(requantized(out, args.requantize))


if __name__ == "__main__":
    main()
