"""Decode graphs (atom/model/forward/graphs.py): the static buffers, the padding rows and
the runner's choice between a graph and an eager step.

A CUDA graph needs a device; here `Capture` is a stand-in whose "replay" runs the captured
forward again over the same static buffers. Everything else is what CUDA runs: the sizes,
the rows copied in and padded onto the scratch block, the logits sliced out, the steps
sent eagerly. bench/gpu.sh runs the real capture on a device."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch
import transformers

from atom.model.forward.graphs import (
    LENGTH,
    SLOT,
    DecodeGraphs,
    Forward,
    GraphPlan,
    capture_sizes,
    graph_plan,
    graphs_name,
)
from atom.model.forward.llama_forward import LlamaForward
from atom.model.forward.operators import TorchOps
from atom.model.runner import SeqChunk
from atom.model.torch_runner import TorchRunner
from atom.vocabulary.events import SamplingParams
from tests.model.tiny import BLOCK, PROMPTS, cpu_ops, run_all, tiny_model

NUM_BLOCKS = 128


@dataclass
class Rerun:
    """A Capture whose replay runs the forward again; it counts captures and replays."""

    captured: list[int] = field(default_factory=list)  # the rows of each captured forward
    replays: int = 0

    def __call__(self, forward: Forward) -> Forward:
        self.captured.append(forward().shape[0])

        def replay() -> torch.Tensor:
            self.replays += 1
            with torch.inference_mode():  # as the runner's step calls it
                return forward()

        return replay


def runner(plan: GraphPlan | None) -> TorchRunner:
    """ATOM's forward on torch's operators, decode attention by the CPU kernel reading
    the paged cache in place (as Triton's does on CUDA)."""
    return TorchRunner(
        LlamaForward(tiny_model(transformers.LlamaConfig), TorchOps).eval(),
        eos_token_ids=frozenset({0}),
        max_model_len=256,
        num_blocks=NUM_BLOCKS,
        block_size=BLOCK,
        decode_kernel=cpu_ops().paged_decode,
        graph_plan=plan,
    )


def test_capture_sizes_double_to_eight_then_step_by_eight() -> None:
    assert capture_sizes(1) == (1,)
    assert capture_sizes(5) == (1, 2, 4, 8)
    assert capture_sizes(8) == (1, 2, 4, 8)
    assert capture_sizes(20) == (1, 2, 4, 8, 16, 24)
    assert capture_sizes(256)[-1] == 256


def test_replayed_decodes_answer_as_eager_steps() -> None:
    """Prompts admitted a few at a time (a small step budget) make decode steps of every
    width, some wider than the largest graph, and mixed steps: the graphs serve the
    decode steps they hold, padded, and the answers equal the eager runner's."""
    capture = Rerun()
    graphed = runner(GraphPlan(capture_sizes(8), capture))
    assert sorted(capture.captured) == [1, 2, 4, 8]  # each size's logits rows
    eager = runner(None)
    prompts = PROMPTS[:12]
    theirs, _ = run_all(eager, prompts, budget=24)
    ours, _ = run_all(graphed, prompts, budget=24)
    assert ours == theirs
    assert capture.replays > 10  # the decode steps of at most 8 rows
    assert graphed.kv_cache is not None
    scratch = graphed.kv_cache.tensors[0][:, :, NUM_BLOCKS * BLOCK]
    assert scratch.abs().sum() > 0  # the padding rows wrote to the scratch block


def decode(seq: str, pos: int, blocks: tuple[int, ...], **fields: object) -> SeqChunk:
    params = SamplingParams(temperature=0.0, max_tokens=4)
    return SeqChunk(
        seq_id=seq,
        token_ids=(5,),
        start_pos=pos,
        block_ids=blocks,
        params=params,
        seed=0,
        **fields,  # type: ignore[arg-type]
    )


def graphs_over(max_blocks: int) -> DecodeGraphs:
    """Decode graphs over a runner's model and cache, its last block the scratch one."""
    model = runner(None)
    assert model.kv_cache is not None
    return DecodeGraphs(
        model.model,
        model.kv_cache.layers,
        cpu_ops().paged_decode,
        block_size=BLOCK,
        max_blocks=max_blocks,
        scratch_block=NUM_BLOCKS - 1,
        device=torch.device("cpu"),
    )


def test_a_step_of_two_rows_pads_a_graph_of_four() -> None:
    graphs = graphs_over(max_blocks=8)
    capture = Rerun()
    graphs.capture((4, 2), capture)
    three = [decode("a", 5, (3, 7)), decode("b", 0, (9,)), decode("c", 2, (1,))]
    logits = graphs.run(three)
    assert logits is not None and logits.shape[0] == 3 and capture.replays == 1
    inputs = graphs._graphs[4].inputs
    assert inputs.fields[SLOT].tolist() == [7 * BLOCK + 1, 9 * BLOCK, 1 * BLOCK + 2, 127 * BLOCK]
    assert inputs.fields[LENGTH].tolist() == [6, 1, 3, 1]
    assert inputs.tables[:, :2].tolist() == [[3, 7], [9, 0], [1, 0], [127, 0]]
    assert graphs.run(three[:2]) is not None and capture.replays == 2  # the size-2 graph


def test_steps_a_graph_does_not_run_go_eagerly() -> None:
    graphs = graphs_over(max_blocks=2)
    graphs.capture((2,), Rerun())
    one = decode("a", 5, (3, 7))
    prefill = SeqChunk(
        seq_id="p", token_ids=(5, 6, 7), start_pos=0, block_ids=(4,), params=one.params, seed=0
    )
    assert graphs.run([one, prefill]) is None  # mixed
    assert graphs.run([one, decode("b", 1, (2,), lora="adapter")]) is None
    assert graphs.run([one, decode("b", 1, (2,)), decode("c", 1, (6,))]) is None  # 3 > 2 rows
    assert graphs.run([decode("b", 9, (2, 5, 6))]) is None  # wider than the tables
    assert graphs.run([one]) is not None


def test_new_weights_and_a_new_cache_are_captured_again() -> None:
    capture = Rerun()
    graphed = runner(GraphPlan((1, 2), capture))
    assert len(capture.captured) == 2
    graphed.replace_weights(LlamaForward(tiny_model(transformers.LlamaConfig), TorchOps).eval())
    assert len(capture.captured) == 4
    graphed.sleep(1)
    assert graphed.graphs is None
    graphed.wake_up(None)
    assert len(capture.captured) == 6 and graphed.graphs is not None
    assert graphs_name(graphed.graphs).startswith("2 sizes up to 2, captured in ")


def test_a_failed_capture_leaves_every_step_eager() -> None:
    def failing(forward: Forward) -> Forward:
        raise RuntimeError("operation not permitted when stream is capturing")

    graphed = runner(GraphPlan((1, 2), failing))
    assert graphed.graphs is None and graphs_name(graphed.graphs) == "off"
    eager = runner(None)
    assert run_all(graphed, PROMPTS[:3])[0] == run_all(eager, PROMPTS[:3])[0]


@pytest.mark.parametrize(
    ("enforce_eager", "device", "own", "kernel", "split"),
    [
        (True, "cuda", True, True, False),  # --enforce-eager
        (False, "cpu", True, True, False),
        (False, "cuda", False, True, False),  # transformers' classes
        (False, "cuda", True, False, False),  # the gathering path
        (False, "cuda", True, True, True),  # tensor parallel
    ],
)
def test_steps_stay_eager_without_cuda_and_atoms_forward(
    enforce_eager: bool, device: str, own: bool, kernel: bool, split: bool
) -> None:
    model = tiny_model(transformers.LlamaConfig)
    plan = graph_plan(
        enforce_eager=enforce_eager,
        max_num_seqs=8,
        device=device,
        model=LlamaForward(model, TorchOps) if own else model,
        kernel=cpu_ops().paged_decode if kernel else None,
        split=split,
    )
    assert plan is None
