"""Which part of the machine each replica gets: on CPU a contiguous share of the cores
(NUMA node by node, so a share stays on one node when the replicas divide the nodes),
on CUDA one visible GPU each."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from atom.vocabulary.config import naming

NODES = Path("/sys/devices/system/node")


@dataclass(frozen=True, slots=True)
class Replica:
    rank: int
    cpus: tuple[int, ...]  # the cores it is pinned to; empty: not pinned (one GPU each)
    gpu: str | None = None  # its CUDA_VISIBLE_DEVICES


def place_on_cpus(size: int, nodes: Sequence[Sequence[int]]) -> tuple[Replica, ...]:
    """`size` replicas over the cores of `nodes` (each node's usable cores), in node
    order; the first shares take one core more when the cores do not divide evenly."""
    cpus = [cpu for node in nodes for cpu in node]
    with naming("data_parallel_size"):
        if size > len(cpus):
            raise ValueError(f"{size} replicas need a core each; this process may use {len(cpus)}")
    share, extra = divmod(len(cpus), size)
    replicas: list[Replica] = []
    start = 0
    for rank in range(size):
        end = start + share + (rank < extra)
        replicas.append(Replica(rank=rank, cpus=tuple(cpus[start:end])))
        start = end
    return tuple(replicas)


def place_on_gpus(size: int, visible: Sequence[str]) -> tuple[Replica, ...]:
    """One GPU a replica, from the ones this process sees."""
    with naming("data_parallel_size"):
        if size > len(visible):
            raise ValueError(f"{size} replicas need a GPU each; {len(visible)} visible")
    return tuple(Replica(rank=rank, cpus=(), gpu=visible[rank]) for rank in range(size))


def numa_nodes() -> tuple[tuple[int, ...], ...]:
    """The cores this process may run on, grouped by NUMA node (one group without
    /sys's node list)."""
    usable = os.sched_getaffinity(0)
    listed = sorted(NODES.glob("node[0-9]*/cpulist"), key=lambda p: int(p.parent.name[4:]))
    groups = [tuple(cpu for cpu in cpu_list(p.read_text()) if cpu in usable) for p in listed]
    groups = [group for group in groups if group]
    return tuple(groups) if groups else (tuple(sorted(usable)),)


def cpu_list(text: str) -> tuple[int, ...]:
    """The kernel's cpulist format: `0-3,8,10-11`."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus += range(int(first), int(last or first) + 1)
    return tuple(cpus)


def visible_gpus() -> tuple[str, ...]:
    """The CUDA devices this process sees, as CUDA_VISIBLE_DEVICES entries."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return tuple(entry.strip() for entry in listed.split(",") if entry.strip())
    import torch  # only on the CUDA path: the launcher otherwise never loads it

    return tuple(str(index) for index in range(torch.cuda.device_count()))


def place(size: int, device: str | None) -> tuple[Replica, ...]:
    """The replicas of `--data-parallel-size` on this machine, for the server's device
    (`--device`, or CUDA where torch finds it, as the server itself decides)."""
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        return place_on_gpus(size, visible_gpus())
    return place_on_cpus(size, numa_nodes())
