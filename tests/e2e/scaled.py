"""`python -m tests.e2e.scaled PORT`: what `atom serve --data-parallel-size N` runs (N
from ATOM_DATA_PARALLEL_SIZE), with replicas serving `tests.e2e.faulty_app:app`
(FAKE_REPLY set: a FakeRunner each, no model to load)."""

from __future__ import annotations

import sys

from atom.scaling.supervisor import serve
from atom.vocabulary.config import Settings

if __name__ == "__main__":
    sys.exit(serve("127.0.0.1", int(sys.argv[1]), Settings.from_env(), "tests.e2e.faulty_app:app"))
