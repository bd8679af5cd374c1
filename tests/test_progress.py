"""Start-up progress: JSON `progress` lines, or a bar on a console terminal."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time

import pytest

from atom import logs
from atom.progress import BAR_WIDTH, bar_line, progress

JSON_RUN = """
import time
from atom.logs import configure_logging
from atom.progress import progress
configure_logging("info", "json")
with progress("dequantize", expected_s=2, interval_s=0.05):
    time.sleep(0.4)
"""


def test_json_logs_get_a_progress_line_every_interval_then_a_done_line() -> None:
    done = subprocess.run([sys.executable, "-c", JSON_RUN], capture_output=True, text=True)
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    ticks = [line for line in lines if line["event"] == "progress"]
    assert len(ticks) >= 3 and {t["task"] for t in ticks} == {"dequantize"}
    assert all(t["expected_s"] == 2 for t in ticks)
    assert lines[-1]["event"] == "dequantize_done" and lines[-1]["seconds"] >= 0.4


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_console_terminal_gets_a_bar_redrawn_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs, "_format", "console")  # what --log-format console sets
    screen = Terminal()
    with progress("build", expected_s=100, stream=screen):
        time.sleep(1.3)
    frames = screen.getvalue().split("\r")[1:]
    assert len(frames) >= 2  # at least one redraw, then the finished bar
    assert frames[0].startswith("build [") and " of ~100 s" in frames[0]
    assert frames[-1].startswith("build [" + "#" * BAR_WIDTH + "]")
    assert frames[-1].endswith("\n")


def test_the_bar_stops_short_of_full_until_the_work_is_done() -> None:
    assert bar_line("t", 500, 10).count("#") == BAR_WIDTH - 1  # slower than expected
    assert bar_line("t", 5, 10).count("#") == BAR_WIDTH // 2
    assert bar_line("t", 1, 10, is_done=True).count("#") == BAR_WIDTH
