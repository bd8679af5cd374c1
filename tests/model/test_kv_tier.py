"""The prefix cache's disk tier: blocks by hash, checked on read, bounded, LRU across a
restart, and a full disk that pauses the writes while serving goes on."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from atom.model import kv_tier
from atom.model.kv_tier import DiskTier, file_name


def written(tier: DiskTier, blocks: dict[int, bytes]) -> None:
    for block_hash, payload in blocks.items():
        tier.write(block_hash, payload)
    tier.flush()


def test_blocks_come_back_by_hash_and_under_their_fingerprint_only(tmp_path: Path) -> None:
    tier = DiskTier(tmp_path, "model-a", max_bytes=1 << 20)
    written(tier, {1: b"one" * 10, 2: b"two" * 10, 4: b"four" * 10})
    assert tier.has(1) and tier.has(2) and not tier.has(3)
    assert tier.read([1, 2, 3, 4]) == {1: b"one" * 10, 2: b"two" * 10, 4: b"four" * 10}
    assert tier.counts.blocks_read == 3 and tier.counts.blocks_written == 3
    other = DiskTier(tmp_path, "model-b", max_bytes=1 << 20)  # another fingerprint
    assert not other.has(1) and other.read([1]) == {}
    tier.close()
    other.close()


def test_a_flipped_byte_or_a_cut_file_is_dropped_and_counted(tmp_path: Path) -> None:
    tier = DiskTier(tmp_path, "m", max_bytes=1 << 20)
    written(tier, {7: bytes(range(200)), 8: bytes(range(100))})
    path = tier.folder / file_name(7)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x01
    path.write_bytes(bytes(data))
    cut = tier.folder / file_name(8)
    cut.write_bytes(cut.read_bytes()[:-1])
    assert tier.read([7, 8]) == {}
    assert tier.counts.corrupt_blocks == 2
    assert not path.exists() and not tier.has(7) and not tier.has(8)
    tier.close()


def test_the_folder_keeps_its_bound_least_recently_used_first_across_a_restart(
    tmp_path: Path,
) -> None:
    size = kv_tier.HEADER.size + 100
    tier = DiskTier(tmp_path, "m", max_bytes=3 * size)
    written(tier, {1: b"a" * 100, 2: b"b" * 100, 3: b"c" * 100})
    for i, block_hash in enumerate((1, 2, 3)):  # distinct times, whatever the clock's grain
        os.utime(tier.folder / file_name(block_hash), (1000 + i, 1000 + i))
    tier.close()
    again = DiskTier(tmp_path, "m", max_bytes=3 * size)
    assert again.read([1]) == {1: b"a" * 100}  # 1 is now the most recently used
    written(again, {4: b"d" * 100})
    assert [again.has(h) for h in (1, 2, 3, 4)] == [True, False, True, True]
    assert again.num_bytes == 3 * size
    again.close()


def test_a_full_disk_pauses_the_writes_and_is_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tier = DiskTier(tmp_path, "m", max_bytes=1 << 20)

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(kv_tier.os, "replace", full)
    written(tier, {1: b"x" * 10})
    assert tier.counts.failed_writes == 1 and not tier.has(1)
    assert list(tier.folder.iterdir()) == []  # no temporary file left behind
    written(tier, {2: b"y" * 10})  # paused: not even tried
    assert tier.counts.failed_writes == 1 and tier.counts.dropped_writes == 1
    monkeypatch.undo()
    monkeypatch.setattr(kv_tier, "PAUSE_AFTER_FULL_S", 0.0)
    tier._paused_until = 0.0
    written(tier, {3: b"z" * 10})
    assert tier.has(3)
    tier.close()


def test_a_restart_removes_temporary_files_and_clear_removes_everything(tmp_path: Path) -> None:
    tier = DiskTier(tmp_path, "m", max_bytes=1 << 20)
    written(tier, {5: b"five"})
    tier.close()
    (tier.folder / "0000000000000009.tmp").write_bytes(b"half a block")
    again = DiskTier(tmp_path, "m", max_bytes=1 << 20)
    assert sorted(p.name for p in again.folder.iterdir()) == [file_name(5)]
    again.clear()
    assert not again.has(5) and list(again.folder.iterdir()) == [] and again.num_bytes == 0
    again.close()
