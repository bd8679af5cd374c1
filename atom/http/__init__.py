"""The OpenAI HTTP surface. `app` is what `hypercorn -k trio atom.http:app` serves;
it reads its settings from `ATOM_*` environment variables."""

from __future__ import annotations

import os

# Before torch loads: idle OpenMP workers keep spinning between the many small
# parallel regions of a decode step. Measured here (bench.run, 2 cores): ACTIVE
# decodes ~1.7x faster at concurrency 1 than PASSIVE, and stays faster at 16.
os.environ.setdefault("OMP_WAIT_POLICY", "ACTIVE")

from atom.config import Settings
from atom.http.app import AtomApp, create_app
from atom.logs import configure_logging

_settings = Settings.from_env()
configure_logging(_settings.log_level)
app: AtomApp = create_app(_settings)

__all__ = ["AtomApp", "app", "create_app"]
