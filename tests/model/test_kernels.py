"""ATOM's CPU kernels against torch: paged decode attention vs the gather path on random
paged caches, int8_linear vs the float product of the dequantized weights, the fused
layer operators vs `TorchOps`."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from atom.model.forward.attention import (
    INT8_GROUP,
    GatherDecode,
    Int8Rows,
    KernelDecode,
    Scoring,
    read_rows,
    write_rows,
)
from atom.model.forward.kernels import (
    X86,
    _cpu_flags,
    _drop_stale_lock,
    cpu_ops,
    kernel_dirs,
    load_cpu_ops,
)
from atom.model.forward.operators import TorchOps
from atom.vocabulary.config import Settings
from tests.model.tiny import cpu_ops as built_ops


def int16_query(q: torch.Tensor) -> torch.Tensor:
    """Each head of q [batch, heads, dim] rounded to int16 against its largest |value|, as
    paged_decode's int8-cache loops take it (csrc/attention_int8.cpp), then widened."""
    top = q.abs().amax(dim=-1, keepdim=True)
    inverse = torch.where(top > 0, 32767.0 / top, torch.zeros_like(top))
    return torch.round(q * inverse) * (top * (1.0 / 32767.0))


def instruction_sets() -> list[str]:
    """avx2, and the CPU's own choice where it is another (avx512_vnni, amx_int8)."""
    return sorted({"avx2", built_ops().kernel_isa()}) if X86 else [built_ops().kernel_isa()]


@contextmanager
def kernel_isa(name: str) -> Iterator[None]:
    before = built_ops().set_kernel_isa(name)
    try:
        yield
    finally:
        built_ops().set_kernel_isa(before)


