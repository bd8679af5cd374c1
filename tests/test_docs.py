"""The docs name real code: every `atom/...` path a doc names exists, so a move or a
rename that forgets its doc fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
# `atom/x/y.py`, `atom/x/` or `atom/x/y.cpp`: a path from the checkout's root, as the docs
# write them (not the tail of another path, such as `<venv>/share/atom/kernels`)
PATH = re.compile(r"(?<![\w/.~-])atom/[\w./-]*[\w/]")


def named_paths(text: str) -> set[str]:
    return {m.group(0).rstrip(".") for m in PATH.finditer(text)}


def test_the_pattern_finds_paths_as_docs_write_them() -> None:
    text = "`atom/actors/engine.py`, the folder atom/log/, atom/http/app.py. Not .venv/share/atom/x"
    assert named_paths(text) == {"atom/actors/engine.py", "atom/log/", "atom/http/app.py"}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_path_a_doc_names_exists(doc: Path) -> None:
    missing = sorted(p for p in named_paths(doc.read_text()) if not (ROOT / p).exists())
    assert not missing, f"{doc.name} names paths that do not exist: {missing}"
