"""How many KV blocks the paged cache gets: `--kv-cache-memory-bytes`, or on CUDA the
`--gpu-memory-utilization` share of the device left after the weights, or 2 GiB on CPU."""

from __future__ import annotations

from atom.vocabulary.config import Settings


def num_kv_blocks(settings: Settings, device: str, per_block: int, max_model_len: int) -> int:
    """KV blocks in the cache budget; ValueError when one full-length sequence won't fit."""
    num_blocks = kv_cache_bytes(settings, device) // per_block
    if num_blocks * settings.block_size < max_model_len:
        raise ValueError(
            f"the KV cache holds {num_blocks * settings.block_size} tokens, fewer than "
            f"max_model_len {max_model_len}: raise --kv-cache-memory-bytes"
        )
    return int(num_blocks)


CPU_KV_CACHE_BYTES = 2 << 30


def kv_cache_bytes(settings: Settings, device: str) -> int:
    """--kv-cache-memory-bytes if set; on CUDA the --gpu-memory-utilization share of the
    device left after the weights; on CPU 2 GiB."""
    import torch

    if settings.kv_cache_memory_bytes:
        return settings.kv_cache_memory_bytes
    if device.startswith("cuda"):
        free, total = torch.cuda.mem_get_info(torch.device(device))
        return max(0, int(total * settings.gpu_memory_utilization) - (total - free))
    return CPU_KV_CACHE_BYTES
