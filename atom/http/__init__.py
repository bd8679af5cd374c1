"""The OpenAI HTTP surface. `app` is what `hypercorn -k trio atom.http:app` serves;
it reads its settings from `ATOM_*` environment variables."""

from __future__ import annotations

import multiprocessing
import os

import structlog

# Before torch loads: OpenMP workers keep spinning between the many small parallel
# regions of a step (ACTIVE), but only for ~1 s after the last one (the spin
# count; ACTIVE alone spins for minutes, a whole core of an idle server).
# Measured here, int8 through the server: c=16 439 tokens/s against 355 with the
# default policy; docs/configuration.md.
os.environ.setdefault("OMP_WAIT_POLICY", "ACTIVE")
os.environ.setdefault("GOMP_SPINCOUNT", "30000000")

from atom.config import Settings, unknown_env
from atom.http.app import AtomApp, create_app
from atom.logs import configure_logging

_settings = Settings.from_env()
configure_logging(_settings.log_level)
for _name in unknown_env():
    structlog.get_logger(__name__).warning("unknown_setting_ignored", variable=_name)
if multiprocessing.parent_process() is not None:
    # hypercorn 0.18's master exits 0 when its worker dies; docs/reliability.md.
    structlog.get_logger(__name__).warning(
        "served_from_a_worker_process",
        advice="a crash of this worker is reported as exit status 0; for a supervisor "
        "to see it, serve with `atom serve` or `hypercorn -k trio -w 0 atom.http:app`",
    )
app: AtomApp = create_app(_settings)

__all__ = ["AtomApp", "app", "create_app"]
