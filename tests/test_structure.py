"""House rules that a test can check: the import direction and the file-size ceiling."""

from __future__ import annotations

import ast
from pathlib import Path

ATOM = Path(__file__).parent.parent / "atom"
# package → atom packages it must never import (DESIGN.md: events ← model/text ← actors ← http)
FORBIDDEN = {
    "events": {"atom.model", "atom.text", "atom.actors", "atom.http"},
    "errors": {"atom.model", "atom.text", "atom.actors", "atom.http"},
    "config": {"atom.model", "atom.text", "atom.actors", "atom.http"},
    "model": {"atom.actors", "atom.http", "atom.text", "trio"},
    "text": {"atom.actors", "atom.http", "atom.model", "trio", "torch"},
    "actors": {"atom.http", "pydantic", "quart"},
    "request_log": {"atom.http", "atom.actors"},
    "replay": {"atom.http"},
    "metrics": {"atom.http"},
    "wire": {"atom.http", "atom.actors", "atom.model"},
}


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_import_direction() -> None:
    for path in ATOM.rglob("*.py"):
        part = path.relative_to(ATOM).parts[0].removesuffix(".py")
        for name in imports_of(path):
            for banned in FORBIDDEN.get(part, set()):
                assert not (name == banned or name.startswith(banned + ".")), (path, name)


def test_files_stay_under_the_ceiling() -> None:
    for path in ATOM.rglob("*.py"):
        assert len(path.read_text().splitlines()) <= 400, path
