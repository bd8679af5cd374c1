from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atom.model.fake_runner import FakeRunner
from atom.model.scheduling.kv_cache import (
    BlocksRemoved,
    BlocksStored,
    CacheCleared,
    KVCacheManager,
    KVChange,
    block_hashes,
    check_invariants,
)
from atom.model.scheduling.scheduler import Scheduler
from atom.vocabulary.events import SamplingParams, Submit


def test_hash_chain_depends_on_every_earlier_token_and_the_salt() -> None:
    a = block_hashes([1, 2, 3, 4, 5, 6, 7, 8, 9], 4, None)
    b = block_hashes([0, 2, 3, 4, 5, 6, 7, 8], 4, None)
    assert len(a) == 2 and a[1] != b[1]
    assert block_hashes([1, 2, 3, 4], 4, "tenant-a") != block_hashes([1, 2, 3, 4], 4, "tenant-b")


@given(
    tokens=st.lists(st.integers(0, 50), min_size=0, max_size=40),
    cut=st.integers(0, 10),
    span=st.tuples(st.integers(0, 40), st.integers(1, 8)),
)
def test_a_chain_extended_from_known_blocks_is_the_whole_chain(
    tokens: list[int], cut: int, span: tuple[int, int]
) -> None:
    spans = [(span[0], span[0] + span[1], "image-hash")]
    whole = block_hashes(tokens, 4, "salt", spans)
    known = block_hashes(tokens[: cut * 4], 4, "salt", spans)
    assert block_hashes(tokens, 4, "salt", spans, known=known) == whole


