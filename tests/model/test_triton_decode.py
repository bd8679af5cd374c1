"""The Triton paged decode kernel against the gathering path, on random shapes.

On a CUDA device it runs compiled (bench/gpu.sh runs this file there, bfloat16 too);
elsewhere under TRITON_INTERPRET=1 (tests/conftest.py sets it before anything imports
triton), in float32 and float16: the interpreter has no bfloat16 arithmetic. Skipped
without triton."""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("triton")

from atom.model.forward.attention import (
    GatherDecode,
    KernelDecode,
    Scoring,
    decode_kernel,
    decode_name,
)
from atom.model.forward.triton_decode import paged_decode

ON_GPU = torch.cuda.is_available()
if not ON_GPU and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("Triton runs on a CUDA device or under its interpreter", allow_module_level=True)

DEVICE = "cuda" if ON_GPU else "cpu"
DTYPES = [torch.float32, torch.float16, *([torch.bfloat16] if ON_GPU else [])]
BLOCK = 16


def random_step(
    lengths: list[int], heads: int, kv_heads: int, dim: int, dtype: torch.dtype, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[list[int]]]:
    """Queries, K and V caches of scattered blocks, and each sequence's block ids."""
    gen = torch.Generator().manual_seed(seed)
    num_blocks = sum(-(-n // BLOCK) for n in lengths) + 3
    order = torch.randperm(num_blocks, generator=gen).tolist()  # blocks out of order
    tables, taken = [], 0
    for n in lengths:
        count = -(-n // BLOCK)
        tables.append(order[taken : taken + count])
        taken += count
    shape = (num_blocks * BLOCK, kv_heads, dim)
    k = torch.randn(shape, generator=gen).to(dtype)
    v = torch.randn(shape, generator=gen).to(dtype)
    q = torch.randn(len(lengths), heads, dim, generator=gen).to(dtype)
    return q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), tables


def both(
    lengths: list[int], heads: int, kv_heads: int, dim: int, dtype: torch.dtype,
    scoring: Scoring, seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    q, k, v, tables = random_step(lengths, heads, kv_heads, dim, dtype, seed)
    width = max(map(len, tables))
    padded = torch.tensor([t + [0] * (width - len(t)) for t in tables], device=DEVICE)
    lens = torch.tensor(lengths, device=DEVICE)
    idx = torch.arange(len(lengths), device=DEVICE)
    kernel = KernelDecode(
        q_idx=idx, block_tables=padded, seq_lens=lens, block_size=BLOCK, kernel=paged_decode
    )
    max_len = max(lengths)
    slots = [
        [t[p // BLOCK] * BLOCK + p % BLOCK for p in range(n)]
        for t, n in zip(tables, lengths, strict=True)
    ]
    read = torch.tensor([s + [0] * (max_len - len(s)) for s in slots], device=DEVICE)
    real = torch.arange(max_len, device=DEVICE)[None, :] < lens[:, None]
    gather = GatherDecode(q_idx=idx, read_slots=read, seq_lens=lens, mask=real[:, None, None, :])
    return kernel.attend(q, k, v, scoring), gather.attend(q.float(), k, v, scoring)


TOLERANCE = {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 2e-2}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    ("heads", "kv_heads", "dim"),
    [(4, 4, 64), (9, 3, 64), (8, 2, 32), (6, 1, 48)],  # MHA, SmolLM2's GQA, MQA, dim not 2^n
)
def test_the_kernel_attends_as_the_gathering_path(
    dtype: torch.dtype, heads: int, kv_heads: int, dim: int
) -> None:
    lengths = [1, 17, 70, 16, 33]  # a block's edges, one token, several blocks
    got, expected = both(lengths, heads, kv_heads, dim, dtype, Scoring(scale=dim**-0.5))
    assert got.dtype == dtype and got.shape == (len(lengths), heads, dim)
    torch.testing.assert_close(got.float(), expected.float(), atol=TOLERANCE[dtype], rtol=0.01)


@pytest.mark.parametrize(
    "scoring",
    [
        Scoring(scale=0.125, window=20),
        Scoring(scale=0.125, softcap=5.0),
        Scoring(scale=0.125, window=7, softcap=2.0),
    ],
    ids=["window", "softcap", "both"],
)
def test_windows_and_softcaps_as_the_gathering_path(scoring: Scoring) -> None:
    got, expected = both([5, 40, 90], 8, 2, 64, torch.float32, scoring, seed=3)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0.01)


def test_an_int8_cache_is_not_taken() -> None:
    q = torch.zeros(1, 2, 16, device=DEVICE)
    cache = torch.zeros(BLOCK, 2, 16, dtype=torch.int8, device=DEVICE)
    table, lens = torch.zeros(1, 1, dtype=torch.long), torch.ones(1, dtype=torch.long)
    with pytest.raises(ValueError, match="int8"):
        paged_decode(q, cache, cache, table, lens, BLOCK, 1.0, k_scales=q, v_scales=q)


def test_the_loader_takes_it_on_cuda_for_a_float_cache() -> None:
    class Ops:
        paged_decode = object()

    assert decode_kernel(Ops(), "cpu", "float32") is Ops.paged_decode
    assert decode_kernel(None, "cuda", "bfloat16") is paged_decode
    assert decode_kernel(None, "cuda:1", "float16") is paged_decode
    assert decode_kernel(None, "cuda", "int8") is None  # the gathering path
    assert decode_kernel(None, "cpu", "float32") is None  # CPU kernels off
    assert [decode_name(None, d, t) for d, t in [("cuda", "bfloat16"), ("cpu", "int8")]] == [
        "triton",
        "gather",
    ]
