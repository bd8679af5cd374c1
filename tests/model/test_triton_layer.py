"""The Triton operators of ATOM's forward against TorchOps, on a layer's shapes.

On a CUDA device they run compiled (bench/gpu.sh runs this file there, bfloat16 too);
elsewhere under TRITON_INTERPRET=1 (tests/conftest.py), in float32 and float16."""

from __future__ import annotations

import os

import pytest
import torch
import transformers

pytest.importorskip("triton")

from atom.model.forward.graphs import GraphPlan, capture_sizes, cuda_capture
from atom.model.forward.llama_forward import LlamaForward
from atom.model.forward.operators import TorchOps, gpu_ops, ops_name
from atom.model.forward.triton_decode import paged_decode
from atom.model.forward.triton_layer import TritonOps
from atom.model.torch_runner import TorchRunner
from tests.model.tiny import BLOCK, PROMPTS, generate, run_all, tiny_model

ON_GPU = torch.cuda.is_available()
if not ON_GPU and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("Triton runs on a CUDA device or under its interpreter", allow_module_level=True)

DEVICE = "cuda" if ON_GPU else "cpu"
DTYPES = [torch.float32, torch.float16, *([torch.bfloat16] if ON_GPU else [])]
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


def rand(*shape: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(dtype).to(DEVICE)


def close(got: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    torch.testing.assert_close(got.float(), expected.float(), atol=TOLERANCE[dtype], rtol=0.01)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("with_delta", [True, False])
def test_add_rms_norm_as_torch(dtype: torch.dtype, with_delta: bool) -> None:
    x, delta = rand(7, 576, dtype=dtype, seed=1), rand(7, 576, dtype=dtype, seed=2)
    weight = rand(576, dtype=dtype, seed=3)
    mine, theirs = x.clone(), x.clone()
    got = TritonOps.add_rms_norm(mine, delta if with_delta else None, weight, 1e-5)
    expected = TorchOps.add_rms_norm(theirs, delta if with_delta else None, weight, 1e-5)
    close(got, expected, dtype)
    close(mine, theirs, dtype)  # the residual, added in place


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_silu_mul_as_torch(dtype: torch.dtype) -> None:
    gate_up = rand(5, 2 * 1536, dtype=dtype, seed=4)
    close(TritonOps.silu_mul(gate_up), TorchOps.silu_mul(gate_up), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("heads", "kv_heads", "dim"), [(9, 3, 64), (4, 4, 32), (8, 1, 128)])
def test_rope_write_as_torch(dtype: torch.dtype, heads: int, kv_heads: int, dim: int) -> None:
    tokens, num_slots = 6, 40
    qkv = rand(tokens, (heads + 2 * kv_heads) * dim, dtype=dtype, seed=5)
    angles = rand(tokens, dim // 2, dtype=torch.float32, seed=6).repeat(1, 2)
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    slots = torch.tensor([3, 17, 0, 39, 8, 22], device=DEVICE)  # scattered rows
    results = []
    for ops in (TritonOps, TorchOps):
        mine = qkv.clone()
        k = torch.zeros(num_slots, kv_heads, dim, dtype=dtype, device=DEVICE)
        v = torch.zeros_like(k)
        ops.rope_write(mine, cos, sin, k, v, slots, heads, kv_heads)
        results.append((mine, k, v))
    for got, expected in zip(*results, strict=True):
        close(got, expected, dtype)
    assert results[0][1][1].abs().sum() == 0  # rows no token wrote stay as they were


def test_atoms_forward_takes_them_on_cuda_only() -> None:
    assert gpu_ops(torch.device("cuda", 0)) is TritonOps
    assert gpu_ops(torch.device("cpu")) is None
    model = tiny_model(transformers.LlamaConfig)
    assert ops_name(model) == "transformers"  # not ATOM's forward
    assert ops_name(LlamaForward(model, TorchOps)) == "torch"
    assert ops_name(LlamaForward(model, TritonOps)) == "triton"


def test_atoms_forward_on_triton_answers_as_generate() -> None:
    """The CUDA path's parts together on a tiny Llama (float32 here, under the
    interpreter): Triton's operators and decode attention, chunked prefill and batched
    decode through the paged cache; greedy answers token for token as transformers'."""
    reference = tiny_model(transformers.LlamaConfig)
    runner = triton_runner()
    prompts = PROMPTS[:3]
    ours, _ = run_all(runner, prompts, budget=8)
    assert ours == [generate(reference, p) for p in prompts]


@pytest.mark.skipif(not ON_GPU, reason="a CUDA graph needs a CUDA device")
def test_decode_graphs_answer_as_generate() -> None:
    """The same on CUDA with the decode steps captured as graphs and replayed (sizes
    1 to 8; a small step budget makes steps of every width, and mixed ones)."""
    reference = tiny_model(transformers.LlamaConfig)
    plan = GraphPlan(capture_sizes(8), cuda_capture(torch.cuda.graph_pool_handle()))
    runner = triton_runner(plan)
    assert runner.graphs is not None and runner.graphs.sizes == (1, 2, 4, 8)
    prompts = PROMPTS[:12]
    ours, _ = run_all(runner, prompts, budget=24)
    assert ours == [generate(reference, p) for p in prompts]


def triton_runner(graph_plan: GraphPlan | None = None) -> TorchRunner:
    """A tiny Llama on ATOM's forward with Triton's operators and decode attention."""
    return TorchRunner(
        LlamaForward(tiny_model(transformers.LlamaConfig).to(DEVICE), TritonOps).eval(),
        eos_token_ids=frozenset({0}),
        max_model_len=256,
        num_blocks=128,
        block_size=BLOCK,
        decode_kernel=paged_decode,
        graph_plan=graph_plan,
    )
