"""A server whose engine fails exits non-zero, so a supervisor sees it (issue 23)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from atom.scaling.commands import serve_command
from atom.vocabulary.config import Settings
from tests.e2e.conftest import free_port

pytestmark = pytest.mark.slow


def test_a_failed_model_load_is_a_non_zero_exit_under_the_documented_command(
    tmp_path: Path,
) -> None:
    settings = Settings(model=(str(tmp_path),))  # a folder with no model in it
    command = serve_command(f"127.0.0.1:{free_port()}", settings)
    assert command[command.index("-w") + 1] == "0"
    # A replica count given to the app itself is ignored, with a warning saying who
    # starts replicas.
    env = {**os.environ, **settings.to_env(), "ATOM_LOG_LEVEL": "warning",
           "ATOM_DATA_PARALLEL_SIZE": "2"}  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "model_load_failed" in done.stderr
    assert "data_parallel_size_ignored" in done.stderr


def test_atom_serve_listens_with_a_backlog_for_every_promised_connection() -> None:
    settings = Settings(max_num_seqs=8, max_queued_requests=1000)
    command = serve_command("127.0.0.1:8000", settings)
    backlog = int(command[command.index("--backlog") + 1])
    assert backlog >= 8 + 1000
    assert command[:2] == [sys.executable, "-m"]


@pytest.mark.parametrize(("graceful", "warns"), [(None, True), ("60", False)])
def test_a_worker_warns_when_hypercorn_would_cut_streams_before_the_shutdown_timeout(
    tmp_path: Path, graceful: str | None, warns: bool
) -> None:
    """The card's own command runs the app in a worker: after SIGTERM hypercorn cuts
    open streams at its graceful timeout (3 s unless told), not at --shutdown-timeout."""
    flag = [] if graceful is None else ["--graceful-timeout", graceful]
    command = [sys.executable, "-m", "hypercorn", "-k", "trio", *flag]
    command += ["-b", f"127.0.0.1:{free_port()}", "atom.http:app"]
    settings = Settings(model=(str(tmp_path),), shutdown_timeout=30)  # the load fails at once
    env = {**os.environ, **settings.to_env(), "ATOM_LOG_LEVEL": "warning"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert "served_from_a_worker_process" in done.stderr, done.stderr[-2000:]
    assert ("graceful_timeout_below_shutdown_timeout" in done.stderr) is warns
