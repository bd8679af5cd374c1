"""What the hypercorn command that started this worker process says about shutting down.

Under `hypercorn -k trio atom.http:app` (workers, the default) the master takes the
SIGTERM and tells the worker to stop; hypercorn then gives open connections its
`graceful_timeout` (3 s by default) before it cuts them, whatever ATOM's
`--shutdown-timeout` says. A spawned worker runs with its master's `sys.argv`, so the
app can read that command line (and the config file it names) and warn at start-up
when streams would be cut early (docs/operations.md)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path


def graceful_timeout(argv: Sequence[str]) -> float | None:
    """The graceful timeout a hypercorn command line gives its workers: its `--config`
    file's, then `--graceful-timeout`'s; None when `argv` is not a hypercorn command."""
    if not argv or "hypercorn" not in Path(argv[0]).parts[-2:]:
        return None
    from hypercorn.config import Config

    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("-c", "--config")
    parser.add_argument("--graceful-timeout", type=float)
    args, _ = parser.parse_known_args(list(argv[1:]))
    if args.graceful_timeout is not None:
        return float(args.graceful_timeout)
    config = args.config
    if config is None:
        return float(Config().graceful_timeout)
    if config.startswith("python:"):
        return float(Config.from_object(config.removeprefix("python:")).graceful_timeout)
    if config.startswith("file:"):
        return float(Config.from_pyfile(config.removeprefix("file:")).graceful_timeout)
    return float(Config.from_toml(config).graceful_timeout)