@pytest.mark.parametrize(("window", "softcap"), [(None, None), (7, None), (None, 2.0), (90, 3.0)])
@pytest.mark.parametrize(
    ("heads", "kv_heads", "dim", "block_size"),
    # int8 caches: 3 heads a kv head in one block of heads; 8 in two blocks of 4 (the
    # 512-bit loops); 6 in blocks of 4 and 2, head size 32 (the 256-bit loops only)
    [(9, 3, 64, 16), (4, 4, 40, 4), (8, 1, 128, 8), (6, 2, 20, 16), (12, 2, 32, 16)],
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
    # 133: a row asked for ahead (csrc/attention.cpp) across many of its blocks
    lengths = [1, 5, block_size, block_size + 1, 3 * block_size + 7, 60, 133]
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
    for dtype in (torch.float16, torch.bfloat16):  # --kv-cache-dtype: read back widened
        narrow_k, narrow_v = k_cache.to(dtype), v_cache.to(dtype)
        widened = kernel.attend(q, narrow_k.float(), narrow_v.float(), how)
        assert torch.equal(kernel.attend(q, narrow_k, narrow_v, how), widened)
        torch.testing.assert_close(gather.attend(q, narrow_k, narrow_v, how), widened)
    if dim % INT8_GROUP == 0:  # --kv-cache-dtype int8: the kernel reads what the gather widens
        all_slots = torch.arange(num_blocks * block_size)
        k8, v8 = (
            Int8Rows(
                torch.zeros(c.shape, dtype=torch.int8),
                torch.zeros((*c.shape[:2], dim // INT8_GROUP), dtype=torch.float16),
            )
            for c in (k_cache, v_cache)
        )
        write_rows(k8, all_slots, k_cache)
        write_rows(v8, all_slots, v_cache)
        dequantized = [read_rows(c, all_slots, torch.float32) for c in (k8, v8)]
        groups = k_cache.unflatten(-1, (-1, INT8_GROUP)).abs().amax(-1, keepdim=True)
        error = (dequantized[0] - k_cache).unflatten(-1, (-1, INT8_GROUP)).abs()
        assert (error <= groups / 254 * 1.002 + 1e-6).all()  # half a step, a float16 scale
        rounded = int16_query(q)  # the kernel's scores take the query as int16
        for isa in instruction_sets():  # the 256-bit loops and, where the CPU has them, 512
            with kernel_isa(isa):
                int8 = kernel.attend(q, k8, v8, how)
            # float32 sums in another order: the integer dot products, then the scales
            for reference in (gather.attend(rounded, k8, v8, how),
                              kernel.attend(rounded, *dequantized, how)):  # fmt: skip
                torch.testing.assert_close(int8, reference, rtol=2e-5, atol=2e-5)
        assert not torch.equal(rounded, q)  # (so the rounding is what the test is about)


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 7, 37, 70])  # groups of 4, blocks of 32
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


def test_mode_choice() -> None:
    cache = Settings().cache_dir
    assert cpu_ops("off", device="cpu", dtype=torch.float32, cache_dir=cache) is None
    assert cpu_ops("auto", device="cpu", dtype=torch.bfloat16, cache_dir=cache) is None
    assert cpu_ops("auto", device="cpu", dtype=torch.float32, cache_dir=cache) is not None
    with pytest.raises(ValueError, match=r"--cpu-kernels \(ATOM_CPU_KERNELS\)"):
        Settings(cpu_kernels="fast")  # type: ignore[arg-type]  # refused once, at the start
    with pytest.raises(ValueError, match="float32"):
        cpu_ops("on", device="cpu", dtype=torch.bfloat16, cache_dir=cache)


def test_the_int4_loops_run_on_the_best_instruction_set_the_cpu_and_os_allow() -> None:
    """One build serves every x86 CPU with AVX2; AVX-512 with VNNI is used where the
    CPU lists it (the OS check is the compiler runtime's), AMX only where the CPU lists
    it too and Linux granted the tile state (else AVX-512: a VM may list AMX and trap)."""
    flags = _cpu_flags()
    wide = {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"} <= flags
    tiles = wide and {"amx_tile", "amx_int8"} <= flags
    chosen = built_ops().kernel_isa()
    allowed = ("amx_int8", "avx512_vnni") if tiles else ("avx512_vnni",) if wide else ("avx2",)
    assert chosen in allowed
    if not tiles:
        with pytest.raises(RuntimeError, match="has no amx_int8"):
            built_ops().set_kernel_isa("amx_int8")
    with pytest.raises(RuntimeError, match="one of avx2, avx512_vnni, amx_int8"):
        built_ops().set_kernel_isa("amx")


@pytest.mark.skipif(shutil.which("objdump") is None or not X86, reason="needs objdump, x86")
def test_the_build_keeps_avx512_and_amx_inside_their_own_loops() -> None:
    """A CPU without AVX-512 (or AMX) must never meet one of its instructions: a
    function using 512-bit registers (tiles) is local to its loops' file or one of their
    entry points, never a shared (weak) copy the linker could hand to other code."""
    path = built_ops().__file__

    def objdump(*flags: str) -> list[str]:
        run = subprocess.run(["objdump", *flags, path], capture_output=True, text=True, check=True)
        return run.stdout.splitlines()

    binding = {line.split()[-1]: line[17] for line in objdump("-t") if " F " in line}
    function, wide, tiled = "", set(), set()
    for line in objdump("-d", "--no-show-raw-insn"):
        if line.endswith(">:"):
            function = line.split("<", 1)[1].removesuffix(">:")
        elif "%zmm" in line:
            wide.add(function)
        if any(amx in line for amx in ("tilecfg", "tileload", "tilestore", "tilezero", "tdpb")):
            tiled.add(function)
    assert wide and tiled
    for name in wide:
        entry = ("avx512" in name or "amx" in name) and binding[name] == "g"
        assert binding[name] == "l" or entry, name
    for name in tiled:
        assert binding[name] == "l" or ("amx" in name and binding[name] == "g"), name


def test_a_fresh_home_uses_the_build_inside_the_installation(tmp_path: Path) -> None:
    """`make setup` builds into the installation, so an empty per-user cache (a new
    container, a service user) neither rebuilds nor writes anything there."""
    installed, _ = kernel_dirs(str(tmp_path))
    assert any(installed.glob("atom_cpu_ops_*/*.so")), "make setup builds the kernels here"
    ops = load_cpu_ops(str(tmp_path))
    assert Path(ops.__file__).is_relative_to(installed)
    assert ops.kernel_isa() in ("avx2", "avx512_vnni", "amx_int8")
    assert list(tmp_path.iterdir()) == []


def test_a_stale_build_lock_is_removed_and_a_fresh_one_kept(tmp_path: Path) -> None:
    stale, fresh = tmp_path / "stale", tmp_path / "fresh"
    stale.touch()
    fresh.touch()
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    _drop_stale_lock(stale)
    _drop_stale_lock(fresh)
    _drop_stale_lock(tmp_path / "missing")
    assert not stale.exists() and fresh.exists()


@pytest.mark.parametrize("tokens", [1, 3, 40])
@pytest.mark.parametrize("has_delta", [False, True])
def test_add_rms_norm_matches_torch(tokens: int, has_delta: bool) -> None:
    gen = torch.Generator().manual_seed(tokens)
    x = torch.randn(tokens, 96, generator=gen)
    delta = torch.randn(tokens, 96, generator=gen) if has_delta else None
    weight = torch.rand(96, generator=gen) + 0.5
    x_torch = x.clone()
    expected = TorchOps.add_rms_norm(x_torch, delta, weight, 1e-5)
    got = built_ops().add_rms_norm(x, delta, weight, 1e-5)
    torch.testing.assert_close(x, x_torch)  # the residual stream, updated in place
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tokens", [1, 5, 33])
@pytest.mark.parametrize(("heads", "kv_heads", "dim"), [(9, 3, 64), (4, 4, 16)])
def test_rope_write_into_an_int8_cache_matches_torch(
    tokens: int, heads: int, kv_heads: int, dim: int
) -> None:
    """The same rounding: values and scales equal, bar a last-bit difference of rotated K."""
    gen = torch.Generator().manual_seed(tokens * heads + 1)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, generator=gen)
    qkv[0, (heads + kv_heads) * dim : (heads + kv_heads + 1) * dim] = 0.0  # an all-zero V head
    angles = torch.rand(tokens, dim // 2, generator=gen) * 6
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    slots = torch.randperm(64, generator=gen)[:tokens]
    values = [torch.zeros(64, kv_heads, dim, dtype=torch.int8) for _ in range(4)]
    scales = [torch.zeros(64, kv_heads, dim // INT8_GROUP, dtype=torch.float16) for _ in range(4)]
    qkv_torch = qkv.clone()
    TorchOps.rope_write(
        qkv_torch, cos, sin, values[0], values[1], slots, heads, kv_heads, scales[0], scales[1]
    )
    built_ops().rope_write(
        qkv, cos, sin, values[2], values[3], slots, heads, kv_heads, scales[2], scales[3]
    )
    assert torch.equal(values[3], values[1]) and torch.equal(scales[3], scales[1])
    assert (values[2].int() - values[0].int()).abs().max() <= 1
    torch.testing.assert_close(scales[2], scales[0], rtol=1e-6, atol=0)
    assert not scales[3][slots[0], 0].any() and not values[3][slots[0], 0].any()
    groups = values[2][slots].unflatten(-1, (-1, INT8_GROUP))
    assert groups.abs().amax(dim=-1).min() == 127  # each group spans the range


@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("tokens", [1, 5, 33])
@pytest.mark.parametrize(("heads", "kv_heads", "dim"), [(9, 3, 64), (4, 4, 16)])
def test_rope_write_matches_torch(
    tokens: int, heads: int, kv_heads: int, dim: int, cache_dtype: torch.dtype
) -> None:
    gen = torch.Generator().manual_seed(tokens * heads)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, generator=gen)
    angles = torch.rand(tokens, dim // 2, generator=gen) * 6
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    slots = torch.randperm(64, generator=gen)[:tokens]  # scattered cache rows
    caches = [torch.zeros(64, kv_heads, dim, dtype=cache_dtype) for _ in range(4)]
    qkv_torch = qkv.clone()
    TorchOps.rope_write(qkv_torch, cos, sin, caches[0], caches[1], slots, heads, kv_heads)
    built_ops().rope_write(qkv, cos, sin, caches[2], caches[3], slots, heads, kv_heads)
    torch.testing.assert_close(qkv, qkv_torch, rtol=1e-5, atol=1e-5)
    # rotated K may differ in its last float32 bit, so once rounded by one step of the
    # cache's type; V is copied, rounded alike
    close = {"rtol": 1e-5, "atol": 1e-5} if cache_dtype == torch.float32 else {}
    torch.testing.assert_close(caches[2], caches[0], **close)
    assert torch.equal(caches[3], caches[1])
    assert caches[2][slots].abs().sum(dim=(1, 2)).min() > 0  # every token was written


@pytest.mark.parametrize("tokens", [1, 20])
def test_silu_mul_matches_torch(tokens: int) -> None:
    gate_up = torch.randn(tokens, 2 * 80, generator=torch.Generator().manual_seed(tokens)) * 4
    expected = TorchOps.silu_mul(gate_up)
    torch.testing.assert_close(built_ops().silu_mul(gate_up), expected, rtol=1e-5, atol=1e-5)


def test_paged_decode_reads_strided_query_rows() -> None:
    """The ATOM forward hands the kernel a view of the fused qkv projection."""
    gen = torch.Generator().manual_seed(3)
    k_cache, v_cache = torch.randn(48, 2, 16, generator=gen), torch.randn(48, 2, 16, generator=gen)
    qkv = torch.randn(3, (4 + 2 * 2) * 16, generator=gen)
    q = qkv.view(3, 8, 16)[:, :4]
    args = (k_cache, v_cache, torch.tensor([[0, 1], [2, 3], [4, 5]]), torch.tensor([5, 9, 16]))
    strided = built_ops().paged_decode(q, *args, 8, 0.25, 0, 0.0)
    packed = built_ops().paged_decode(q.contiguous(), *args, 8, 0.25, 0, 0.0)
    torch.testing.assert_close(strided, packed)


@pytest.mark.parametrize("cache_dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(
    ("heads", "kv_heads", "dim"),
    [(9, 3, 64), (8, 2, 64), (12, 2, 40), (6, 6, 32)],  # 3 / 4 / 6 / 1 heads a kv head
)
def test_paged_decode_gives_a_sequence_the_same_bits_alone_and_in_a_batch(
    heads: int, kv_heads: int, dim: int, cache_dtype: torch.dtype
) -> None:
    """A sequence's attention does not depend on the sequences decoded beside it."""
    gen = torch.Generator().manual_seed(heads + dim)
    batch, block_size, blocks_each = 24, 16, 9
    slots = batch * blocks_each * block_size
    k_cache = torch.randn(slots, kv_heads, dim, generator=gen).to(cache_dtype)
    v_cache = torch.randn(slots, kv_heads, dim, generator=gen).to(cache_dtype)
    tables = torch.randperm(batch * blocks_each, generator=gen).view(batch, blocks_each)
    lengths = torch.randint(1, blocks_each * block_size + 1, (batch,), generator=gen)
    q = torch.randn(batch, heads, dim, generator=gen)
    decode = built_ops().paged_decode
    together = decode(q, k_cache, v_cache, tables, lengths, block_size, dim**-0.5, 0, 0.0)
    for b in range(batch):
        alone = decode(q[b : b + 1], k_cache, v_cache, tables[b : b + 1], lengths[b : b + 1],
                       block_size, dim**-0.5, 0, 0.0)  # fmt: skip
        assert torch.equal(alone[0], together[b]), f"sequence {b} of length {lengths[b]}"
