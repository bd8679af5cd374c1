"""Profiling (POST /start_profile, POST /stop_profile): one Chrome/Perfetto trace of the
engine, written under `--profile-dir`.

Two halves make it. The torch profiler records the model calls on the device thread
(it records only the thread that started it, so it starts there), with the runner's
named ranges `atom.forward` and `atom.sampling`. The event loop's side is `Phases`:
each Batcher marks the phase it enters — `schedule`, `model step` (waiting for the
device), `delivery`, `between steps` (request actors and admission), `idle` — and
while a profile runs each phase becomes a span on the model's own track. At the stop
both go into one file, on one clock: docs/operations.md shows how to open it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from atom.actors.device import DeviceThread
from atom.vocabulary.errors import Conflict


@dataclass(frozen=True, slots=True)
class Span:
    track: str  # whose: "batcher <model>"
    name: str
    start_ns: int  # time.time_ns()
    end_ns: int


class Phases:
    """The event loop's half of a profile. `enter` costs one attribute test while no
    profile runs."""

    def __init__(self) -> None:
        self.is_on = False
        self._spans: list[Span] = []
        self._open: dict[str, tuple[str, int]] = {}  # track → (phase, since)

    def enter(self, track: str, phase: str) -> None:
        """`track` leaves the phase it was in (a span ends) and enters `phase`."""
        if not self.is_on:
            return
        now = time.time_ns()
        opened = self._open.get(track)
        if opened is not None:
            self._spans.append(Span(track, opened[0], opened[1], now))
        self._open[track] = (phase, now)

    def start(self) -> None:
        self.is_on, self._spans, self._open = True, [], {}

    def stop(self) -> list[Span]:
        """The spans recorded since `start` (those still open end now)."""
        now = time.time_ns()
        spans = [*self._spans, *(Span(t, p, s, now) for t, (p, s) in self._open.items())]
        self.is_on, self._spans, self._open = False, [], {}
        return spans


class Profiler:
    """Starts and stops the torch profiler on the device thread and writes the trace."""

    def __init__(self, directory: str, device: DeviceThread, phases: Phases) -> None:
        self.directory = Path(directory)
        self._device = device
        self._phases = phases
        self._profile: Any = None  # the torch profiler while a profile runs

    @property
    def is_running(self) -> bool:
        return self._profile is not None

    async def start(self) -> None:
        """Conflict (409) when a profile runs already."""
        if self._profile is not None:
            raise Conflict("a profile is running; POST /stop_profile first")
        import torch
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self._profile = profile(activities=activities)
        await self._device.run_sync(self._profile.start)
        self._phases.start()

    async def stop(self) -> Path:
        """Write the trace; its path. Conflict (409) when no profile runs."""
        if self._profile is None:
            raise Conflict("no profile is running; POST /start_profile first")
        profile, self._profile = self._profile, None
        await self._device.run_sync(profile.stop)
        spans = self._phases.stop()
        return await trio.to_thread.run_sync(self._write, profile, spans)

    def _write(self, profile: Any, spans: list[Span]) -> Path:
        """The torch trace with the event loop's spans added as tracks of their own."""
        self.directory.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = self.directory / f"atom-{stamp}-{os.getpid()}.pt.trace.json"
        partial = path.with_suffix(".partial")
        profile.export_chrome_trace(str(partial))
        trace = json.loads(partial.read_text())
        trace["traceEvents"].extend(loop_events(spans, trace.get("baseTimeNanoseconds", 0)))
        partial.write_text(json.dumps(trace))
        partial.rename(path)
        return path


def loop_events(spans: list[Span], base_ns: int) -> list[dict[str, Any]]:
    """Chrome trace events for `spans`: one named thread a track, times in µs after
    `base_ns` (the torch trace's own origin, so both halves share one clock)."""
    tids = {track: 1_000_000 + i for i, track in enumerate(sorted({s.track for s in spans}))}
    pid = os.getpid()
    names = [
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": track}}
        for track, tid in tids.items()
    ]
    return names + [
        {
            "ph": "X",
            "cat": "atom",
            "name": span.name,
            "pid": pid,
            "tid": tids[span.track],
            "ts": (span.start_ns - base_ns) / 1000,
            "dur": (span.end_ns - span.start_ns) / 1000,
        }
        for span in spans
    ]
