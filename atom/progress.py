"""Progress of long start-up work that cannot report its own (a compiler run, the GGUF
dequantization inside transformers): how long it has run against how long it
usually takes, so a first start is never a minute of silence.

With `--log-format console` on a terminal it is a bar on stderr, redrawn every
second; otherwise (JSON logs, or stderr not a terminal) a `progress` log line every
`interval_s` seconds. Either way a `<task>_done` line with the seconds it took ends it.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

import structlog

from atom import logs

log = structlog.get_logger(__name__)
BAR_WIDTH = 30


@contextmanager
def progress(
    task: str,
    *,
    expected_s: float,
    interval_s: float = 5.0,
    stream: TextIO | None = None,
) -> Iterator[None]:
    """Report on `task` while the body runs (in this thread; the reports come from
    another one). `stream`: where a bar goes (stderr); a bar only when it is a
    terminal and the logs are console lines."""
    out = stream or sys.stderr
    as_bar = logs.log_format() == "console" and out.isatty()
    done = threading.Event()
    started = time.monotonic()

    def report() -> None:
        while not done.wait(1.0 if as_bar else interval_s):
            elapsed = time.monotonic() - started
            if as_bar:
                out.write("\r" + bar_line(task, elapsed, expected_s))
                out.flush()
            else:
                log.info("progress", task=task, elapsed_s=round(elapsed), expected_s=expected_s)

    reporter = threading.Thread(target=report, name=f"progress-{task}", daemon=True)
    reporter.start()
    try:
        yield
    finally:
        done.set()
        reporter.join()
        if as_bar:
            out.write("\r" + bar_line(task, time.monotonic() - started, expected_s, is_done=True))
            out.write("\n")
        log.info(f"{task}_done", seconds=round(time.monotonic() - started, 1))


def bar_line(task: str, elapsed_s: float, expected_s: float, *, is_done: bool = False) -> str:
    """`task [#######.......] 12 s of ~40 s`; the bar stops short of full until done."""
    share = elapsed_s / expected_s if expected_s > 0 else 1.0
    filled = BAR_WIDTH if is_done else min(round(BAR_WIDTH * share), BAR_WIDTH - 1)
    drawn = "#" * filled + "." * (BAR_WIDTH - filled)
    return f"{task} [{drawn}] {elapsed_s:.0f} s of ~{expected_s:g} s"


def quiet_library_bars() -> None:
    """transformers draws tqdm bars of its own on stderr; with JSON logs they would break
    the one-object-a-line stream, so `progress` lines stand in for them."""
    if logs.log_format() == "json":
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
