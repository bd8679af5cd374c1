"""Dequantized GGUF copies are keyed by content and replace older copies of the same file."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from atom.model.gguf_folder import _drop_older_copies, content_key


def test_the_same_content_gets_the_same_key_whatever_its_time_or_place(tmp_path: Path) -> None:
    original = tmp_path / "a" / "model.gguf"
    original.parent.mkdir()
    original.write_bytes(os.urandom(3 << 20))
    copy = tmp_path / "b" / "model.gguf"
    copy.parent.mkdir()
    shutil.copyfile(original, copy)
    os.utime(copy, (1, 1))
    assert content_key(copy) == content_key(original)
    with open(copy, "r+b") as f:  # one byte of the header changed (never to itself)
        first = f.read(1)[0]
        f.seek(0)
        f.write(bytes([first ^ 0xFF]))
    assert content_key(copy) != content_key(original)


def test_older_copies_of_the_same_file_are_removed_and_nothing_else(tmp_path: Path) -> None:
    names = [
        "Smol.Q4_1-0123456789abcdef",  # the new copy
        "Smol.Q4_1-fedcba9876543210",  # an older content key
        "Smol.Q4_1-98362432-1796138861",  # the earlier size-mtime key
        "Smol.Q4_1-extra-0123456789abcdef",  # another model whose name starts alike
        "Other-fedcba9876543210",
    ]
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_bytes(b"w")
    _drop_older_copies(tmp_path / names[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([names[0], *names[3:]])
