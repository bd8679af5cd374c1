"""The ranks of `--tensor-parallel-size N` (atom/model/forward/tensor_parallel.py splits
the model between them).

Rank 0 is the server's own device thread; ranks 1..N-1 are processes it starts
(multiprocessing spawn, as vLLM's `mp` backend), each loading the same model and
keeping its share. They join one torch.distributed group (gloo on CPU, NCCL on CUDA).
The Batcher runs on rank 0 alone: `TensorParallelRunner` sends each step's plan, with
the sequences released since the last one, down a pipe to every other rank, and every
rank runs the same forward, meeting the others in the layers' all-reduces. Between
steps the ranks wait on their pipes, so an idle server has no collective to time out.
A rank process ends when its pipe closes, and asks the kernel to end it with the thread
that started it (PR_SET_PDEATHSIG), so none outlives the server.
"""

from __future__ import annotations

import ctypes
import datetime
import multiprocessing
import os
import signal
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from atom.model.runner import Sampled, StepPlan

if TYPE_CHECKING:
    from atom.model.catalog import ModelSpec
    from atom.vocabulary.config import Settings

# How long the ranks wait for each other: to meet (their imports) and inside a step's
# all-reduce (the slowest rank's share of the step). Idle ranks wait on their pipes.
GROUP_TIMEOUT = datetime.timedelta(seconds=600)
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True, slots=True)
class Rank:
    """This process's place in the group: `rank` of `world`, meeting at `port`."""

    rank: int
    world: int
    port: int

    def join(self, device: str, threads: int | None) -> None:
        """Meet the other ranks; on CPU each takes its share of the cores as threads
        (unless --num-threads says otherwise)."""
        backend = "nccl" if device.startswith("cuda") else "gloo"
        if not device.startswith("cuda"):
            torch.set_num_threads(threads or max(1, len(os.sched_getaffinity(0)) // self.world))
        dist.init_process_group(
            backend,
            init_method=f"tcp://127.0.0.1:{self.port}",
            rank=self.rank,
            world_size=self.world,
            timeout=GROUP_TIMEOUT,
        )

    def device(self, device: str) -> str:
        """A CUDA rank's own GPU; a CPU rank shares the CPU."""
        return f"cuda:{self.rank}" if device.startswith("cuda") else device

    @staticmethod
    def all_reduce(tensor: torch.Tensor) -> None:
        dist.all_reduce(tensor)


def start_ranks(settings: Settings, spec: ModelSpec | None) -> tuple[Rank, tuple[Connection, ...]]:
    """On rank 0: start ranks 1..N-1 with these settings (as variables: a process of
    its own reads them again); returns rank 0's place and a pipe to each of them."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    context = multiprocessing.get_context("spawn")
    pipes: list[Connection] = []
    for rank in range(1, settings.tensor_parallel_size):
        receiver, sender = context.Pipe(duplex=False)
        place = Rank(rank, settings.tensor_parallel_size, port)
        context.Process(
            target=run_rank,
            args=(place, settings.to_env(), spec, receiver),
            name=f"atom-tp-rank-{rank}",
            daemon=True,
        ).start()
        receiver.close()  # the rank's copy is its own
        pipes.append(sender)
    return Rank(0, settings.tensor_parallel_size, port), tuple(pipes)


def run_rank(
    place: Rank, env: Mapping[str, str], spec: ModelSpec | None, steps: Connection
) -> None:
    """A rank process: load its share, then run every step rank 0 sends, until rank 0
    closes the pipe (its shutdown, or its death)."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # with rank 0's device thread
    from atom.logs import configure_logging
    from atom.model.loader import load_runtime
    from atom.vocabulary.config import Settings

    settings = Settings.from_env({**os.environ, **env})
    configure_logging(settings.log_level, settings.log_format)
    runner = load_runtime(settings, spec, rank=place).runner
    while True:
        try:
            command = steps.recv()
        except EOFError:
            return
        if command is None:
            return
        plan, released = command
        for seq_id in released:
            runner.release(seq_id)
        runner.step(plan)


class TensorParallelRunner:
    """Rank 0's runner: the local TorchRunner, with each step sent to the other ranks
    first. Releases (from the Batcher, between steps or during one) travel with
    the next step, so only the device thread writes to the pipes."""

    def __init__(self, runner: Any, ranks: tuple[Connection, ...]) -> None:
        self._runner, self._ranks = runner, ranks
        self.eos_token_ids: frozenset[int] = runner.eos_token_ids
        self.max_model_len: int = runner.max_model_len
        self.num_blocks: int = runner.num_blocks
        self.block_size: int = runner.block_size
        self._released: list[str] = []
        self._lock = threading.Lock()  # release() comes from the Batcher's thread

    def step(self, plan: StepPlan) -> Mapping[str, tuple[Sampled, ...]]:
        with self._lock:
            released, self._released = self._released, []
        for rank in self._ranks:
            rank.send((plan, released))
        return self._runner.step(plan)  # type: ignore[no-any-return]

    def release(self, seq_id: str) -> None:
        self._runner.release(seq_id)
        with self._lock:
            self._released.append(seq_id)

    def num_sequences(self) -> int:
        return self._runner.num_sequences()  # type: ignore[no-any-return]

    def close(self) -> None:
        """The other ranks return."""
        for rank in self._ranks:
            rank.send(None)
            rank.close()

    def add_lora(self, adapter: Any) -> None:
        raise ValueError(UNSUPPORTED.format("LoRA adapters"))

    def remove_lora(self, name: str) -> None:
        raise ValueError(UNSUPPORTED.format("LoRA adapters"))

    def replace_weights(self, weights: Any) -> None:
        raise ValueError(UNSUPPORTED.format("new weights"))

    def sleep(self, level: int) -> None:
        raise ValueError(UNSUPPORTED.format("sleep"))

    def wake_up(self, weights: Any | None) -> None:
        raise ValueError(UNSUPPORTED.format("sleep"))


UNSUPPORTED = "{} under --tensor-parallel-size: not built yet"
