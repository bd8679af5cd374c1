"""KV-cache events for a KV-aware router, in vLLM's format and over its transport
(`--kv-events-config`; the llm-d KV-cache indexer and SGLang's router read it).

The KV bookkeeping (atom/model/scheduling/kv_cache.py) tells every change as it
happens; this publisher's thread sends what has gathered as one batch, a ZMQ PUB message
of three frames: the topic, an 8-byte big-endian sequence number and the msgpack
payload, vLLM's array form:

    [ts, [event, ...], data_parallel_rank]
    ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium]
    ["BlockRemoved", block_hashes, medium]
    ["AllBlocksCleared"]

Hashes are ATOM's own prefix-chain hashes as unsigned 64-bit integers: a reader keys
blocks by them and reads the tokens from `token_ids`. With `replay_endpoint`, a ROUTER
socket answers a starting sequence number (8 bytes) with every kept batch from there,
then the end marker (-1, empty). Nothing here can stop serving: a full queue drops
events (counted, logged once) and a failed send is logged.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from typing import Any

import structlog

from atom.model.scheduling.kv_cache import BlocksRemoved, BlocksStored, KVChange
from atom.vocabulary.kv_events import KVEventsConfig

log = structlog.get_logger(__name__)
MASK = (1 << 64) - 1
END = (-1).to_bytes(8, "big", signed=True)
POLL_S = 0.05  # how often the thread looks at the replay socket while idle


class KVEventPublisher:
    def __init__(self, config: KVEventsConfig, *, rank: int = 0, medium: str = "CPU") -> None:
        try:
            import msgpack
            import zmq
        except ImportError:
            raise ValueError(
                "--kv-events-config needs pyzmq and msgpack: pip install 'atom[kv-events]'"
            ) from None
        self._zmq, self._pack = zmq, msgpack.packb
        self._config, self._rank, self._medium = config, rank, medium
        self._queue: queue.Queue[KVChange | None] = queue.Queue(config.max_queue_size)
        self._kept: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self.num_dropped = 0
        self.endpoint = _offset(config.endpoint, rank)
        self._thread = threading.Thread(target=self._run, name="kv-events", daemon=True)
        self._ready = threading.Event()
        self._thread.start()
        self._ready.wait(5)

    def put(self, change: KVChange) -> None:
        """Called by the KV bookkeeping; never blocks."""
        try:
            self._queue.put_nowait(change)
        except queue.Full:
            if self.num_dropped == 0:
                log.warning("kv_events_dropped", queue=self._config.max_queue_size)
            self.num_dropped += 1

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(2)

    def _run(self) -> None:
        context: Any = self._zmq.Context.instance()
        pub = context.socket(self._zmq.PUB)
        pub.set_hwm(self._config.hwm)
        _bind_or_connect(pub, self.endpoint)
        replay = None
        if self._config.replay_endpoint:
            replay = context.socket(self._zmq.ROUTER)
            replay.bind(_offset(self._config.replay_endpoint, self._rank))
        self._ready.set()
        try:
            self._serve(pub, replay)
        finally:
            pub.close(linger=0)
            if replay is not None:
                replay.close(linger=0)

    def _serve(self, pub: Any, replay: Any) -> None:
        topic, seq = self._config.topic.encode(), 0
        while True:
            if replay is not None and replay.poll(0):
                self._answer(replay)
            try:
                first = self._queue.get(timeout=POLL_S)
            except queue.Empty:
                continue
            changes = [first, *_gathered(self._queue)]
            events = [self._event(change) for change in changes if change is not None]
            if events:
                payload = self._pack([time.time(), events, self._rank])
                try:
                    pub.send_multipart((topic, seq.to_bytes(8, "big"), payload))
                except self._zmq.ZMQError:
                    log.error("kv_events_send_failed", exc_info=True)
                self._kept.append((seq, payload))
                seq += 1
            if None in changes:
                return

    def _event(self, change: KVChange) -> list[Any]:
        if isinstance(change, BlocksStored):
            parent = None if change.parent is None else change.parent & MASK
            hashes = [h & MASK for h in change.hashes]
            return ["BlockStored", hashes, parent, list(change.token_ids), change.block_size,
                    None, self._medium]  # fmt: skip
        if isinstance(change, BlocksRemoved):
            return ["BlockRemoved", [h & MASK for h in change.hashes], self._medium]
        return ["AllBlocksCleared"]

    def _answer(self, replay: Any) -> None:
        frames = replay.recv_multipart()
        if len(frames) != 3:
            return
        client, _, start = frames
        first = int.from_bytes(start, "big")
        for seq, payload in list(self._kept):
            if seq >= first:
                replay.send_multipart((client, b"", seq.to_bytes(8, "big"), payload))
        replay.send_multipart((client, b"", END, b""))


def publisher(
    config: KVEventsConfig | None, rank: int, device: str | None
) -> KVEventPublisher | None:
    """The publisher `--kv-events-config` asks for (None: off). The medium vLLM names is
    where the KV cache lives: GPU on CUDA, else CPU."""
    if config is None:
        return None
    import torch

    on_cuda = (device or "").startswith("cuda") or (device is None and torch.cuda.is_available())
    return KVEventPublisher(config, rank=rank, medium="GPU" if on_cuda else "CPU")


def _gathered(changes: queue.Queue[KVChange | None]) -> list[KVChange | None]:
    out: list[KVChange | None] = []
    while True:
        try:
            out.append(changes.get_nowait())
        except queue.Empty:
            return out


def _bind_or_connect(socket: Any, endpoint: str) -> None:
    """vLLM's convention: a wildcard (`*`, `::`) or a local transport binds; an address connects."""
    if "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://")):
        socket.bind(endpoint)
    else:
        socket.connect(endpoint)


def _offset(endpoint: str, rank: int) -> str:
    """Replica `rank`'s endpoint: the port plus the rank (an inproc name gets a suffix)."""
    if rank == 0:
        return endpoint
    if endpoint.startswith("inproc://"):
        return f"{endpoint}_dp{rank}"
    base, _, port = endpoint.rpartition(":")
    return f"{base}:{int(port) + rank}"
