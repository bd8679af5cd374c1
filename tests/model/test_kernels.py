"""ATOM's CPU kernels against torch: paged decode attention vs the gather path on random
paged caches, int8_linear vs the float product of the dequantized weights."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from atom.config import Settings
from atom.model.attention import GatherDecode, KernelDecode, Scoring
from atom.model.kernels import _drop_stale_lock, cpu_ops
from tests.model.tiny import cpu_ops as built_ops


@pytest.mark.parametrize(("window", "softcap"), [(None, None), (7, None), (None, 2.0), (20, 3.0)])
@pytest.mark.parametrize(
    ("heads", "kv_heads", "dim", "block_size"),
    [(9, 3, 64, 16), (4, 4, 40, 4), (8, 1, 128, 8), (6, 2, 20, 16)],
)
def test_kernel_matches_gather_then_sdpa(
    heads: int,
    kv_heads: int,
    dim: int,
    block_size: int,
    window: int | None,
    softcap: float | None,
) -> None:
    gen = torch.Generator().manual_seed(heads * dim + block_size)
    num_blocks = 64
    k_cache = torch.randn(num_blocks * block_size, kv_heads, dim, generator=gen)
    v_cache = torch.randn(num_blocks * block_size, kv_heads, dim, generator=gen)
    lengths = [1, 5, block_size, block_size + 1, 3 * block_size + 7, 60]
    order = torch.randperm(num_blocks, generator=gen).tolist()  # scattered block tables
    tables = []
    for n in lengths:
        count = -(-n // block_size)
        tables.append(order[:count])
        order = order[count:]
    width = max(len(t) for t in tables)
    padded_tables = [t + [0] * (width - len(t)) for t in tables]
    max_len = max(lengths)
    slots = [
        [t[p // block_size] * block_size + p % block_size for p in range(n)] + [0] * (max_len - n)
        for t, n in zip(tables, lengths, strict=True)
    ]
    mask = torch.arange(max_len)[None, :] < torch.tensor(lengths)[:, None]
    q = torch.randn(len(lengths), heads, dim, generator=gen)
    q_idx = torch.arange(len(lengths))
    gather = GatherDecode(
        q_idx=q_idx,
        read_slots=torch.tensor(slots),
        seq_lens=torch.tensor(lengths),
        mask=mask[:, None, None, :],
    )
    kernel = KernelDecode(
        q_idx=q_idx,
        block_tables=torch.tensor(padded_tables),
        seq_lens=torch.tensor(lengths),
        block_size=block_size,
        kernel=built_ops().paged_decode,
    )
    how = Scoring(scale=dim**-0.5, window=window, softcap=softcap)
    expected = gather.attend(q, k_cache, v_cache, how)
    got = kernel.attend(q, k_cache, v_cache, how)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows", [1, 2, 3, 4])
@pytest.mark.parametrize(("in_features", "out_features", "bias"), [(64, 48, False), (77, 33, True)])
def test_int8_linear_matches_dequantized_float(
    rows: int, in_features: int, out_features: int, bias: bool
) -> None:
    gen = torch.Generator().manual_seed(rows * in_features)
    weight = torch.randint(-127, 128, (out_features, in_features), dtype=torch.int8, generator=gen)
    scale = torch.rand(out_features, generator=gen) / 50
    b = torch.randn(out_features, generator=gen) if bias else None
    x = torch.randn(1, rows, in_features, generator=gen)  # leading dims are kept
    expected = x @ (weight.float() * scale[:, None]).T + (0 if b is None else b)
    got = built_ops().int8_linear(x, weight, scale, b)
    assert got.shape == (1, rows, out_features)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_int8_linear_refuses_more_than_four_rows() -> None:
    weight = torch.zeros(8, 32, dtype=torch.int8)
    with pytest.raises(RuntimeError, match="at most 4 rows"):
        built_ops().int8_linear(torch.zeros(5, 32), weight, torch.ones(8), None)


def test_mode_choice() -> None:
    cache = Settings().cache_dir
    assert cpu_ops("off", device="cpu", dtype=torch.float32, cache_dir=cache) is None
    assert cpu_ops("auto", device="cpu", dtype=torch.bfloat16, cache_dir=cache) is None
    assert cpu_ops("auto", device="cpu", dtype=torch.float32, cache_dir=cache) is not None
    with pytest.raises(ValueError, match="cpu-kernels"):
        cpu_ops("fast", device="cpu", dtype=torch.float32, cache_dir=cache)
    with pytest.raises(ValueError, match="float32"):
        cpu_ops("on", device="cpu", dtype=torch.bfloat16, cache_dir=cache)


def test_a_stale_build_lock_is_removed_and_a_fresh_one_kept(tmp_path: Path) -> None:
    stale, fresh = tmp_path / "stale", tmp_path / "fresh"
    stale.touch()
    fresh.touch()
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    _drop_stale_lock(stale)
    _drop_stale_lock(fresh)
    _drop_stale_lock(tmp_path / "missing")
    assert not stale.exists() and fresh.exists()
