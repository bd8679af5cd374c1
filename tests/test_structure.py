"""House rules that a test can check: the import direction and the file-size ceiling."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ATOM = Path(__file__).parent.parent / "atom"
# The layers, lowest first (docs/architecture.md draws them):
#   vocabulary ← text, model, projections ← log ← actors ← http (and cli)
# A module under a key (a folder or a module, dotted from atom/) must never import these.
_ABOVE_VOCABULARY = {
    "atom.model",
    "atom.text",
    "atom.projections",
    "atom.log",
    "atom.actors",
    "atom.http",
}
FORBIDDEN = {
    "vocabulary": _ABOVE_VOCABULARY,
    "vocabulary.plan": {"atom"},  # the vocabulary's base: stdlib only
    "model": {"atom.actors", "atom.http", "atom.text", "atom.projections", "atom.log", "trio"},
    "text": {"atom.actors", "atom.http", "atom.model", "atom.projections", "atom.log", "trio",
             "torch"},
    # Projections read events and plans; they never call an actor, a model or the text path.
    "projections": {"atom.http", "atom.actors", "atom.model", "atom.text", "atom.log"},
    # The log writes, reads and replays events; it never imports the server's layers.
    "log": {"atom.http", "atom.actors", "atom.model"},
    "actors": {"atom.http", "pydantic", "quart"},
    # HTTP reaches the engine through Engine and RequestActor only, and never a tensor;
    # the loader is imported lazily when the app is built.
    # The launcher starts processes and reads settings; it never builds a server itself.
    "scaling": {"atom.actors", "atom.http", "atom.model", "atom.projections", "atom.log",
                "atom.text"},
    "http": {"torch", "atom.actors.batcher", "atom.actors.device", "atom.model.scheduling",
             "atom.model.forward", "atom.model.sampling", "atom.model.torch_runner"},
}  # fmt: skip


# shared/STYLE.md's ceilings; each file or function above one is listed with its reason.
FILE_LINES = 400
FUNCTION_LINES = 40
LONG_FILES: dict[str, str] = {}
LONG_FUNCTIONS = {
    ("loader.py", "load_runtime"): "the load sequence in order; mostly keyword arguments",
    ("sampling.py", "sampling_params"): "one keyword per SamplingParams field",
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
        module = ".".join(path.relative_to(ATOM).with_suffix("").parts)
        banned = set().union(*(names for key, names in FORBIDDEN.items() if _within(module, key)))
        for name in imports_of(path):
            assert not any(_within(name, b) for b in banned), (path, name)


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_the_root_keeps_at_most_five_modules() -> None:
    assert len(list(ATOM.glob("*.py"))) <= 5, sorted(p.name for p in ATOM.glob("*.py"))


def test_functions_stay_under_the_budget() -> None:
    long = {}
    for path in ATOM.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                num_lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if num_lines > FUNCTION_LINES:
                    long[(path.name, node.name)] = num_lines
    assert set(long) == set(LONG_FUNCTIONS), long  # and no exception outlives its reason


def test_files_stay_under_the_ceiling() -> None:
    long = {p.name for p in ATOM.rglob("*.py") if len(p.read_text().splitlines()) > FILE_LINES}
    assert long == set(LONG_FILES), long  # and no exception outlives its reason


# Modules that say they are torch-free, and what importing the HTTP package may not do.
TORCH_FREE = [
    "atom.model.scheduling.scheduler",
    "atom.model.fake_runner",
    "atom.model.runner",
    "atom.model.scheduling.kv_cache",
    "atom.vocabulary.plan",
    "atom.vocabulary.events",
    "atom.projections.wire",
    "atom.projections.wire_anthropic",
    "atom.log.replay",
    "atom.text.pipeline",
    "atom.http.schemas",
    "atom.projections.responses_store",
    "atom.scaling.supervisor",
]


def test_torch_free_modules_import_with_torch_blocked() -> None:
    """Each module imports in a fresh interpreter where `import torch` fails."""
    code = (
        "import importlib, sys\n"
        "sys.modules['torch'] = None  # any import of torch now raises ImportError\n"
        f"for name in {TORCH_FREE!r}:\n"
        "    importlib.import_module(name)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_importing_the_http_package_builds_nothing() -> None:
    """`import atom.http.schemas` reads no settings and builds no engine: the app is built
    on its first ASGI call (hypercorn still finds `atom.http:app`)."""
    code = (
        "import sys\n"
        "import atom.http.schemas, atom.http\n"
        "assert type(atom.http.app).__name__ == 'ServedApp'\n"
        "assert 'atom.http.app' not in sys.modules\n"
        "assert 'atom.vocabulary.config' not in sys.modules\n"
        "assert 'torch' not in sys.modules\n"
    )
    env = {**os.environ, "ATOM_NOT_A_SETTING": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "ATOM_NOT_A_SETTING" not in out.stdout + out.stderr  # no start-up warning yet


# Classes with more public methods (properties included) than a reader can hold, each
# with the reason it stays one class.
PUBLIC_METHODS = 12
BROAD_CLASSES: dict[tuple[str, str], str] = {}


def test_classes_keep_to_a_dozen_public_methods() -> None:
    broad = {}
    for path in ATOM.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                public = [
                    n.name
                    for n in node.body
                    if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                    and not n.name.startswith("_")
                ]
                if len(public) > PUBLIC_METHODS:
                    broad[(path.name, node.name)] = len(public)
    assert set(broad) == set(BROAD_CLASSES), broad
