"""The prefix cache's disk tier (`--prefix-cache-dir`): full KV blocks that left memory,
one file a block, named by its chain hash, in a folder named by the fingerprint of the
model and the settings that shape its cache, so another model (or dtype, block size,
...) never reads them.

A file is a 32-byte header (b"ATOMKV01", the payload's length, its blake2b-128 digest)
and the payload: the block's keys and values in every layer, in the cache's dtype. A
read checks the length and the digest; a file that fails is removed and counted, and
the block is computed again. Writes go through one writer thread (never the step's):
each to a temporary file, then renamed, so a crash leaves no half file under a block's
name. The folder is bounded by `--prefix-cache-disk-bytes`, least recently used first
(the order survives a restart as the files' modification times). A full disk stops
the writes for a minute, counted and logged; serving goes on.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import queue
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import structlog

from atom.model.gguf_folder import content_key

log = structlog.get_logger(__name__)

HEADER = struct.Struct("<8sQ16s")
MAGIC = b"ATOMKV01"
PAUSE_AFTER_FULL_S = 60.0
MAX_QUEUED_WRITES = 256  # blocks waiting for the writer; more are dropped, not waited for


@dataclass(slots=True)
class TierCounts:
    """What the tier did since it started, for /metrics."""

    blocks_read: int = 0
    bytes_read: int = 0
    blocks_written: int = 0
    bytes_written: int = 0
    corrupt_blocks: int = 0  # failed their length or digest check: removed
    failed_writes: int = 0  # a full disk or another OS error
    dropped_writes: int = 0  # the writer was behind, or paused after a full disk


def fingerprint(source: str, facts: Mapping[str, object]) -> str:
    """The folder name of one model's blocks: the weights' identity (a file's content key,
    as its dequantized copy's; a folder's weight and config files by name, size and
    modification time) and `facts`, the settings that shape the cache's contents."""
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode())
    path = Path(source)
    if path.is_file():
        digest.update(content_key(path).encode())
    elif path.is_dir():
        for part in sorted(path.iterdir()):
            if part.suffix in (".json", ".safetensors", ".bin", ".gguf"):
                stat = part.stat()
                digest.update(f"{part.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:24]


def file_name(block_hash: int) -> str:
    return f"{block_hash:016x}.kv"


class DiskTier:
    """The files of one fingerprint. `has` and `read` are called from the device thread,
    `write` from it too (queued for the writer thread); the index has its own lock."""

    def __init__(self, root: str | Path, fingerprint: str, max_bytes: int) -> None:
        self.folder = Path(root) / fingerprint
        self.folder.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.counts = TierCounts()
        self._lock = threading.Lock()
        self._index: OrderedDict[int, int] = OrderedDict()  # hash → file size, LRU first
        self._num_bytes = 0
        self._paused_until = 0.0
        self._queue: queue.Queue[tuple[int, bytes] | None] = queue.Queue(MAX_QUEUED_WRITES)
        self._scan()
        self._writer = threading.Thread(target=self._write_loop, name="atom-kv-disk", daemon=True)
        self._writer.start()

    def _scan(self) -> None:
        """The index from the folder: oldest modification first; leftover temporary files
        (a crash mid-write) are removed."""
        found = []
        for path in self.folder.iterdir():
            if path.suffix != ".kv":
                path.unlink(missing_ok=True)
                continue
            try:
                stat = path.stat()
                found.append((stat.st_mtime, int(path.stem, 16), stat.st_size))
            except (OSError, ValueError):
                path.unlink(missing_ok=True)
        for _, block_hash, size in sorted(found):
            self._index[block_hash] = size
            self._num_bytes += size
        self._shrink()

    @property
    def num_bytes(self) -> int:
        return self._num_bytes

    def has(self, block_hash: int) -> bool:
        with self._lock:
            return block_hash in self._index

    def read(self, hashes: list[int]) -> dict[int, bytes]:
        """The payloads of `hashes` that could be read (a missing file, or one failing its
        check, is left out: then removed)."""
        payloads = {}
        for block_hash in hashes:
            payload = self._read_one(block_hash)
            if payload is not None:
                payloads[block_hash] = payload
        return payloads

    def _read_one(self, block_hash: int) -> bytes | None:
        path = self.folder / file_name(block_hash)
        try:
            data = path.read_bytes()
        except OSError:
            self._forget(block_hash)
            return None
        payload = _checked(data)
        if payload is None:
            log.warning("prefix_cache_block_corrupt", file=str(path))
            self.counts.corrupt_blocks += 1
            self._forget(block_hash)
            path.unlink(missing_ok=True)
            return None
        with self._lock:
            if block_hash in self._index:
                self._index.move_to_end(block_hash)
        os.utime(path)  # the LRU order, kept across a restart
        self.counts.blocks_read += 1
        self.counts.bytes_read += len(payload)
        return payload

    def write(self, block_hash: int, payload: bytes) -> None:
        """Queue a block for the writer (dropped when it is behind or paused)."""
        if self.has(block_hash):
            return
        if time.monotonic() < self._paused_until:
            self.counts.dropped_writes += 1
            return
        try:
            self._queue.put_nowait((block_hash, payload))
        except queue.Full:
            self.counts.dropped_writes += 1

    def flush(self) -> None:
        """Wait until every queued block is on disk (or failed)."""
        self._queue.join()

    def close(self) -> None:
        """Write what is queued, then stop the writer."""
        self._queue.put(None)
        self._writer.join()

    def clear(self) -> None:
        """Remove every block (the weights changed: none of them holds)."""
        self.flush()
        with self._lock:
            hashes = list(self._index)
        for block_hash in hashes:
            self._forget(block_hash)
            (self.folder / file_name(block_hash)).unlink(missing_ok=True)

    def _write_loop(self) -> None:
        while (item := self._queue.get()) is not None:
            try:
                self._write_one(*item)
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def _write_one(self, block_hash: int, payload: bytes) -> None:
        path = self.folder / file_name(block_hash)
        temporary = path.with_suffix(".tmp")
        digest = hashlib.blake2b(payload, digest_size=16).digest()
        try:
            with open(temporary, "wb") as f:
                f.write(HEADER.pack(MAGIC, len(payload), digest))
                f.write(payload)
            os.replace(temporary, path)
        except OSError as error:
            temporary.unlink(missing_ok=True)
            self.counts.failed_writes += 1
            if error.errno in (errno.ENOSPC, errno.EDQUOT):
                self._paused_until = time.monotonic() + PAUSE_AFTER_FULL_S
                log.warning("prefix_cache_disk_full", folder=str(self.folder), pause_s=60)
            else:
                log.warning("prefix_cache_write_failed", file=str(path), error=str(error))
            return
        size = HEADER.size + len(payload)
        with self._lock:
            self._index[block_hash] = size
            self._num_bytes += size
        self.counts.blocks_written += 1
        self.counts.bytes_written += len(payload)
        self._shrink()

    def _shrink(self) -> None:
        """Remove the least recently used files while the folder is over its bound."""
        while True:
            with self._lock:
                if self._num_bytes <= self.max_bytes or not self._index:
                    return
                block_hash, size = self._index.popitem(last=False)
                self._num_bytes -= size
            (self.folder / file_name(block_hash)).unlink(missing_ok=True)

    def _forget(self, block_hash: int) -> None:
        with self._lock:
            size = self._index.pop(block_hash, None)
            if size is not None:
                self._num_bytes -= size


def _checked(data: bytes) -> bytes | None:
    """The payload of a block file, or None if its header, length or digest is wrong."""
    if len(data) < HEADER.size:
        return None
    magic, length, digest = HEADER.unpack_from(data)
    payload = data[HEADER.size :]
    if magic != MAGIC or length != len(payload):
        return None
    return payload if hashlib.blake2b(payload, digest_size=16).digest() == digest else None
