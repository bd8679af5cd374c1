"""A wheel built from the tree (no network) holds every file the kernel build reads
(found from the sources' `#include` lines) and every file of the web page, its vendored
libraries included."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from atom.http.webui import PAGE_DIR, VENDOR_DIR
from atom.model.forward.kernels import CSRC, build_inputs

ROOT = Path(__file__).parent.parent

pytestmark = pytest.mark.slow


def test_the_wheel_carries_the_kernel_sources_and_the_web_page(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    done = subprocess.run(
        [*command, "--wheel-dir", str(tmp_path), str(ROOT)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = tmp_path.glob("atom-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    needed = build_inputs()  # the sources and every file their #include lines name
    assert CSRC / "loops.inc" in needed  # (the wheel once lacked it)
    missing = [p.name for p in needed if f"atom/model/forward/csrc/{p.name}" not in names]
    assert not missing, f"the wheel lacks {missing}"
    page = [p for p in PAGE_DIR.rglob("*") if p.is_file() and p.name != ".installed"]
    page = [p for p in page if p.suffix not in {".json"}]  # npm's lists stay in the tree
    assert VENDOR_DIR / "marked.umd.js" in page  # make setup brought the libraries
    missing = [p.name for p in page if f"atom/{p.relative_to(PAGE_DIR.parent)}" not in names]
    assert not missing, f"the wheel lacks the web page's {missing}"
