"""A GGUF file as a Hugging Face folder: dequantized once by transformers (slow: most of a
first start, docs/performance.md) into a safetensors copy under the cache dir, keyed by
the file's content; later loads read the copy."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

import structlog

from atom.progress import progress

log = structlog.get_logger(__name__)


def local_folder(source: Path, cache_dir: str) -> Path:
    if source.is_dir():
        return source
    if source.suffix != ".gguf":
        raise FileNotFoundError(f"model not found: {source} (a folder or a .gguf file)")
    folder = Path(cache_dir) / f"{source.stem}-{content_key(source)}"
    if not (folder / "model.safetensors").exists():
        with progress("gguf_dequantization", expected_s=40):
            _dequantize(source, folder)
        _drop_older_copies(folder)
    return folder


def content_key(gguf: Path, edge_bytes: int = 1 << 20) -> str:
    """A key for the file's content, not its path or time: a reinstall of the same
    package (a new mtime) finds its copy. The size and the first and last MiB are
    hashed, which tells GGUF files apart (their header names every tensor)."""
    digest = hashlib.sha256(str(gguf.stat().st_size).encode())
    with open(gguf, "rb") as f:
        digest.update(f.read(edge_bytes))
        f.seek(max(0, gguf.stat().st_size - edge_bytes))
        digest.update(f.read(edge_bytes))
    return digest.hexdigest()[:16]


def _drop_older_copies(folder: Path) -> None:
    """Remove other dequantized copies of a file of the same name (an older version or
    the earlier mtime-keyed folders): each is the size of the float32 model."""
    stem = folder.name.rsplit("-", 1)[0]
    for other in folder.parent.glob(f"{stem}-*"):
        is_copy = re.fullmatch(r"[0-9a-f]{16}|\d+-\d+", other.name[len(stem) + 1 :])
        if other != folder and is_copy and (other / "model.safetensors").exists():
            log.info("dequantized_copy_removed", folder=str(other))
            shutil.rmtree(other, ignore_errors=True)


def _dequantize(gguf: Path, folder: Path) -> None:
    log.info("dequantizing_gguf", source=str(gguf), cache=str(folder), expected_s="20-60")
    # One partial folder a process: replicas started together (--data-parallel-size)
    # each dequantize, and the first rename wins.
    tmp = folder.with_name(f"{folder.name}.partial-{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        _save_copy(gguf, tmp)
        tmp.rename(folder)  # atomic: a crash mid-way never leaves a half copy in place
    except OSError:
        if not (folder / "model.safetensors").exists():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # failed, or another process finished first


def _save_copy(gguf: Path, tmp: Path) -> None:
    import torch
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    hf_model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    config = hf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the copy holds plain float weights
    config.save_pretrained(tmp)
    hf_model.generation_config.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    save_model(hf_model, str(tmp / "model.safetensors"))
