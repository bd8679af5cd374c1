"""The OpenAI HTTP surface. `app` is what `hypercorn -k trio atom.http:app` serves.

Importing this package (or any module in it) builds nothing: `app` reads its
settings from the `ATOM_*` environment variables, configures logging and creates
the server on its first ASGI call (hypercorn's lifespan start-up).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import MutableMapping
from typing import Any

# Before torch loads: OpenMP workers keep spinning between the many small parallel
# regions of a step (ACTIVE), but only for ~1 s after the last one (the spin
# count; ACTIVE alone spins for minutes, a whole core of an idle server). Served, it
# is worth a quarter more tokens/s at c=16 (bench/results/history.md).
os.environ.setdefault("OMP_WAIT_POLICY", "ACTIVE")
os.environ.setdefault("GOMP_SPINCOUNT", "30000000")


class ServedApp:
    """The ASGI application `atom.http:app`: the real one, built on first use."""

    def __init__(self) -> None:
        self._app: Any = None

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if self._app is None:
            self._app = _from_env()
        await self._app(scope, receive, send)


def _from_env() -> Any:
    import structlog

    from atom.http.app import create_app
    from atom.logs import configure_logging
    from atom.vocabulary.config import Settings, unknown_env

    settings = Settings.from_env()
    configure_logging(settings.log_level, settings.log_format)
    log = structlog.get_logger(__name__)
    for name in unknown_env():
        log.warning("unknown_setting_ignored", variable=name)
    if settings.data_parallel_size > 1:
        log.warning(
            "data_parallel_size_ignored",
            advice="this process serves alone; `atom serve --data-parallel-size N` starts "
            "the replicas and the router (docs/scaling.md)",
        )
    if multiprocessing.parent_process() is not None:
        _check_graceful_timeout(settings.shutdown_timeout)
        # hypercorn 0.18's master exits 0 when its worker dies; docs/reliability.md.
        log.warning(
            "served_from_a_worker_process",
            advice="a crash of this worker is reported as exit status 0; for a supervisor "
            "to see it, serve with `atom serve` or `hypercorn -k trio -w 0 atom.http:app`",
        )
    from atom.actors.engine import exit_drained

    return create_app(settings, on_drained=exit_drained)


def _check_graceful_timeout(shutdown_timeout: float) -> None:
    """In a hypercorn worker, open streams live for hypercorn's graceful timeout after
    a SIGTERM, not ATOM's `--shutdown-timeout`: a shorter one is worth a warning."""
    import sys

    import structlog

    from atom.http.worker import graceful_timeout

    try:
        graceful = graceful_timeout(sys.argv)
    except Exception as error:  # an unreadable config file: hypercorn itself reads it
        structlog.get_logger(__name__).warning("hypercorn_config_unreadable", error=str(error))
        return
    if graceful is not None and graceful < shutdown_timeout:
        enough = max(60, shutdown_timeout + 5)
        structlog.get_logger(__name__).warning(
            "graceful_timeout_below_shutdown_timeout",
            graceful_timeout_s=graceful,
            shutdown_timeout_s=shutdown_timeout,
            advice=f"hypercorn cuts open streams {graceful:g} s after SIGTERM; serve with "
            f"`hypercorn -k trio --graceful-timeout {enough:g} atom.http:app`",
        )


app = ServedApp()

__all__ = ["ServedApp", "app"]
