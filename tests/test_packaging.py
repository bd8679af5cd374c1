"""A wheel built from the tree (no network) holds every file the kernel build reads."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from atom.model.forward.kernels import CSRC, SOURCES

ROOT = Path(__file__).parent.parent

pytestmark = pytest.mark.slow


def test_the_wheel_carries_the_kernel_sources_and_headers(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    done = subprocess.run(
        [*command, "--wheel-dir", str(tmp_path), str(ROOT)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = tmp_path.glob("atom-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    needed = [*SOURCES, *CSRC.glob("*.h")]
    missing = [p.name for p in needed if f"atom/model/forward/csrc/{p.name}" not in names]
    assert not missing, f"the wheel lacks {missing}"
