"""The prefix cache's disk tier under a real runner: blocks pushed out of memory come back
from disk bit for bit (the answers equal a memory hit's), also in a new process's cache,
and a damaged file is dropped and its block computed again."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig

from atom.model.kv_tier import DiskTier
from atom.model.runner import StepPlan
from atom.model.scheduling.kv_cache import KVCacheManager, check_invariants
from atom.model.scheduling.scheduler import Scheduler
from atom.model.torch_runner import TorchRunner
from atom.vocabulary.events import Submit
from tests.model.tiny import BLOCK, GREEDY, tiny_model

SHARED = tuple(range(20, 80))  # 60 tokens: 15 full blocks
PROMPTS = {name: (*SHARED, *tail) for name, tail in (("a", (5, 6)), ("b", (7, 8, 9)))}
OTHERS = [tuple(range(100 + 70 * i, 160 + 70 * i)) for i in range(2)]  # push SHARED out


class Server:
    """A runner, its cache's books and a scheduler over them, with or without a disk tier;
    `ask` runs one prompt to its end, the Batcher's way (disk reads before planning)."""

    def __init__(
        self, folder: Path | None, num_blocks: int, kv_dtype: torch.dtype | None = None
    ) -> None:
        self.tier = None if folder is None else DiskTier(folder, "tiny", max_bytes=1 << 30)
        self.runner = TorchRunner(
            tiny_model(LlamaConfig),
            eos_token_ids=frozenset({0}),
            max_model_len=256,
            num_blocks=num_blocks,
            block_size=BLOCK,
            disk=self.tier,
            kv_dtype=kv_dtype,
        )
        self.kv = KVCacheManager(num_blocks=num_blocks, block_size=BLOCK, spill=folder is not None)
        self.scheduler = Scheduler(kv=self.kv, max_num_seqs=8, max_num_batched_tokens=512,
                                   eos_token_ids=frozenset({0}), max_model_len=256)  # fmt: skip
        self.disk_hits = 0

    def ask(self, request_id: str, prompt: tuple[int, ...]) -> list[int]:
        self.scheduler.add(Submit(request_id=request_id, prompt_ids=prompt, params=GREEDY))
        tokens: list[int] = []
        while self.scheduler.num_seqs:
            if self.tier is not None:
                wanted = self.scheduler.disk_wanted(self.tier.has)
                self.kv.staged.add(self.tier.read(wanted))
            plan = self.scheduler.schedule()
            self.disk_hits += self.scheduler.stats.prefix_cache_disk_hits
            for out in self.scheduler.update(plan, self.runner.step(plan)):
                tokens.extend(out.token_ids)
            for seq_id in self.scheduler.take_released():
                self.runner.release(seq_id)
            check_invariants(self.kv)
        return tokens

    def stop(self) -> None:
        """What a stop does: every cached block saved, the writer drained."""
        self.kv.forget_prefixes(in_use=True, save=True)
        self.runner.step(StepPlan(chunks=(), moves=self.kv.take_moves()))
        assert self.tier is not None
        self.tier.close()


@pytest.fixture(scope="module")
def from_memory() -> dict[str, list[int]]:
    """Each prompt's answer with its shared prefix cached in memory (a big cache)."""
    server = Server(None, num_blocks=512)
    server.ask("warm", PROMPTS["a"])
    return {name: server.ask(name, prompt) for name, prompt in PROMPTS.items()}


def test_blocks_pushed_out_of_memory_come_back_from_disk(
    tmp_path: Path, from_memory: dict[str, list[int]]
) -> None:
    server = Server(tmp_path, num_blocks=24)
    server.ask("a0", PROMPTS["a"])
    for i, other in enumerate(OTHERS):
        server.ask(f"o{i}", other)
    server.tier.flush()  # type: ignore[union-attr]
    assert server.tier is not None and server.tier.counts.blocks_written >= 15
    assert server.ask("b", PROMPTS["b"]) == from_memory["b"]
    assert server.disk_hits == 60  # every full block of the shared prefix
    server.stop()


@pytest.mark.parametrize("kv_dtype", [None, torch.int8])  # an int8 block: values, then scales
def test_a_new_process_reads_what_the_last_one_saved_when_it_stopped(
    tmp_path: Path, from_memory: dict[str, list[int]], kv_dtype: torch.dtype | None
) -> None:
    if kv_dtype is not None:
        cached = Server(None, num_blocks=512, kv_dtype=kv_dtype)
        cached.ask("warm", PROMPTS["a"])
        from_memory = {"a": cached.ask("a", PROMPTS["a"])}
    first = Server(tmp_path, num_blocks=512, kv_dtype=kv_dtype)
    first.ask("a0", PROMPTS["a"])
    first.stop()  # its blocks were all still in memory
    second = Server(tmp_path, num_blocks=512, kv_dtype=kv_dtype)
    assert second.ask("a", PROMPTS["a"]) == from_memory["a"]
    assert second.disk_hits == 60
    second.stop()


def test_a_damaged_block_is_dropped_and_computed_again(
    tmp_path: Path, from_memory: dict[str, list[int]]
) -> None:
    first = Server(tmp_path, num_blocks=512)
    first.ask("a0", PROMPTS["a"])
    first.stop()
    files = sorted(first.tier.folder.iterdir(), key=lambda p: p.stat().st_size)  # type: ignore[union-attr]
    damaged = files[len(files) // 2]
    data = bytearray(damaged.read_bytes())
    data[-3] ^= 0x10
    damaged.write_bytes(bytes(data))
    second = Server(tmp_path, num_blocks=512)
    assert second.ask("b", PROMPTS["b"]) == from_memory["b"]
    assert second.tier is not None and second.tier.counts.corrupt_blocks == 1
    assert 0 < second.disk_hits < 60  # the chain up to the damaged block
    second.stop()  # the block computed again is saved again, whole
    third = DiskTier(tmp_path, "tiny", max_bytes=1 << 30)
    assert third.read([int(damaged.stem, 16)]) and third.counts.corrupt_blocks == 0
    third.close()