def test_a_growing_sequence_hashes_each_block_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Committing after every token hashes each full block once (the chain is kept), not
    the whole chain again each time a block fills."""
    from atom.model.scheduling import kv_blocks

    digests: list[bytes] = []
    digest = kv_blocks._digest
    monkeypatch.setattr(kv_blocks, "_digest", lambda data: digests.append(data) or digest(data))
    kv = KVCacheManager(num_blocks=64, block_size=4)
    tokens = list(range(1, 6))
    kv.acquire_prefix("a", tokens, None)  # the prompt's one full block below its last token
    kv.allocate("a", len(tokens))
    for token in range(100, 140):
        kv.commit("a", tokens, len(tokens), None)
        tokens.append(token)
        kv.allocate("a", len(tokens))
    num_blocks = (len(tokens) - 1) // 4
    assert len(digests) == 1 + num_blocks  # the chain's root, then each block once
    assert kv._chains["a"] == block_hashes(tokens[: num_blocks * 4], 4, None)


def test_freed_blocks_stay_cached_until_evicted_least_recently_used() -> None:
    kv = KVCacheManager(num_blocks=4, block_size=2)
    prompt = [1, 2, 3, 4, 5]
    assert kv.acquire_prefix("a", prompt, None) == 0
    assert kv.allocate("a", 5)
    kv.commit("a", prompt, 5, None)
    kv.free("a")
    assert kv.num_free_blocks == 4
    assert kv.acquire_prefix("b", prompt, None) == 4  # both full blocks come back
    assert kv.acquire_prefix("c", prompt, "other-salt") == 0  # isolated by salt
    assert kv.allocate("c", 4)  # takes the two blocks that were never cached
    assert not kv.allocate("c", 8)  # only b's blocks are left, and they are in use
    kv.free("b")
    kv.free("c")
    check_invariants(kv)
    assert kv.num_free_blocks == 4


def test_blocks_go_out_in_id_order_then_least_recently_freed_first() -> None:
    kv = KVCacheManager(num_blocks=1_000_000, block_size=2)  # starts with no block made
    assert kv.num_free_blocks == 1_000_000 and kv.usage == 0.0
    assert kv.allocate("a", 6) and kv.allocate("b", 4)
    assert kv.table("a") == (0, 1, 2) and kv.table("b") == (3, 4)
    kv.free("b")  # its tail block first: 4, then 3
    kv.free("a")
    assert kv.allocate("c", 4) and kv.table("c") == (5, 6)  # never used ones first
    small = KVCacheManager(num_blocks=5, block_size=2)
    assert small.allocate("a", 6) and small.allocate("b", 4)
    small.free("b")
    small.free("a")
    assert small.allocate("c", 10)
    assert small.table("c") == (4, 3, 2, 1, 0)  # then the least recently freed
    check_invariants(small)
    check_invariants(kv)


def test_a_reset_forgets_free_cached_blocks_and_keeps_those_in_use() -> None:
    kv = KVCacheManager(num_blocks=8, block_size=2)
    free_prompt, live_prompt = [1, 2, 3, 4, 5], [9, 8, 7, 6, 5]
    for seq, prompt in (("a", free_prompt), ("live", live_prompt)):
        kv.acquire_prefix(seq, prompt, None)
        kv.allocate(seq, 5)
        kv.commit(seq, prompt, 5, None)
    kv.free("a")
    assert kv.forget_prefixes() == 2  # a's two full blocks
    check_invariants(kv)
    assert kv.acquire_prefix("b", free_prompt, None) == 0
    assert kv.acquire_prefix("c", live_prompt, None) == 4  # still shared with "live"
    assert kv.forget_prefixes() == 0


def test_a_flush_forgets_every_cached_block_and_what_live_sequences_compute_later() -> None:
    kv = KVCacheManager(num_blocks=8, block_size=2)
    live_prompt = [9, 8, 7, 6, 5]
    kv.acquire_prefix("live", live_prompt, None)
    kv.allocate("live", 5)
    kv.commit("live", live_prompt, 5, None)
    assert kv.forget_prefixes(in_use=True) == 2  # the live sequence's blocks too
    check_invariants(kv)
    longer = [*live_prompt, 4, 3]  # it goes on after the flush (new weights)
    kv.allocate("live", 7)
    kv.commit("live", longer, 7, None)
    assert kv.acquire_prefix("fresh", [*longer, 1], None) == 0  # nothing it made is reused
    kv.free("live")
    kv.allocate("fresh", 8)
    kv.commit("fresh", [*longer, 1], 8, None)  # a sequence begun after the flush caches again
    kv.free("fresh")
    assert kv.acquire_prefix("again", [*longer, 1, 0], None) == 8
    check_invariants(kv)


def test_without_prefix_caching_nothing_is_reused() -> None:
    kv = KVCacheManager(num_blocks=4, block_size=2, enable_prefix_caching=False)
    kv.allocate("a", 4)
    kv.commit("a", [1, 2, 3, 4], 4, None)
    kv.free("a")
    assert kv.acquire_prefix("b", [1, 2, 3, 4, 5], None) == 0


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 3), st.integers(1, 40), st.integers(1, 3),
                  st.integers(1, 12)),
        st.tuples(st.just("abort"), st.integers(0, 30), st.none(), st.none(), st.none()),
        st.tuples(st.just("step"), st.none(), st.none(), st.none(), st.none()),
    ),
    max_size=60,
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(ops=OPS, num_blocks=st.integers(12, 40))
def test_random_traffic_keeps_the_cache_consistent_and_frees_everything(
    ops: list[tuple], num_blocks: int
) -> None:
    """Random arrivals (with shared prefixes), aborts and steps against a FakeRunner whose
    replies depend on reading every token back through the block tables."""
    runner = FakeRunner(eos_token_id=0, block_size=4, num_blocks=num_blocks)
    kv = KVCacheManager(num_blocks=num_blocks, block_size=4)
    scheduler = Scheduler(kv=kv, max_num_seqs=6, max_num_batched_tokens=16,
                          eos_token_ids=frozenset({0}), max_model_len=48)  # fmt: skip
    prompts: dict[str, tuple[int, ...]] = {}
    max_tokens: dict[str, int] = {}
    outputs: dict[str, list[int]] = {}

    def step() -> None:
        plan = scheduler.schedule()
        for out in scheduler.update(plan, runner.step(plan)):
            outputs.setdefault(out.seq.seq_id, []).extend(out.token_ids)
        for seq_id in scheduler.take_released():
            runner.release(seq_id)
        check_invariants(kv)

    for kind, a, b, c, d in ops:
        if kind == "add" and scheduler.can_admit(c):
            rid = f"r{len(prompts)}"
            prompts[rid] = tuple([5 + a] * 8 + list(range(10, 10 + b)))  # shared 8-token head
            params = SamplingParams(temperature=0.0, max_tokens=d)
            max_tokens[rid] = d
            scheduler.add(Submit(request_id=rid, prompt_ids=prompts[rid], params=params,
                                 choices_per_prompt=c))  # fmt: skip
        elif kind == "abort" and f"r{a}" in prompts:
            scheduler.drop(f"r{a}")
            for seq_id in scheduler.take_released():
                runner.release(seq_id)
                outputs.pop(seq_id, None)
        elif kind == "step":
            step()
    while scheduler.num_seqs:
        step()
    assert kv.num_free_blocks == num_blocks
    assert runner.num_sequences() == 0
    for seq_id, tokens in outputs.items():  # greedy FakeRunner: the prompt reversed, then EOS
        rid = seq_id.split("/")[0]
        prompt = prompts[rid]
        num_out = min(max_tokens[rid], max(1, 48 - len(prompt)))
        assert tokens == [*reversed(prompt), 0][:num_out]


def test_every_change_to_what_is_cached_is_told_in_prefix_order() -> None:
    told: list[KVChange] = []
    kv = KVCacheManager(num_blocks=3, block_size=2, on_change=told.append)
    prompt = [1, 2, 3, 4, 5]
    kv.acquire_prefix("a", prompt, None)
    kv.allocate("a", 5)
    kv.commit("a", prompt, 5, None)
    chain = block_hashes(prompt, 2, None)
    assert told == [
        BlocksStored(hashes=tuple(chain), parent=None, token_ids=(1, 2, 3, 4), block_size=2)
    ]
    kv.commit("a", [*prompt, 6], 6, None)  # the third block fills: it chains on the second
    assert told[-1] == BlocksStored(
        hashes=(block_hashes([*prompt, 6], 2, None)[2],), parent=chain[1], token_ids=(5, 6),
        block_size=2,
    )  # fmt: skip
    kv.free("a")
    kv.acquire_prefix("b", [9, 9, 9], None)
    kv.allocate("b", 3)  # two blocks: the least recently freed cached ones are evicted
    removed = [change for change in told if isinstance(change, BlocksRemoved)]
    assert [h for change in removed for h in change.hashes] == list(
        block_hashes([*prompt, 6], 2, None)[2:0:-1]
    )  # the tail was freed first, so it leaves first
    kv.free("b")
    assert kv.forget_prefixes() == 1
    assert told[-1] == BlocksRemoved((chain[0],))
    kv.forget_prefixes(in_use=True)
    assert told[-1] == CacheCleared()


def test_a_fork_shares_full_blocks_and_copies_the_partial_last_one() -> None:
    kv = KVCacheManager(num_blocks=6, block_size=4)
    prompt = list(range(1, 11))  # two full blocks and two tokens in a third
    kv.acquire_prefix("a", prompt, None)
    assert kv.allocate("a", 10)
    kv.commit("a", prompt, 10, None)
    assert kv.fork("a", "b", 10)
    parent, child = kv.table("a"), kv.table("b")
    assert child[:2] == parent[:2] and child[2] != parent[2]
    assert kv.take_moves().copies == ((parent[2], child[2]),) and kv.take_moves().copies == ()
    assert kv.fork("a", "c", 8)  # on a block boundary: nothing to copy
    assert kv.table("c") == parent[:2] and kv.take_moves().copies == ()
    check_invariants(kv)
    kv.free("a")  # the shared blocks stay with b and c
    assert kv.num_free_blocks == 6 - 3
    assert kv.allocate("x", 12)  # the three blocks left
    assert not kv.fork("b", "d", 10)  # no block for d's copy: nothing changed
    assert kv.table("d") == () and kv.take_moves().copies == ()
    for seq_id in ("b", "c", "x"):
        kv.free(seq_id)
    check_invariants(kv)
    assert kv.num_free_blocks == 6
