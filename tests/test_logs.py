"""Log lines carry the request id, as JSON or as console text (a fresh process each, so
the suite's own logging stays as it is)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from atom.vocabulary.config import Settings

SCRIPT = """
import structlog
from atom.logs import configure_logging
configure_logging("info", {fmt!r})
with structlog.contextvars.bound_contextvars(request_id="chatcmpl-1"):
    structlog.get_logger("atom.test").info("request_crashed", step=3)
"""


def log_line(fmt: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(fmt=fmt)], capture_output=True, text=True, check=True
    )
    return done.stderr.strip()


def test_json_lines_and_console_lines_both_name_the_request() -> None:
    record = json.loads(log_line("json"))
    assert record["request_id"] == "chatcmpl-1" and record["event"] == "request_crashed"
    console = log_line("console")
    assert "request_crashed" in console and "request_id=chatcmpl-1" in console
    with pytest.raises(ValueError, match=r"--log-format \(ATOM_LOG_FORMAT\): expected json or"):
        Settings(log_format="xml")  # type: ignore[arg-type]
