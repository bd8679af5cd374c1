"""KV block manager: fixed-size blocks, per-sequence block tables, ref counts, prefix caching.

Pure bookkeeping (no torch): the runner owns the tensors, this owns which block
holds what. A full block is keyed by a hash chain over its tokens (the first
link also covers the request's cache salt and LoRA adapter, and a block holding an
image's placeholders the image's hash), so a new sequence reuses the
longest chain already cached. Freed blocks keep their hash and stay reusable
until the free list hands them out again, least recently freed first. Blocks never
handed out yet come before them, in id order, and exist only as a count until then:
starting a manager of a million blocks costs nothing.

    never used: 10 … num_blocks-1    free list (LRU → MRU):  [ 7 | 3 | 9 (cached h=…) | 2 ]
    tables: seq "a/0" → [4, 5, 8]   refs: 4→2 (shared prefix), 5→1, 8→1

With a disk tier (`--prefix-cache-dir`, atom/model/kv_tier.py) a cached block that is
evicted is saved first (`take_moves`: the runner writes it out before the step that
reuses the block), and a prefix that runs past the blocks in memory continues through
blocks the Batcher read from disk (`disk_wanted`, ``staged`): each gets a fresh block,
filled by the runner before the step (`take_moves`) and cached like any other.

A beam that continues another (beam search) forks its table: the full blocks are
shared, the last partial one is copied into a new block by the runner before the next
step (`fork`, `take_moves`).

Invariants: a block handed out once is in the free list iff its ref count is 0; every
hash in `_cached` maps to a block whose `hash` is that key.

With `on_change`, every change to what is cached is told as it happens, for a KV-aware
router (atom/actors/kv_events.py): blocks stored (their hashes, the hash before them and
their tokens), blocks removed (evicted, or forgotten by a reset) and the whole cache
cleared (new weights).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence

from atom.model.scheduling.kv_blocks import (
    Block,
    BlockMoves,
    BlocksRemoved,
    BlocksStored,
    CacheCleared,
    KVChange,
    Span,
    Staged,
    block_hashes,
)


class KVCacheManager:
    def __init__(
        self,
        *,
        num_blocks: int,
        block_size: int,
        enable_prefix_caching: bool = True,
        on_change: Callable[[KVChange], None] | None = None,
        spill: bool = False,
    ):
        """`spill`: evicted cached blocks are saved for a disk tier (`take_moves`)."""
        self.num_blocks = num_blocks
        self._on_change = on_change
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self._blocks: list[Block] = []  # those handed out once: block ids 0, 1, 2, …
        self._free: OrderedDict[int, None] = OrderedDict()  # handed out once, free now
        self._cached: dict[int, int] = {}  # hash → block id
        self._tables: dict[str, list[int]] = {}
        self._num_hashed: dict[str, int] = {}  # full blocks of a seq already registered
        # the hash chain of a seq's full blocks found so far (commit extends it)
        self._chains: dict[str, list[int]] = {}
        self._stale: set[str] = set()  # live seqs computed on replaced weights: never cached
        self._copies: list[tuple[int, int]] = []  # (source, destination) blocks: see fork
        self._spill = spill
        self._saves: list[tuple[int, int]] = []  # (block, hash) evicted: save before reuse
        self.staged = Staged()  # blocks the Batcher read from the disk tier
        self._loads: list[tuple[int, bytes]] = []  # (block, payload) to fill before the step
        self.num_loaded_blocks = 0  # blocks a prefix took from the disk tier, ever

    # --- queries -----------------------------------------------------------------

    @property
    def num_free_blocks(self) -> int:
        return self.num_blocks - len(self._blocks) + len(self._free)

    @property
    def usage(self) -> float:
        """Fraction of blocks referenced by live sequences."""
        return 1.0 - self.num_free_blocks / self.num_blocks

    def table(self, seq_id: str) -> tuple[int, ...]:
        return tuple(self._tables.get(seq_id, ()))

    def _blocks_needed(self, seq_id: str, num_tokens: int) -> int:
        have = len(self._tables.get(seq_id, ()))
        return max(0, -(-num_tokens // self.block_size) - have)

    # --- mutations -----------------------------------------------------------------

    def forget_prefixes(self, *, in_use: bool = False, save: bool = False) -> int:
        """Forget the cached prefixes no live sequence holds (POST /reset_prefix_cache),
        or with `in_use` every one, and never cache the later blocks of a sequence alive
        now (new weights, a sleep, a stop: what they computed can no longer be reused);
        with `save`, each forgotten block is saved first (`take_moves`: a disk tier keeps
        them). Returns how many blocks it forgot; blocks in use keep their memory."""
        forgotten = [
            block.hash
            for block in self._blocks
            if block.hash is not None and (in_use or block.ref_count == 0)
        ]
        for h in forgotten:
            block_id = self._cached.pop(h)
            self._blocks[block_id].hash = None
            if save:
                self._saves.append((block_id, h))
        if in_use:
            self._stale.update(self._tables)
        if self._on_change is not None and (forgotten or in_use):
            self._on_change(CacheCleared() if in_use else BlocksRemoved(tuple(forgotten)))
        return len(forgotten)

    def acquire_prefix(
        self, seq_id: str, token_ids: Sequence[int], salt: Hashable, spans: Sequence[Span] = ()
    ) -> int:
        """Start `seq_id`'s table with the longest cached prefix, in memory and then among
        the blocks staged from disk; returns the cached token count.

        At least one token is always left to compute, so the step that finishes the
        prompt produces logits and never writes into a shared block."""
        assert seq_id not in self._tables, f"{seq_id} already holds blocks"
        table: list[int] = []
        if self.enable_prefix_caching:
            hashes = self._prefix_hashes(token_ids, salt, spans)
            loaded = []  # indexes of the blocks taken from disk
            for h in hashes:
                block_id = self._cached.get(h)
                if block_id is not None:
                    self._ref(block_id)
                elif h in self.staged and self.num_free_blocks:
                    block_id = self._load(h)
                    loaded.append(len(table))
                else:
                    break
                table.append(block_id)
            if loaded and self._on_change is not None:
                self._tell_stored(loaded, hashes, token_ids)
            self._chains[seq_id] = hashes
        self._tables[seq_id] = table
        self._num_hashed[seq_id] = len(table)
        return len(table) * self.block_size

    def _prefix_hashes(
        self, token_ids: Sequence[int], salt: Hashable, spans: Sequence[Span]
    ) -> list[int]:
        """The hashes of the full blocks a prefix hit may cover (all but the last token)."""
        max_blocks = (len(token_ids) - 1) // self.block_size
        return block_hashes(token_ids[: max_blocks * self.block_size], self.block_size, salt, spans)

    def _load(self, h: int) -> int:
        """A free block for the staged block `h`: cached at once, filled by the runner
        before the step (`take_moves`)."""
        block = self._take_free()
        block.ref_count, block.hash = 1, h
        self._cached[h] = block.block_id
        self._loads.append((block.block_id, self.staged.take(h)))
        self.num_loaded_blocks += 1
        return block.block_id

    def disk_wanted(
        self,
        token_ids: Sequence[int],
        salt: Hashable,
        spans: Sequence[Span],
        on_disk: Callable[[int], bool],
    ) -> list[int]:
        """The hashes a prefix hit could take from disk: those past its blocks in memory
        (and already staged) that `on_disk` holds, in chain order."""
        if not self.enable_prefix_caching:
            return []
        wanted = []
        for h in self._prefix_hashes(token_ids, salt, spans):
            if h in self._cached or h in self.staged:
                continue
            if not on_disk(h):
                break
            wanted.append(h)
        return wanted

    def take_moves(self) -> BlockMoves:
        """The block saves, copies and loads asked since the last call, for the next
        step (the runner makes them before its forward)."""
        moves = BlockMoves(saves=tuple(self._saves), copies=tuple(self._copies),
                           loads=tuple(self._loads))  # fmt: skip
        self._saves, self._copies, self._loads = [], [], []
        return moves

    def allocate(self, seq_id: str, num_tokens: int) -> bool:
        """Grow the table to cover `num_tokens` positions; False (nothing changed) if short."""
        needed = self._blocks_needed(seq_id, num_tokens)
        if needed > self.num_free_blocks:
            return False
        table = self._tables.setdefault(seq_id, [])
        self._num_hashed.setdefault(seq_id, 0)
        for _ in range(needed):
            block = self._take_free()
            block.ref_count = 1
            table.append(block.block_id)
        return True

    def _take_free(self) -> Block:
        """A block never handed out yet, else the least recently freed one (its cached
        prefix evicted)."""
        if len(self._blocks) < self.num_blocks:
            block = Block(len(self._blocks))
            self._blocks.append(block)
            return block
        block_id, _ = self._free.popitem(last=False)
        block = self._blocks[block_id]
        if block.hash is not None:
            del self._cached[block.hash]
            if self._spill:
                self._saves.append((block_id, block.hash))
            if self._on_change is not None:
                self._on_change(BlocksRemoved((block.hash,)))
            block.hash = None
        return block

    def commit(
        self,
        seq_id: str,
        token_ids: Sequence[int],
        num_computed: int,
        salt: Hashable,
        spans: Sequence[Span] = (),
    ) -> None:
        """Register the blocks that `num_computed` tokens filled, for later prefix hits."""
        if not self.enable_prefix_caching or seq_id in self._stale:
            return
        table, done = self._tables[seq_id], self._num_hashed[seq_id]
        num_full = min(num_computed // self.block_size, len(table))
        if num_full <= done:
            return
        known = self._chains.get(seq_id, ())[:num_full]
        hashes = block_hashes(
            token_ids[: num_full * self.block_size], self.block_size, salt, spans, known=known
        )
        self._chains[seq_id] = hashes
        stored: list[int] = []  # indexes of the blocks cached now
        for idx in range(done, num_full):
            block = self._blocks[table[idx]]
            if block.hash is None and hashes[idx] not in self._cached:
                block.hash = hashes[idx]
                self._cached[hashes[idx]] = block.block_id
                stored.append(idx)
        self._num_hashed[seq_id] = num_full
        if stored and self._on_change is not None:
            self._tell_stored(stored, hashes, token_ids)

    def _tell_stored(self, stored: list[int], hashes: list[int], token_ids: Sequence[int]) -> None:
        """One BlocksStored a run of consecutive blocks cached now."""
        assert self._on_change is not None
        runs: list[list[int]] = []
        for idx in stored:
            if runs and runs[-1][-1] == idx - 1:
                runs[-1].append(idx)
            else:
                runs.append([idx])
        size = self.block_size
        for run in runs:
            first, end = run[0], run[-1] + 1
            self._on_change(
                BlocksStored(
                    hashes=tuple(hashes[first:end]),
                    parent=hashes[first - 1] if first else None,
                    token_ids=tuple(token_ids[first * size : end * size]),
                    block_size=size,
                )
            )

    def fork(self, parent: str, child: str, num_tokens: int) -> bool:
        """Start `child`'s table as a copy of `parent`'s first `num_tokens` positions (a
        beam that continues another): the full blocks are shared, a last partial block
        (which both will write into) is copied into a new one; False (nothing changed)
        when no block is free for that copy. The copy is made by the runner before the
        next step's forward (`take_moves`)."""
        assert child not in self._tables, f"{child} already holds blocks"
        num_full, partial = divmod(num_tokens, self.block_size)
        if partial and not self.num_free_blocks:
            return False
        table = self._tables[parent][:num_full]
        for block_id in table:
            self._ref(block_id)
        if partial:
            block = self._take_free()
            block.ref_count = 1
            self._copies.append((self._tables[parent][num_full], block.block_id))
            table.append(block.block_id)
        self._tables[child] = table
        self._num_hashed[child] = min(self._num_hashed[parent], num_full)
        self._chains[child] = self._chains.get(parent, [])[:num_full]
        if parent in self._stale:
            self._stale.add(child)
        return True

    def truncate(self, seq_id: str, num_tokens: int) -> None:
        """Give back the blocks past the first `num_tokens` positions (those that held
        rejected draft tokens only); they were never committed, so hold no hash."""
        table = self._tables[seq_id]
        keep = -(-num_tokens // self.block_size)
        while len(table) > max(keep, self._num_hashed[seq_id]):
            block = self._blocks[table.pop()]
            block.ref_count -= 1
            if block.ref_count == 0:
                self._free[block.block_id] = None

    def free(self, seq_id: str) -> None:
        """Drop `seq_id`'s references; tail blocks go to the free list first (evicted first)."""
        table = self._tables.pop(seq_id, [])
        self._num_hashed.pop(seq_id, None)
        self._chains.pop(seq_id, None)
        self._stale.discard(seq_id)
        for block_id in reversed(table):
            block = self._blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self._free[block_id] = None

    def _ref(self, block_id: int) -> None:
        block = self._blocks[block_id]
        if block.ref_count == 0:
            del self._free[block_id]
        block.ref_count += 1


def check_invariants(kv: KVCacheManager) -> None:
    """Raise AssertionError if the bookkeeping is inconsistent (tests call this)."""
    refs = [0] * kv.num_blocks
    for table in kv._tables.values():
        for block_id in table:
            refs[block_id] += 1
    assert [b.block_id for b in kv._blocks] == list(range(len(kv._blocks)))
    for block in kv._blocks:
        assert block.ref_count == refs[block.block_id], block
        assert (block.ref_count == 0) == (block.block_id in kv._free), block
    for h, block_id in kv._cached.items():
        assert kv._blocks[block_id].hash == h
