"""The KV cache's records: a block, the changes a KV-aware router is told of, the hash
chain that names a full block's contents, the block moves a step makes before its
forward, and the blocks staged from the disk tier (atom/model/scheduling/kv_cache.py)."""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(slots=True)
class Block:
    block_id: int
    ref_count: int = 0
    hash: int | None = None


@dataclass(frozen=True, slots=True)
class BlocksStored:
    """Full blocks newly cached, in prefix order: each hash chains on the one before."""

    hashes: tuple[int, ...]
    parent: int | None  # the hash of the block before the first (None: the prefix's start)
    token_ids: tuple[int, ...]  # block_size tokens a block
    block_size: int


@dataclass(frozen=True, slots=True)
class BlocksRemoved:
    hashes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CacheCleared:
    pass


KVChange = BlocksStored | BlocksRemoved | CacheCleared
Span = tuple[int, int, Hashable]  # (first position, end, key): an image in the prompt


def block_hashes(
    token_ids: Sequence[int],
    block_size: int,
    salt: Hashable,
    spans: Sequence[Span] = (),
    *,
    known: Sequence[int] = (),
) -> list[int]:
    """The hash chain of every full block of `token_ids`: 64-bit blake2b digests, the same
    in every process (the disk tier and KV events outlive one). A block that overlaps a
    span (an image's placeholder tokens, atom/vocabulary/images.py) also hashes the
    span's key: the same placeholders with another image behind them are another prefix.
    `known`: the chain of the first blocks, found before from the same tokens; only the
    blocks after them are hashed (a growing sequence hashes each block once)."""
    hashes = list(known)
    parent = hashes[-1] if hashes else _digest(repr(("atom-kv", salt)).encode())
    for start in range(len(hashes) * block_size, len(token_ids) - block_size + 1, block_size):
        stop = start + block_size
        link = parent.to_bytes(8, "little") + array("q", token_ids[start:stop]).tobytes()
        keys = tuple(k for first, end, k in spans if first < stop and end > start) if spans else ()
        parent = _digest(link + repr(keys).encode() if keys else link)
        hashes.append(parent)
    return hashes


def _digest(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


@dataclass(frozen=True, slots=True)
class BlockMoves:
    """What the runner does to its cache's blocks before a step's forward, in this order:
    `saves` (block, hash) are written to the disk tier (cached blocks about to be reused,
    or a sleeping or stopping cache), `copies` (source, destination) give a forked beam
    its own last block, `loads` (block, payload) fill blocks read from the disk tier."""

    saves: tuple[tuple[int, int], ...] = ()
    copies: tuple[tuple[int, int], ...] = ()
    loads: tuple[tuple[int, bytes], ...] = ()


class Staged:
    """Blocks read from the disk tier by hash, waiting for a prefix hit to take them; the
    oldest beyond `limit` are dropped (read again if still wanted)."""

    def __init__(self, limit: int = 4096) -> None:
        self._blocks: OrderedDict[int, bytes] = OrderedDict()
        self._limit = limit

    def __contains__(self, block_hash: object) -> bool:
        return block_hash in self._blocks

    def add(self, blocks: Mapping[int, bytes]) -> None:
        self._blocks.update(blocks)
        while len(self._blocks) > self._limit:
            self._blocks.popitem(last=False)

    def take(self, block_hash: int) -> bytes:
        return self._blocks.pop(block_hash)
